package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"rackd/internal/atomicfile"
	"rackd/store/boltfile"
)

// A rackd that migrates the database to a newer schema first keeps a copy
// of it as it was (boltfile.SchemaCopyPath), which boltfile's
// RestoreForRollback puts back after an appliance rolls back to an older
// rackd.

// SchemaCopyPath is where a database at path keeps its copy from schema v.
func SchemaCopyPath(path string, v int) string { return boltfile.SchemaCopyPath(path, v) }

// keepSchemaCopy writes a consistent copy of the database (one read
// transaction) to SchemaCopyPath(have), durably, replacing an older copy.
func (s *Store) keepSchemaCopy(have int) error {
	dst := SchemaCopyPath(s.path, have)
	f, err := atomicfile.Create(dst, atomicfile.Options{Perm: 0o600})
	if err != nil {
		return fmt.Errorf("keep a copy of schema %d before migrating: %w", have, err)
	}
	defer f.Abort()
	if err := s.db.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(f)
		return err
	}); err != nil {
		return fmt.Errorf("keep a copy of schema %d before migrating: %w", have, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("keep a copy of schema %d before migrating: %w", have, err)
	}
	return nil
}
