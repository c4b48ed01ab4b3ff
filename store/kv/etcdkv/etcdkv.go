// Package etcdkv is a kv engine on etcd, for several rackd agents sharing
// one inventory: optimistic, serialisable transactions over etcd's flat,
// multi-versioned keyspace.
//
// A transaction reads at one revision: the cluster's revision at its first
// read, so it sees one consistent snapshot. Its writes are buffered and
// committed as one etcd Txn whose comparisons say that nothing it read has
// changed since that revision: the modification revision of every key it
// read (CreateRevision == 0 for a key it found absent), and, for every
// bucket it walked (ForEach, Cursor, KeyN), the bucket's version key, which
// every transaction writing to the bucket touches, so that a key inserted
// into a walked range is a conflict too. A conflict runs the function again
// on a fresh snapshot, up to MaxAttempts times.
//
// Layout under the prefix: b/NAME/KEY the records, B/NAME a bucket's
// existence, S/NAME its sequence, V/NAME its version.
//
// A transaction whose ctx carries a kv.Fence also compares the fence key's
// creation revision; a commit refused because the fence no longer holds
// returns an error wrapping kv.ErrFenced and is not run again.
//
// A transaction that would send more operations than the cluster's
// per-transaction limit (etcd's --max-txn-ops, 128 by default) is refused
// with ErrTooLarge before anything is sent.
package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"rackd/store/kv"
)

// DefaultMaxTxnOps is etcd's default --max-txn-ops.
const DefaultMaxTxnOps = 128

// MaxAttempts bounds how often a conflicting transaction runs again
// (with a random pause growing to 64 ms between runs).
const MaxAttempts = 32

// pageSize is how many keys one range request of a walk asks for.
const pageSize = 500

var (
	// ErrConflict is returned when a transaction conflicted MaxAttempts
	// times in a row.
	ErrConflict = kv.ErrConflict
	// ErrTooLarge is returned for a transaction over the cluster's
	// per-transaction limit.
	ErrTooLarge = kv.ErrTooLarge
	// ErrReadOnly is returned by writes in a read-only transaction.
	ErrReadOnly = errors.New("etcdkv: write in a read-only transaction")
)

// A DB is a shared engine that can be followed.
var _ kv.Follower = (*DB)(nil)

// Unavailable is the package's Unavailable, as kv.Shared asks it of an
// engine.
func (d *DB) Unavailable(err error) bool { return Unavailable(err) }

// DB is a kv engine on an etcd cluster.
type DB struct {
	cli       *clientv3.Client
	prefix    string
	maxTxnOps int
	// beforeApply is Options.BeforeApply.
	beforeApply func(rev int64)
	// mir is the mirror of some buckets, when one runs (Mirror).
	mir atomic.Pointer[mirror]
}

// Options configures a DB.
type Options struct {
	// Prefix is where the engine's keys live ("/rackd/" when empty).
	Prefix string
	// MaxTxnOps is the cluster's --max-txn-ops (DefaultMaxTxnOps when 0).
	MaxTxnOps int
	// BeforeApply, when set, is called by Watch with each revision before
	// it applies it, to the mirror and then to its caller: a test holds a
	// follower back with it. It must not call the DB.
	BeforeApply func(rev int64)
}

// New returns an engine on cli.
func New(cli *clientv3.Client, opts Options) *DB {
	if opts.Prefix == "" {
		opts.Prefix = "/rackd/"
	}
	if opts.MaxTxnOps <= 0 {
		opts.MaxTxnOps = DefaultMaxTxnOps
	}
	return &DB{cli: cli, prefix: opts.Prefix, maxTxnOps: opts.MaxTxnOps, beforeApply: opts.BeforeApply}
}

// View runs fn in a read-only transaction on one snapshot.
func (d *DB) View(ctx context.Context, fn func(kv.Tx) error) error {
	t := d.newTx(ctx, false)
	t.mirrored = kv.MirroredReads(ctx)
	err := fn(t)
	if t.err != nil {
		return t.err // see UpdateRev
	}
	return err
}

// Update runs fn in a read-write transaction and commits its writes if
// nothing it read changed meanwhile; otherwise it runs fn again on a fresh
// snapshot. fn may therefore run more than once. An error from fn rolls
// back (nothing is sent) and is returned, unless a read of fn's failed
// (etcd did not answer): that error is returned instead.
func (d *DB) Update(ctx context.Context, fn func(kv.Tx) error) error {
	_, err := d.UpdateRev(ctx, fn)
	return err
}

// UpdateRev is Update that also returns the revision of its commit (0 when
// fn wrote nothing and nothing was sent).
func (d *DB) UpdateRev(ctx context.Context, fn func(kv.Tx) error) (int64, error) {
	return d.update(ctx, fn, MaxAttempts)
}

// TryUpdateRev is UpdateRev that runs fn once: a conflict returns
// ErrConflict at once, so that the caller may run it again otherwise (the
// store alone, with none of its own transactions beside it).
func (d *DB) TryUpdateRev(ctx context.Context, fn func(kv.Tx) error) (int64, error) {
	return d.update(ctx, fn, 1)
}

func (d *DB) update(ctx context.Context, fn func(kv.Tx) error, attempts int) (int64, error) {
	// Reads from the mirror are tried first when ctx allows; a conflict
	// on them does not count as an attempt (the mirror may only have been
	// behind) but ends them: the next run reads the cluster.
	mirrored := kv.MirroredReads(ctx)
	for attempt := 0; attempt < attempts; {
		if attempt > 0 && !mirrored {
			// Those that conflicted together would conflict again if
			// they ran again together: a random pause, growing.
			pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6)))
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		t, err := d.run(ctx, fn, mirrored)
		if err != nil {
			return 0, err
		}
		ok, err := t.commit()
		if err != nil {
			return 0, err
		}
		if ok {
			return t.committed, nil
		}
		if t.usedMirror {
			mirrored = false
		} else {
			attempt++
		}
	}
	return 0, ErrConflict
}

// run runs fn once in a read-write transaction, on reads from the mirror
// if mirrored. A refusal, or a run that writes nothing, rests on reads no
// commit will check when they came from the mirror: fn is then run again
// on the cluster's records, whose answer stands.
func (d *DB) run(ctx context.Context, fn func(kv.Tx) error, mirrored bool) (*tx, error) {
	t := d.newTx(ctx, true)
	t.mirrored = mirrored
	err := fn(t)
	if t.err == nil && t.usedMirror && (err != nil || len(t.writes) == 0) {
		t = d.newTx(ctx, true)
		err = fn(t)
	}
	if t.err != nil {
		// A read failed: whatever fn concluded from it (a refusal
		// included) rests on records it could not see.
		return nil, t.err
	}
	return t, err
}

// ViewRev is View that also returns the revision of its snapshot: the
// cluster's revision when it began, fixed before fn reads anything, so
// that a watch from the revision after it misses no change and repeats
// none. It loads the mirror (see Mirror) at the same revision.
func (d *DB) ViewRev(ctx context.Context, fn func(kv.Tx) error) (int64, error) {
	t := d.newTx(ctx, false)
	resp, err := d.cli.Get(ctx, d.prefix+"B/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdkv: the cluster's revision: %w", err)
	}
	t.rev = resp.Header.Revision
	err = fn(t)
	if t.err != nil {
		return 0, t.err // see UpdateRev
	}
	if err != nil {
		return 0, err
	}
	// The mirror, if any, is loaded at the same revision: the Watch from
	// the next keeps both the caller's state and it.
	if m := d.mir.Load(); m != nil {
		if err := m.load(ctx, t.rev); err != nil {
			return 0, err
		}
	}
	return t.rev, nil
}

func (d *DB) newTx(ctx context.Context, writable bool) *tx {
	return &tx{db: d, ctx: ctx, writable: writable, read: map[string]int64{}, values: map[string][]byte{}, writes: map[string]*[]byte{}, walked: map[string]bool{}}
}

// tx is one attempt of a transaction.
type tx struct {
	db       *DB
	ctx      context.Context
	writable bool
	rev      int64 // the snapshot's revision; 0 before the first read
	// read is the modification revision of every key read (0: absent),
	// and values what each held at the snapshot.
	read   map[string]int64
	values map[string][]byte
	// writes is the buffered writes, by full key; a nil value deletes.
	writes map[string]*[]byte
	// walked is the buckets whose ranges were read.
	walked map[string]bool
	// mirrored: reads of the keys the mirror keeps come from it;
	// usedMirror: some did.
	mirrored, usedMirror bool
	// err is the first etcd error met by a method that cannot return
	// one (Get, ForEach's reads): the transaction fails with it.
	err error
	// committed is the revision of a successful commit.
	committed int64
}

func (t *tx) key(kind, bucket string, k []byte) string {
	return t.db.prefix + kind + "/" + bucket + "/" + string(k)
}

func (t *tx) meta(kind, bucket string) string { return t.db.prefix + kind + "/" + bucket }

// rangeAt reads at the transaction's snapshot. The first read is
// linearizable: it fixes the snapshot at the cluster's revision, newer than
// every write committed before it. Later reads name that revision and are
// served by the member the client asks without a round of the leader's
// (serializable): a revision's contents never change once applied, so any
// member that applied it answers the same; one that has not yet says so
// (a future revision), and the read is asked again, linearizably.
func (t *tx) rangeAt(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if t.rev == 0 {
		return t.db.cli.Get(t.ctx, key, opts...)
	}
	opts = append(opts, clientv3.WithRev(t.rev))
	resp, err := t.db.cli.Get(t.ctx, key, append(opts, clientv3.WithSerializable())...)
	if errors.Is(err, rpctypes.ErrFutureRev) {
		resp, err = t.db.cli.Get(t.ctx, key, opts...)
	}
	return resp, err
}

// get reads key at the snapshot (its own writes first) and records it.
func (t *tx) get(key string) []byte {
	if w, ok := t.writes[key]; ok {
		if w == nil {
			return nil
		}
		return *w
	}
	if _, ok := t.read[key]; ok {
		return t.values[key]
	}
	if t.err != nil {
		return nil
	}
	if m := t.db.mir.Load(); t.mirrored && m != nil {
		if v, mod, ok := m.get(key); ok {
			t.usedMirror = true
			t.read[key] = mod
			if v != nil {
				t.values[key] = v
			}
			return v
		}
	}
	resp, err := t.rangeAt(key)
	if err != nil {
		t.err = fmt.Errorf("etcdkv: get %q: %w", key, err)
		return nil
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	if len(resp.Kvs) == 0 {
		t.read[key] = 0
		return nil
	}
	t.read[key] = resp.Kvs[0].ModRevision
	t.values[key] = present(resp.Kvs[0].Value)
	return t.values[key]
}

func (t *tx) put(key string, value []byte) error {
	if !t.writable {
		return ErrReadOnly
	}
	v := append([]byte{}, value...) // empty, never nil: the key exists
	t.writes[key] = &v
	return nil
}

func (t *tx) del(key string) error {
	if !t.writable {
		return ErrReadOnly
	}
	t.writes[key] = nil
	return nil
}

// pair is one key and value of a walked range.
type pair struct{ k, v []byte }

// walk reads bucket's whole range at the snapshot, merged with the
// transaction's own writes, in key order.
func (t *tx) walk(bucket string) []pair {
	c := t.newCursor(bucket)
	for c.load() {
	}
	return c.pairs
}

// Pages of a walk start small and double up to pageSize: a cursor that
// stops at its first keys (an allocation taking the first free machine)
// reads a few, one that goes on reads in large pages.
const firstPageSize = 16

// newCursor is a walk of bucket at the snapshot, read page by page as the
// cursor moves, merged with the transaction's writes made before it.
func (t *tx) newCursor(bucket string) *cursor {
	t.walked[bucket] = true
	start := t.key("b", bucket, nil)
	c := &cursor{t: t, start: start, end: clientv3.GetPrefixRangeEnd(start), from: start,
		page: firstPageSize, writes: map[string]*[]byte{}, i: -1}
	for k, w := range t.writes {
		if strings.HasPrefix(k, start) {
			c.writes[k] = w
		}
	}
	return c
}

// load reads the next page of the range into pairs; false once the range
// is all read (or a read failed: t.err).
func (c *cursor) load() bool {
	t := c.t
	if c.done || t.err != nil {
		return false
	}
	resp, err := t.rangeAt(c.from, clientv3.WithRange(c.end), clientv3.WithLimit(int64(c.page)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		t.err = fmt.Errorf("etcdkv: range of bucket %q: %w", strings.TrimPrefix(c.start, t.db.prefix+"b/"), err)
		return false
	}
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
	merged := map[string][]byte{}
	for _, kv := range resp.Kvs {
		merged[string(kv.Key)] = present(kv.Value)
	}
	// This page covers the keys from c.from up to its last (to the end
	// of the range when it is the last page): the writes among them.
	upTo := c.end
	c.done = !resp.More || len(resp.Kvs) == 0
	if !c.done {
		upTo = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	for k, w := range c.writes {
		if k < c.from || k >= upTo {
			continue
		}
		if w == nil {
			delete(merged, k)
		} else {
			merged[k] = *w
		}
	}
	page := make([]pair, 0, len(merged))
	for k, v := range merged {
		page = append(page, pair{k: []byte(k[len(c.start):]), v: v})
	}
	slices.SortFunc(page, func(a, b pair) int { return bytes.Compare(a.k, b.k) })
	c.pairs = append(c.pairs, page...)
	c.from = upTo
	c.page = min(2*c.page, pageSize)
	return true
}

// commit sends the buffered writes with the comparisons that make the
// transaction serialisable. It reports false on a conflict.
func (t *tx) commit() (bool, error) {
	if len(t.writes) == 0 {
		return true, nil // read only: its snapshot was consistent
	}
	var cmps []clientv3.Cmp
	for k, rev := range t.read {
		if rev == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
		}
	}
	// A walked bucket's version is compared as of the walk's snapshot,
	// not as the mirror has it.
	t.mirrored = false
	for b := range t.walked {
		vk := t.meta("V", b)
		if _, seen := t.read[vk]; !seen {
			// The version as of the snapshot: read it now, at the
			// snapshot's revision.
			t.get(vk)
			if t.err != nil {
				return false, t.err
			}
			rev := t.read[vk]
			if rev == 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(vk), "=", 0))
			} else {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(vk), "=", rev))
			}
		}
	}
	var ops []clientv3.Op
	touched := map[string]bool{}
	bprefix := t.db.prefix + "b/"
	for k, w := range t.writes {
		if w == nil {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(*w)))
		}
		if strings.HasPrefix(k, bprefix) {
			bucket, _, _ := strings.Cut(k[len(bprefix):], "/")
			touched[bucket] = true
		}
	}
	// Every write to a bucket moves its version, so that a transaction
	// that walked the bucket conflicts with it.
	versions := make([]string, 0, len(touched))
	for b := range touched {
		versions = append(versions, t.meta("V", b))
		ops = append(ops, clientv3.OpPut(t.meta("V", b), ""))
	}
	// A fenced write commits only while its leader's key is the one it
	// won; when the commit fails, the Else branch says whether the fence
	// is why (rerunning would fail the same way) or a conflict.
	fence, fenced := kv.FenceFrom(t.ctx)
	var orElse []clientv3.Op
	if fenced {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(fence.Key), "=", fence.CreateRevision))
		orElse = append(orElse, clientv3.OpGet(fence.Key, clientv3.WithKeysOnly()))
	}
	if n := len(cmps) + len(ops); n > t.db.maxTxnOps {
		return false, fmt.Errorf("%w: %d comparisons and writes, the limit is %d", ErrTooLarge, n, t.db.maxTxnOps)
	}
	resp, err := t.db.cli.Txn(t.ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err != nil {
		return false, fmt.Errorf("etcdkv: commit: %w", err)
	}
	if resp.Succeeded {
		t.committed = resp.Header.Revision
		if m := t.db.mir.Load(); m != nil {
			m.committed(t.committed, t.writes, versions)
		}
	}
	if !resp.Succeeded && fenced {
		var now int64 // 0: the key is gone
		if len(resp.Responses) == 1 {
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				now = kvs[0].CreateRevision
			}
		}
		if now != fence.CreateRevision {
			return false, fmt.Errorf("%w: fence %q was created at revision %d, now %d (0: gone)", kv.ErrFenced, fence.Key, fence.CreateRevision, now)
		}
	}
	return resp.Succeeded, nil
}

// present is a stored value as Get returns it: etcd hands an empty value
// back as nil, which would read as an absent key.
func present(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// kv.Tx

func (t *tx) Bucket(name []byte) kv.Bucket {
	if t.get(t.meta("B", string(name))) == nil && t.err == nil {
		return nil
	}
	// After a failed read the bucket may well exist: a nil here would
	// read as "no such bucket" to a caller that cannot see t.err. Its
	// reads find nothing and the transaction fails with t.err.
	return &bucket{t: t, name: string(name)}
}

func (t *tx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	if b := t.Bucket(name); b != nil {
		return b, t.err
	}
	if t.err != nil {
		return nil, t.err
	}
	if err := t.put(t.meta("B", string(name)), []byte{1}); err != nil {
		return nil, err
	}
	return &bucket{t: t, name: string(name)}, nil
}

func (t *tx) Writable() bool { return t.writable }

type bucket struct {
	t    *tx
	name string
}

func (b *bucket) Get(key []byte) []byte { return b.t.get(b.t.key("b", b.name, key)) }

func (b *bucket) Put(key, value []byte) error {
	if len(key) == 0 {
		return errors.New("etcdkv: empty key")
	}
	return b.t.put(b.t.key("b", b.name, key), value)
}

func (b *bucket) Delete(key []byte) error { return b.t.del(b.t.key("b", b.name, key)) }

func (b *bucket) ForEach(fn func(k, v []byte) error) error {
	for _, p := range b.t.walk(b.name) {
		if err := fn(p.k, p.v); err != nil {
			return err
		}
	}
	return b.t.err
}

func (b *bucket) Cursor() kv.Cursor { return b.t.newCursor(b.name) }

func (b *bucket) NextSequence() (uint64, error) {
	if !b.t.writable {
		return 0, ErrReadOnly
	}
	n, err := b.sequence()
	if err != nil {
		return 0, err
	}
	n++
	return n, b.SetSequence(n)
}

func (b *bucket) sequence() (uint64, error) {
	var n uint64
	if v := b.t.get(b.t.meta("S", b.name)); v != nil {
		var err error
		if n, err = strconv.ParseUint(string(v), 10, 64); err != nil {
			return 0, fmt.Errorf("etcdkv: sequence of bucket %q is %q: %w", b.name, v, err)
		}
	}
	return n, b.t.err
}

func (b *bucket) Sequence() uint64 {
	n, _ := b.sequence() // an error fails the transaction (t.err)
	return n
}

func (b *bucket) SetSequence(v uint64) error {
	return b.t.put(b.t.meta("S", b.name), []byte(strconv.FormatUint(v, 10)))
}

func (b *bucket) KeyN() int { return len(b.t.walk(b.name)) }

// cursor walks a snapshot of the bucket's range (with the transaction's
// writes up to when it was made), read page by page as it moves.
type cursor struct {
	t          *tx
	start, end string             // the bucket's range of etcd keys
	writes     map[string]*[]byte // the transaction's, in the range, when made
	pairs      []pair             // read so far, in order
	from       string             // where the next page starts
	page       int                // the next page's size
	done       bool               // the whole range is in pairs
	i          int
}

// at returns the pair at i, reading on until it is read or the range ends.
func (c *cursor) at() ([]byte, []byte) {
	for c.i >= len(c.pairs) && c.load() {
	}
	if c.i < 0 || c.i >= len(c.pairs) {
		c.i = max(-1, min(c.i, len(c.pairs)))
		return nil, nil
	}
	return c.pairs[c.i].k, c.pairs[c.i].v
}

func (c *cursor) First() ([]byte, []byte) { c.i = 0; return c.at() }
func (c *cursor) Next() ([]byte, []byte)  { c.i++; return c.at() }
func (c *cursor) Prev() ([]byte, []byte)  { c.i--; return c.at() }

func (c *cursor) Last() ([]byte, []byte) {
	for c.load() {
	}
	c.i = len(c.pairs) - 1
	return c.at()
}

func (c *cursor) Seek(key []byte) ([]byte, []byte) {
	for {
		var found bool
		c.i, found = slices.BinarySearchFunc(c.pairs, key, func(p pair, k []byte) int { return bytes.Compare(p.k, k) })
		if found || c.i < len(c.pairs) || !c.load() {
			return c.at()
		}
	}
}

func (c *cursor) Delete() error {
	k, _ := c.at()
	if k == nil {
		return errors.New("etcdkv: cursor delete off the range")
	}
	return c.t.del(c.start + string(k))
}
