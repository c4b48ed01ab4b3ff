// Package benchns is what the benchmarks that race rackd against a peer
// share: a pair of network namespaces joined by a veth pair, processes
// started inside them (stopped by PID, all of them on any exit), dialling
// into a namespace, and CPU-time readings from /proc.
package benchns

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

// The addresses of the two ends; the namespaces are the run's own, so they
// cannot clash with anything.
const (
	ServerIP = "10.77.0.1"
	ClientIP = "10.77.0.2"
	IfPrefix = "/24"
)

// CmdTimeout bounds every setup Command ("ip" answers in milliseconds).
const CmdTimeout = 30 * time.Second

// Topology is the namespace pair: server and client joined by one veth pair,
// no default route, nothing else attached.
type Topology struct {
	Srv, Cli     string // namespace names
	SrvIf, CliIf string // veth ends
}

func RandName(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + hex.EncodeToString(b) // at most 15 bytes: a valid interface name too
}

// NewTopology creates the namespaces and the veth pair. On error it removes
// whatever it created; otherwise the caller removes it with Close.
func NewTopology(ctx context.Context, prefix string) (_ *Topology, err error) {
	base := RandName(prefix)
	t := &Topology{Srv: base + "s", Cli: base + "c", SrvIf: base + "a", CliIf: base + "b"}
	created := []string{}
	defer func() {
		if err != nil {
			for _, ns := range created {
				Command(context.Background(), "ip", "netns", "del", ns)
			}
		}
	}()
	for _, ns := range []string{t.Srv, t.Cli} {
		if _, err := os.Stat("/var/run/netns/" + ns); err == nil {
			return nil, fmt.Errorf("namespace %s exists already", ns)
		}
		if err := RunCmd(ctx, "ip", "netns", "add", ns); err != nil {
			return nil, err
		}
		created = append(created, ns)
	}
	steps := [][]string{
		// Created directly in the namespaces: the names never appear in
		// the host's namespace.
		{"link", "add", t.SrvIf, "netns", t.Srv, "type", "veth", "peer", "name", t.CliIf, "netns", t.Cli},
		{"-n", t.Srv, "link", "set", "lo", "up"},
		{"-n", t.Cli, "link", "set", "lo", "up"},
		{"-n", t.Srv, "addr", "add", ServerIP + IfPrefix, "dev", t.SrvIf},
		{"-n", t.Cli, "addr", "add", ClientIP + IfPrefix, "dev", t.CliIf},
		{"-n", t.Srv, "link", "set", t.SrvIf, "up"},
		{"-n", t.Cli, "link", "set", t.CliIf, "up"},
	}
	for _, s := range steps {
		if err := RunCmd(ctx, "ip", s...); err != nil {
			return nil, err
		}
	}
	// The link takes a moment to come up (carrier on both ends).
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := Command(ctx, "ip", "-n", t.Cli, "-o", "link", "show", t.CliIf)
		if err == nil && strings.Contains(string(out), "state UP") {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("veth %s not up after 10s: %s", t.CliIf, out)
		}
		if err := Sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Close deletes both namespaces, which also destroys the veth pair.
func (t *Topology) Close() error {
	var errs []error
	for _, ns := range []string{t.Srv, t.Cli} {
		if out, err := Command(context.Background(), "ip", "netns", "del", ns); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, out))
		}
	}
	return errors.Join(errs...)
}

// Dialer returns a DialContext whose sockets are created inside the
// namespace ns: the dialling goroutine locks its OS thread, enters ns, dials
// and leaves. A socket's namespace is fixed at creation, so the connection
// stays there whichever thread uses it later. If leaving fails the thread is
// left locked and dies with the goroutine.
func Dialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
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

// Proc is a long-running process started in a namespace ("ip netns exec"
// execs the command in place, so the PID is the server's own). It leads its
// own process group.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Out  *TailBuffer
	Done chan struct{}
	Err  error // set before Done is closed
}

// procs holds every process started and not yet reaped, so that an error or
// an interrupt anywhere still stops them all (by PID).
var procs = struct {
	sync.Mutex
	m map[*Proc]bool
}{m: map[*Proc]bool{}}

// StartProc starts name in namespace ns. With cgroupFD >= 0 it starts inside
// that cgroup (clone3's CLONE_INTO_CGROUP): the process and every child it
// forks are in it from their first instruction, so its CPU time counts whole.
func StartProc(ns string, cgroupFD int, env []string, name string, args ...string) (*Proc, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	p := &Proc{Name: name, Cmd: cmd, Out: &TailBuffer{max: 64 << 10}, Done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cgroupFD >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cgroupFD
	}
	procs.Lock()
	defer procs.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	procs.m[p] = true
	go func() {
		p.Err = cmd.Wait()
		close(p.Done)
	}()
	return p, nil
}

func (p *Proc) PID() int { return p.Cmd.Process.Pid }

func (p *Proc) Exited() bool {
	select {
	case <-p.Done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group, SIGKILL after grace, and waits.
// It returns the exit error unless the process ended because of the SIGTERM.
func (p *Proc) Stop(grace time.Duration) error {
	defer func() {
		procs.Lock()
		delete(procs.m, p)
		procs.Unlock()
	}()
	if p.Exited() {
		return fmt.Errorf("%s (pid %d) had exited: %v", p.Name, p.PID(), p.Err)
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
	select {
	case <-p.Done:
		return nil
	case <-time.After(grace):
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.Done
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %v; killed", p.Name, p.PID(), grace)
	}
}

func StopAll() {
	procs.Lock()
	list := make([]*Proc, 0, len(procs.m))
	for p := range procs.m {
		list = append(list, p)
	}
	procs.Unlock()
	for _, p := range list {
		p.Stop(5 * time.Second)
	}
}

// TailBuffer keeps the last max bytes written to it.
type TailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTailBuffer returns a TailBuffer that keeps the last max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func Command(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, CmdTimeout)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

func RunCmd(ctx context.Context, name string, args ...string) error {
	if out, err := Command(ctx, name, args...); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

const UserHZ = 100

// Listening reports whether a UDP socket is bound to port in pid's network
// namespace and, with packet, whether an AF_PACKET socket is open there too
// (Kea's raw mode opens its UDP socket first, then the packet socket).
func Listening(pid, port int, packet bool) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", pid))
	if err != nil || !strings.Contains(string(b), fmt.Sprintf(":%04X ", port)) {
		return false
	}
	if !packet {
		return true
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/net/packet", pid))
	return err == nil && strings.Count(string(b), "\n") > 1
}

// MachineTicks is the busy time of all CPUs together so far (everything but
// idle and iowait), in USER_HZ ticks, from /proc/stat.
func MachineTicks() (int64, error) {
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
