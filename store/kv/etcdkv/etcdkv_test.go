package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/etcdtest"
	"rackd/internal/netnstest"
	"rackd/store/kv"
	"rackd/store/kv/etcdkv"
	"rackd/store/kv/kvtest"
)

func client(t *testing.T, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func engine(db *etcdkv.DB) kvtest.Engine {
	ctx := context.Background()
	return kvtest.Engine{
		Update: func(fn func(kv.Tx) error) error { return db.Update(ctx, fn) },
		View:   func(fn func(kv.Tx) error) error { return db.View(ctx, fn) },
	}
}

// cluster is one single-member cluster shared by the conformance
// subtests, each under a prefix of its own (a fresh, empty engine).
func cluster(t *testing.T) *clientv3.Client {
	t.Helper()
	netnstest.Tool(t, "etcd")
	return client(t, etcdtest.Start(t, 1))
}

func TestConformance(t *testing.T) {
	cli := cluster(t)
	n := 0
	kvtest.Run(t, func(t *testing.T) kvtest.Engine {
		n++
		return engine(etcdkv.New(cli, etcdkv.Options{Prefix: fmt.Sprintf("/conf%d/", n)}))
	})
}

// TestNoLostUpdates: concurrent read-modify-writes of one counter, from
// clients on different members of a 3-member cluster, lose none.
func TestNoLostUpdates(t *testing.T) {
	netnstest.Tool(t, "etcd")
	c := etcdtest.Start(t, 3)
	const writers, each = 6, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints()[w%3 : w%3+1], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		db := etcdkv.New(cli, etcdkv.Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := db.Update(t.Context(), func(tx kv.Tx) error {
					b, err := tx.CreateBucketIfNotExists([]byte("c"))
					if err != nil {
						return err
					}
					n, _ := strconv.Atoi(string(b.Get([]byte("n"))))
					return b.Put([]byte("n"), []byte(strconv.Itoa(n+1)))
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	db := etcdkv.New(client(t, c), etcdkv.Options{})
	if err := db.View(t.Context(), func(tx kv.Tx) error {
		if got := string(tx.Bucket([]byte("c")).Get([]byte("n"))); got != strconv.Itoa(writers*each) {
			return fmt.Errorf("counter %s after %d increments", got, writers*each)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestNoWriteSkew: two transactions that each walk a bucket and insert
// only if it is empty (an invariant over a range, like "an address has one
// use") cannot both commit: the second one's walk is a conflict, and its
// rerun sees the first one's key.
func TestNoWriteSkew(t *testing.T) {
	cli := cluster(t)
	db := etcdkv.New(cli, etcdkv.Options{})
	if err := db.Update(t.Context(), func(tx kv.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte("uses"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	insertIfEmpty := func(key string, between func()) (inserted bool, err error) {
		err = db.Update(t.Context(), func(tx kv.Tx) error {
			b := tx.Bucket([]byte("uses"))
			inserted = b.KeyN() == 0
			if between != nil {
				between()
				between = nil // only on the first run
			}
			if !inserted {
				return nil
			}
			return b.Put([]byte(key), []byte("1"))
		})
		return inserted, err
	}
	// a walks the empty bucket; b inserts meanwhile; a must not insert.
	a, err := insertIfEmpty("a", func() {
		if ok, err := insertIfEmpty("b", nil); err != nil || !ok {
			t.Errorf("b: inserted %v, %v", ok, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if a {
		t.Error("a inserted into a bucket b had just inserted into: write skew")
	}
	if err := db.View(t.Context(), func(tx kv.Tx) error {
		if n := tx.Bucket([]byte("uses")).KeyN(); n != 1 {
			return fmt.Errorf("%d uses, want 1", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTooLarge: a transaction over the per-transaction limit is refused
// before anything is written.
func TestTooLarge(t *testing.T) {
	cli := cluster(t)
	db := etcdkv.New(cli, etcdkv.Options{MaxTxnOps: 10})
	err := db.Update(t.Context(), func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("big"))
		if err != nil {
			return err
		}
		for i := range 20 {
			if err := b.Put([]byte(strconv.Itoa(i)), []byte("x")); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, etcdkv.ErrTooLarge) {
		t.Fatalf("a 20-key transaction under a 10-operation limit: %v", err)
	}
	if err := db.View(t.Context(), func(tx kv.Tx) error {
		if tx.Bucket([]byte("big")) != nil {
			return errors.New("the refused transaction created its bucket")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPaging: a walk of a bucket larger than one range page sees every
// key in order.
func TestPaging(t *testing.T) {
	cli := cluster(t)
	db := etcdkv.New(cli, etcdkv.Options{})
	const n = 1200
	for i := 0; i < n; i += 100 {
		if err := db.Update(t.Context(), func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("p"))
			if err != nil {
				return err
			}
			for j := i; j < i+100; j++ {
				if err := b.Put([]byte(fmt.Sprintf("%05d", j)), []byte("x")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := db.View(ctx, func(tx kv.Tx) error {
		i := 0
		return tx.Bucket([]byte("p")).ForEach(func(k, _ []byte) error {
			if want := fmt.Sprintf("%05d", i); string(k) != want {
				return fmt.Errorf("key %d is %q, want %q", i, k, want)
			}
			i++
			if i > n {
				return errors.New("more keys than written")
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}

	// A cursor reads page by page: at the snapshot (a key committed after
	// its first page is not in a later one), with the transaction's own
	// writes made before it, wherever they fall.
	var want []string
	for i := range n {
		switch k := fmt.Sprintf("%05d", i); k {
		case "00003", "00700":
		case "00500":
			want = append(want, k, "00500a")
		default:
			want = append(want, k)
		}
	}
	want = append(want, "99999")
	err := db.Update(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("p"))
		for _, k := range []string{"00003", "00700"} {
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		for _, k := range []string{"00500a", "99999"} {
			if err := b.Put([]byte(k), []byte("y")); err != nil {
				return err
			}
		}
		var got []string
		c := b.Cursor()
		k, _ := c.First()
		if err := db.Update(ctx, func(tx kv.Tx) error { return tx.Bucket([]byte("p")).Put([]byte("00900x"), []byte("z")) }); err != nil {
			return err
		}
		for ; k != nil; k, _ = c.Next() {
			got = append(got, string(k))
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("cursor walked %d keys (%q...), want %d (%q...)", len(got), got[:min(5, len(got))], len(want), want[:5])
		}
		c = b.Cursor()
		for _, step := range []struct {
			name string
			move func() ([]byte, []byte)
			want string
		}{
			{"seek 00699", func() ([]byte, []byte) { return c.Seek([]byte("00699")) }, "00699"},
			{"next past the deleted 00700", c.Next, "00701"},
			{"seek 00500a", func() ([]byte, []byte) { return c.Seek([]byte("00500a")) }, "00500a"},
			{"prev", c.Prev, "00500"},
			{"seek 00002a", func() ([]byte, []byte) { return c.Seek([]byte("00002a")) }, "00004"},
			{"last", c.Last, "99999"},
			{"prev from last", c.Prev, "01199"},
			{"seek past the end", func() ([]byte, []byte) { return c.Seek([]byte("zzz")) }, ""},
		} {
			if k, _ := step.move(); string(k) != step.want {
				return fmt.Errorf("%s: %q, want %q", step.name, k, step.want)
			}
		}
		return errors.New("done") // write nothing
	})
	if err == nil || err.Error() != "done" {
		t.Fatal(err)
	}
}

// TestFence: a fenced write commits while its fence key is the one it
// names, and is refused with kv.ErrFenced, run once and writing nothing,
// once the key is gone or made again.
func TestFence(t *testing.T) {
	cli := cluster(t)
	ctx := t.Context()
	db := etcdkv.New(cli, etcdkv.Options{Prefix: "/fence/"})
	const leader = "/election/leader"
	put, err := cli.Put(ctx, leader, "agent-a")
	if err != nil {
		t.Fatal(err)
	}
	f := kv.Fence{Key: leader, CreateRevision: put.Header.Revision}
	write := func(ctx context.Context, v string) (runs int, err error) {
		err = db.Update(ctx, func(tx kv.Tx) error {
			runs++
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte("k"), []byte(v))
		})
		return runs, err
	}
	read := func() string {
		var v string
		if err := db.View(ctx, func(tx kv.Tx) error {
			if b := tx.Bucket([]byte("b")); b != nil {
				v = string(b.Get([]byte("k")))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if _, err := write(kv.WithFence(ctx, f), "held"); err != nil {
		t.Fatalf("fenced write while the fence holds: %v", err)
	}
	if got := read(); got != "held" {
		t.Fatalf("after the fenced write, k = %q, want held", got)
	}
	// The key rewritten by its holder keeps its creation revision.
	if _, err := cli.Put(ctx, leader, "agent-a again"); err != nil {
		t.Fatal(err)
	}
	if _, err := write(kv.WithFence(ctx, f), "still held"); err != nil {
		t.Fatalf("fenced write after the holder rewrote its key: %v", err)
	}
	if _, err := cli.Delete(ctx, leader); err != nil {
		t.Fatal(err)
	}
	runs, err := write(kv.WithFence(ctx, f), "gone")
	if !errors.Is(err, kv.ErrFenced) {
		t.Fatalf("fenced write after the key was deleted: %v, want ErrFenced", err)
	}
	if runs != 1 {
		t.Errorf("a fenced write refused by its fence ran %d times, want 1 (no rerun)", runs)
	}
	if _, err := cli.Put(ctx, leader, "agent-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := write(kv.WithFence(ctx, f), "recreated"); !errors.Is(err, kv.ErrFenced) {
		t.Fatalf("fenced write after the key was made again by another: %v, want ErrFenced", err)
	}
	if got := read(); got != "still held" {
		t.Errorf("refused fenced writes left k = %q, want %q", got, "still held")
	}
	// Without a fence the same write goes through.
	if _, err := write(ctx, "unfenced"); err != nil {
		t.Fatal(err)
	}
}

// TestWatch: Watch delivers each commit's records once, in revision
// order, created, rewritten and deleted; resuming from a compacted
// revision is ErrCompacted.
func TestWatch(t *testing.T) {
	cli := cluster(t)
	ctx := t.Context()
	db := etcdkv.New(cli, etcdkv.Options{Prefix: "/watch/"})
	start, err := db.ViewRev(ctx, func(kv.Tx) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	write := func(fn func(b kv.Bucket) error) int64 {
		rev, err := db.UpdateRev(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return fn(b)
		})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	r1 := write(func(b kv.Bucket) error { return b.Put([]byte("k/1"), []byte("one")) })
	r2 := write(func(b kv.Bucket) error { return b.Put([]byte("k/1"), []byte("uno")) })
	r3 := write(func(b kv.Bucket) error { return b.Delete([]byte("k/1")) })
	type seen struct {
		rev     int64
		changes []etcdkv.Change
	}
	var got []seen
	wctx, cancel := context.WithCancel(ctx)
	err = db.Watch(wctx, start+1, func(rev int64, cs []etcdkv.Change) error {
		if len(cs) > 0 {
			got = append(got, seen{rev, cs})
		}
		if rev >= r3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch ended with %v, want the cancel", err)
	}
	want := []seen{
		{r1, []etcdkv.Change{{Bucket: "b", Key: []byte("k/1"), Value: []byte("one"), Created: true}}},
		{r2, []etcdkv.Change{{Bucket: "b", Key: []byte("k/1"), Value: []byte("uno")}}},
		{r3, []etcdkv.Change{{Bucket: "b", Key: []byte("k/1")}}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("watched\n%v\nwant\n%v", got, want)
	}
	if last, err := db.LastChange(ctx, r3); err != nil || last != r3 {
		t.Errorf("LastChange(%d) = %d, %v; want %d", r3, last, err, r3)
	}
	if _, err := cli.Compact(ctx, r3); err != nil {
		t.Fatal(err)
	}
	err = db.Watch(ctx, start+1, func(int64, []etcdkv.Change) error { return nil })
	if !errors.Is(err, etcdkv.ErrCompacted) {
		t.Fatalf("Watch from a compacted revision: %v, want ErrCompacted", err)
	}
}
