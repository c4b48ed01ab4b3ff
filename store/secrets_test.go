package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"rackd/internal/seal"
	"rackd/store/kv"
)

// password is a BMC password unlikely to appear in a file by chance.
func password(i int) string { return fmt.Sprintf("pw-%d-Zq8xTm4Rk2", i) }

// openWithKeys opens the store at path with the keyring keys.
func openWithKeys(t *testing.T, path string, keys KeyStore, opts Options) *Store {
	t.Helper()
	opts.Secrets = keys
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// backupBytes is what a backup of s holds.
func backupBytes(t *testing.T, s *Store) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := s.WriteBackup(func(int64) io.Writer { return &b }); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// wantReadable checks that every machine's password opens to password(i).
func wantReadable(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		m, err := s.MachineForPower(fmt.Sprintf("n%d", i))
		if err != nil || m.Power.Password != password(i) {
			t.Fatalf("machine n%d: password %q, %v; want %q", i, m.Power.Password, err, password(i))
		}
	}
}

// keysOf lists the IDs of the keys that sealed the machines' secrets.
func keysOf(t *testing.T, s *Store) map[seal.KeyID]int {
	t.Helper()
	ms, err := s.ListMachines(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[seal.KeyID]int{}
	for _, m := range ms {
		for _, env := range m.Secrets {
			id, err := seal.KeyOf(env)
			if err != nil {
				t.Fatal(err)
			}
			out[id]++
		}
	}
	return out
}

func TestSecretsSealedAtRest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s := openWithKeys(t, path, MemoryKeys(), Options{})
	defer s.Close()
	ctx := context.Background()
	m := mustCreatePowered(t, s, "n0", 1, StateReady, PowerParams{Driver: "ipmi", Address: "10.0.0.1", Username: "root", Password: password(0)})
	if m.Power.Password != "" || len(m.Secrets[secretPowerPassword]) == 0 {
		t.Fatalf("created machine: power %+v, secrets %v: want the password sealed", m.Power, m.Secrets)
	}
	if got, _ := s.Machine("n0"); got.Power.Password != "" {
		t.Fatal("Machine returns the password in clear")
	}
	if ms, _ := s.ListMachines(Filter{}); ms[0].Power.Password != "" {
		t.Fatal("ListMachines returns the password in clear")
	}
	wantReadable(t, s, 1)
	// A new password replaces the envelope; the old one is in no page of
	// the file either (it never was in clear).
	if _, err := s.UpdateMachine(ctx, testAdmin, "n0", MachinePatch{Power: PowerPatch{Password: ptrTo(password(1))}}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.MachineForPower("n0"); m.Power.Password != password(1) {
		t.Fatalf("after a change: %q", m.Power.Password)
	}
	b := backupBytes(t, s)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{password(0), password(1)} {
		if bytes.Contains(b, []byte(pw)) {
			t.Errorf("the backup holds the password %q", pw)
		}
		if bytes.Contains(file, []byte(pw)) {
			t.Errorf("the database file holds the password %q", pw)
		}
	}
	// The backup opens with the keyring (a restore that kept secrets.key).
	restored := filepath.Join(t.TempDir(), FileName)
	os.WriteFile(restored, b, 0o600)
	r := openWithKeys(t, restored, &memKeys{ring: s.keys.current()}, Options{})
	defer r.Close()
	if m, err := r.MachineForPower("n0"); err != nil || m.Power.Password != password(1) {
		t.Fatalf("the backup restored with its keyring: %q %v", m.Power.Password, err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestSecretBoundToItsMachine: an envelope copied into another machine's
// record does not open there.
func TestSecretBoundToItsMachine(t *testing.T) {
	s := openTest(t, Options{}, true)
	a := mustCreatePowered(t, s, "a", 1, StateReady, PowerParams{Driver: "ipmi", Address: "10.0.0.1", Password: "secret-a"})
	mustCreatePowered(t, s, "b", 2, StateReady, PowerParams{Driver: "ipmi", Address: "10.0.0.2", Password: "secret-b"})
	err := s.update(context.Background(), func(t *Tx) error {
		b, err := t.machine("b")
		if err != nil {
			return err
		}
		b.Secrets = a.Secrets
		return t.put(bucketMachines, []byte(b.ID), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.MachineForPower("b")
	if !errors.Is(err, ErrSecretUnreadable) || !errors.Is(err, seal.ErrOpen) || !strings.Contains(err.Error(), "machine b:") {
		t.Fatalf("a moved envelope: %v (want unreadable, naming machine b)", err)
	}
	if m, err := s.MachineForPower("a"); err != nil || m.Power.Password != "secret-a" {
		t.Fatalf("machine a: %q %v", m.Power.Password, err)
	}
}

// TestUpdatePassword: setting the same password again changes nothing,
// another one is named in the history (never shown), clearing drops it.
func TestUpdatePassword(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	m := mustCreatePowered(t, s, "n0", 1, StateReady, PowerParams{Driver: "ipmi", Address: "10.0.0.1", Password: "one"})
	events := func() []Event { e, _ := s.Events(m.ID, 0); return e }
	n := len(events())
	got, err := s.UpdateMachine(ctx, testAdmin, "n0", MachinePatch{Power: PowerPatch{Password: ptrTo("one")}})
	if err != nil || len(events()) != n || !bytes.Equal(got.Secrets[secretPowerPassword], m.Secrets[secretPowerPassword]) {
		t.Fatalf("the same password again: %v, events %d -> %d", err, n, len(events()))
	}
	if _, err := s.UpdateMachine(ctx, testAdmin, "n0", MachinePatch{Power: PowerPatch{Password: ptrTo("two")}}); err != nil {
		t.Fatal(err)
	}
	e := events()
	if len(e) != n+1 || !strings.Contains(e[len(e)-1].Reason, "power password changed") || strings.Contains(e[len(e)-1].Reason, "two") {
		t.Fatalf("events after a new password: %+v", e[len(e)-1])
	}
	if _, err := s.UpdateMachine(ctx, testAdmin, "n0", MachinePatch{Power: PowerPatch{Password: ptrTo("")}}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.MachineForPower("n0")
	if got.Secrets != nil || got.Power.Password != "" || !strings.Contains(events()[len(events())-1].Reason, "power password changed") {
		t.Fatalf("cleared: %+v %v", got.Power, got.Secrets)
	}
	// A driver cannot go while a sealed password stays.
	s.UpdateMachine(ctx, testAdmin, "n0", MachinePatch{Power: PowerPatch{Password: ptrTo("three")}})
	_, err = s.UpdateMachine(ctx, testAdmin, "n0", MachinePatch{Power: PowerPatch{Driver: ptrTo(""), Address: ptrTo("")}})
	if CodeOf(err) != CodeInvalid {
		t.Fatalf("no driver, a password: %v", err)
	}
}

// writeSchema10 writes, by hand, a database of schema 10, the last that
// kept BMC passwords in clear: machine n<i> has the password password(i)
// (none for the last). It returns the path.
func writeSchema10(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for v := range 10 {
			if err := migrations[v](nil, tx); err != nil {
				return err
			}
		}
		meta, _ := tx.CreateBucketIfNotExists(bucketMeta)
		meta.Put(keySchema, []byte("10"))
		for i := range n {
			power := map[string]any{"driver": "ipmi", "address": fmt.Sprintf("10.0.0.%d", i+1), "username": "root"}
			if i < n-1 {
				power["password"] = password(i)
			}
			m := map[string]any{"id": fmt.Sprintf("m-%d", i), "hostname": fmt.Sprintf("n%d", i), "state": "READY",
				"arch": "amd64", "macs": []string{testMAC(i)}, "power": power, "commissioned": true}
			data, _ := json.Marshal(m)
			tx.Bucket(bucketMachines).Put([]byte(m["id"].(string)), data)
			tx.Bucket(bucketHostnames).Put([]byte(m["hostname"].(string)), []byte(m["id"].(string)))
			tx.Bucket(bucketMACs).Put([]byte(testMAC(i)), []byte(m["id"].(string)))
			tx.Bucket(bucketFree).Put([]byte(m["hostname"].(string)), []byte(m["id"].(string)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte(password(0))) {
		t.Fatal("the schema-10 file does not hold its password in clear: the test proves nothing")
	}
	return path
}

func TestMigrateSealsPasswords(t *testing.T) {
	const n = 4
	path := writeSchema10(t, n)
	keys := MemoryKeys()
	s := openWithKeys(t, path, keys, Options{})
	if err := s.Check(); err != nil {
		t.Fatalf("invariants after migration:\n%v", err)
	}
	wantReadable(t, s, n-1)
	if m, err := s.MachineForPower(fmt.Sprintf("n%d", n-1)); err != nil || m.Power.Password != "" || m.Secrets != nil {
		t.Fatalf("the machine without a password: %+v %v", m, err)
	}
	b := backupBytes(t, s)
	s.Close()
	file, _ := os.ReadFile(path)
	for i := range n - 1 {
		if bytes.Contains(file, []byte(password(i))) || bytes.Contains(b, []byte(password(i))) {
			t.Fatalf("password of n%d still in clear in the database file or its backup", i)
		}
	}
	// The copy kept for a rollback is the old file, as the old rackd
	// needs it: clear (docs/ARCHITECTURE.md says to remove it once the
	// update is confirmed).
	if c, err := os.ReadFile(SchemaCopyPath(path, 10)); err != nil || !bytes.Contains(c, []byte(password(0))) {
		t.Fatalf("schema-10 copy: %v", err)
	}
	// Idempotent: opening again changes nothing and reads the same.
	ring, _ := keys.Load()
	s = openWithKeys(t, path, keys, Options{})
	defer s.Close()
	wantReadable(t, s, n-1)
	if again, _ := keys.Load(); !again.Equal(ring) {
		t.Fatal("a second open changed the keyring")
	}
	if _, err := os.Stat(path + ".scrub"); !os.IsNotExist(err) {
		t.Fatalf("the scrub's temporary file is left: %v", err)
	}
}

// TestMigrateSealsPasswordsCrash: a migration that fails midway leaves the
// schema-10 file as it was (the old rackd still reads it, the next start
// migrates again); a scrub cut short (marker and temporary file left) is
// done again on the next open.
func TestMigrateSealsPasswordsCrash(t *testing.T) {
	path := writeSchema10(t, 3)
	// A record the migration cannot decode, after the first ones: the
	// migration fails after having sealed some.
	db, _ := bolt.Open(path, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMachines).Put([]byte("m-9"), []byte("{")) })
	db.Close()
	if _, err := Open(path, Options{Secrets: MemoryKeys()}); err == nil || !strings.Contains(err.Error(), "migrate schema 10 -> 11") {
		t.Fatalf("open with a damaged record: %v", err)
	}
	db, _ = bolt.Open(path, 0o600, nil)
	err := db.View(func(tx *bolt.Tx) error {
		if v := schemaOf(kv.Bolt(tx)); v != 10 {
			return fmt.Errorf("schema %d after a failed migration", v)
		}
		if !bytes.Contains(tx.Bucket(bucketMachines).Get([]byte("m-0")), []byte(password(0))) {
			return errors.New("the clear password of the old schema is gone after a failed migration")
		}
		return nil
	})
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMachines).Delete([]byte("m-9")) })
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	keys := MemoryKeys()
	s := openWithKeys(t, path, keys, Options{})
	s.Close()
	// As if the scrub had crashed: the marker back, a temporary file left.
	db, _ = bolt.Open(path, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyScrub, []byte("1")) })
	db.Close()
	os.WriteFile(path+".scrub", []byte("half a file"), 0o600)
	s = openWithKeys(t, path, keys, Options{})
	defer s.Close()
	wantReadable(t, s, 2)
	s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta).Get(keyScrub) != nil {
			t.Error("the scrub marker is still set")
		}
		return nil
	})
	if _, err := os.Stat(path + ".scrub"); !os.IsNotExist(err) {
		t.Fatalf("the scrub's temporary file is left: %v", err)
	}
}

// failingKeys is a KeyStore whose Save fails from the nth call on.
type failingKeys struct {
	KeyStore
	saves, failFrom int
}

func (f *failingKeys) Save(r *seal.Keyring) error {
	f.saves++
	if f.failFrom > 0 && f.saves >= f.failFrom {
		return errors.New("disk full")
	}
	return f.KeyStore.Save(r)
}

func TestRotateSecrets(t *testing.T) {
	defer func(n int) { rotateBatch = n }(rotateBatch)
	rotateBatch = 2
	const n = 5 // three batches
	keys := MemoryKeys()
	s := openWithKeys(t, filepath.Join(t.TempDir(), FileName), keys, Options{})
	defer s.Close()
	for i := range n {
		mustCreatePowered(t, s, fmt.Sprintf("n%d", i), i, StateReady, PowerParams{Driver: "ipmi", Address: "x", Password: password(i)})
	}
	mustCreate(t, s, "bare", 99, StateReady)
	old := s.keys.current().Current()
	if _, err := s.RotateSecrets(context.Background(), Actor{Name: "alice"}); CodeOf(err) != CodeForbidden {
		t.Fatalf("a user rotates: %v", err)
	}
	rot, err := s.RotateSecrets(context.Background(), testAdmin)
	if err != nil {
		t.Fatal(err)
	}
	ring, _ := keys.Load()
	if rot.Key == old.String() || rot.Key != ring.Current().String() || len(ring.IDs()) != 1 ||
		len(rot.Retired) != 1 || rot.Retired[0] != old.String() || rot.Resealed != n {
		t.Fatalf("rotation %+v, keyring %v (old key %s)", rot, ring.IDs(), old)
	}
	if got := keysOf(t, s); len(got) != 1 || got[ring.Current()] != n {
		t.Fatalf("keys of the secrets after rotation: %v", got)
	}
	wantReadable(t, s, n)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestRotateSecretsCrash stops a rotation at each of its steps, as a crash
// would: every secret stays readable with the keyring as it is on disk, and
// the next start finishes the rotation.
func TestRotateSecretsCrash(t *testing.T) {
	defer func(n int) { rotateBatch = n }(rotateBatch)
	rotateBatch = 2
	const n = 5
	for _, tc := range []struct {
		step string
		nth  int // stop at the nth time the step is reached
		// saveFails: the keyring write of this number fails instead.
		saveFails int
	}{
		{step: "new key written", nth: 1},
		{step: "batch re-encrypted", nth: 1},
		{step: "batch re-encrypted", nth: 2},
		{step: "batch re-encrypted", nth: 3}, // all re-encrypted, old key not retired
		{saveFails: 1},                       // the new key cannot be written
		{saveFails: 2},                       // the old key cannot be retired
	} {
		t.Run(fmt.Sprintf("%s %d save %d", tc.step, tc.nth, tc.saveFails), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			disk := MemoryKeys()
			keys := &failingKeys{KeyStore: disk}
			s := openWithKeys(t, path, keys, Options{})
			for i := range n {
				mustCreatePowered(t, s, fmt.Sprintf("n%d", i), i, StateReady, PowerParams{Driver: "ipmi", Address: "x", Password: password(i)})
			}
			first, _ := disk.Load()
			seen := 0
			s.keys.failAt = func(step string) error {
				if step == tc.step {
					seen++
					if seen == tc.nth {
						return errors.New("crash")
					}
				}
				return nil
			}
			keys.failFrom = tc.saveFails
			if _, err := s.RotateSecrets(context.Background(), testAdmin); err == nil {
				t.Fatal("the rotation did not stop")
			}
			s.Close()
			// What a restart finds: the keyring on disk, the records on
			// disk. Read-only first (nothing finishes the rotation), then
			// read-write (the start finishes it).
			onDisk, _ := disk.Load()
			ro := openWithKeys(t, path, disk, Options{ReadOnly: true})
			wantReadable(t, ro, n)
			if _, err := ro.RotateSecrets(context.Background(), testAdmin); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("rotate on a read-only store: %v", err)
			}
			if again, _ := disk.Load(); !again.Equal(onDisk) {
				t.Fatal("a refused rotation changed the keyring")
			}
			ro.Close()
			s = openWithKeys(t, path, disk, Options{})
			defer s.Close()
			wantReadable(t, s, n)
			ring, _ := disk.Load()
			if len(ring.IDs()) != 1 {
				t.Fatalf("after the restart the keyring has %v, want one key", ring.IDs())
			}
			if got := keysOf(t, s); len(got) != 1 || got[ring.Current()] != n {
				t.Fatalf("keys of the secrets after the restart: %v (keyring %v)", got, ring.IDs())
			}
			if tc.saveFails == 1 && !ring.Equal(first) {
				t.Fatal("a rotation whose new key was never written changed the keyring")
			}
			if tc.saveFails != 1 && ring.Current() != onDisk.Current() {
				t.Fatalf("the restart did not finish with the new key %s: %s", onDisk.Current(), ring.Current())
			}
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMissingKeyring: a database whose secrets the keyring cannot open is
// refused with a message naming the file, the machines and the way out;
// accepted as lost, the store opens, the power read fails naming the
// machine, and a new password makes it work again.
func TestMissingKeyring(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s := openWithKeys(t, path, MemoryKeys(), Options{})
	mustCreatePowered(t, s, "n0", 1, StateReady, PowerParams{Driver: "ipmi", Address: "x", Password: password(0)})
	mustCreatePowered(t, s, "n1", 2, StateReady, PowerParams{Driver: "ipmi", Address: "x", Password: password(1)})
	s.Close()
	dir := t.TempDir()
	missing := seal.File{Path: filepath.Join(dir, "secrets.key")}
	_, err := Open(path, Options{Secrets: missing})
	for _, want := range []string{"secrets.key is missing", "2 machine(s) (n0, n1)", "--accept-lost-secrets", "put back the secrets.key"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("open without the key file: %v (want %q)", err, want)
		}
	}
	if _, err := os.Stat(missing.Path); !os.IsNotExist(err) {
		t.Fatal("a refused open created a key file")
	}
	wrong := seal.File{Path: filepath.Join(dir, "other.key")}
	wrong.Create(seal.New())
	if _, err := Open(path, Options{Secrets: wrong}); err == nil || !strings.Contains(err.Error(), "other.key does not hold") {
		t.Fatalf("open with another installation's key file: %v", err)
	}

	s = openWithKeys(t, path, missing, Options{AcceptLostSecrets: true})
	defer s.Close()
	if _, err := os.Stat(missing.Path); err != nil {
		t.Fatalf("no new key file: %v", err)
	}
	_, err = s.MachineForPower("n0")
	if !errors.Is(err, ErrSecretUnreadable) || !errors.Is(err, seal.ErrUnknownKey) ||
		!strings.Contains(err.Error(), "machine n0:") || !strings.Contains(err.Error(), "rackd machines set n0 --power-password") {
		t.Fatalf("power read of a lost secret: %v", err)
	}
	// Never silently dropped: the envelope is still in the record.
	if m, _ := s.Machine("n0"); m.Secrets[secretPowerPassword] == nil {
		t.Fatal("the lost secret was dropped from the record")
	}
	if _, err := s.UpdateMachine(context.Background(), testAdmin, "n0", MachinePatch{Power: PowerPatch{Password: ptrTo("new-one")}}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.MachineForPower("n0"); err != nil || m.Power.Password != "new-one" {
		t.Fatalf("after setting the password again: %q %v", m.Power.Password, err)
	}
	// A rotation re-encrypts what it can and names what it cannot.
	rot, err := s.RotateSecrets(context.Background(), testAdmin)
	if err != nil || rot.Resealed != 1 || len(rot.Unreadable) != 1 || rot.Unreadable[0] != "n1" {
		t.Fatalf("rotation with a lost secret: %+v %v", rot, err)
	}
	if m, err := s.MachineForPower("n0"); err != nil || m.Power.Password != "new-one" {
		t.Fatalf("after the rotation: %q %v", m.Power.Password, err)
	}
}

// TestRotateSecretsBounded rotates more machines than one re-encrypting
// transaction takes, on whichever engine the store runs (openTest): the
// batches stay inside the engine's limits on one transaction.
func TestRotateSecretsBounded(t *testing.T) {
	s := openTest(t, Options{}, true)
	n := 2*rotateBatch + 7
	for i := range n {
		mustCreatePowered(t, s, fmt.Sprintf("n%d", i), i, StateReady, PowerParams{Driver: "ipmi", Address: "x", Password: password(i)})
	}
	rot, err := s.RotateSecrets(context.Background(), testAdmin)
	if err != nil || rot.Resealed != n {
		t.Fatalf("rotate %d machines: %+v %v", n, rot, err)
	}
	if got := keysOf(t, s); len(got) != 1 || got[s.keys.current().Current()] != n {
		t.Fatalf("keys of the secrets after rotation: %v", got)
	}
	wantReadable(t, s, n)
}
