package kv

import bolt "go.etcd.io/bbolt"

// Bolt wraps a bbolt transaction as a Tx. bbolt gives every guarantee the
// package asks for: one writer at a time (a read-write transaction is never
// in conflict, so it never runs twice), an fsync'd commit, ordered keys.
func Bolt(tx *bolt.Tx) Tx { return boltTx{tx} }

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Bucket(name []byte) Bucket {
	b := t.tx.Bucket(name)
	if b == nil {
		return nil // a nil interface, not an interface holding a nil pointer
	}
	return boltBucket{b}
}

func (t boltTx) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	b, err := t.tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return boltBucket{b}, nil
}

func (t boltTx) Writable() bool { return t.tx.Writable() }

// boltBucket is pointer-shaped: making it an interface does not allocate.
type boltBucket struct{ b *bolt.Bucket }

func (b boltBucket) Get(key []byte) []byte                    { return b.b.Get(key) }
func (b boltBucket) Put(key, value []byte) error              { return b.b.Put(key, value) }
func (b boltBucket) Delete(key []byte) error                  { return b.b.Delete(key) }
func (b boltBucket) ForEach(fn func(k, v []byte) error) error { return b.b.ForEach(fn) }
func (b boltBucket) Cursor() Cursor                           { return boltCursor{b.b.Cursor()} }
func (b boltBucket) NextSequence() (uint64, error)            { return b.b.NextSequence() }
func (b boltBucket) Sequence() uint64                         { return b.b.Sequence() }
func (b boltBucket) SetSequence(v uint64) error               { return b.b.SetSequence(v) }
func (b boltBucket) KeyN() int                                { return b.b.Stats().KeyN }

type boltCursor struct{ c *bolt.Cursor }

func (c boltCursor) First() ([]byte, []byte)          { return c.c.First() }
func (c boltCursor) Last() ([]byte, []byte)           { return c.c.Last() }
func (c boltCursor) Next() ([]byte, []byte)           { return c.c.Next() }
func (c boltCursor) Prev() ([]byte, []byte)           { return c.c.Prev() }
func (c boltCursor) Seek(key []byte) ([]byte, []byte) { return c.c.Seek(key) }
func (c boltCursor) Delete() error                    { return c.c.Delete() }
