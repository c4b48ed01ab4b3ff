package store

import (
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// WriteBackup writes a consistent copy of the database from one read
// transaction. start is told the copy's exact size before the first byte (an
// HTTP handler sets Content-Length from it) and returns where to write.
func (s *Store) WriteBackup(start func(size int64) io.Writer) (int64, error) {
	db, err := s.dbFile()
	if err != nil {
		return 0, err
	}
	var n int64
	err = db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(start(tx.Size()))
		return err
	})
	if err != nil {
		return n, fmt.Errorf("backup: %w", err)
	}
	return n, nil
}
