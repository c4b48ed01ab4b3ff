package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"rackd/internal/seal"
)

// BMC secrets at rest. A machine's BMC password never reaches the database
// in clear: putMachine seals it (internal/seal, XChaCha20-Poly1305) under the
// current key of a keyring kept outside the database, bound to the machine's
// id and the field's name, into Machine.Secrets; the plaintext field is not
// serialized at all. Reads return the machine without its secrets opened;
// MachineForPower, what the power queue and the serial console read to
// reach a BMC, opens them.
// A backup of the database therefore holds ciphertext only, and restoring
// one needs the keyring file kept beside it (docs/ARCHITECTURE.md).

// secretField is one secret of a machine's power parameters: its name in
// Machine.Secrets (and in the associated data of its envelope) and where its
// plaintext lives while it is being written or used. A driver that keeps a
// secret of its own (a session token) adds its field here, with a json:"-"
// plaintext field in PowerParams, and it is sealed like the password.
type secretField struct {
	name  string
	plain func(*PowerParams) *string
}

const secretPowerPassword = "power.password"

var secretFields = []secretField{
	{secretPowerPassword, func(p *PowerParams) *string { return &p.Password }},
}

// secretAD binds an envelope to its machine and field: moved to another
// record, or to another field, it does not open.
func secretAD(machine, field string) []byte {
	return []byte("rackd secret\x00" + machine + "\x00" + field)
}

// KeyStore keeps the secrets keyring outside the database (seal.File in
// rackd: <state dir>/secrets.key).
type KeyStore interface {
	// Load reads the keyring; an error wrapping fs.ErrNotExist says there
	// is none yet.
	Load() (*seal.Keyring, error)
	// Create writes the first keyring, failing if one appeared meanwhile.
	Create(*seal.Keyring) error
	// Save replaces the keyring, durably: after a crash the file holds the
	// old keyring or the new one.
	Save(*seal.Keyring) error
	// Name says where the keyring is, for messages.
	Name() string
}

// memKeys is the KeyStore of a store opened without one (tests, tools): the
// keyring lives as long as the KeyStore value.
type memKeys struct {
	mu   sync.Mutex
	ring *seal.Keyring
}

// MemoryKeys returns a KeyStore that keeps its keyring in memory: stores
// opened with the same one share their keys (tests that reopen a database).
func MemoryKeys() KeyStore { return &memKeys{} }

func (k *memKeys) Load() (*seal.Keyring, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring == nil {
		return nil, fmt.Errorf("no keyring yet: %w", fs.ErrNotExist)
	}
	return k.ring, nil
}

func (k *memKeys) Create(r *seal.Keyring) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring != nil {
		return fmt.Errorf("keyring: %w", fs.ErrExist)
	}
	k.ring = r
	return nil
}

func (k *memKeys) Save(r *seal.Keyring) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ring = r
	return nil
}

func (k *memKeys) Name() string { return "the in-memory keyring" }

// ErrSecretUnreadable marks a machine secret that cannot be opened: sealed
// under a key the keyring does not hold (a database restored without its
// keyring file), or damaged.
var ErrSecretUnreadable = errors.New("BMC secret cannot be decrypted")

// keyState is the store's keyring: swapped whole by a rotation, read by
// every operation that seals or opens.
type keyState struct {
	keys KeyStore
	ring atomic.Pointer[seal.Keyring]
	// rotate serializes rotations.
	rotate sync.Mutex
	// failAt, when set (tests), is called at each step of a rotation and
	// stops it there with its error, as a crash would.
	failAt func(step string) error
}

func (k *keyState) current() *seal.Keyring { return k.ring.Load() }

// openKeys loads the keyring, or makes the first one, and refuses a database
// whose secrets were sealed under keys the keyring does not hold unless
// opts.AcceptLostSecrets. It runs before the migrations, which seal.
func (s *Store) openKeys() error {
	ks := s.opts.Secrets
	if ks == nil {
		ks = MemoryKeys()
	}
	s.keys = &keyState{keys: ks}
	if s.opts.ReadOnly {
		// Nothing is sealed or opened by a read-only store (backups,
		// checks); a missing keyring is not its business.
		if r, err := ks.Load(); err == nil {
			s.keys.ring.Store(r)
		}
		return nil
	}
	ring, err := ks.Load()
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && !missing {
		return err
	}
	if missing {
		ring = seal.New()
	}
	lost, err := s.unreadableSecrets(ring)
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		what := fmt.Sprintf("keyring %s does not hold", ks.Name())
		if missing {
			what = fmt.Sprintf("keyring file %s is missing", ks.Name())
		}
		msg := fmt.Sprintf("the database holds BMC secrets of %d machine(s) (%s) sealed under key(s) %s, and the %s",
			len(lost), strings.Join(lost.names(5), ", "), strings.Join(lost.keys(), ", "), what)
		if !s.opts.AcceptLostSecrets {
			return fmt.Errorf("%s: put back the secrets.key kept with this database, or start with --accept-lost-secrets "+
				"to run without those secrets (their machines' power fails until their BMC passwords are set again)", msg)
		}
		slog.Warn(msg+": starting without them, as asked; set their BMC passwords again (rackd machines set MACHINE --power-password)",
			"machines", lost.names(0))
	}
	if missing {
		if err := ks.Create(ring); err != nil {
			return err
		}
	}
	s.keys.ring.Store(ring)
	return nil
}

// lostSecret is a machine with a secret the keyring cannot open.
type lostSecret struct {
	id, hostname string
	key          seal.KeyID
}

type lostSecrets []lostSecret

func (l lostSecrets) names(max int) []string {
	var out []string
	for i, m := range l {
		if max > 0 && i == max {
			out = append(out, fmt.Sprintf("and %d more", len(l)-max))
			break
		}
		out = append(out, m.hostname)
	}
	return out
}

func (l lostSecrets) keys() []string {
	var out []string
	for _, m := range l {
		if s := m.key.String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// unreadableSecrets scans the machines for envelopes under keys ring does not
// hold. Records without secrets are not decoded.
func (s *Store) unreadableSecrets(ring *seal.Keyring) (lostSecrets, error) {
	var lost lostSecrets
	err := s.view(func(t *Tx) error {
		b := t.tx.Bucket(bucketMachines)
		if b == nil {
			return nil // a new database
		}
		return b.ForEach(func(k, v []byte) error {
			if !bytes.Contains(v, []byte(`"secrets":`)) {
				return nil
			}
			var m Machine
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("decode machine %s: %w", k, err)
			}
			for _, f := range secretFields {
				env := m.Secrets[f.name]
				if env == nil {
					continue
				}
				if id, err := seal.KeyOf(env); err != nil || !ring.Has(id) {
					lost = append(lost, lostSecret{m.ID, m.Hostname, id})
					break
				}
			}
			return nil
		})
	})
	slices.SortFunc(lost, func(a, b lostSecret) int {
		return strings.Compare(a.hostname, b.hostname)
	})
	return lost, err
}

// sealSecrets moves the plaintext secrets of m into m.Secrets, sealed under
// the current key; a secret whose plaintext is empty keeps its envelope (an
// operation that read m never had the plaintext: clearing a secret is
// clearSecret's job).
func (t *Tx) sealSecrets(m *Machine) error { return sealSecrets(t.keys.current(), m) }

func sealSecrets(ring *seal.Keyring, m *Machine) error {
	for _, f := range secretFields {
		p := f.plain(&m.Power)
		if *p == "" {
			continue
		}
		env, err := ring.Seal([]byte(*p), secretAD(m.ID, f.name))
		if err != nil {
			return fmt.Errorf("machine %s: seal %s: %w", m.ID, f.name, err)
		}
		if m.Secrets == nil {
			m.Secrets = map[string][]byte{}
		}
		m.Secrets[f.name] = env
		*p = ""
	}
	return nil
}

// clearSecret drops a machine's secret, plaintext and envelope.
func clearSecret(m *Machine, name string) {
	for _, f := range secretFields {
		if f.name == name {
			*f.plain(&m.Power) = ""
		}
	}
	delete(m.Secrets, name)
	if len(m.Secrets) == 0 {
		m.Secrets = nil
	}
}

// hasSecret says whether m has the secret, sealed or not yet.
func hasSecret(m Machine, name string) bool {
	for _, f := range secretFields {
		if f.name == name && *f.plain(&m.Power) != "" {
			return true
		}
	}
	return m.Secrets[name] != nil
}

// openSecrets fills the plaintext fields of m.Power from m.Secrets.
func openSecrets(ring *seal.Keyring, m *Machine) error {
	for _, f := range secretFields {
		env := m.Secrets[f.name]
		if env == nil {
			continue
		}
		p, err := ring.Open(env, secretAD(m.ID, f.name))
		if err != nil {
			what := strings.ReplaceAll(strings.TrimPrefix(f.name, "power."), "_", " ")
			return fmt.Errorf("machine %s: %w (the BMC %s: %w): set it again (rackd machines set %s --power-password), "+
				"or put back the secrets.key kept with this database", m.Hostname, ErrSecretUnreadable, what, err, m.Hostname)
		}
		*f.plain(&m.Power) = string(p)
	}
	return nil
}

// MachineForPower is Machine with the BMC secrets opened: the one read that
// sees them, for the power drivers (power queue, console). Nothing it
// returns may be stored or shown. A secret that cannot be opened is an
// error wrapping ErrSecretUnreadable that names the machine and what to do.
func (s *Store) MachineForPower(idOrName string) (Machine, error) {
	m, err := s.Machine(idOrName)
	if err != nil {
		return m, err
	}
	if err := openSecrets(s.keys.current(), &m); err != nil {
		return Machine{}, err
	}
	return m, nil
}

// Rotation is what a key rotation did.
type Rotation struct {
	// Key is the new current key's ID.
	Key string `json:"key"`
	// Retired are the IDs of the keys removed from the keyring.
	Retired []string `json:"retired"`
	// Resealed counts the secrets re-encrypted under the new key.
	Resealed int `json:"resealed"`
	// Unreadable lists the machines whose secrets are sealed under keys the
	// keyring does not hold (accepted as lost at start): left as they are.
	Unreadable []string `json:"unreadable,omitempty"`
}

// rotateBatch bounds how many machine records one re-encrypting
// transaction rewrites: a short commit on a file, and well inside the
// operations an engine like etcd takes in one transaction (128 by default).
var rotateBatch = 50

// RotateSecrets makes a new key current and re-encrypts every secret under
// it, then retires the old keys (admins only). Its steps are ordered so that
// a crash anywhere leaves every secret readable: (1) the keyring file is
// written with the new key first and the old keys kept; (2) the secrets are
// re-encrypted, at most rotateBatch records per transaction; (3) once no
// record uses an old key, the keyring is written without them. A rotation
// cut short is finished by the next one, or by the next start (Open).
func (s *Store) RotateSecrets(ctx context.Context, actor Actor) (Rotation, error) {
	if !actor.Admin {
		return Rotation{}, errorf(CodeForbidden, "only an admin may rotate the secrets key")
	}
	if s.opts.ReadOnly {
		return Rotation{}, ErrReadOnly
	}
	k := s.keys
	k.rotate.Lock()
	defer k.rotate.Unlock()
	ring := k.current().WithNewKey()
	if err := k.keys.Save(ring); err != nil {
		return Rotation{}, fmt.Errorf("rotate: write the new key: %w", err)
	}
	k.ring.Store(ring)
	slog.Info("secrets key rotation: new key written, re-encrypting", "key", ring.Current(), "keyring", k.keys.Name())
	if err := k.step("new key written"); err != nil {
		return Rotation{}, err
	}
	rot, err := s.finishRotation(ctx)
	if err != nil {
		return rot, err
	}
	if actor.Name != "" {
		slog.Info("secrets key rotated", "by", actor.Name, "key", rot.Key, "retired", rot.Retired, "resealed", rot.Resealed)
	}
	return rot, nil
}

func (k *keyState) step(name string) error {
	if k.failAt != nil {
		if err := k.failAt(name); err != nil {
			return fmt.Errorf("rotate: %s: %w", name, err)
		}
	}
	return nil
}

// finishRotation is steps 2 and 3 of RotateSecrets: it re-encrypts what
// the current key did not seal and retires the keys nothing uses any more.
// The caller holds k.rotate.
func (s *Store) finishRotation(ctx context.Context) (Rotation, error) {
	k := s.keys
	ring := k.current()
	rot := Rotation{Key: ring.Current().String(), Retired: []string{}}
	var after string // the last machine id a batch looked at
	for {
		var (
			done       bool
			unreadable []string
			n          int
			next       string
		)
		// fn may run twice (a batch replayed one operation at a time):
		// it sets its results afresh each time.
		err := s.update(ctx, func(t *Tx) error {
			done, unreadable, n, next = true, nil, 0, after
			c := t.tx.Bucket(bucketMachines).Cursor()
			key, v := c.First()
			if after != "" {
				key, v = c.Seek([]byte(after))
				if key != nil && string(key) == after {
					key, v = c.Next()
				}
			}
			var todo []Machine
			for ; key != nil; key, v = c.Next() {
				if len(todo) == rotateBatch {
					done = false
					break
				}
				next = string(key)
				if !bytes.Contains(v, []byte(`"secrets":`)) {
					continue
				}
				var m Machine
				if err := json.Unmarshal(v, &m); err != nil {
					return fmt.Errorf("decode machine %s: %w", key, err)
				}
				stale := false
				for _, env := range m.Secrets {
					if id, err := seal.KeyOf(env); err != nil || id != ring.Current() {
						stale = true
					}
				}
				if !stale {
					continue
				}
				if err := openSecrets(ring, &m); err != nil {
					unreadable = append(unreadable, m.Hostname)
					continue
				}
				todo = append(todo, m)
			}
			for i := range todo {
				// Sealed again, everything else as it was: the record's
				// other fields, its Updated stamp, no event.
				if err := t.sealSecrets(&todo[i]); err != nil {
					return err
				}
				if err := t.put(bucketMachines, []byte(todo[i].ID), todo[i]); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return rot, fmt.Errorf("rotate: re-encrypt: %w", err)
		}
		after = next
		rot.Resealed += n
		rot.Unreadable = append(rot.Unreadable, unreadable...)
		if err := k.step("batch re-encrypted"); err != nil {
			return rot, err
		}
		if done {
			break
		}
	}
	// Every record the keyring can open is under the current key now (a
	// write that raced with the scan sealed under it too): the others are
	// of no use. Keys nothing could open are not in the keyring anyway.
	kept := ring.Retain(func(seal.KeyID) bool { return false })
	for _, id := range ring.IDs()[1:] {
		rot.Retired = append(rot.Retired, id.String())
	}
	if len(rot.Retired) > 0 {
		if err := k.keys.Save(kept); err != nil {
			return rot, fmt.Errorf("rotate: retire the old keys (every secret is readable, under the new key): %w", err)
		}
		k.ring.Store(kept)
	}
	return rot, nil
}

// resumeRotation finishes, at start, a rotation that a crash cut short.
func (s *Store) resumeRotation() {
	k := s.keys
	if len(k.current().IDs()) < 2 {
		return
	}
	k.rotate.Lock()
	defer k.rotate.Unlock()
	rot, err := s.finishRotation(context.Background())
	if err != nil {
		slog.Error("finish the secrets key rotation cut short (every secret stays readable; run rackd keys rotate)", "err", err)
		return
	}
	slog.Info("finished the secrets key rotation cut short", "key", rot.Key, "retired", rot.Retired, "resealed", rot.Resealed)
}

// checkSecrets verifies that a machine's record (raw: its stored bytes)
// holds no secret in clear and only envelopes of known fields.
func checkSecrets(m Machine, raw []byte, bad func(string, ...any)) {
	var clear struct {
		Power map[string]json.RawMessage `json:"power"`
	}
	if json.Unmarshal(raw, &clear) == nil {
		if _, ok := clear.Power["password"]; ok {
			bad("machine %s: its BMC password is stored in clear", m.ID)
		}
	}
	for name, env := range m.Secrets {
		if !slices.ContainsFunc(secretFields, func(f secretField) bool { return f.name == name }) {
			bad("machine %s: unknown secret %q", m.ID, name)
		}
		if _, err := seal.Parse(env); err != nil {
			bad("machine %s: secret %s: %v", m.ID, name, err)
		}
	}
}
