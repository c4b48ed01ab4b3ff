package store

// These tests reach inside the store: the committer, raw bbolt access, the
// schema. They cannot use storetest (it imports this package), so openTest
// does its job.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"rackd/store/kv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var testAdmin = Actor{Name: "admin", Admin: true}

// openTest opens a store on a fresh file; at the end of the test it checks
// the invariants (unless the test breaks them on purpose) and closes it.
func openTest(t *testing.T, opts Options, check bool) *Store {
	t.Helper()
	var s *Store
	var err error
	if testEngine != nil {
		s, err = OpenEngine(testEngine(t), "etcd", opts)
	} else {
		s, err = Open(filepath.Join(t.TempDir(), FileName), opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if check {
			if err := s.Check(); err != nil {
				t.Errorf("invariants broken at the end of the test:\n%v", err)
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func testMAC(i int) string {
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
}

func mustCreate(t testing.TB, s *Store, hostname string, i int, state State) Machine {
	t.Helper()
	return mustCreatePowered(t, s, hostname, i, state, PowerParams{})
}

// mustCreatePowered is mustCreate with power parameters: a machine to be
// commissioned needs a driver.
func mustCreatePowered(t testing.TB, s *Store, hostname string, i int, state State, p PowerParams) Machine {
	t.Helper()
	m, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{
		Hostname: hostname, MACs: []string{testMAC(i)}, State: state, Power: p})
	if err != nil {
		t.Fatalf("create %s: %v", hostname, err)
	}
	return m
}

// blockCommitter parks the committer inside a commit until release is
// called, so that whatever is queued meanwhile lands in the next batch. On
// a shared engine, where operations run concurrently, it parks one in
// every slot (Options.MaxInFlight), so that the next operation queues.
func blockCommitter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	n := 1
	if s.db == nil {
		n = s.opts.MaxInFlight
	}
	unblock := make(chan struct{})
	entered, done := make(chan struct{}, n), make(chan error, n)
	for range n {
		go func() {
			var once sync.Once
			done <- s.update(context.Background(), func(*Tx) error {
				once.Do(func() { entered <- struct{}{} })
				<-unblock
				return nil
			})
		}()
	}
	for range n {
		<-entered
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(unblock)
			for range n {
				if err := <-done; err != nil {
					t.Errorf("blocking op: %v", err)
				}
			}
		})
	}
	t.Cleanup(release)
	return release
}

// waitQueued waits until n operations wait for the committer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.ops) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d operations queued, want %d", len(s.ops), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func metaValue(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	var v []byte
	if err := s.view(func(tx *Tx) error { v = tx.getRaw(bucketMeta, []byte(key)); return nil }); err != nil {
		t.Fatal(err)
	}
	return v
}

// An operation that fails after writing must not spoil the batch it shares:
// it rolls back alone and the others commit.
func TestReplay(t *testing.T) {
	if testEngine != nil {
		t.Skip("many operations sharing one transaction is the database file's group commit; on another engine each operation has its own")
	}
	errBad := errors.New("bad op changed its mind")
	tests := map[string]struct {
		write     bool   // the bad op writes before failing
		panics    bool   // it panics instead of returning errBad
		wantErr   string // what its caller is told
		wantBatch bool   // the batch commits as one (no replay needed)
	}{
		"refusal before writing": {false, false, errBad.Error(), true},
		"failure after writing":  {true, false, errBad.Error(), false},
		"panic after writing":    {true, true, "operation panicked: boom", false},
		"panic before writing":   {false, true, "operation panicked: boom", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				batches []int
			)
			s := openTest(t, Options{OnCommit: func(ops int, _ time.Duration) {
				mu.Lock()
				batches = append(batches, ops)
				mu.Unlock()
			}}, true)
			release := blockCommitter(t, s)

			const good = 6
			errs := make(chan error, 2*good)
			for i := range good {
				go func() {
					_, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{
						Hostname: fmt.Sprintf("good%d", i), MACs: []string{testMAC(i)}})
					errs <- err
				}()
				go func() {
					errs <- s.update(context.Background(), func(t *Tx) error {
						return t.putRaw(bucketMeta, []byte(fmt.Sprintf("good-%d", i)), []byte("yes"))
					})
				}()
			}
			waitQueued(t, s, good)
			badErr := make(chan error, 1)
			go func() {
				badErr <- s.update(context.Background(), func(t *Tx) error {
					if tc.write {
						if err := t.putRaw(bucketMeta, []byte("bad"), []byte("must not stay")); err != nil {
							return err
						}
						// Also break an invariant: the rollback must undo it.
						if err := t.putRaw(bucketHostnames, []byte("ghost"), []byte("m-ghost")); err != nil {
							return err
						}
					}
					if tc.panics {
						panic("boom")
					}
					return errBad
				})
			}()
			waitQueued(t, s, 2*good+1)
			mu.Lock()
			batches = nil
			mu.Unlock()
			release()

			for range 2 * good {
				if err := <-errs; err != nil {
					t.Errorf("a good operation failed: %v", err)
				}
			}
			err := <-badErr
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, errReplay) {
				t.Errorf("bad op returned %v, want %q", err, tc.wantErr)
			}
			if v := metaValue(t, s, "bad"); v != nil {
				t.Errorf("the failed op's write survived: %q", v)
			}
			for i := range good {
				if v := metaValue(t, s, fmt.Sprintf("good-%d", i)); string(v) != "yes" {
					t.Errorf("good write %d: %q", i, v)
				}
				if _, err := s.Machine(fmt.Sprintf("good%d", i)); err != nil {
					t.Errorf("good create %d: %v", i, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			// The blocking op's own commit ends after the release too.
			shared := slices.Contains(batches, 2*good+1)
			if shared != tc.wantBatch {
				t.Errorf("commits after the release %v; want one batch of %d: %t", batches, 2*good+1, tc.wantBatch)
			}
		})
	}
}

func TestContextCancelled(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	ops := map[string]func(context.Context, *Store) error{
		"CreateMachine": func(ctx context.Context, s *Store) error {
			_, err := s.CreateMachine(ctx, testAdmin, NewMachine{Hostname: "new", MACs: []string{testMAC(99)}})
			return err
		},
		"Allocate": func(ctx context.Context, s *Store) error {
			_, err := s.Allocate(ctx, Actor{Name: "alice"}, AllocateRequest{AgentName: "juju"})
			return err
		},
		"Transition": func(ctx context.Context, s *Store) error {
			_, err := s.Transition(ctx, testAdmin, TransitionRequest{Machine: "r", Action: ActionMarkBroken})
			return err
		},
		"CreateUser": func(ctx context.Context, s *Store) error {
			_, _, err := s.CreateUser(ctx, testAdmin, "carol", false, "")
			return err
		},
		"Expire": func(ctx context.Context, s *Store) error {
			_, err := s.Expire(ctx, Timeouts{Commissioning: time.Nanosecond, Deploying: time.Nanosecond})
			return err
		},
	}
	ctxs := map[string]struct {
		ctx  context.Context
		want error
	}{
		"cancelled": {cancelled, context.Canceled},
		"deadline":  {expired, context.DeadlineExceeded},
	}
	for opName, op := range ops {
		for ctxName, c := range ctxs {
			t.Run(opName+"/"+ctxName, func(t *testing.T) {
				s := openTest(t, Options{}, true)
				mustCreate(t, s, "r", 1, StateReady)
				mustCreatePowered(t, s, "c", 2, StateNew, PowerParams{Driver: "manual"})
				if _, err := s.Transition(context.Background(), testAdmin, TransitionRequest{Machine: "c", Action: ActionCommission}); err != nil {
					t.Fatal(err)
				}
				before := dump(t, s)
				if err := op(c.ctx, s); !errors.Is(err, c.want) {
					t.Fatalf("got %v, want %v", err, c.want)
				}
				if after := dump(t, s); !bytes.Equal(before, after) {
					t.Errorf("the cancelled operation wrote:\n%s\n->\n%s", before, after)
				}
			})
		}
	}
}

// dump is every key and value of every bucket, for before/after comparisons.
func dump(t *testing.T, s *Store) []byte {
	t.Helper()
	var b bytes.Buffer
	err := s.kv.View(context.Background(), func(tx kv.Tx) error {
		for _, name := range schemaBuckets(t) {
			bk := tx.Bucket(name)
			if bk == nil {
				continue
			}
			fmt.Fprintf(&b, "[%s] seq %d\n", name, bk.Sequence())
			if err := bk.ForEach(func(k, v []byte) error {
				fmt.Fprintf(&b, "%q=%q\n", k, v)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// schemaBuckets names the buckets of a new database file, in order.
func schemaBuckets(t *testing.T) [][]byte {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), FileName), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var names [][]byte
	if err := s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			names = append(names, bytes.Clone(name))
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return names
}

// fileOnly skips a test of what only a database file has (its bytes,
// locks, backups) when the store's tests run on another engine.
func fileOnly(t *testing.T) {
	t.Helper()
	if testEngine != nil {
		t.Skip("a database file's own behaviour: the store runs on another engine here (RACKD_STORE_ENGINE)")
	}
}

// A context cancelled while its operation waits in the queue stops it: the
// operation has not started, so it never will.
func TestContextCancelledWhileQueued(t *testing.T) {
	s := openTest(t, Options{}, true)
	release := blockCommitter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- s.update(ctx, func(t *Tx) error {
			ran.Store(true)
			return t.putRaw(bucketMeta, []byte("late"), []byte("x"))
		})
	}()
	waitQueued(t, s, 1)
	cancel()
	release()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if ran.Load() || metaValue(t, s, "late") != nil {
		t.Error("the cancelled operation ran")
	}
}

func TestOpenLocked(t *testing.T) {
	fileOnly(t)
	for name, readOnly := range map[string]bool{"read-write": false, "read-only": true} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, Options{}, true)
			start := time.Now()
			_, err := Open(s.Path(), Options{LockTimeout: 100 * time.Millisecond, ReadOnly: readOnly})
			if err == nil || !strings.Contains(err.Error(), "locked") {
				t.Fatalf("second open: %v, want an error saying the database is locked", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("gave up after %s, want about 100ms", d)
			}
		})
	}
}

func TestOpenCorrupt(t *testing.T) {
	fileOnly(t)
	// A real database with some content to cut short.
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	s, err := Open(good, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		mustCreate(t, s, fmt.Sprintf("host-%03d-%s", i, strings.Repeat("x", 40)), i, StateReady)
	}
	need, err := s.BackupSize()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	const page = 4096
	tests := map[string][]byte{
		"random bytes":            random(64 << 10),
		"a few random bytes":      random(100),
		"a text file":             []byte("this is not a database\n"),
		"zeros":                   make([]byte, 8*page),
		"truncated to 100 bytes":  full[:100],
		"truncated to one page":   full[:page],
		"truncated to two pages":  full[:2*page],
		"truncated to 3 pages":    full[:3*page],
		"truncated to half":       full[:need/2/page*page],
		"last page missing":       full[:need-page],
		"meta pages overwritten":  append(random(2*page), full[2*page:]...),
		"first meta page damaged": append(append(append([]byte(nil), full[:64]...), random(64)...), full[128:]...),
		"data pages zeroed":       append(append(append([]byte(nil), full[:2*page]...), make([]byte, need-2*page)...), full[need:]...),
		"data pages random":       append(append(append([]byte(nil), full[:2*page]...), random(int(need)-2*page)...), full[need:]...),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			// Read-only first: after bbolt panicked in a read-write open,
			// its mapping keeps the file locked until the process exits.
			for _, ro := range []bool{true, false} {
				s, err := Open(path, Options{ReadOnly: ro})
				if err == nil {
					err := s.Check()
					s.Close()
					if name == "first meta page damaged" && err == nil {
						// bbolt falls back on the second meta page: fine,
						// as long as what it opened is whole.
						continue
					}
					t.Fatalf("read-only %t: opened a damaged file (check: %v)", ro, err)
				}
				if testing.Verbose() {
					t.Logf("read-only %t: %v", ro, err)
				}
				if !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), path) {
					t.Errorf("read-only %t: %v; want an error saying %s is corrupt", ro, err, path)
				}
			}
		})
	}
	// And the good file still opens.
	s, err = Open(good, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// setSchema writes a schema version straight into a closed database file.
func setSchema(t *testing.T, path string, v string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		return meta.Put(keySchema, []byte(v))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenSchema(t *testing.T) {
	t.Run("newer", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), FileName)
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, s, "web1", 1, StateReady)
		s.Close()
		setSchema(t, path, strconv.Itoa(SchemaVersion+1))
		for _, ro := range []bool{false, true} {
			_, err := Open(path, Options{ReadOnly: ro})
			if err == nil || !strings.Contains(err.Error(), "newer") ||
				!strings.Contains(err.Error(), fmt.Sprintf("schema %d", SchemaVersion+1)) {
				t.Errorf("read-only %t: %v; want an error saying schema %d is newer", ro, err, SchemaVersion+1)
			}
		}
		// Nothing was touched: the version is still the newer one.
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.View(func(tx *bolt.Tx) error {
			if got := schemaOf(kv.Bolt(tx)); got != SchemaVersion+1 {
				t.Errorf("schema now %d", got)
			}
			return nil
		})
	})
	t.Run("bare bbolt file", func(t *testing.T) {
		// A bbolt file without any rackd schema: read-only cannot migrate it,
		// read-write does.
		path := filepath.Join(t.TempDir(), FileName)
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := Open(path, Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "needs migrating") {
			t.Errorf("read-only open of an unmigrated file: %v", err)
		}
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.view(func(t *Tx) error {
			if got := schemaOf(t.tx); got != SchemaVersion {
				return fmt.Errorf("schema %d after migration, want %d", got, SchemaVersion)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		mustCreate(t, s, "web1", 1, StateReady)
		if err := s.Check(); err != nil {
			t.Error(err)
		}
	})
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := mustCreate(t, s, "web1", 1, StateReady)
	res, err := s.Allocate(context.Background(), Actor{Name: "alice"}, AllocateRequest{Name: "web1", AgentName: "juju"})
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := s.CreateUser(context.Background(), testAdmin, "alice", false, "")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := s.Machine(m.ID)
	wantEvents, _ := s.Events(m.ID, 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{Hostname: "x", MACs: []string{testMAC(2)}}); !errors.Is(err, ErrClosed) {
		t.Errorf("create on a closed store: %v, want ErrClosed", err)
	}

	// In this order: the read-write store changes the database at the end.
	for _, opts := range []Options{{ReadOnly: true}, {}} {
		t.Run(fmt.Sprintf("read-only=%t", opts.ReadOnly), func(t *testing.T) {
			s, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
			got, err := s.Machine("web1")
			if err != nil || !jsonEqual(got, want) {
				t.Errorf("after reopening: %+v, %v\nwant %+v", got, err, want)
			}
			if ev, _ := s.Events(m.ID, 0); !jsonEqual(ev, wantEvents) {
				t.Errorf("events after reopening %+v, want %+v", ev, wantEvents)
			}
			if a, ok, err := s.Authenticate(token); !ok || err != nil || a.Name != "alice" {
				t.Errorf("Authenticate after reopening = %+v, %t, %v", a, ok, err)
			}
			// The token survived as a hash: whoever holds it may still adopt
			// (on the read-write store; the read-only one refuses writes).
			adopted, err := s.Allocate(context.Background(), Actor{Name: "bob"}, AllocateRequest{Name: "web1", Token: res.Token})
			if opts.ReadOnly {
				if !errors.Is(err, ErrReadOnly) {
					t.Errorf("write to a read-only store: %v, want ErrReadOnly", err)
				}
			} else if err != nil || !adopted.Adopted {
				t.Errorf("adopting after reopening = %+v, %v", adopted, err)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// Every write to a read-only store is refused at once (it used to wait
// forever for a committer that a read-only store does not run).
func TestReadOnlyRefusesWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "r", 1, StateReady)
	s.Close()
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	// Two readers may share the file.
	ro2, err := Open(path, Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("second read-only open: %v", err)
	}
	ro2.Close()
	writes := map[string]func() error{
		"CreateMachine": func() error {
			_, err := ro.CreateMachine(context.Background(), testAdmin, NewMachine{Hostname: "x", MACs: []string{testMAC(2)}})
			return err
		},
		"Allocate": func() error {
			_, err := ro.Allocate(context.Background(), Actor{Name: "alice"}, AllocateRequest{})
			return err
		},
		"Transition": func() error {
			_, err := ro.Transition(context.Background(), testAdmin, TransitionRequest{Machine: "r", Action: ActionRetire})
			return err
		},
		"CreateUser": func() error {
			_, _, err := ro.CreateUser(context.Background(), testAdmin, "alice", false, "")
			return err
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- write() }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrReadOnly) {
					t.Errorf("got %v, want ErrReadOnly", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a write to a read-only store hangs")
			}
		})
	}
	if ms, err := ro.ListMachines(Filter{}); err != nil || len(ms) != 1 || ms[0].State != StateReady {
		t.Errorf("ListMachines on the read-only store = %+v, %v", ms, err)
	}
}

// Closing while writers are busy answers every one of them: success (and
// then the write is on disk) or ErrClosed (and then it is not).
func TestCloseWhileWriting(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), FileName)
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		const writers = 16
		var (
			wg        sync.WaitGroup
			succeeded atomic.Int64
			wrong     = make(chan error, writers)
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					_, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{
						Hostname: fmt.Sprintf("w%d-%d", w, i), MACs: []string{testMAC(w<<12 | i)}})
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							wrong <- err
						}
						return
					}
					succeeded.Add(1)
				}
			}()
		}
		for succeeded.Load() < int64(round*3) {
			time.Sleep(100 * time.Microsecond)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: writers still waiting 10s after Close", round)
		}
		close(wrong)
		for err := range wrong {
			t.Errorf("round %d: writer got %v, want ErrClosed", round, err)
		}
		s, err = Open(path, Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		ms, err := s.ListMachines(Filter{})
		if err != nil || int64(len(ms)) != succeeded.Load() {
			t.Errorf("round %d: %d machines on disk (%v), %d writes succeeded", round, len(ms), err, succeeded.Load())
		}
		if err := s.Check(); err != nil {
			t.Error(err)
		}
		s.Close()
	}
}

// Backup copies a consistent snapshot while writers keep going.
func TestBackup(t *testing.T) {
	fileOnly(t)
	s := openTest(t, Options{}, true)
	var before []string
	for i := range 30 {
		before = append(before, mustCreate(t, s, fmt.Sprintf("pre%02d", i), i, StateReady).ID)
	}
	if _, err := s.Allocate(context.Background(), Actor{Name: "alice"}, AllocateRequest{Name: "pre00", AgentName: "juju"}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var (
		wg      sync.WaitGroup
		written atomic.Int64
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{
					Hostname: fmt.Sprintf("w%d-%d", w, i), MACs: []string{testMAC(1<<16 | w<<12 | i)}, State: StateReady})
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if _, err := s.Allocate(context.Background(), Actor{Name: "bob"}, AllocateRequest{Name: m.ID, AgentName: "x"}); err != nil {
						t.Error(err)
						return
					}
				}
				written.Add(1)
			}
		}()
	}
	for written.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	copyPath := filepath.Join(t.TempDir(), "backup.db")
	f, err := os.Create(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Backup(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	atBackup := written.Load()
	for written.Load() < atBackup+20 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()

	if fi, err := os.Stat(copyPath); err != nil {
		t.Error(err)
	} else if fi.Size() != n {
		t.Errorf("Backup said %d bytes, the file has %d", n, fi.Size())
	}
	b, err := Open(copyPath, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Check(); err != nil {
		t.Fatalf("backup fails its check: %v", err)
	}
	for _, id := range before {
		if _, err := b.Machine(id); err != nil {
			t.Errorf("machine %s, created before the backup, is not in it: %v", id, err)
		}
	}
	if m, _ := b.Machine("pre00"); m.Owner != "alice" {
		t.Errorf("backup lost the allocation: %+v", m)
	}
	inBackup, _ := b.ListMachines(Filter{})
	all, _ := s.ListMachines(Filter{})
	if len(inBackup) < len(before)+20 || len(inBackup) >= len(all) {
		t.Errorf("backup has %d machines; want at least %d (before it began) and fewer than the %d there are now",
			len(inBackup), len(before)+20, len(all))
	}
}

// Check finds each kind of damage, done here with raw bbolt writes that no
// operation would make.
func TestCheckFindsDamage(t *testing.T) {
	type fixture struct{ alloc, ready, fresh Machine }
	put := func(tx kv.Tx, bucket []byte, key string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return tx.Bucket(bucket).Put([]byte(key), data)
	}
	tests := map[string]struct {
		damage func(tx kv.Tx, f fixture) error
		want   string
	}{
		"allocation record deleted": {func(tx kv.Tx, f fixture) error {
			m := f.alloc
			m.Allocation, m.Owner, m.AgentName = nil, "", ""
			return put(tx, bucketMachines, m.ID, m)
		}, "is ALLOCATED but has no allocation"},
		"allocation of a READY machine": {func(tx kv.Tx, f fixture) error {
			m := f.ready
			m.Allocation = &Allocation{Owner: "mallory"}
			return put(tx, bucketMachines, m.ID, m)
		}, "is READY but has an allocation (owner mallory)"},
		"owner differs from the allocation": {func(tx kv.Tx, f fixture) error {
			m := f.alloc
			m.Owner = "mallory"
			return put(tx, bucketMachines, m.ID, m)
		}, "differ from its allocation"},
		"owner without allocation": {func(tx kv.Tx, f fixture) error {
			m := f.fresh
			m.Owner = "mallory"
			return put(tx, bucketMachines, m.ID, m)
		}, "has owner mallory but no allocation"},
		"hostname indexed to another machine": {func(tx kv.Tx, f fixture) error {
			return tx.Bucket(bucketHostnames).Put([]byte(f.ready.Hostname), []byte(f.alloc.ID))
		}, "hostname r indexed to"},
		"stale hostname": {func(tx kv.Tx, f fixture) error {
			return tx.Bucket(bucketHostnames).Put([]byte("ghost"), []byte(f.ready.ID))
		}, "hostnames index: ghost"},
		"MAC not indexed": {func(tx kv.Tx, f fixture) error {
			return tx.Bucket(bucketMACs).Delete([]byte(f.ready.MACs[0]))
		}, fmt.Sprintf("MAC %s indexed to \"\"", f0MAC)},
		"stale MAC": {func(tx kv.Tx, f fixture) error {
			return tx.Bucket(bucketMACs).Put([]byte("52:54:00:ff:ff:ff"), []byte(f.ready.ID))
		}, "macs index: 52:54:00:ff:ff:ff"},
		"unknown state": {func(tx kv.Tx, f fixture) error {
			m := f.fresh
			m.State = "LIMBO"
			return put(tx, bucketMachines, m.ID, m)
		}, `unknown state "LIMBO"`},
		"undecodable machine": {func(tx kv.Tx, f fixture) error {
			return tx.Bucket(bucketMachines).Put([]byte(f.fresh.ID), []byte("{"))
		}, "undecodable"},
		"machine under another key": {func(tx kv.Tx, f fixture) error {
			return put(tx, bucketMachines, "m-other", f.fresh)
		}, "stored under key m-other"},
		"index entry of an unknown token": {func(tx kv.Tx, f fixture) error {
			return tx.Bucket(bucketTokens).Put([]byte(HashToken("x")), []byte("t-ghost"))
		}, "names token t-ghost"},
		"token not indexed": {func(tx kv.Tx, f fixture) error {
			tk := bobToken(tx)
			return tx.Bucket(bucketTokens).Delete([]byte(tk.Hash))
		}, "its hash is indexed to \"\""},
		"token of an unknown user": {func(tx kv.Tx, f fixture) error {
			tk := bobToken(tx)
			tk.User = "ghost"
			return put(tx, bucketAPITokens, tk.ID, tk)
		}, `user "ghost" does not exist`},
		"token under another key": {func(tx kv.Tx, f fixture) error {
			return put(tx, bucketAPITokens, "t-other", bobToken(tx))
		}, "stored under key t-other"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, Options{}, false)
			f := fixture{
				alloc: mustCreate(t, s, "a", 1, StateReady),
				ready: mustCreate(t, s, "r", 0xf0, StateReady),
				fresh: mustCreate(t, s, "n", 3, StateNew),
			}
			res, err := s.Allocate(context.Background(), Actor{Name: "alice"}, AllocateRequest{Name: "a", AgentName: "juju"})
			if err != nil {
				t.Fatal(err)
			}
			f.alloc = res.Machine
			if _, _, err := s.CreateUser(context.Background(), testAdmin, "bob", false, ""); err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("before the damage: %v", err)
			}
			if err := s.kv.Update(context.Background(), func(tx kv.Tx) error { return tc.damage(tx, f) }); err != nil {
				t.Fatal(err)
			}
			err = s.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check() = %v\nwant a report containing %q", err, tc.want)
			}
		})
	}
}

// bobToken is bob's token in TestCheckFindsDamage.
func bobToken(tx kv.Tx) Token {
	var tk Token
	tx.Bucket(bucketAPITokens).ForEach(func(_, v []byte) error {
		json.Unmarshal(v, &tk)
		return nil
	})
	return tk
}

// f0MAC is the MAC of the "r" machine in TestCheckFindsDamage.
var f0MAC = testMAC(0xf0)

// putDeployImages records a deploy image of each name for amd64 (a file
// whose blob does not exist: a deploy's transaction only asks that the
// image be imported), so that a test can deploy it.
func putDeployImages(t testing.TB, s *Store, names ...string) {
	t.Helper()
	for _, name := range names {
		im := Image{Name: name, Arch: "amd64", Purpose: PurposeDeploy,
			Files: []ImageFile{{Path: name + ".img", Role: "disk", SHA256: strings.Repeat("d", 64), Size: 1 << 20}}}
		if _, err := s.PutImage(context.Background(), testAdmin, im); err != nil {
			t.Fatalf("import deploy image %s: %v", name, err)
		}
	}
}
