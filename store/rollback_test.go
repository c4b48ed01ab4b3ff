package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"rackd/store/boltfile"
)

// setSchemaN is setSchema with a number.
func setSchemaN(t *testing.T, path string, v int) { t.Helper(); setSchema(t, path, strconv.Itoa(v)) }

func schemaFile(t *testing.T, path string) int {
	t.Helper()
	v, err := boltfile.Schema(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// dbWithMachine makes a database of this build's schema holding one
// machine named host.
func dbWithMachine(t *testing.T, path, host string) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateMachine(context.Background(), Actor{Name: "admin", Admin: true}, NewMachine{Hostname: host, Arch: "amd64", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func hasMachine(t *testing.T, path, host string) bool {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer s.Close()
	_, err = s.Machine(host)
	return err == nil
}

// Opening an older database migrates it, and keeps the file as it was
// before under rackd.db.schema-<old>.
func TestMigrationKeepsSchemaCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	// A fresh database has nothing to keep.
	dbWithMachine(t, path, "before")
	if m, _ := filepath.Glob(path + ".schema-*"); len(m) != 0 {
		t.Fatalf("a new database left copies: %v", m)
	}
	// Pretend the file is one schema older (the last migration only
	// creates buckets, so it runs again harmlessly).
	old := SchemaVersion - 1
	setSchemaN(t, path, old)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	cp := SchemaCopyPath(path, old)
	fi, err := os.Stat(cp)
	if err != nil {
		t.Fatalf("no copy before the migration: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("copy mode %v", fi.Mode())
	}
	if got := schemaFile(t, cp); got != old {
		t.Fatalf("copy has schema %d, want %d", got, old)
	}
	if got := schemaFile(t, path); got != SchemaVersion {
		t.Fatalf("database has schema %d after the migration", got)
	}
	// Opening at the current schema takes no copy again.
	os.Remove(cp)
	if s, err := Open(path, Options{}); err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	if _, err := os.Stat(cp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a copy without a migration: %v", err)
	}
}

// The rollback: a newer rackd migrated the database (and kept a copy); the
// appliance falls back to this build, which restores the copy and opens it.
func TestRestoreForRollback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	dbWithMachine(t, path, "kept")
	// The copy a newer rackd kept before migrating from our schema.
	if err := copyFile(path, SchemaCopyPath(path, SchemaVersion)); err != nil {
		t.Fatal(err)
	}
	// The newer rackd's database: our data and more, a newer schema.
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.CreateMachine(context.Background(), Actor{Name: "admin", Admin: true}, NewMachine{Hostname: "after-update", Arch: "amd64", MACs: []string{"52:54:00:00:00:02"}})
	s.Close()
	setSchemaN(t, path, SchemaVersion+1)
	if _, err := Open(path, Options{}); err == nil {
		t.Fatal("this build opened a newer schema")
	}

	restored, err := boltfile.RestoreForRollback(dir)
	if err != nil || !restored {
		t.Fatalf("RestoreForRollback: %v %v", restored, err)
	}
	if got := schemaFile(t, path); got != SchemaVersion {
		t.Fatalf("restored schema %d", got)
	}
	if !hasMachine(t, path, "kept") || hasMachine(t, path, "after-update") {
		t.Fatal("restored database is not the copy")
	}
	aside := SchemaCopyPath(path, SchemaVersion+1) + ".rolled-back"
	if got := schemaFile(t, aside); got != SchemaVersion+1 {
		t.Fatalf("newer database kept as %s with schema %d", aside, got)
	}
	if _, err := os.Stat(SchemaCopyPath(path, SchemaVersion)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the copy is still there after being restored")
	}
	// Again: nothing to do now.
	if restored, err := boltfile.RestoreForRollback(dir); err != nil || restored {
		t.Fatalf("second RestoreForRollback: %v %v", restored, err)
	}
}

// A copy of an older schema than ours is restored and then migrated by Open.
func TestRestoreForRollbackOlderCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	dbWithMachine(t, path, "kept")
	cp := SchemaCopyPath(path, SchemaVersion-1)
	copyFile(path, cp)
	setSchemaN(t, cp, SchemaVersion-1)
	setSchemaN(t, path, SchemaVersion+2)
	if restored, err := boltfile.RestoreForRollback(dir); err != nil || !restored {
		t.Fatalf("RestoreForRollback: %v %v", restored, err)
	}
	if !hasMachine(t, path, "kept") || schemaFile(t, path) != SchemaVersion {
		t.Fatal("restored older copy does not open and migrate")
	}
}

func TestRestoreForRollbackRefuses(t *testing.T) {
	t.Run("no database", func(t *testing.T) {
		if restored, err := boltfile.RestoreForRollback(t.TempDir()); err != nil || restored {
			t.Fatalf("%v %v", restored, err)
		}
	})
	t.Run("current schema", func(t *testing.T) {
		dir := t.TempDir()
		dbWithMachine(t, filepath.Join(dir, FileName), "x")
		copyFile(filepath.Join(dir, FileName), SchemaCopyPath(filepath.Join(dir, FileName), SchemaVersion-1))
		if restored, err := boltfile.RestoreForRollback(dir); err != nil || restored {
			t.Fatalf("%v %v", restored, err)
		}
		if !hasMachine(t, filepath.Join(dir, FileName), "x") {
			t.Fatal("database touched")
		}
	})
	t.Run("newer schema, no copy", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		dbWithMachine(t, path, "x")
		setSchemaN(t, path, SchemaVersion+1)
		// A copy of a schema newer than ours does not help.
		copyFile(path, SchemaCopyPath(path, SchemaVersion+1))
		restored, err := boltfile.RestoreForRollback(dir)
		if !errors.Is(err, boltfile.ErrNoRollbackCopy) || restored {
			t.Fatalf("%v %v", restored, err)
		}
		t.Log(err)
		if schemaFile(t, path) != SchemaVersion+1 {
			t.Fatal("database moved")
		}
	})
	t.Run("copy with another schema than its name", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		dbWithMachine(t, path, "x")
		copyFile(path, SchemaCopyPath(path, SchemaVersion))
		setSchemaN(t, SchemaCopyPath(path, SchemaVersion), SchemaVersion+1)
		setSchemaN(t, path, SchemaVersion+1)
		if restored, err := boltfile.RestoreForRollback(dir); err == nil || restored {
			t.Fatalf("%v %v", restored, err)
		}
		if schemaFile(t, path) != SchemaVersion+1 {
			t.Fatal("database moved")
		}
	})
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// The schema this build writes, which the appliance's init reads from
// boltfile without linking the store, is the count of the store's
// migrations: a migration added without it would never run.
func TestSchemaVersionCountsMigrations(t *testing.T) {
	if len(migrations) != SchemaVersion {
		t.Fatalf("%d migrations, SchemaVersion (boltfile.SchemaVersion) %d: make them equal", len(migrations), SchemaVersion)
	}
}
