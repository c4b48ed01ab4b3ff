package etcdkv_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"rackd/store/kv"
	"rackd/store/kv/etcdkv"
)

// TestMirror: transactions that read from a mirror behind the cluster
// still commit exactly what reads from the cluster would have: a conflict
// or a refusal on a stale mirror is run again on the cluster's records.
// The mirror shows this DB's own commits at once and other writers' once
// the Watch that follows the DB has applied them: before it hands their
// revision to its caller, so that a caller never reports a revision the
// mirror does not show.
func TestMirror(t *testing.T) {
	cli := cluster(t)
	ctx := t.Context()
	const prefix = "/mirror/"
	mirrored := etcdkv.New(cli, etcdkv.Options{Prefix: prefix})
	other := etcdkv.New(cli, etcdkv.Options{Prefix: prefix})
	mctx := kv.WithMirroredReads(ctx)

	// set writes key (deletes it when value is "") and returns the
	// commit's revision.
	set := func(db *etcdkv.DB, key, value string) int64 {
		t.Helper()
		rev, err := db.UpdateRev(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("m"))
			if err != nil {
				return err
			}
			if value == "" {
				return b.Delete([]byte(key))
			}
			return b.Put([]byte(key), []byte(value))
		})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	// read returns key as a mirrored View sees it ("" when absent).
	read := func(key string) string {
		var v string
		if err := mirrored.View(mctx, func(tx kv.Tx) error {
			if b := tx.Bucket([]byte("m")); b != nil {
				v = string(b.Get([]byte(key)))
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		return v
	}
	// increment adds one to the counter at key, on mirrored reads.
	increment := func(key string) {
		t.Helper()
		if err := mirrored.Update(mctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("m"))
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(string(b.Get([]byte(key))))
			return b.Put([]byte(key), []byte(strconv.Itoa(n+1)))
		}); err != nil {
			t.Fatal(err)
		}
	}

	set(other, "counter", "1")
	mirrored.Mirror("m")
	if got := read("counter"); got != "1" {
		t.Fatalf("before any ViewRev, a mirrored read (from the cluster) shows counter = %q, want 1", got)
	}
	start, err := mirrored.ViewRev(ctx, func(kv.Tx) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	// Not followed yet: the mirror stays as ViewRev loaded it.
	set(other, "counter", "5")
	if got := read("counter"); got != "1" {
		t.Fatalf("a mirror nothing follows shows counter = %q, want the stale 1 it was loaded with", got)
	}
	// A read-modify-write on the stale value conflicts and runs again.
	increment("counter")
	if got := cliValue(t, other, "counter"); got != "6" {
		t.Fatalf("counter is %q after an increment on a stale mirror, want 6", got)
	}
	// The DB's own commit shows in its mirror at once.
	if got := read("counter"); got != "6" {
		t.Fatalf("the mirror shows counter = %q after its own commit, want 6", got)
	}

	// A refusal on a stale read is decided again on the cluster's.
	written := map[int64][2]string{} // revision -> key, value of another writer's commit
	rev := set(other, "flag", "on")
	written[rev] = [2]string{"flag", "on"}
	errOff := errors.New("flag is off")
	runs := 0
	if err := mirrored.Update(mctx, func(tx kv.Tx) error {
		runs++
		b, err := tx.CreateBucketIfNotExists([]byte("m"))
		if err != nil {
			return err
		}
		if string(b.Get([]byte("flag"))) != "on" {
			return errOff
		}
		return b.Put([]byte("seen"), []byte("on"))
	}); err != nil {
		t.Fatalf("update refused on the mirror's stale flag: %v", err)
	}
	if runs != 2 {
		t.Errorf("the update ran %d times, want 2 (on the mirror, then on the cluster)", runs)
	}
	for i := range 5 {
		v := strconv.Itoa(100 + i)
		written[set(other, "k", v)] = [2]string{"k", v}
	}
	// A deletion by another writer, after the DB's own commit of 6.
	last := set(other, "counter", "")
	written[last] = [2]string{"counter", ""}

	// The watch from the load on: at each revision it hands over, the
	// mirror already shows that revision's write, and never goes back to
	// a value older than one it showed.
	wctx, cancel := context.WithCancel(ctx)
	err = mirrored.Watch(wctx, start+1, func(rev int64, _ []etcdkv.Change) error {
		if w, ok := written[rev]; ok {
			if got := read(w[0]); got != w[1] {
				t.Errorf("handed revision %d, the mirror shows %s = %q, want %q (written at %d)", rev, w[0], got, w[1], rev)
			}
		}
		if v := read("counter"); v == "5" || v == "1" {
			t.Errorf("at revision %d the mirror went back to counter = %q, older than its own commit of 6", rev, v)
		}
		if rev >= last {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch ended with %v, want the cancel", err)
	}
	for k, want := range map[string]string{"counter": "", "flag": "on", "seen": "on", "k": "104"} {
		if got := read(k); got != want {
			t.Errorf("after the watch, %s = %q, want %q", k, got, want)
		}
	}
	// Nothing follows the DB any more: reads go to the cluster.
	set(other, "k", "after")
	if got := read("k"); got != "after" {
		t.Errorf("with the watch ended, a mirrored read shows k = %q, want the cluster's %q", got, "after")
	}
}

// cliValue reads key of bucket m from the cluster itself.
func cliValue(t *testing.T, db *etcdkv.DB, key string) string {
	t.Helper()
	var v string
	if err := db.View(t.Context(), func(tx kv.Tx) error {
		if b := tx.Bucket([]byte("m")); b != nil {
			v = string(b.Get([]byte(key)))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}
