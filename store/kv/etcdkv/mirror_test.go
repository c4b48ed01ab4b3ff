package etcdkv_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"rackd/store/kv"
	"rackd/store/kv/etcdkv"
)

// TestMirror: transactions that read from a mirror held behind the
// cluster still commit exactly what reads from the cluster would have:
// a conflict or a refusal on a stale mirror is run again on the cluster's
// records. The mirror shows this DB's own commits at once and other
// writers' once its watch has applied them.
func TestMirror(t *testing.T) {
	cli := cluster(t)
	ctx := t.Context()
	const prefix = "/mirror/"
	mirrored := etcdkv.New(cli, etcdkv.Options{Prefix: prefix})
	other := etcdkv.New(cli, etcdkv.Options{Prefix: prefix})
	mctx := kv.WithMirroredReads(ctx)

	set := func(db *etcdkv.DB, key, value string) {
		t.Helper()
		if err := db.Update(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("m"))
			if err != nil {
				return err
			}
			if value == "" {
				return b.Delete([]byte(key))
			}
			return b.Put([]byte(key), []byte(value))
		}); err != nil {
			t.Fatal(err)
		}
	}
	// read returns key as a mirrored View sees it ("" when absent).
	read := func(key string) string {
		t.Helper()
		var v string
		if err := mirrored.View(mctx, func(tx kv.Tx) error {
			if b := tx.Bucket([]byte("m")); b != nil {
				v = string(b.Get([]byte(key)))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	eventually := func(key, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for read(key) != want {
			if time.Now().After(deadline) {
				t.Fatalf("the mirror shows %s = %q after 10s, want %q", key, read(key), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
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
	gate := make(chan struct{})
	if err := mirrored.MirrorGated(ctx, gate, "m"); err != nil {
		t.Fatal(err)
	}
	if got := read("counter"); got != "1" {
		t.Fatalf("the mirror loaded counter = %q, want 1", got)
	}

	// Held behind: another writer's change is not seen yet.
	set(other, "counter", "5")
	if got := read("counter"); got != "1" {
		t.Fatalf("a mirror held behind shows counter = %q, want the stale 1", got)
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
	set(other, "flag", "on")
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

	// A deletion by another writer: seen once the watch applies it, and
	// not brought back by the older changes applied before it.
	set(other, "counter", "")
	for range 20 {
		select {
		case gate <- struct{}{}:
		case <-time.After(time.Second):
		}
		v := read("counter")
		if v == "5" || v == "1" {
			t.Fatalf("the mirror went back to counter = %q, older than its own commit of 6", v)
		}
		if v == "" {
			break
		}
	}
	close(gate)
	eventually("counter", "")
	eventually("flag", "on")
	eventually("seen", "on")
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
