package kv

import "context"

type mirroredKey struct{}

// WithMirroredReads returns a ctx whose transactions an engine may read
// from an in-memory copy of its records that can lag behind the engine by
// what is still on its way (etcd: a watch), instead of asking the engine
// for each key. A read-write transaction stays serialisable: its commit
// still compares every key it read with the engine's, and a transaction
// that conflicts, refuses, or would write nothing is run again on reads
// from the engine itself. A read-only transaction may see a state a little
// behind: it is for advisory reads whose outcome a later write checks (a
// DHCP offer, checked by the acknowledgement that follows it). An engine
// with no such copy (bbolt) ignores it.
func WithMirroredReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, mirroredKey{}, true)
}

// MirroredReads reports whether ctx allows reads from a copy (see
// WithMirroredReads).
func MirroredReads(ctx context.Context) bool {
	ok, _ := ctx.Value(mirroredKey{}).(bool)
	return ok
}
