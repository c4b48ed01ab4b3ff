// Package store is the rack's state and its rules.
//
// It keeps machines, their interfaces (MACs), users and their hashed tokens,
// allocations and the event history in one bbolt file, and it owns the domain
// operations that must be atomic: creating a machine, a lifecycle transition,
// allocating, adopting and releasing. Each of them runs as one transaction, so
// an invariant ("a machine is held by at most one allocation", "a MAC belongs
// to one machine") can never be seen half-kept, not even after a crash.
//
// # Group commit
//
// Every write goes through one committer goroutine. It takes everything that
// was queued while the previous commit was being fsync'd and runs it in one
// bbolt transaction, so N concurrent writers share one fsync instead of
// queueing for N of them. A caller is answered only after the commit that
// holds its change is on disk. A domain refusal (say, no machine available)
// does not spoil the batch: operations check before they write, and an
// operation that fails after writing makes the committer replay the batch one
// operation per transaction.
//
// On a shared engine (OpenEngine: etcd, several agents) there is no group:
// each operation runs in a transaction of its own, up to
// Options.MaxInFlight at once, and its after-commit hooks run on its own
// goroutine, concurrently with other operations' hooks (follow.go keeps the
// in-memory state up with the other agents).
//
// # Caveats
//
// Values returned by the store are copies; nothing returned aliases bbolt's
// memory-mapped pages (which are only valid inside a transaction). bbolt
// transactions cannot be cancelled, so every operation here is short.
package store
