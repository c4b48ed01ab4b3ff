package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"rackd/internal/atomicfile"
	"rackd/store/kv"
)

// A rackd that migrates the database to a newer schema first keeps a copy
// of it as it was, named for the schema it had: rackd.db.schema-9. An
// appliance whose update does not come up healthy boots the previous slot,
// whose older rackd cannot open the migrated file; RestoreForRollback, run
// before that rackd starts, puts the copy back. What changed between the
// migration and the rollback is lost from the running database (it stays in
// the file moved aside).

// SchemaCopyPath is where a database at path keeps its copy from schema v.
func SchemaCopyPath(path string, v int) string { return path + ".schema-" + strconv.Itoa(v) }

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

// ErrNoRollbackCopy is returned by RestoreForRollback when the database is
// newer than this build and no copy of an older schema is there.
var ErrNoRollbackCopy = errors.New("no copy of the database from a schema this rackd can open")

// RestoreForRollback makes the database in stateDir one this build can open
// after a rollback to it: when rackd.db has a schema newer than this build's,
// it is moved aside as rackd.db.schema-<its schema>.rolled-back and the
// newest copy rackd.db.schema-<N> with N at most this build's schema is put
// in its place (an older one is then migrated as usual by Open). restored
// says whether it did; a database this build opens as it is, or none at all,
// is left alone. It must run while no rackd has the database open.
func RestoreForRollback(stateDir string) (restored bool, err error) {
	path := filepath.Join(stateDir, FileName)
	theirs, err := fileSchema(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if theirs <= SchemaVersion {
		return false, nil
	}
	var copyPath string
	var ours int
	for v := SchemaVersion; v >= 1; v-- {
		p := SchemaCopyPath(path, v)
		if _, err := os.Stat(p); err == nil {
			copyPath, ours = p, v
			break
		}
	}
	if copyPath == "" {
		return false, fmt.Errorf("database %s has schema %d, newer than this rackd's %d, and %w (%s): restore a backup or run a newer rackd",
			path, theirs, SchemaVersion, ErrNoRollbackCopy, SchemaCopyPath(path, SchemaVersion))
	}
	got, err := fileSchema(copyPath)
	if err != nil {
		return false, fmt.Errorf("rollback copy %s: %w", copyPath, err)
	}
	if got != ours {
		return false, fmt.Errorf("rollback copy %s has schema %d, its name says %d: move it away", copyPath, got, ours)
	}
	var since time.Time
	if fi, err := os.Stat(copyPath); err == nil {
		since = fi.ModTime()
	}
	aside := SchemaCopyPath(path, theirs) + ".rolled-back"
	if err := os.Rename(path, aside); err != nil {
		return false, fmt.Errorf("move the newer database aside: %w", err)
	}
	if err := os.Rename(copyPath, path); err != nil {
		// Put the newer one back: never leave no database at all.
		return false, errors.Join(fmt.Errorf("restore %s: %w", copyPath, err), os.Rename(aside, path))
	}
	if err := atomicfile.SyncDir(stateDir); err != nil {
		return true, fmt.Errorf("restored %s, but: %w", copyPath, err)
	}
	slog.Warn("database rolled back to the copy kept before its schema migration: changes made since are not in it",
		"schema", ours, "newer_schema", theirs, "copy_taken", since, "newer_database_kept_as", aside)
	return true, nil
}

// fileSchema reads a database file's schema version without migrating it.
func fileSchema(path string) (int, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, err
	}
	db, err := openBolt(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	var v int
	err = guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			v = schemaOf(kv.Bolt(tx))
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("read the schema of %s: %w", path, err)
	}
	return v, nil
}
