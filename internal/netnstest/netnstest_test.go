package netnstest

import (
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestName(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n := Name("rk")
		if len(n) > 15 || !strings.HasPrefix(n, "rk") {
			t.Fatalf("bad name %q", n)
		}
		if seen[n] {
			t.Fatalf("duplicate name %q", n)
		}
		seen[n] = true
	}
	if n := Name("rkbridge01"); len(n) > 15 {
		t.Fatalf("name %q longer than IFNAMSIZ-1", n)
	}
}

// TestTopology joins two namespaces with a veth pair and sends a datagram
// between sockets opened inside each with Do.
func TestTopology(t *testing.T) {
	a, b := New(t), New(t)
	ifA, ifB := Veth(t, a, b)
	a.AddAddr(ifA, netip.MustParsePrefix("10.250.0.1/24"))
	b.AddAddr(ifB, netip.MustParsePrefix("10.250.0.2/24"))

	var recv, send *net.UDPConn
	if err := b.Do(func() (err error) {
		recv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 250, 0, 2), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	if err := a.Do(func() (err error) {
		send, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 250, 0, 2), Port: 9999})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if _, err := send.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	recv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, from, err := recv.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "hello" || !from.IP.Equal(net.IPv4(10, 250, 0, 1)) {
		t.Fatalf("got %q from %v", buf[:n], from)
	}

	// The address is inside b only: the test's own namespace never sees it.
	if _, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 250, 0, 2)}); err == nil {
		t.Fatal("address of the namespace is bindable outside it")
	}
	if mac := b.MAC(ifB); len(mac) != 6 {
		t.Fatalf("MAC = %v", mac)
	}
	if out := b.MustExec("ip", "-4", "-o", "addr", "show", "dev", ifB); !strings.Contains(out, "10.250.0.2/24") {
		t.Fatalf("ip addr in namespace: %s", out)
	}
}

// TestStart checks that a long-running process runs in the namespace and is
// stopped by PID.
func TestStart(t *testing.T) {
	ns := New(t)
	p := ns.Start("sh", "-c", "ip -o link; echo started; exec sleep 600")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Output(), "started") {
		if time.Now().After(deadline) {
			t.Fatalf("no output: %q", p.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Only loopback exists in a fresh namespace.
	if links := strings.Split(strings.TrimSpace(strings.SplitN(p.Output(), "started", 2)[0]), "\n"); len(links) != 1 || !strings.Contains(links[0], ": lo:") {
		t.Fatalf("process not in its namespace: %q", p.Output())
	}
	pid := p.PID()
	p.Stop(5 * time.Second)
	select {
	case <-p.Done():
	default:
		t.Fatal("process not stopped")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("pid %d still alive", pid)
	}
	if err := p.Wait(time.Second); err == nil {
		t.Fatal("sleep 600 ended cleanly; want killed")
	}
}
