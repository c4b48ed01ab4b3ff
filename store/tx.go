package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	bolt "go.etcd.io/bbolt"

	"rackd/store/kv"
)

// Tx is one operation's view of a write transaction. Operations must check
// every rule before their first write; see the package doc.
type Tx struct {
	tx    kv.Tx
	now   time.Time
	dirty bool
	ipam  *ipamState
	// buckets caches bucket handles (see bucket).
	buckets [4]struct {
		name []byte
		b    kv.Bucket
	}
	// after runs once the transaction's writes are durable (or, for an
	// operation that wrote nothing, once it has run): in-memory state that
	// readers outside the committer consult must not move ahead of what
	// they can see in the database.
	after []func()
	// powerKicks lists machines this operation queued power requests for.
	powerKicks []string
	// credKey derives phase credentials (phases.go).
	credKey []byte
	// keys seals BMC secrets (secrets.go).
	keys *keyState
	// onEvent is Store.OnEvent's function when one is set.
	onEvent func(Event)
	// consoleTail is Store.ConsoleTail's function when one is set.
	consoleTail func(machine string) []byte
	// commit is what the hooks learn of the commit (nil in a view).
	commit *commitInfo
	// macs is the MAC each address this operation wrote ends with, on an
	// engine with other writers (setMAC).
	macs map[netip.Addr]string
}

// afterCommit runs fn once this operation's outcome is committed.
func (t *Tx) afterCommit(fn func()) { t.after = append(t.after, fn) }

// viewFunc runs fn in a read transaction of the engine.
type viewFunc func(fn func(kv.Tx) error) error

// viewKV runs fn in a read transaction of the engine, bounded by
// CommitTimeout (an engine across the network may not answer).
func (s *Store) viewKV(fn func(kv.Tx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	defer cancel()
	return s.unavailable(s.kv.View(ctx, fn))
}

// view runs fn in a read transaction.
func (s *Store) view(fn func(*Tx) error) error {
	return s.viewKV(func(tx kv.Tx) error { return fn(s.readTx(tx)) })
}

// viewMirrored is view for an advisory read whose outcome a later write
// checks: on an engine that keeps the records in memory it reads them
// there, maybe a little behind (kv.WithMirroredReads).
func (s *Store) viewMirrored(fn func(*Tx) error) error {
	ctx, cancel := context.WithTimeout(kv.WithMirroredReads(context.Background()), s.opts.CommitTimeout)
	defer cancel()
	return s.unavailable(s.kv.View(ctx, func(tx kv.Tx) error { return fn(s.readTx(tx)) }))
}

func (s *Store) readTx(tx kv.Tx) *Tx {
	return &Tx{tx: tx, now: s.now().UTC(), ipam: s.ipam, credKey: s.credKey, keys: s.keys}
}

// Engine is a kv engine the store runs on: its bbolt file (Open), or
// another (OpenEngine). See package kv for what an engine guarantees, and
// for the capabilities beyond it (kv.Shared, kv.Follower) the store asks
// an engine for.
type Engine = kv.Engine

// boltEngine is the store's bbolt file as an Engine. bbolt has no
// context: its transactions are local and bounded by the disk.
type boltEngine struct{ db *bolt.DB }

func (e boltEngine) Update(_ context.Context, fn func(kv.Tx) error) error {
	return e.db.Update(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
}

func (e boltEngine) View(_ context.Context, fn func(kv.Tx) error) error {
	return e.db.View(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
}

// get decodes the value at key into v; it reports whether the key exists.
// bucket returns the named top-level bucket. Handles are kept for the
// operation: in a read transaction bbolt looks a bucket up (a seek and an
// allocation) on every Tx.Bucket call, and a DHCP offer reads the addresses
// bucket several times.
func (t *Tx) bucket(name []byte) kv.Bucket {
	for i := range t.buckets {
		c := &t.buckets[i]
		if c.b == nil {
			b := t.tx.Bucket(name)
			if b != nil { // a bucket created later in the transaction is found then
				c.name, c.b = name, b
			}
			return b
		}
		if bytes.Equal(c.name, name) {
			return c.b
		}
	}
	return t.tx.Bucket(name)
}

func (t *Tx) get(bucket, key []byte, v any) (bool, error) {
	data := t.bucket(bucket).Get(key)
	if data == nil {
		return false, nil
	}
	// json.Unmarshal copies: nothing returned aliases the mmap.
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return true, nil
}

func (t *Tx) put(bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	t.dirty = true
	return t.bucket(bucket).Put(key, data)
}

func (t *Tx) putRaw(bucket, key, value []byte) error {
	t.dirty = true
	return t.bucket(bucket).Put(key, value)
}

func (t *Tx) getRaw(bucket, key []byte) []byte {
	v := t.bucket(bucket).Get(key)
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

func (t *Tx) del(bucket, key []byte) error {
	t.dirty = true
	return t.bucket(bucket).Delete(key)
}

func (t *Tx) nextSeq(bucket []byte) (uint64, error) {
	t.dirty = true
	return t.tx.Bucket(bucket).NextSequence()
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
