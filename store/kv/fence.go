package kv

import (
	"context"
	"errors"
)

// Fence makes a write conditional on a leadership still being held: the
// key a leader holds (its election key, the full engine key, not under the
// store's prefix) must still exist with the creation revision it had when
// leadership was won. A key deleted (the lease expired, the leader
// resigned) or created again (someone else won) fails the fence.
type Fence struct {
	Key            string
	CreateRevision int64
}

// ErrFenced is returned by a write whose fence no longer holds: nothing of
// it was written.
var ErrFenced = errors.New("the leadership this write relied on was lost")

type fenceKey struct{}

// WithFence returns a ctx whose writes commit only while f holds. An
// engine shared by several writers (etcd) checks it in the same commit as
// the write; an engine with one writer (bbolt) ignores it.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the fence ctx carries, if any.
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok && f.Key != ""
}
