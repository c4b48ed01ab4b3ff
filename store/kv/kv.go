// Package kv is the seam between the store's domain operations and the
// engine that keeps their records: ordered buckets of byte keys and values,
// read and written inside a transaction. The store's operations speak only
// to these interfaces; an engine provides them (Bolt here, over bbolt).
//
// What an engine must guarantee (docs/ARCHITECTURE.md, "The store"):
//   - a read-write transaction is serialisable: it sees one consistent
//     snapshot plus its own writes, and it commits only if nothing it read
//     changed meanwhile (bbolt: one writer at a time; an engine with
//     optimistic concurrency compares what it read and retries);
//   - a function given to a read-write transaction may be run more than
//     once, so it must have no effect outside the transaction (the store
//     defers its in-memory effects to after-commit hooks);
//   - a commit is durable when it returns;
//   - keys within a bucket are ordered bytewise, which cursors and ForEach
//     follow;
//   - values returned are valid only during the transaction: copy what is
//     kept.
package kv

// Tx is a transaction.
type Tx interface {
	// Bucket returns the named top-level bucket, or nil if it does not
	// exist.
	Bucket(name []byte) Bucket
	// CreateBucketIfNotExists returns the named bucket, creating it in a
	// read-write transaction.
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	// Writable reports whether this is a read-write transaction.
	Writable() bool
}

// Bucket is an ordered collection of keys and values.
type Bucket interface {
	// Get returns the value at key, or nil.
	Get(key []byte) []byte
	// Put sets key to value.
	Put(key, value []byte) error
	// Delete removes key (no error when it is absent).
	Delete(key []byte) error
	// ForEach calls fn for every key in order until fn returns an error,
	// which it returns. fn must not change the bucket.
	ForEach(fn func(k, v []byte) error) error
	// Cursor returns a cursor over the bucket, valid for the transaction.
	Cursor() Cursor
	// NextSequence returns the bucket's next counter value (from 1),
	// incremented in this transaction.
	NextSequence() (uint64, error)
	// Sequence is the bucket's counter as it is (0 before the first
	// NextSequence); SetSequence sets it (copying a bucket).
	Sequence() uint64
	SetSequence(v uint64) error
	// KeyN is the number of keys in the bucket.
	KeyN() int
}

// Cursor walks a bucket's keys in order. Every move returns the key and
// value it lands on, or nil keys past either end.
type Cursor interface {
	First() (k, v []byte)
	Last() (k, v []byte)
	Next() (k, v []byte)
	Prev() (k, v []byte)
	// Seek moves to key, or to the first key after it.
	Seek(key []byte) (k, v []byte)
	// Delete removes the key the cursor is on.
	Delete() error
}
