package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"rackd/store/kv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestMigrateFromSchema1 writes a database the way schema 1 laid it out
// (allocations in their own bucket, no free index), opens it with this
// build, and checks that the migrations carried everything over.
func TestMigrateFromSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	token := "the-allocation-token"
	ready := Machine{ID: "m-ready", Hostname: "ready", State: StateReady, Arch: "amd64",
		MACs: []string{"52:54:00:00:00:01"}, CPUCount: 4, Commissioned: true, StateSince: now, Created: now}
	held := Machine{ID: "m-held", Hostname: "held", State: StateAllocated, Arch: "amd64",
		MACs: []string{"52:54:00:00:00:02"}, CPUCount: 4, Commissioned: true, Owner: "alice", AgentName: "U",
		StateSince: now, Created: now}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := migrations[0](nil, tx); err != nil {
			return err
		}
		meta, _ := tx.CreateBucketIfNotExists(bucketMeta)
		meta.Put(keySchema, []byte("1"))
		for _, m := range []Machine{ready, held} {
			data, _ := json.Marshal(m)
			tx.Bucket(bucketMachines).Put([]byte(m.ID), data)
			tx.Bucket(bucketHostnames).Put([]byte(m.Hostname), []byte(m.ID))
			tx.Bucket(bucketMACs).Put([]byte(m.MACs[0]), []byte(m.ID))
		}
		// Schema 1 kept the allocation apart, with the machine id in it.
		a, _ := json.Marshal(map[string]any{"machine_id": held.ID, "owner": "alice", "agent_name": "U",
			"token_hash": HashToken(token), "created": now})
		return tx.Bucket(bucketAllocations).Put([]byte(held.ID), a)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open schema 1: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("invariants after migration:\n%v", err)
	}
	s.db.View(func(tx *bolt.Tx) error {
		if got := schemaOf(kv.Bolt(tx)); got != SchemaVersion {
			t.Errorf("schema %d after migration, want %d", got, SchemaVersion)
		}
		if tx.Bucket(bucketAllocations) != nil {
			t.Errorf("the schema-1 allocations bucket is still there")
		}
		return nil
	})
	m, err := s.Machine("held")
	if err != nil || m.Allocation == nil || m.Allocation.Owner != "alice" || m.Allocation.TokenHash != HashToken(token) {
		t.Fatalf("held machine after migration: %+v %v", m, err)
	}
	// The free index was built: constraints find the READY machine...
	res, err := s.Allocate(context.Background(), Actor{Name: "bob"}, AllocateRequest{AgentName: "x"})
	if err != nil || res.Machine.ID != "m-ready" {
		t.Fatalf("allocate after migration: %+v %v", res, err)
	}
	// ...and the migrated allocation's token still hands its machine over.
	res, err = s.Allocate(context.Background(), Actor{Name: "bob"}, AllocateRequest{Name: "held", AgentName: "V", Token: token})
	if err != nil || !res.Adopted || res.Machine.Owner != "bob" {
		t.Fatalf("adopt a migrated allocation: %+v %v", res, err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("invariants after use:\n%v", err)
	}
}

// A batch of refusals only is rolled back, not committed: refusing costs no
// fsync.
func TestRefusalsDoNotCommit(t *testing.T) {
	var commits atomic.Int64
	s := openTest(t, Options{OnCommit: func(int, time.Duration) { commits.Add(1) }}, true)
	for range 20 {
		if _, err := s.Allocate(context.Background(), Actor{Name: "a"}, AllocateRequest{}); CodeOf(err) != CodeNoAvailableMachine {
			t.Fatalf("allocate from an empty store: %v", err)
		}
	}
	if n := commits.Load(); n != 0 {
		t.Fatalf("20 refusals made %d commits, want 0", n)
	}
	if _, err := s.CreateMachine(context.Background(), System, NewMachine{Hostname: "a", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	if n := commits.Load(); n != 1 {
		t.Fatalf("one write made %d commits, want 1", n)
	}
}

// TestMigrateFromSchema7 opens a database whose users each held one token,
// as a hash in the user's record indexed to the user's name, and checks that
// those tokens keep working as named tokens.
func TestMigrateFromSchema7(t *testing.T) {
	secrets := map[string]string{"admin": NewToken(), "alice": NewToken()}
	path := writeSchema7(t, secrets)

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open schema 7: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("invariants after migration:\n%v", err)
	}
	for name, secret := range secrets {
		a, ok, err := s.Authenticate(secret)
		if err != nil || !ok || a.Name != name || a.Admin != (name == "admin") || a.Token == "" {
			t.Errorf("%s's old token after migration: %+v, %t, %v", name, a, ok, err)
		}
		ts, err := s.Tokens(Actor{Name: name}, "")
		if err != nil || len(ts) != 1 || ts[0].Name != DefaultTokenName || ts[0].ID != a.Token || !ts[0].Created.Equal(schema7Created) {
			t.Errorf("%s's tokens after migration: %+v, %v", name, ts, err)
		}
	}
	s.db.View(func(tx *bolt.Tx) error {
		if strings.Contains(string(tx.Bucket(bucketUsers).Get([]byte("alice"))), "token_hash") {
			t.Error("the user record still holds its token hash")
		}
		return nil
	})
	// The migrated token is revocable like any other.
	ts, _ := s.Tokens(Actor{Name: "alice"}, "")
	if _, err := s.RevokeToken(context.Background(), Actor{Name: "alice"}, ts[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Authenticate(secrets["alice"]); ok {
		t.Error("a revoked migrated token still works")
	}
}

// schema7Created is when the users of writeSchema7 were created.
var schema7Created = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// writeSchema7 writes, by hand, a database of schema 7, the last before
// named tokens: each user (admin when named "admin") keeps the hash of its
// one token (secrets: user -> token) in its record. It returns the path.
func writeSchema7(t *testing.T, secrets map[string]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for v := range 7 {
			if err := migrations[v](nil, tx); err != nil {
				return err
			}
		}
		meta, _ := tx.CreateBucketIfNotExists(bucketMeta)
		meta.Put(keySchema, []byte("7"))
		for name, secret := range secrets {
			u, _ := json.Marshal(map[string]any{"name": name, "admin": name == "admin",
				"token_hash": HashToken(secret), "created": schema7Created})
			tx.Bucket(bucketUsers).Put([]byte(name), u)
			tx.Bucket(bucketTokens).Put([]byte(HashToken(secret)), []byte(name))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	return path
}
