package kv_test

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"rackd/store/kv"
	"rackd/store/kv/kvtest"
)

func TestBolt(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kvtest.Engine {
		db, err := bolt.Open(filepath.Join(t.TempDir(), "kv.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return kvtest.Engine{
			Update: func(fn func(kv.Tx) error) error { return db.Update(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) }) },
			View:   func(fn func(kv.Tx) error) error { return db.View(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) }) },
		}
	})
}
