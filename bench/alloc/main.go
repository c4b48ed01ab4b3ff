// Command alloc measures allocation throughput through rackd's HTTP API
// against the raw rate of single-key, fsync'd bbolt update transactions on
// the same disk, in the same run (`make bench-alloc`). It prints progress,
// then one line:
//
//	RESULT alloc_per_s=<n> concurrent16_per_s=<n> raw_bbolt_txn_per_s=<n> ratio=<alloc/raw>
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

func run() error {
	dur := flag.Duration("duration", 3*time.Second, "time bound of each measured phase")
	machines := flag.Int("machines", 30000, "READY machines created (bounds the allocations)")
	dir := flag.String("dir", "bench/out", "scratch directory, on the disk being measured")
	flag.Parse()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(*dir, "alloc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	raw, err := rawBolt(filepath.Join(work, "raw.db"), *dur, *machines)
	if err != nil {
		return fmt.Errorf("raw bbolt: %w", err)
	}
	fmt.Printf("raw bbolt: %.0f fsync'd single-key update txns/s\n", raw)

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
	url := "http://" + ln.Addr().String()
	token, err := os.ReadFile(a.AdminTokenPath())
	if err != nil {
		return err
	}

	start := time.Now()
	if err := createMachines(ctx, a.Store(), *machines); err != nil {
		return err
	}
	fmt.Printf("setup: %d READY machines in %.1fs\n", *machines, time.Since(start).Seconds())

	st := time.Now()
	for i := 0; i < 1000; i++ {
		if _, err := a.Store().Allocate(ctx, store.Actor{Name: "admin", Admin: true}, store.AllocateRequest{AgentName: "direct"}); err != nil {
			return err
		}
	}
	fmt.Printf("direct store: %v per allocation\n", time.Since(st)/1000)
	c := &client{url: url, token: strings.TrimSpace(string(token)),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}}
	single, n1, err := c.allocate(1, *dur, *machines/2)
	if err != nil {
		return err
	}
	fmt.Printf("alloc, 1 client over HTTP: %d allocations, %.0f/s\n", n1, single)
	// Each worker checks the bound before it asks, so 16 may overshoot by 15.
	conc, n16, err := c.allocate(16, *dur, *machines/2-16)
	if err != nil {
		return err
	}
	fmt.Printf("alloc, 16 clients over HTTP: %d allocations, %.0f/s\n", n16, conc)
	if err := a.Store().Check(); err != nil {
		return fmt.Errorf("store invariants after the run: %w", err)
	}
	fmt.Printf("RESULT alloc_per_s=%.0f concurrent16_per_s=%.0f raw_bbolt_txn_per_s=%.0f ratio=%.2f\n",
		single, conc, raw, single/raw)
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

// createMachines fills the store through its own API, concurrently so that
// group commit makes the setup quick.
func createMachines(ctx context.Context, s *store.Store, n int) error {
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
				if i >= n {
					return
				}
				_, err := s.CreateMachine(ctx, store.System, store.NewMachine{
					Hostname: fmt.Sprintf("node%06d", i), Arch: "amd64",
					MACs:     []string{fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", i>>24&255, i>>16&255, i>>8&255, i&255)},
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
	return <-errs
}

type client struct {
	url, token string
	http       *http.Client
}

// allocate runs workers that allocate by constraints until dur or max.
func (c *client) allocate(workers int, dur time.Duration, max int) (float64, int64, error) {
	var (
		done     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	body := []byte(`{"agent_name":"bench","constraints":{"arch":"amd64","min_cpu":4}}`)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < dur && done.Load() < int64(max) {
				req, _ := http.NewRequest("POST", c.url+"/api/v1/allocations", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+c.token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.http.Do(req)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					firstErr.CompareAndSwap(nil, fmt.Errorf("allocate: %d %s", resp.StatusCode, msg))
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
	return float64(done.Load()) / elapsed, done.Load(), nil
}
