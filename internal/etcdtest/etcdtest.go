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
	t       testing.TB
	bin     string
	token   string
	members []*Member
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
// healthy. It skips the test when the process may not run it (see
// netnstest.Tool: a missing etcd fails as root or in CI).
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest: %d members", n)
	}
	c := &Cluster{t: t, bin: netnstest.Tool(t, "etcd"), token: netnstest.Name("rackd-etcd")}
	root := t.TempDir()
	ports := freePorts(t, 2*n)
	var initial []string
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			Dir:       filepath.Join(root, fmt.Sprintf("m%d", i)),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.stop(5 * time.Second)
			if t.Failed() {
				t.Logf("etcdtest: output of %s:\n%s", m.Name, m.output())
			}
		}
	})
	for _, m := range c.members {
		c.launch(m, strings.Join(initial, ","), "new")
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for i := range c.members {
		c.waitHealthy(ctx, i)
	}
	return c
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
	c.launch(m, strings.Join(initial, ","), "existing")
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c.waitHealthy(ctx, i)
}

// launch starts member m's process.
func (c *Cluster) launch(m *Member, initial, state string) {
	c.t.Helper()
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
	out := &netnstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("etcdtest: start %s: %v", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.out, m.done = cmd, out, done
	m.mu.Unlock()
}

// waitHealthy waits until member i answers /health with health "true".
func (c *Cluster) waitHealthy(ctx context.Context, i int) {
	c.t.Helper()
	m := c.members[i]
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		m.mu.Lock()
		done := m.done
		m.mu.Unlock()
		select {
		case <-done:
			c.t.Fatalf("etcdtest: %s exited before it was healthy:\n%s", m.Name, m.output())
		default:
		}
		ok, why := health(ctx, client, m.ClientURL)
		if ok {
			return
		}
		last = why
		select {
		case <-ctx.Done():
			c.t.Fatalf("etcdtest: %s not healthy within %v (last: %s):\n%s", m.Name, StartTimeout, last, m.output())
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
func freePorts(t testing.TB, n int) []int {
	t.Helper()
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
			t.Fatalf("etcdtest: free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
