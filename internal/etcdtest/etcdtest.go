// Package etcdtest starts a real etcd cluster on loopback for tests: n
// members of Debian's etcd-server (etcd 3.4), each a process of its own with
// its own data directory, that a test can kill, pause and start again.
//
// Every member is stopped by its PID when the test ends (SIGTERM, then
// SIGKILL), and its data directory goes with the test's temporary
// directory. Start-up is bounded: a member that does not report healthy in
// time fails the test with its output.
package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// StartTimeout bounds how long a cluster (or one restarted member) may take
// to report healthy.
const StartTimeout = 60 * time.Second

// Cluster is a running etcd cluster on loopback.
type Cluster struct {
	t       testing.TB // nil for a Launch cluster
	bin     string
	token   string
	members []*Member
	opts    LaunchOptions
}

// Member is one etcd process of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:PORT
	PeerURL   string
	Dir       string // data directory

	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *netnstest.Buffer
	done chan struct{}
}

// Start starts an n-member cluster and waits until every member reports
// healthy; the test's end stops it. It skips the test when the process may
// not run it (see netnstest.Tool: a missing etcd fails as root or in CI).
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	netnstest.Tool(t, "etcd")
	c, err := Launch(n, t.TempDir())
	if c != nil {
		c.t = t
		t.Cleanup(func() {
			if t.Failed() {
				for _, m := range c.members {
					t.Logf("etcdtest: output of %s:\n%s", m.Name, m.output())
				}
			}
			c.Close()
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Launch is Start outside a test (a TestMain's cluster shared by a
// package's tests): the members keep their data under dir, and the caller
// stops them with Close. On an error the cluster returned, if any, still
// needs closing.
func Launch(n int, dir string) (*Cluster, error) {
	return LaunchWith(n, dir, LaunchOptions{})
}

// LaunchOptions is where a Launch cluster runs.
type LaunchOptions struct {
	// Netns, when set, is the network namespace the members run in (their
	// loopback is that namespace's): a benchmark whose servers live in a
	// namespace reaches them there.
	Netns string
	// Dial dials inside Netns, for the health checks (required with it).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// LaunchWith is Launch with options.
func LaunchWith(n int, dir string, o LaunchOptions) (*Cluster, error) {
	if o.Netns != "" && o.Dial == nil {
		return nil, fmt.Errorf("etcdtest: a cluster in namespace %s needs its Dial", o.Netns)
	}
	if n < 1 {
		return nil, fmt.Errorf("etcdtest: %d members", n)
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w (scripts/test-deps.sh installs etcd-server)", err)
	}
	c := &Cluster{bin: bin, token: netnstest.Name("rackd-etcd"), opts: o}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			Dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.members {
		if err := c.launch(m, strings.Join(initial, ","), "new"); err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for i := range c.members {
		if err := c.waitHealthy(ctx, i); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Close stops every member by its PID (SIGTERM, then SIGKILL).
func (c *Cluster) Close() {
	for _, m := range c.members {
		m.stop(5 * time.Second)
	}
}

// Endpoints returns the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Member returns member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Kill ends member i at once (SIGKILL), as a crash or a pulled plug would,
// and waits for it to exit.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Pause stops member i (SIGSTOP) without ending it; Resume lets it go on.
func (c *Cluster) Pause(i int) { c.signal(i, syscall.SIGSTOP) }

// Resume continues a paused member (SIGCONT).
func (c *Cluster) Resume(i int) { c.signal(i, syscall.SIGCONT) }

func (c *Cluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		c.t.Fatalf("etcdtest: %s is not running", m.Name)
	}
	if err := syscall.Kill(-m.cmd.Process.Pid, sig); err != nil {
		c.t.Fatalf("etcdtest: signal %s: %v", m.Name, err)
	}
}

// Restart starts a killed member again on its data directory and waits
// until it reports healthy (which needs a quorum of the cluster).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	m.stop(5 * time.Second)
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.Name+"="+o.PeerURL)
	}
	if err := c.launch(m, strings.Join(initial, ","), "existing"); err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx, i); err != nil {
		c.t.Fatal(err)
	}
}

// launch starts member m's process.
func (c *Cluster) launch(m *Member, initial, state string) error {
	args := []string{
		"--name", m.Name,
		"--data-dir", m.Dir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", initial,
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.token,
		// Loopback: a short heartbeat finds a dead leader in about a
		// second, which keeps failover tests short.
		"--heartbeat-interval", "100",
		"--election-timeout", "1000",
		"--logger", "zap",
		"--log-level", "warn",
	}
	cmd := exec.Command(c.bin, args...)
	if c.opts.Netns != "" {
		// ip netns exec execs etcd in place: the PID stays the member's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", c.opts.Netns, c.bin}, args...)...)
	}
	out := &netnstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig: a test binary that panics runs no cleanup (a TestMain's
	// deferred Close included); the member must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.out, m.done = cmd, out, done
	m.mu.Unlock()
	return nil
}

// waitHealthy waits until member i answers /health with health "true".
func (c *Cluster) waitHealthy(ctx context.Context, i int) error {
	m := c.members[i]
	client := &http.Client{Timeout: 2 * time.Second}
	if c.opts.Dial != nil {
		client.Transport = &http.Transport{DialContext: c.opts.Dial, DisableKeepAlives: true}
	}
	var last string
	for {
		m.mu.Lock()
		done := m.done
		m.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("etcdtest: %s exited before it was healthy:\n%s", m.Name, m.output())
		default:
		}
		ok, why := health(ctx, client, m.ClientURL)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdtest: %s not healthy within %v (last: %s):\n%s", m.Name, StartTimeout, last, m.output())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// health asks a member's /health endpoint.
func health(ctx context.Context, client *http.Client, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return false, fmt.Sprintf("%s: %v", resp.Status, err)
	}
	return h.Health == "true", fmt.Sprintf("%s health=%q", resp.Status, h.Health)
}

// stop ends the member's process group: SIGCONT (a paused member cannot
// act on SIGTERM), SIGTERM, then SIGKILL after grace.
func (m *Member) stop(grace time.Duration) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

func (m *Member) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out == nil {
		return ""
	}
	return m.out.String()
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago. They are held open together so that no two are the same.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
