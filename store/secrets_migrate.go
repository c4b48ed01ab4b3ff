package store

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"rackd/internal/atomicfile"
)

// migrateSealPasswords is the migration from schema 10 to 11: every BMC
// password kept in clear in its machine's record is sealed (secrets.go).
// It runs in the one transaction of all migrations, so a crash leaves the
// file as it was; a record without a clear password is left alone. bbolt
// writes new pages and frees the old ones, which keep the clear bytes until
// reused: the migration marks the file (keyScrub) and Open rewrites it once
// the migration is committed (scrubIfNeeded).
func migrateSealPasswords(env *migrateEnv, tx *bolt.Tx) error {
	b := tx.Bucket(bucketMachines)
	if k, _ := b.Cursor().First(); k == nil {
		return nil // no machine ever: nothing was ever written in clear
	}
	type machineV10 struct {
		Power struct {
			Password string `json:"password"`
		} `json:"power"`
	}
	var todo []Machine
	err := b.ForEach(func(k, v []byte) error {
		var old machineV10
		if err := json.Unmarshal(v, &old); err != nil {
			return fmt.Errorf("decode machine %s: %w", k, err)
		}
		if old.Power.Password == "" {
			return nil
		}
		var m Machine
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("decode machine %s: %w", k, err)
		}
		m.Power.Password = old.Power.Password
		if err := sealSecrets(env.secrets, &m); err != nil {
			return err
		}
		todo = append(todo, m)
		return nil
	})
	if err != nil {
		return err
	}
	// bbolt does not allow writes to a bucket while ForEach walks it.
	for _, m := range todo {
		data, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode machine %s: %w", m.ID, err)
		}
		if err := b.Put([]byte(m.ID), data); err != nil {
			return err
		}
	}
	if len(todo) > 0 {
		slog.Info("sealed the BMC passwords kept in clear by the older schema", "machines", len(todo))
	}
	return tx.Bucket(bucketMeta).Put(keyScrub, []byte("1"))
}

// scrubIfNeeded rewrites the database file when keyScrub says its free pages
// may hold secrets written in clear: bbolt's Compact copies every record
// into a new file, which then replaces the old one (a crash before the
// rename leaves the old file, still marked, and the scrub runs again on the
// next open).
func (s *Store) scrubIfNeeded() error {
	if s.opts.ReadOnly {
		return nil
	}
	var pending bool
	if err := s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		pending = meta != nil && meta.Get(keyScrub) != nil
		return nil
	}); err != nil || !pending {
		return err
	}
	tmp := s.path + ".scrub"
	fail := func(err error) error {
		os.Remove(tmp)
		return fmt.Errorf("rewrite %s without the clear-text secrets of its older schema: %w", s.path, err)
	}
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return fail(err)
	}
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if err != nil {
		return fail(err)
	}
	err = bolt.Compact(dst, s.db, 4<<20)
	if err == nil {
		err = dst.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyScrub) })
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if err := s.db.Close(); err != nil {
		return fail(err)
	}
	renameErr := os.Rename(tmp, s.path)
	if renameErr == nil {
		renameErr = atomicfile.SyncDir(filepath.Dir(s.path))
	}
	db, err := openBolt(s.path, s.opts)
	if err != nil {
		return fail(fmt.Errorf("reopen: %w", err))
	}
	s.db = db
	if renameErr != nil {
		// The records are sealed; only the old free pages remain, and the
		// next open tries again.
		os.Remove(tmp)
		slog.Warn("could not rewrite the database file without the free pages of its older schema; trying again at the next start",
			"path", s.path, "err", renameErr)
		return nil
	}
	slog.Info("rewrote the database file without the free pages of its older schema", "path", s.path)
	return nil
}
