// Package netnstest builds throw-away network topologies for tests that talk
// to real peers (dhclient, udhcpc, perfdhcp, the kernel's ARP) without ever
// touching the host's own network: named network namespaces joined by veth
// pairs, addresses, bridges, commands and long-running processes run inside
// a namespace, and in-process sockets opened inside one.
//
// Everything a helper creates is removed in t.Cleanup: namespaces by name
// ("ip netns del"), processes by PID. Names are "rk" plus random hex, short
// enough for the 15-byte interface name limit (IFNAMSIZ).
//
// The helpers need root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the iproute2
// "ip" tool. Without root a test skips, saying why. As root, or whenever CI
// is set, a missing tool fails the test: the CI image must carry it, and a
// silent skip there would hide that nothing was tested.
package netnstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// cmdTimeout bounds every setup command: "ip" answers in milliseconds, so a
// hang means something is wrong and the test must not wait for the global
// go test timeout.
const cmdTimeout = 30 * time.Second

// Require skips t unless the process may create network namespaces (it is
// root), and checks that iproute2's ip is present.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netnstest: needs root to create network namespaces (CI runs these as root)")
	}
	Tool(t, "ip")
}

// Tool returns the path of an external program (a real peer) a test needs,
// looked up in PATH and then in /usr/sbin (where Debian puts many, outside
// a user's PATH). This is the one policy for missing peers: where
// scripts/test-deps.sh has run (root, as make test and CI run) a missing one
// fails the test; elsewhere, where it could not have run anyway, it skips.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if !strings.Contains(name, "/") {
		if p, err2 := exec.LookPath("/usr/sbin/" + name); err2 == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" || os.Geteuid() == 0 {
		t.Fatalf("netnstest: %s not found (%v); install it (see scripts/test-deps.sh)", name, err)
	}
	t.Skipf("netnstest: %s not found: %v", name, err)
	return ""
}

// Name returns a fresh random name: prefix followed by hex digits, at most
// 15 bytes long so that it is also a valid interface name.
func Name(prefix string) string {
	n := (15 - len(prefix)) / 2
	if n > 4 {
		n = 4
	}
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return prefix + hex.EncodeToString(b)
}

// NS is a named network namespace that lives until the end of the test.
type NS struct {
	// Name is the namespace's name under /var/run/netns.
	Name string
	t    testing.TB
}

// New creates a network namespace with a unique name and loopback up, and
// deletes it when the test ends.
func New(t testing.TB) *NS {
	t.Helper()
	Require(t)
	var name string
	for {
		name = Name("rk")
		if _, err := os.Stat("/var/run/netns/" + name); errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	ns := &NS{Name: name, t: t}
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		// Processes started in the namespace were stopped by their
		// own (later registered, so earlier run) cleanups. Deleting
		// the name also destroys the veth ends inside.
		if out, err := command(context.Background(), "ip", "netns", "del", name); err != nil {
			t.Errorf("netnstest: ip netns del %s: %v: %s", name, err, out)
		}
	})
	ns.IP("link", "set", "lo", "up")
	return ns
}

// IP runs "ip -n NAME args..." and fails the test on error.
func (ns *NS) IP(args ...string) string {
	ns.t.Helper()
	return run(ns.t, "ip", append([]string{"-n", ns.Name}, args...)...)
}

// Veth creates a veth pair with one end in a and the other in b, both up
// with no address, and returns the two interface names.
func Veth(t testing.TB, a, b *NS) (ifA, ifB string) {
	t.Helper()
	base := Name("rkv")
	ifA, ifB = base+"a", base+"b"
	// Created directly in the target namespaces, so the names never
	// appear in (or collide with) the host's namespace.
	run(t, "ip", "link", "add", ifA, "netns", a.Name, "type", "veth", "peer", "name", ifB, "netns", b.Name)
	a.Up(ifA)
	b.Up(ifB)
	return ifA, ifB
}

// Bridge creates a bridge in ns (no STP, no forward delay, so ports forward
// at once) and brings it up.
func (ns *NS) Bridge() string {
	ns.t.Helper()
	name := Name("rkbr")
	ns.IP("link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0")
	ns.Up(name)
	return name
}

// Attach makes ifname a port of bridge.
func (ns *NS) Attach(ifname, bridge string) {
	ns.t.Helper()
	ns.IP("link", "set", ifname, "master", bridge)
}

// AddAddr adds an address with its prefix length to ifname ("10.0.0.1/24").
// IPv6 duplicate address detection is turned off so the address is usable
// at once.
func (ns *NS) AddAddr(ifname string, p netip.Prefix) {
	ns.t.Helper()
	args := []string{"addr", "add", p.String(), "dev", ifname}
	if p.Addr().Is6() {
		args = append(args, "nodad")
	}
	ns.IP(args...)
}

// Up sets ifname administratively up.
func (ns *NS) Up(ifname string) {
	ns.t.Helper()
	ns.IP("link", "set", ifname, "up")
}

// Route adds a route in ns, e.g. Route("10.78.0.0/24", "via", "10.77.0.2").
func (ns *NS) Route(args ...string) {
	ns.t.Helper()
	ns.IP(append([]string{"route", "add"}, args...)...)
}

// MAC returns the hardware address of ifname in ns.
func (ns *NS) MAC(ifname string) net.HardwareAddr {
	ns.t.Helper()
	var mac net.HardwareAddr
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr
		return nil
	}); err != nil {
		ns.t.Fatalf("netnstest: %s in %s: %v", ifname, ns.Name, err)
	}
	return mac
}

// Exec runs a command inside ns ("ip netns exec") and returns its combined
// output. ctx bounds it; it is killed when ctx ends.
func (ns *NS) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	// Only ctx bounds it (not the setup commands' cmdTimeout): a caller
	// may run something long, an image import, on purpose.
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...).CombinedOutput()
}

// MustExec is Exec with a 30-second bound that fails the test on error.
func (ns *NS) MustExec(name string, args ...string) string {
	ns.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := ns.Exec(ctx, name, args...)
	if err != nil {
		ns.t.Fatalf("netnstest: in %s: %s %s: %v\n%s", ns.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Do runs fn on an OS thread that has entered ns, so that the sockets fn
// opens (UDP, AF_PACKET, netlink) belong to ns and stay there after fn
// returns: a socket's namespace is fixed at creation. fn must do its work
// synchronously, since goroutines it starts run on other threads, outside
// ns.
//
// The thread is locked for the call and returned to the original namespace
// afterwards; if that fails the thread is left locked, and the runtime
// destroys it when the goroutine exits, so no other goroutine ever runs in
// the wrong namespace.
func (ns *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netnstest: current namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns.Name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netnstest: namespace %s: %w", ns.Name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netnstest: enter %s: %w", ns.Name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("netnstest: leave %s: %w", ns.Name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Proc is a long-running process started inside a namespace.
type Proc struct {
	cmd  *exec.Cmd
	out  *Buffer
	done chan struct{}
	err  error // set before done is closed
}

// Start starts a long-running command inside ns. It is stopped when the test
// ends (SIGTERM to its process group, SIGKILL after 5 seconds) and its output
// is logged if the test failed.
//
// "ip netns exec" execs the command in place, so the PID of the started
// process is the command's own; it is made a process-group leader so that
// the helpers it forks (dhclient's script) go with it.
func (ns *NS) Start(name string, args ...string) *Proc {
	ns.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
	p := &Proc{cmd: cmd, out: &Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		ns.t.Fatalf("netnstest: start %s in %s: %v", name, ns.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t := ns.t
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("netnstest: output of %s (pid %d):\n%s", name, cmd.Process.Pid, p.Output())
		}
	})
	return p
}

// PID returns the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Output returns what the process wrote to stdout and stderr so far.
func (p *Proc) Output() string { return p.out.String() }

// Signal sends sig to the process (not its group).
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits up to timeout for the process to exit by itself and returns its
// exit error; it reports a timeout error if it is still running.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("netnstest: pid %d still running after %v", p.PID(), timeout)
	}
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop ends the process and waits for it: SIGTERM to its process group, and
// SIGKILL if it has not exited after grace. Stopping an exited process is a
// no-op. It returns the process's exit error.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	pid := p.PID()
	// The negative PID addresses the group this process leads.
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	return p.err
}

// Buffer is a bytes.Buffer safe for concurrent writers (a process's stdout
// and stderr copiers, a logger), for tests to read at the end.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func command(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := command(context.Background(), name, args...)
	if err != nil {
		t.Fatalf("netnstest: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ListenUDP opens a UDP socket inside the namespace bound to laddr on one
// interface (SO_BINDTODEVICE), standing in for a DHCP client or relay agent.
// It is closed when the test ends.
func (ns *NS) ListenUDP(t testing.TB, ifname string, laddr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := ns.Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = syscall.BindToDevice(int(fd), ifname) }); err != nil {
				return err
			}
			return serr
		}}
		pc, err := lc.ListenPacket(context.Background(), "udp4", laddr.String())
		if err != nil {
			return err
		}
		c = pc.(*net.UDPConn)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
