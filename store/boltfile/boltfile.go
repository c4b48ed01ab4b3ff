// Package boltfile is rackd's database file on disk, apart from what is in
// it: its name, the schema version this build writes, opening it safely
// (bbolt meets some damaged files with a panic or a memory fault), reading
// the schema a file has without migrating it, and the copies kept before a
// migration, one of which RestoreForRollback puts back after an appliance
// rolls back to an older rackd.
//
// It is small on purpose: the appliance's init runs RestoreForRollback
// before rackd starts and must not link the whole store (and its etcd
// engine) for it.
package boltfile

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"rackd/internal/atomicfile"
)

// FileName is the database file's name in rackd's state directory.
const FileName = "rackd.db"

// SchemaVersion is the schema this build's store writes: the number of its
// migrations (the store's tests hold the two equal).
const SchemaVersion = 11

// Where a file records its schema: key SchemaKey of bucket MetaBucket, in
// decimal.
var (
	MetaBucket = []byte("meta")
	SchemaKey  = []byte("schema_version")
)

// ErrCorrupt marks a file that bbolt cannot safely read.
var ErrCorrupt = errors.New("damaged file")

// Guard runs fn, turning the panics and memory faults with which bbolt
// meets a damaged file into ErrCorrupt. A read transaction that panics is
// rolled back by bbolt on the way out, so the database can still be closed.
func Guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrCorrupt, r)
		}
	}()
	return fn()
}

// Open is bolt.Open made safe against damaged files. On some of them bbolt
// panics, or faults on a page past the end of the mapping, instead of
// failing: a file cut short, a page overwritten (when the freelist page is
// damaged bbolt walks every page to rebuild it). Guard turns that into
// ErrCorrupt and the file is closed again, but the mapping bbolt made
// cannot be reached: it, and with it the file's lock, stays until the
// process exits. A file shorter than its meta page says is refused as
// well, before anything else reads it. lockTimeout bounds the wait for
// another process's lock.
func Open(path string, lockTimeout time.Duration, readOnly bool) (*bolt.DB, error) {
	var (
		file *os.File
		db   *bolt.DB
	)
	err := Guard(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{
			Timeout:      lockTimeout,
			ReadOnly:     readOnly,
			FreelistType: bolt.FreelistMapType,
			// The freelist is not written on every commit (one page or more
			// less to write and sync per commit); bbolt rebuilds it by
			// scanning the file on open, which for a rack's database takes
			// milliseconds. etcd runs bbolt this way.
			NoFreelistSync: true,
			OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
				f, err := os.OpenFile(name, flag, perm)
				file = f
				return f, err
			},
		})
		return err
	})
	if err != nil {
		if errors.Is(err, ErrCorrupt) && file != nil {
			file.Close()
		}
		return nil, err
	}
	var need, have int64
	err = db.View(func(tx *bolt.Tx) error {
		need = tx.Size()
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		have = fi.Size()
		return nil
	})
	if err == nil && have < need {
		err = fmt.Errorf("%w: the file has %d bytes but its pages need %d (truncated?)", ErrCorrupt, have, need)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Schema reads a file's schema version without migrating it (0 for a file
// that records none).
func Schema(path string) (int, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, err
	}
	db, err := Open(path, time.Second, true)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	var v int
	err = Guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			if meta := tx.Bucket(MetaBucket); meta != nil {
				v, _ = strconv.Atoi(string(meta.Get(SchemaKey)))
			}
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("read the schema of %s: %w", path, err)
	}
	return v, nil
}

// A rackd that migrates the database to a newer schema first keeps a copy
// of it as it was, named for the schema it had: rackd.db.schema-9. An
// appliance whose update does not come up healthy boots the previous slot,
// whose older rackd cannot open the migrated file; RestoreForRollback, run
// before that rackd starts, puts the copy back. What changed between the
// migration and the rollback is lost from the running database (it stays in
// the file moved aside).

// SchemaCopyPath is where a database at path keeps its copy from schema v.
func SchemaCopyPath(path string, v int) string { return path + ".schema-" + strconv.Itoa(v) }

// ErrNoRollbackCopy is returned by RestoreForRollback when the database is
// newer than this build and no copy of an older schema is there.
var ErrNoRollbackCopy = errors.New("no copy of the database from a schema this rackd can open")

// RestoreForRollback makes the database in stateDir one this build can open
// after a rollback to it: when rackd.db has a schema newer than this build's,
// it is moved aside as rackd.db.schema-<its schema>.rolled-back and the
// newest copy rackd.db.schema-<N> with N at most this build's schema is put
// in its place (an older one is then migrated as usual when the store opens
// it). restored says whether it did; a database this build opens as it is,
// or none at all, is left alone. It must run while no rackd has the
// database open.
func RestoreForRollback(stateDir string) (restored bool, err error) {
	path := filepath.Join(stateDir, FileName)
	theirs, err := Schema(path)
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
	got, err := Schema(copyPath)
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
