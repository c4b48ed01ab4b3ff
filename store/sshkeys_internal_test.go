package store

import (
	"context"
	"encoding/json"
	"rackd/store/kv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

const testEd25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"

// Check finds ssh keys that break the bucket's invariants.
func TestCheckSSHKeys(t *testing.T) {
	ctx := context.Background()
	admin := Actor{Name: "admin", Admin: true}
	good, err := ParseSSHKey(testEd25519 + " good")
	if err != nil {
		t.Fatal(err)
	}
	other, err := ParseSSHKey("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDJKzVs7dBwfgPGmHMGFx4Mj2vMzDeYtNKk2XwN7FmAf")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		key  func(k *SSHKey) // how the stored record is damaged
		at   string          // the key it is stored under; "" for its own
		want string
	}{
		"unknown user":      {key: func(k *SSHKey) { k.User = "carol" }, want: "belongs to user carol, who does not exist"},
		"wrong fingerprint": {key: func(k *SSHKey) { k.Fingerprint = other.Fingerprint }, want: "stored as ssh-ed25519 " + other.Fingerprint},
		"key of another":    {key: func(k *SSHKey) { k.Key = other.Key + " good" }, want: "the key itself is ssh-ed25519 " + other.Fingerprint},
		"refused key":       {key: func(k *SSHKey) { k.Key = "ssh-dss AAAA" }, want: "ssh key: dsa keys are not accepted"},
		"misfiled":          {key: func(k *SSHKey) {}, at: "alice\x00k-other", want: "stored under key"},
		"duplicate":         {key: func(k *SSHKey) { k.ID = "k-copy" }, want: "are the same key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, Options{}, false)
			if _, _, err := s.CreateUser(ctx, admin, "alice", false, ""); err != nil {
				t.Fatal(err)
			}
			k, err := s.AddSSHKey(ctx, admin, "alice", good.Key)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("before the damage: %v", err)
			}
			tc.key(&k)
			at := string(sshKeyKey(k.User, k.ID))
			if tc.at != "" {
				at = tc.at
			}
			err = s.kv.Update(context.Background(), func(tx kv.Tx) error {
				data, _ := json.Marshal(k)
				return tx.Bucket(bucketSSHKeys).Put([]byte(at), data)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want a finding with %q", err, tc.want)
			}
		})
	}
}

// A database of schema 7 (before named tokens and ssh keys) opens, gets the
// ssh_keys bucket, and its users can add keys.
func TestMigrateToSSHKeys(t *testing.T) {
	path := writeSchema7(t, map[string]string{"alice": "alice-token"})
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open schema 7: %v", err)
	}
	defer s.Close()
	s.db.View(func(tx *bolt.Tx) error {
		if got := schemaOf(kv.Bolt(tx)); got != SchemaVersion {
			t.Errorf("schema %d after migration, want %d", got, SchemaVersion)
		}
		if tx.Bucket(bucketSSHKeys) == nil {
			t.Errorf("no %s bucket after migration", bucketSSHKeys)
		}
		return nil
	})
	alice, found, err := s.Authenticate("alice-token")
	if err != nil || !found {
		t.Fatalf("alice's token after migration: %v %v", found, err)
	}
	if _, err := s.AddSSHKey(context.Background(), alice, "alice", testEd25519+" alice@laptop"); err != nil {
		t.Fatalf("add a key after migration: %v", err)
	}
	if keys, err := s.SSHKeys(alice, "alice"); err != nil || len(keys) != 1 {
		t.Fatalf("keys after migration: %+v %v", keys, err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("invariants after migration:\n%v", err)
	}
}
