package kv

import (
	"context"
	"errors"
)

// Engine is where a store keeps its records: a database file (Bolt) or a
// cluster several writers share (store/kv/etcdkv). What an engine can do
// beyond transactions, the store learns from the interfaces below it
// implements, never from which engine it is.
type Engine interface {
	// Update runs fn in a read-write transaction, committed durably when
	// fn returns nil; fn may run more than once.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only transaction on one snapshot.
	View(ctx context.Context, fn func(Tx) error) error
}

// Shared is an engine several writers use at once. Its transactions are
// serialisable and retried by the engine when they conflict (ErrConflict
// once they kept conflicting), each is bounded in size (ErrTooLarge), and
// a write's fence (WithFence) is checked in the same commit. A store on it
// commits its operations concurrently, one a transaction, and never shares
// a commit between operations of different fences.
type Shared interface {
	Engine
	// Unavailable says whether err is the engine not answering (no
	// quorum, no member reachable): no refusal, and nothing known to be
	// written.
	Unavailable(err error) bool
}

// Follower is a shared engine whose commits have revisions that a watch
// delivers in order, so that a writer can keep state in memory that
// follows every writer's commits.
type Follower interface {
	Shared
	UpdateRev(ctx context.Context, fn func(Tx) error) (int64, error)
	TryUpdateRev(ctx context.Context, fn func(Tx) error) (int64, error)
	ViewRev(ctx context.Context, fn func(Tx) error) (int64, error)
	// Watch calls fn, in revision order, for every revision from fromRev
	// on with the records it changed, until ctx ends or fn fails;
	// ErrCompacted says fromRev is gone.
	Watch(ctx context.Context, fromRev int64, fn func(rev int64, changes []Change) error) error
	// LastChange is the revision of the last commit at or before rev
	// that changed anything the engine holds.
	LastChange(ctx context.Context, rev int64) (int64, error)
}

// Change is one record written or deleted by a commit.
type Change struct {
	Bucket string
	Key    []byte
	// Value is the record as written; nil when it was deleted.
	Value []byte
	// Created is set when the commit made the key (it did not exist
	// before).
	Created bool
}

var (
	// ErrConflict is returned by a shared engine's transaction that kept
	// conflicting with others.
	ErrConflict = errors.New("kv: transaction kept conflicting with others")
	// ErrTooLarge is returned for a transaction over a shared engine's
	// per-transaction limit, before anything is sent.
	ErrTooLarge = errors.New("kv: transaction over the engine's per-transaction limit")
	// ErrCompacted is returned by Watch when the revision it was to
	// resume from is gone: changes were lost, and whoever keeps state
	// from the watch must load it again (ViewRev) and watch from there.
	ErrCompacted = errors.New("kv: the watch's revision was compacted")
)
