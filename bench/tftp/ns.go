package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// The addresses of the two ends (bench-dhcp's layout; the namespaces are
// this run's own, so the addresses cannot clash with anything).
const (
	serverIP = "10.77.0.1"
	clientIP = "10.77.0.2"
	ifPrefix = "/24"
)

// cmdTimeout bounds every setup command ("ip" answers in milliseconds).
const cmdTimeout = 30 * time.Second

// topology is the namespace pair: server and client joined by one veth pair,
// no default route, nothing else attached.
type topology struct {
	srv, cli     string // namespace names
	srvIf, cliIf string // veth ends
}

func randName(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + hex.EncodeToString(b) // at most 15 bytes: a valid interface name too
}

// newTopology creates the namespaces and the veth pair. On error it removes
// whatever it created; otherwise the caller removes it with close.
func newTopology(ctx context.Context) (_ *topology, err error) {
	base := randName("rkt")
	t := &topology{srv: base + "s", cli: base + "c", srvIf: base + "a", cliIf: base + "b"}
	created := []string{}
	defer func() {
		if err != nil {
			for _, ns := range created {
				command(context.Background(), "ip", "netns", "del", ns)
			}
		}
	}()
	for _, ns := range []string{t.srv, t.cli} {
		if _, err := os.Stat("/var/run/netns/" + ns); err == nil {
			return nil, fmt.Errorf("namespace %s exists already", ns)
		}
		if err := runCmd(ctx, "ip", "netns", "add", ns); err != nil {
			return nil, err
		}
		created = append(created, ns)
	}
	steps := [][]string{
		// Created directly in the namespaces: the names never appear in
		// the host's namespace.
		{"link", "add", t.srvIf, "netns", t.srv, "type", "veth", "peer", "name", t.cliIf, "netns", t.cli},
		{"-n", t.srv, "link", "set", "lo", "up"},
		{"-n", t.cli, "link", "set", "lo", "up"},
		{"-n", t.srv, "addr", "add", serverIP + ifPrefix, "dev", t.srvIf},
		{"-n", t.cli, "addr", "add", clientIP + ifPrefix, "dev", t.cliIf},
		{"-n", t.srv, "link", "set", t.srvIf, "up"},
		{"-n", t.cli, "link", "set", t.cliIf, "up"},
	}
	for _, s := range steps {
		if err := runCmd(ctx, "ip", s...); err != nil {
			return nil, err
		}
	}
	// The link takes a moment to come up (carrier on both ends).
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := command(ctx, "ip", "-n", t.cli, "-o", "link", "show", t.cliIf)
		if err == nil && strings.Contains(string(out), "state UP") {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("veth %s not up after 10s: %s", t.cliIf, out)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// close deletes both namespaces, which also destroys the veth pair.
func (t *topology) close() error {
	var errs []error
	for _, ns := range []string{t.srv, t.cli} {
		if out, err := command(context.Background(), "ip", "netns", "del", ns); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, out))
		}
	}
	return errors.Join(errs...)
}

// dialer returns a DialContext whose sockets are created inside the
// namespace ns: the dialling goroutine locks its OS thread, enters ns, dials
// and leaves. A socket's namespace is fixed at creation, so the connection
// stays there whichever thread uses it later. If leaving fails the thread is
// left locked and dies with the goroutine.
func dialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := netns.Get()
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer orig.Close()
			target, err := netns.GetFromName(ns)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer target.Close()
			if err := netns.Set(target); err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if serr := netns.Set(orig); serr != nil {
				if c != nil {
					c.Close()
				}
				ch <- result{nil, fmt.Errorf("leave namespace %s: %w", ns, serr)}
				return
			}
			runtime.UnlockOSThread()
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// proc is a long-running process started in a namespace ("ip netns exec"
// execs the command in place, so the PID is the server's own). It leads its
// own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	err  error // set before done is closed
}

// procs holds every process started and not yet reaped, so that an error or
// an interrupt anywhere still stops them all (by PID).
var procs = struct {
	sync.Mutex
	m map[*proc]bool
}{m: map[*proc]bool{}}

// startProc starts name in namespace ns. With cg it starts inside that
// cgroup (clone3's CLONE_INTO_CGROUP): the process and every child it forks
// are in it from their first instruction, so its CPU time counts whole.
func startProc(ns string, cg *cgroup, env []string, name string, args ...string) (*proc, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	p := &proc{name: name, cmd: cmd, out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cg != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cg.fd()
	}
	procs.Lock()
	defer procs.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	procs.m[p] = true
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, SIGKILL after grace, and waits.
// It returns the exit error unless the process ended because of the SIGTERM.
func (p *proc) stop(grace time.Duration) error {
	defer func() {
		procs.Lock()
		delete(procs.m, p)
		procs.Unlock()
	}()
	if p.exited() {
		return fmt.Errorf("%s (pid %d) had exited: %v", p.name, p.pid(), p.err)
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %v; killed", p.name, p.pid(), grace)
	}
}

func stopAll() {
	procs.Lock()
	list := make([]*proc, 0, len(procs.m))
	for p := range procs.m {
		list = append(list, p)
	}
	procs.Unlock()
	for _, p := range list {
		p.stop(5 * time.Second)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func command(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

func runCmd(ctx context.Context, name string, args ...string) error {
	if out, err := command(ctx, name, args...); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// listening reports whether a UDP socket is bound to port in pid's network
// namespace.
func listening(pid, port int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", pid))
	return err == nil && strings.Contains(string(b), fmt.Sprintf(":%04X ", port))
}

const userHZ = 100

// machineTicks is the busy time of all CPUs together so far (everything but
// idle and iowait), in USER_HZ ticks, from /proc/stat.
func machineTicks() (int64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: %q", line)
	}
	var busy int64
	for i, s := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
			continue
		}
		var n int64
		if _, err := fmt.Sscan(s, &n); err != nil {
			return 0, err
		}
		busy += n
	}
	return busy, nil
}
