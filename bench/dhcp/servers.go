package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"rackd/bench/internal/benchns"
)

// A server is one of the DHCPv4 servers compared. start runs it in the
// server namespace with an empty lease database in dir and returns once it
// is answering; leases counts the leases it holds in its durable store.
type server interface {
	name() string
	// rate is the run's rate, for the names of what the run leaves (profiles).
	start(ctx context.Context, dir string, rate int) (*benchns.Proc, error)
	leases(ctx context.Context, dir string) (int, error)
}

const readyTimeout = 10 * time.Second

// waitListening waits until p has its DHCP socket(s) open in the server
// namespace, p exits, or the timeout.
func waitListening(ctx context.Context, p *benchns.Proc, packet bool) error {
	deadline := time.Now().Add(readyTimeout)
	for !benchns.Listening(p.PID(), 67, packet) {
		if p.Exited() {
			return fmt.Errorf("%s exited at start: %v\n%s", p.Name, p.Err, p.Out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no DHCP socket on port 67 after %v\n%s", p.Name, readyTimeout, p.Out)
		}
		if err := benchns.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	// Let it finish what it does after opening its sockets.
	return benchns.Sleep(ctx, 200*time.Millisecond)
}

// kea is ISC Kea's kea-dhcp4 (2.2): memfile lease database with persistence
// (each lease is appended to a CSV file before the reply is sent), no lease
// file cleanup, raw socket on the veth, single-threaded (2.2's default).
type kea struct{ t *benchns.Topology }

func (kea) name() string { return "kea" }

func (k kea) config(dir string) ([]byte, error) {
	cfg := map[string]any{"Dhcp4": map[string]any{
		"interfaces-config": map[string]any{"interfaces": []string{k.t.SrvIf}, "dhcp-socket-type": "raw"},
		"lease-database": map[string]any{"type": "memfile", "persist": true,
			"name": filepath.Join(dir, "kea-leases4.csv"), "lfc-interval": 0},
		"valid-lifetime": 3600,
		"subnet4": []any{map[string]any{"id": 1, "subnet": servedCIDR,
			"pools": []any{map[string]any{"pool": poolStart + " - " + poolEnd}}}},
		"loggers": []any{map[string]any{"name": "kea-dhcp4", "severity": "WARN",
			"output_options": []any{map[string]any{"output": "stderr"}}}},
	}}
	return json.MarshalIndent(cfg, "", "  ")
}

func (k kea) env(dir string) []string {
	return []string{"KEA_PIDFILE_DIR=" + dir, "KEA_LOCKFILE_DIR=" + dir}
}

// check validates the configuration with kea-dhcp4 -t.
func (k kea) check(ctx context.Context, dir string) error {
	cfg, err := k.config(dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "kea-dhcp4.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return err
	}
	p, err := benchns.StartProc(k.t.Srv, -1, k.env(dir), "kea-dhcp4", "-t", path)
	if err != nil {
		return err
	}
	select {
	case <-p.Done:
	case <-time.After(benchns.CmdTimeout):
	case <-ctx.Done():
	}
	p.Stop(time.Second)
	if p.Err != nil {
		return fmt.Errorf("kea-dhcp4 -t: %v\n%s", p.Err, p.Out)
	}
	return nil
}

func (k kea) start(ctx context.Context, dir string, _ int) (*benchns.Proc, error) {
	cfg, err := k.config(dir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kea-dhcp4.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return nil, err
	}
	p, err := benchns.StartProc(k.t.Srv, -1, k.env(dir), "kea-dhcp4", "-c", path)
	if err != nil {
		return nil, err
	}
	if err := waitListening(ctx, p, true); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// leases counts the distinct addresses in the memfile CSV (Kea appends a
// line per lease update; the first column is the address).
func (k kea) leases(_ context.Context, dir string) (int, error) {
	f, err := os.Open(filepath.Join(dir, "kea-leases4.csv"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for first := true; sc.Scan(); first = false {
		if first {
			continue // header
		}
		if addr, _, ok := strings.Cut(sc.Text(), ","); ok {
			seen[addr] = true
		}
	}
	return len(seen), sc.Err()
}

// dnsmasq (2.90) with DNS off and the lease file in dir: it rewrites and
// fsyncs the whole lease file on every ACK.
type dnsmasq struct{ t *benchns.Topology }

func (dnsmasq) name() string { return "dnsmasq" }

func (d dnsmasq) start(ctx context.Context, dir string, _ int) (*benchns.Proc, error) {
	p, err := benchns.StartProc(d.t.Srv, -1, nil, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
		"--port=0", "--user=root", "--group=root", "--interface="+d.t.SrvIf, "--bind-dynamic",
		fmt.Sprintf("--dhcp-range=%s,%s,%s,1h", poolStart, poolEnd, poolMask),
		"--dhcp-lease-max=1000000", "--dhcp-leasefile="+filepath.Join(dir, "dnsmasq.leases"),
		"--dhcp-authoritative", "--no-ping", "--quiet-dhcp")
	if err != nil {
		return nil, err
	}
	if err := waitListening(ctx, p, false); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// leases counts the lease file's lines (one per lease).
func (d dnsmasq) leases(_ context.Context, dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "dnsmasq.leases"))
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte("\n")), nil
}

// rackd runs the binary built for the run with its DHCP server on a plain
// UDP socket at the server address (relayed traffic only) and no ARP probe
// (relayed subnets are not on-link). The subnet is created through the API,
// which listens on loopback inside the server namespace; the namespace is
// the bench's own, so a fixed port is free.
type rackd struct {
	t     *benchns.Topology
	label string // rackd, or rackd-b for the second binary of an A/B comparison
	bin   string
	// extra is appended to the [dhcp] section of rackd's config (tuning
	// experiments, e.g. commit_delay = "4ms").
	extra string
	// profDir, when set, is where each run writes a CPU profile
	// (RACKD_CPUPROFILE), named by label, rate and start time.
	profDir string
}

const rackdAPI = "127.0.0.1:5240"

func (r rackd) name() string { return r.label }

func (r rackd) client() *http.Client {
	return &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: benchns.Dialer(r.t.Srv), DisableKeepAlives: true}}
}

const rackdConfig = `# written by bench/dhcp
[dhcp]
listen = ["` + benchns.ServerIP + `:67"]
probe_timeout = "0s"
`

func (r rackd) start(ctx context.Context, dir string, rate int) (*benchns.Proc, error) {
	cfg := filepath.Join(dir, "rackd.toml")
	if err := os.WriteFile(cfg, []byte(rackdConfig+r.extra+"\n"), 0o600); err != nil {
		return nil, err
	}
	state := filepath.Join(dir, "state")
	var env []string
	if r.profDir != "" {
		env = append(env, "RACKD_CPUPROFILE="+filepath.Join(r.profDir,
			fmt.Sprintf("%s-%d-%s.pprof", r.label, rate, time.Now().Format("150405"))))
	}
	p, err := benchns.StartProc(r.t.Srv, -1, env, r.bin, "serve", "--config", cfg, "--state-dir", state,
		"--listen", rackdAPI, "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	if err := r.setup(ctx, p, state); err != nil {
		p.Stop(10 * time.Second)
		return nil, err
	}
	return p, nil
}

func (r rackd) setup(ctx context.Context, p *benchns.Proc, state string) error {
	c := r.client()
	deadline := time.Now().Add(readyTimeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+rackdAPI+"/healthz", nil)
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if p.Exited() {
			return fmt.Errorf("rackd exited at start: %v\n%s", p.Err, p.Out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rackd: API not healthy after %v (%v)\n%s", readyTimeout, err, p.Out)
		}
		if err := benchns.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	token, err := os.ReadFile(filepath.Join(state, "admin.token"))
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"cidr":%q,"lease_seconds":3600,"dynamic_ranges":[{"start":%q,"end":%q}]}`,
		servedCIDR, poolStart, poolEnd)
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+rackdAPI+"/api/v1/subnets", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("rackd: create subnet: %w", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("rackd: create subnet: %d %s", resp.StatusCode, msg)
	}
	if err := waitListening(ctx, p, false); err != nil {
		return fmt.Errorf("%w\n(is dhcp.listen wired into rackd serve yet?)", err)
	}
	return nil
}

// leases counts the dynamic leases rackd's store holds (GET /api/v1/leases).
func (r rackd) leases(ctx context.Context, dir string) (int, error) {
	token, err := os.ReadFile(filepath.Join(dir, "state", "admin.token"))
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+rackdAPI+"/api/v1/leases", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := r.client().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("GET /api/v1/leases: %d %s", resp.StatusCode, msg)
	}
	var list []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	r.printCommits(ctx)
	return len(list), nil
}

// printCommits prints how many group commits the run took, which is what
// the CPU per DORA of a durable store mostly depends on.
func (r rackd) printCommits(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+rackdAPI+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := r.client().Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "rackd_store_commits_total") || strings.HasPrefix(line, "rackd_store_commit_operations_sum") ||
			strings.HasPrefix(line, "rackd_store_commit_operations_count") {
			fmt.Println("rackd:", line)
		}
	}
}
