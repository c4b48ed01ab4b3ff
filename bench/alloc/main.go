// Command alloc measures allocation throughput against the raw rate of
// single-key, fsync'd bbolt update transactions on the same disk, in the same
// run (`make bench-alloc`). It prints progress, then one line:
//
//	RESULT alloc_per_s=<n> concurrent16_per_s=<n> raw_bbolt_txn_per_s=<n> ratio=<alloc/raw> http_alloc_per_s=<n> http_concurrent16_per_s=<n> http_ratio=<http_alloc/raw>
//
// alloc_per_s and concurrent16_per_s call rackd's allocation operation (one
// store transaction through the group committer: the allocation, its event,
// its indexes) from 1 and 16 goroutines; the http_ figures do the same
// through the HTTP API on loopback, with authentication and JSON. raw is
// measured before and after the rackd phases and averaged, because the disk's
// rate drifts.
//
// Every loop is bounded in count and in time, and only loopback is used.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"rackd/agent"
	"rackd/store"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-alloc:", err)
		os.Exit(1)
	}
}

type bench struct {
	dur   time.Duration
	max   int
	store *store.Store
	pool  int // phases so far; names the next pool of machines
}

func run() error {
	dur := flag.Duration("duration", 3*time.Second, "time bound of each measured phase")
	max := flag.Int("max", 10000, "count bound of each measured phase")
	dir := flag.String("dir", "bench/out", "scratch directory, on the disk being measured")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(*dir, "alloc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	raw1, err := rawBolt(filepath.Join(work, "raw1.db"), *dur, *max)
	if err != nil {
		return fmt.Errorf("raw bbolt: %w", err)
	}
	fmt.Printf("raw bbolt: %.0f fsync'd single-key update txns/s\n", raw1)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := agent.DefaultConfig()
	cfg.StateDir = filepath.Join(work, "rackd")
	a, err := agent.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()
	token, err := os.ReadFile(a.AdminTokenPath())
	if err != nil {
		return err
	}
	b := &bench{dur: *dur, max: *max, store: a.Store()}
	c := &client{url: "http://" + ln.Addr().String(), token: strings.TrimSpace(string(token)),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}}

	phases := []struct {
		name    string
		workers int
		alloc   func(ctx context.Context) error
	}{
		{"store, 1 client", 1, b.allocateDirect},
		{"store, 16 clients", 16, b.allocateDirect},
		{"HTTP, 1 client", 1, c.allocate},
		{"HTTP, 16 clients", 16, c.allocate},
	}
	rates := make([]float64, len(phases))
	for i, p := range phases {
		if err := b.newPool(ctx); err != nil {
			return err
		}
		n, rate, err := b.measure(ctx, p.workers, p.alloc)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		rates[i] = rate
		fmt.Printf("allocate, %s: %d allocations, %.0f/s\n", p.name, n, rate)
	}
	if err := a.Store().Check(); err != nil {
		return fmt.Errorf("store invariants after the run: %w", err)
	}
	raw2, err := rawBolt(filepath.Join(work, "raw2.db"), *dur, *max)
	if err != nil {
		return fmt.Errorf("raw bbolt: %w", err)
	}
	fmt.Printf("raw bbolt again: %.0f fsync'd single-key update txns/s\n", raw2)
	raw := (raw1 + raw2) / 2
	fmt.Printf("RESULT alloc_per_s=%.0f concurrent16_per_s=%.0f raw_bbolt_txn_per_s=%.0f ratio=%.2f http_alloc_per_s=%.0f http_concurrent16_per_s=%.0f http_ratio=%.2f\n",
		rates[0], rates[1], raw, rates[0]/raw, rates[2], rates[3], rates[2]/raw)
	return nil
}

// rawBolt is the baseline: one writer, one 100-byte key per fsync'd commit.
func rawBolt(path string, dur time.Duration, max int) (float64, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	val := make([]byte, 100)
	rand.Read(val)
	n := 0
	start := time.Now()
	for ; n < max && time.Since(start) < dur; n++ {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("raw"))
			if err != nil {
				return err
			}
			return b.Put(fmt.Appendf(nil, "key%09d", n), val)
		})
		if err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// newPool creates max READY machines for the next phase, concurrently so that
// group commit makes the setup quick. Their hostnames sort before every
// earlier pool's, so the next phase allocates from this pool and never walks
// over an earlier phase's leftovers.
func (b *bench) newPool(ctx context.Context) error {
	b.pool++
	prefix := fmt.Sprintf("p%d-", 9-b.pool)
	start := time.Now()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make(chan error, 64)
	)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.max {
					return
				}
				j := b.pool<<24 | i
				_, err := b.store.CreateMachine(ctx, store.System, store.NewMachine{
					Hostname: fmt.Sprintf("%s%06d", prefix, i), Arch: "amd64",
					MACs:     []string{fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", j>>24&255, j>>16&255, j>>8&255, j&255)},
					CPUCount: 8, MemoryMB: 16384, State: store.StateReady})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("setup: %d READY machines in %.1fs\n", b.max, time.Since(start).Seconds())
	return nil
}

// measure runs workers that allocate until the phase's time or count bound.
// A worker checks the count before it asks, so the pool (max machines) always
// covers max-1+workers allocations: the bound stops at max-workers.
func (b *bench) measure(ctx context.Context, workers int, alloc func(context.Context) error) (int64, float64, error) {
	var (
		done     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	limit := int64(b.max - workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < b.dur && done.Load() < limit {
				if err := alloc(ctx); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, err
	}
	return done.Load(), float64(done.Load()) / elapsed, nil
}

var benchConstraints = store.Constraints{Arch: "amd64", MinCPU: 4}

func (b *bench) allocateDirect(ctx context.Context) error {
	_, err := b.store.Allocate(ctx, store.Actor{Name: "admin", Admin: true},
		store.AllocateRequest{AgentName: "bench", Constraints: benchConstraints})
	return err
}

type client struct {
	url, token string
	http       *http.Client
}

var allocBody = []byte(`{"agent_name":"bench","constraints":{"arch":"amd64","min_cpu":4}}`)

func (c *client) allocate(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "POST", c.url+"/api/v1/allocations", bytes.NewReader(allocBody))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("allocate: %d %s", resp.StatusCode, msg)
	}
	return nil
}
