package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/kv"
	"rackd/store/kv/etcdkv"
)

// Barrier makes transactions of several stores on one etcd overlap: while
// armed, each engine it wraps holds its first read-write transaction after
// the transaction's function has run (its reads done, its writes not yet
// sent) until every engine's has got that far. Two agents' operations then
// both read before either commits, as they may in a cluster, instead of
// whenever the scheduler lets them.
type Barrier struct {
	t       testing.TB
	parties int

	mu      sync.Mutex
	armed   bool
	arrived map[*barrierEngine]bool
	all     chan struct{}
}

// NewBarrier returns a barrier for parties engines.
func NewBarrier(t testing.TB, parties int) *Barrier {
	return &Barrier{t: t, parties: parties}
}

// Engine wraps db: a store opened on it (store.OpenEngine) waits at the
// barrier while it is armed.
func (b *Barrier) Engine(db *etcdkv.DB) store.Engine {
	return &barrierEngine{DB: db, b: b}
}

// Arm makes the next read-write transaction of each engine wait for the
// others'.
func (b *Barrier) Arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed, b.arrived, b.all = true, map[*barrierEngine]bool{}, make(chan struct{})
}

// Met reports whether every engine reached the barrier since it was
// armed: a test whose operations did not all get there overlapped
// nothing.
func (b *Barrier) Met() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.armed && b.all != nil
}

// arrive is e's transaction, its function run: it waits, if the barrier
// is armed and e has not come yet, for every engine (bounded).
func (b *Barrier) arrive(e *barrierEngine) {
	b.mu.Lock()
	if !b.armed || b.arrived[e] {
		b.mu.Unlock()
		return
	}
	b.arrived[e] = true
	all := b.all
	if len(b.arrived) == b.parties {
		b.armed = false
		close(all)
	}
	b.mu.Unlock()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		b.mu.Lock()
		n := len(b.arrived)
		if b.armed && b.all == all {
			b.armed, b.all = false, nil
			close(all)
		}
		b.mu.Unlock()
		b.t.Errorf("storetest: barrier: %d of %d engines arrived within 30s", n, b.parties)
	}
}

// barrierEngine is an etcd engine whose read-write transactions wait at
// b; everything else is the engine's own (its watch, its mirror).
type barrierEngine struct {
	*etcdkv.DB
	b *Barrier
}

func (e *barrierEngine) wrap(fn func(kv.Tx) error) func(kv.Tx) error {
	return func(tx kv.Tx) error {
		err := fn(tx)
		e.b.arrive(e)
		return err
	}
}

func (e *barrierEngine) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return e.DB.Update(ctx, e.wrap(fn))
}

func (e *barrierEngine) UpdateRev(ctx context.Context, fn func(kv.Tx) error) (int64, error) {
	return e.DB.UpdateRev(ctx, e.wrap(fn))
}

func (e *barrierEngine) TryUpdateRev(ctx context.Context, fn func(kv.Tx) error) (int64, error) {
	return e.DB.TryUpdateRev(ctx, e.wrap(fn))
}
