package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"rackd/api"
	"rackd/bench/internal/benchns"
)

// readyTimeout bounds an agent's start (store open, seed, listeners).
const readyTimeout = 60 * time.Second

// agentProc is one rackd serve process in the server namespace.
type agentProc struct {
	name  string
	ip    string // its API and DHCP address
	state string
	proc  *benchns.Proc
	http  *http.Client
	token string
}

// agentSpec is how to start one agent.
type agentSpec struct {
	name   string
	ip     string
	dir    string
	store  string // [store] section body ("" for the database file)
	dhcp   string // [dhcp] section body
	extra  string // more sections
	leader bool   // this agent seeds: its admin token is everyone's
}

func (b *bench) startAgent(ctx context.Context, s agentSpec) (*agentProc, error) {
	cfg := "# written by bench/etcd\n[dhcp]\n" + s.dhcp + "probe_timeout = \"0s\"\n"
	if s.store != "" {
		cfg += "[store]\n" + s.store
	}
	cfg += s.extra
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(s.dir, "rackd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	a := &agentProc{name: s.name, ip: s.ip, state: filepath.Join(s.dir, "state"),
		http: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{DialContext: benchns.Dialer(b.t.srv), MaxIdleConnsPerHost: 64}}}
	p, err := benchns.StartProc(b.t.srv, -1, nil, b.bin, "serve", "--config", path, "--state-dir", a.state,
		"--listen", s.ip+":5240", "--log-level", b.logLevel)
	if err != nil {
		return nil, err
	}
	a.proc = p
	if err := a.waitHealthy(ctx); err != nil {
		p.Stop(10 * time.Second)
		return nil, err
	}
	return a, nil
}

func (a *agentProc) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+a.ip+":5240/healthz", nil)
		resp, err := a.http.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if a.proc.Exited() {
			return fmt.Errorf("%s exited at start: %v\n%s", a.name, a.proc.Err, a.proc.Out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: API not healthy after %v (%v)\n%s", a.name, readyTimeout, err, a.proc.Out)
		}
		if err := benchns.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// readToken reads the admin token the agent's seed wrote.
func (a *agentProc) readToken() error {
	b, err := os.ReadFile(filepath.Join(a.state, "admin.token"))
	if err != nil {
		return err
	}
	a.token = strings.TrimSpace(string(b))
	return nil
}

// call sends one API request and decodes a 2xx answer into out (if not nil).
func (a *agentProc) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+a.ip+":5240"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s on %s: %w", method, path, a.name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s on %s: %d %s", method, path, a.name, resp.StatusCode, msg)
	}
	if out != nil {
		return json.Unmarshal(msg, out)
	}
	return nil
}

func (a *agentProc) createSubnet(ctx context.Context) error {
	body := fmt.Sprintf(`{"cidr":%q,"lease_seconds":3600,"dynamic_ranges":[{"start":%q,"end":%q}]}`,
		servedCIDR, poolStart, poolEnd)
	return a.call(ctx, "POST", "/api/v1/subnets", []byte(body), nil)
}

func (a *agentProc) leases(ctx context.Context) ([]api.Lease, error) {
	var out []api.Lease
	err := a.call(ctx, "GET", "/api/v1/leases", nil, &out)
	return out, err
}

// waitLeading waits until the agent leads the served subnet's DHCP
// election (an agent on etcd answers a subnet only then), so that a
// measurement starts with the agent answering.
func (a *agentProc) waitLeading(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		var c api.ClusterStatus
		if err := a.call(ctx, "GET", "/api/v1/cluster", nil, &c); err == nil {
			for _, ag := range c.Agents {
				if ag.Name == c.Agent && slices.Contains(ag.Subnets, servedCIDR) {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not leading %s after %v\n%s", a.name, servedCIDR, readyTimeout, a.proc.Out)
		}
		if err := benchns.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitDHCP waits until a DHCP socket is bound in the namespace (the
// agent's healthz, which waited for it, says whose).
func (a *agentProc) waitDHCP(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	for !benchns.Listening(a.proc.PID(), 67, false) {
		if a.proc.Exited() {
			return fmt.Errorf("%s exited: %v\n%s", a.name, a.proc.Err, a.proc.Out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: DHCP not listening after %v\n%s", a.name, readyTimeout, a.proc.Out)
		}
		if err := benchns.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// allocRate creates n READY machines through the API, then allocates them
// from workers clients for at most dur (and at most n-workers allocations)
// and returns the allocations per second.
func (a *agentProc) allocRate(ctx context.Context, n, workers int, dur time.Duration) (float64, error) {
	var next atomic.Int64
	if err := parallel(32, func() error {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			body := fmt.Sprintf(`{"hostname":"b%06d","arch":"amd64","macs":["52:54:00:%02x:%02x:%02x"],"cpu_count":8,"memory_mb":16384,"state":"READY"}`,
				i, i>>16&255, i>>8&255, i&255)
			if err := a.call(ctx, "POST", "/api/v1/machines", []byte(body), nil); err != nil {
				return err
			}
		}
	}); err != nil {
		return 0, fmt.Errorf("create machines: %w", err)
	}
	var done atomic.Int64
	limit := int64(n - workers)
	start := time.Now()
	body := []byte(`{"agent_name":"bench","constraints":{"arch":"amd64","min_cpu":4}}`)
	err := parallel(workers, func() error {
		for time.Since(start) < dur && done.Load() < limit {
			if err := a.call(ctx, "POST", "/api/v1/allocations", body, nil); err != nil {
				return err
			}
			done.Add(1)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("allocate: %w", err)
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

// parallel runs fn on n goroutines and returns the first error.
func parallel(n int, fn func() error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
