// Package kvtest is the conformance suite every kv engine passes: the
// bucket, cursor, sequence and transaction semantics the store's
// operations rely on (see package kv).
package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"rackd/store/kv"
)

// Engine is what the suite drives: a fresh, empty engine's transactions.
type Engine struct {
	// Update runs fn in a read-write transaction, committed when fn
	// returns nil and rolled back otherwise.
	Update func(fn func(kv.Tx) error) error
	// View runs fn in a read-only transaction.
	View func(fn func(kv.Tx) error) error
}

// Run runs the suite; open returns a fresh, empty engine for each test.
func Run(t *testing.T, open func(t *testing.T) Engine) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, e Engine)
	}{
		{"missing bucket", missingBucket},
		{"put get delete", putGetDelete},
		{"order", order},
		{"cursor", cursor},
		{"sequence", sequence},
		{"rollback", rollback},
		{"read only", readOnly},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

var name = []byte("b")

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func missingBucket(t *testing.T, e Engine) {
	must(t, e.View(func(tx kv.Tx) error {
		if b := tx.Bucket(name); b != nil {
			return fmt.Errorf("a bucket never created is %v, want nil", b)
		}
		return nil
	}))
	must(t, e.Update(func(tx kv.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
		if tx.Bucket(name) == nil {
			return errors.New("the bucket just created is not found in its transaction")
		}
		_, err := tx.CreateBucketIfNotExists(name) // again: the same bucket
		return err
	}))
}

func create(t *testing.T, e Engine, pairs ...string) {
	t.Helper()
	must(t, e.Update(func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists(name)
		if err != nil {
			return err
		}
		for i := 0; i < len(pairs); i += 2 {
			if err := b.Put([]byte(pairs[i]), []byte(pairs[i+1])); err != nil {
				return err
			}
		}
		return nil
	}))
}

func putGetDelete(t *testing.T, e Engine) {
	create(t, e, "k1", "v1", "k2", "v2", "empty", "")
	// An empty value is a key that exists (index buckets hold only keys).
	must(t, e.View(func(tx kv.Tx) error {
		if got := tx.Bucket(name).Get([]byte("empty")); got == nil || len(got) != 0 {
			return fmt.Errorf("Get of a key with an empty value = %#v, want empty and not nil", got)
		}
		return nil
	}))
	// A key put with a nil value exists once committed (bbolt answers nil
	// for it inside the putting transaction: the store does not rely on
	// either answer there).
	must(t, e.Update(func(tx kv.Tx) error { return tx.Bucket(name).Put([]byte("nil"), nil) }))
	must(t, e.View(func(tx kv.Tx) error {
		if got := tx.Bucket(name).Get([]byte("nil")); got == nil {
			return errors.New("Get of a key put with a nil value = nil, want empty")
		}
		return nil
	}))
	must(t, e.Update(func(tx kv.Tx) error {
		if err := tx.Bucket(name).Delete([]byte("nil")); err != nil {
			return err
		}
		return tx.Bucket(name).Delete([]byte("empty"))
	}))
	must(t, e.Update(func(tx kv.Tx) error {
		b := tx.Bucket(name)
		if got := b.Get([]byte("k1")); string(got) != "v1" {
			return fmt.Errorf("Get k1 = %q", got)
		}
		if got := b.Get([]byte("nope")); got != nil {
			return fmt.Errorf("Get of a missing key = %q, want nil", got)
		}
		if err := b.Delete([]byte("k1")); err != nil {
			return err
		}
		if err := b.Delete([]byte("nope")); err != nil {
			return fmt.Errorf("Delete of a missing key: %w", err)
		}
		if got := b.Get([]byte("k1")); got != nil {
			return fmt.Errorf("Get after Delete in the same transaction = %q", got)
		}
		return b.Put([]byte("k2"), []byte("v2'"))
	}))
	must(t, e.View(func(tx kv.Tx) error {
		b := tx.Bucket(name)
		if b.Get([]byte("k1")) != nil || string(b.Get([]byte("k2"))) != "v2'" || b.KeyN() != 1 {
			return fmt.Errorf("after the commit: k1 %q k2 %q keys %d", b.Get([]byte("k1")), b.Get([]byte("k2")), b.KeyN())
		}
		return nil
	}))
}

func order(t *testing.T, e Engine) {
	// Bytewise order, not insertion order: big-endian sequence keys and
	// "machine/suffix" keys rely on it.
	create(t, e, "b", "2", "a\xff", "1x", "a", "1", "\x00", "0", "c", "3")
	want := []string{"\x00", "a", "a\xff", "b", "c"}
	must(t, e.View(func(tx kv.Tx) error {
		var got []string
		if err := tx.Bucket(name).ForEach(func(k, _ []byte) error {
			got = append(got, string(k))
			return nil
		}); err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("ForEach order %q, want %q", got, want)
		}
		stop := errors.New("stop")
		n := 0
		err := tx.Bucket(name).ForEach(func(k, _ []byte) error {
			n++
			return stop
		})
		if !errors.Is(err, stop) || n != 1 {
			return fmt.Errorf("ForEach did not stop at fn's error: %v after %d", err, n)
		}
		return nil
	}))
}

func cursor(t *testing.T, e Engine) {
	create(t, e, "m1/0001", "a", "m1/0002", "b", "m2/0001", "c", "m3/0001", "d")
	must(t, e.Update(func(tx kv.Tx) error {
		c := tx.Bucket(name).Cursor()
		if k, v := c.First(); string(k) != "m1/0001" || string(v) != "a" {
			return fmt.Errorf("First = %q %q", k, v)
		}
		if k, _ := c.Next(); string(k) != "m1/0002" {
			return fmt.Errorf("Next = %q", k)
		}
		if k, _ := c.Seek([]byte("m2")); string(k) != "m2/0001" {
			return fmt.Errorf("Seek(m2) = %q", k)
		}
		if k, _ := c.Prev(); string(k) != "m1/0002" {
			return fmt.Errorf("Prev = %q", k)
		}
		if k, v := c.Last(); string(k) != "m3/0001" || string(v) != "d" {
			return fmt.Errorf("Last = %q %q", k, v)
		}
		if k, _ := c.Next(); k != nil {
			return fmt.Errorf("Next past the end = %q, want nil", k)
		}
		if k, _ := c.Seek([]byte("z")); k != nil {
			return fmt.Errorf("Seek past the end = %q, want nil", k)
		}
		// Delete the keys of one prefix while walking them, as the store
		// deletes a machine's records.
		for k, _ := c.Seek([]byte("m1/")); k != nil && bytes.HasPrefix(k, []byte("m1/")); k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	}))
	must(t, e.View(func(tx kv.Tx) error {
		c := tx.Bucket(name).Cursor()
		if k, _ := c.First(); string(k) != "m2/0001" || tx.Bucket(name).KeyN() != 2 {
			return fmt.Errorf("after deleting m1/*: first %q, %d keys", k, tx.Bucket(name).KeyN())
		}
		return nil
	}))
}

func sequence(t *testing.T, e Engine) {
	create(t, e)
	var got []uint64
	for range 3 {
		must(t, e.Update(func(tx kv.Tx) error {
			n, err := tx.Bucket(name).NextSequence()
			got = append(got, n)
			return err
		}))
	}
	// A rolled-back transaction's sequence is not kept.
	_ = e.Update(func(tx kv.Tx) error {
		if _, err := tx.Bucket(name).NextSequence(); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	must(t, e.Update(func(tx kv.Tx) error {
		n, err := tx.Bucket(name).NextSequence()
		got = append(got, n)
		return err
	}))
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Errorf("sequence %v, want [1 2 3 4]", got)
	}
	must(t, e.Update(func(tx kv.Tx) error {
		b := tx.Bucket(name)
		if n := b.Sequence(); n != 4 {
			return fmt.Errorf("Sequence = %d after four, want 4", n)
		}
		return b.SetSequence(100)
	}))
	must(t, e.Update(func(tx kv.Tx) error {
		n, err := tx.Bucket(name).NextSequence()
		if err == nil && n != 101 {
			err = fmt.Errorf("NextSequence after SetSequence(100) = %d, want 101", n)
		}
		return err
	}))
}

func rollback(t *testing.T, e Engine) {
	create(t, e, "kept", "1")
	boom := errors.New("boom")
	err := e.Update(func(tx kv.Tx) error {
		b := tx.Bucket(name)
		if err := b.Put([]byte("lost"), []byte("x")); err != nil {
			return err
		}
		if err := b.Delete([]byte("kept")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	must(t, e.View(func(tx kv.Tx) error {
		b := tx.Bucket(name)
		if b.Get([]byte("lost")) != nil || string(b.Get([]byte("kept"))) != "1" {
			return errors.New("a rolled-back transaction's writes are visible")
		}
		return nil
	}))
}

func readOnly(t *testing.T, e Engine) {
	create(t, e, "k", "v")
	must(t, e.View(func(tx kv.Tx) error {
		if tx.Writable() {
			return errors.New("a read transaction says it is writable")
		}
		if err := tx.Bucket(name).Put([]byte("k"), []byte("w")); err == nil {
			return errors.New("Put in a read transaction succeeded")
		}
		return nil
	}))
	must(t, e.Update(func(tx kv.Tx) error {
		if !tx.Writable() {
			return errors.New("a read-write transaction says it is not writable")
		}
		return nil
	}))
}
