//go:build linux

package netup

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// TestDHCPFromDnsmasq: the management interface's lease from a real
// dnsmasq in another namespace, applied (address, default route), and
// renewed at the server's T1.
func TestDHCPFromDnsmasq(t *testing.T) {
	netnstest.Require(t)
	dnsmasq := netnstest.Tool(t, "dnsmasq")
	srv, cli := netnstest.New(t), netnstest.New(t)
	srvIf, cliIf := netnstest.Veth(t, srv, cli)
	srv.AddAddr(srvIf, netip.MustParsePrefix("10.77.0.1/24"))
	dir := t.TempDir()
	leases := filepath.Join(dir, "leases")
	srv.Start(dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--user=root", "--group=root",
		"--interface="+srvIf, "--bind-interfaces", "--dhcp-range=10.77.0.50,10.77.0.60,255.255.255.0,2m",
		"--dhcp-option=option:router,10.77.0.1", "--dhcp-option=option:dns-server,10.77.0.53",
		"--dhcp-option=option:domain-name,rack.test", "--dhcp-option=option:T1,3",
		"--dhcp-leasefile="+leases, "--dhcp-authoritative", "--no-ping", "--log-dhcp", "--log-facility=-")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var l *Lease
	if err := cli.Do(func() error {
		var err error
		if l, err = Acquire(ctx, cliIf, t.Logf); err != nil {
			return err
		}
		return l.Apply()
	}); err != nil {
		t.Fatal(err)
	}
	lo, hi := netip.MustParseAddr("10.77.0.50"), netip.MustParseAddr("10.77.0.60")
	if a := l.Address.Addr(); l.Address.Bits() != 24 || a.Less(lo) || hi.Less(a) {
		t.Fatalf("lease address %s, want one of the range /24", l.Address)
	}
	if l.Router != netip.MustParseAddr("10.77.0.1") || len(l.DNS) != 1 || l.DNS[0] != netip.MustParseAddr("10.77.0.53") ||
		l.Domain != "rack.test" || l.Duration != 2*time.Minute || l.Renew != 3*time.Second {
		t.Fatalf("lease %+v", l)
	}
	addrs := cli.IP("-4", "-o", "addr", "show", "dev", cliIf)
	if !strings.Contains(addrs, l.Address.String()) || !strings.Contains(addrs, "valid_lft") || strings.Contains(addrs, "valid_lft forever") {
		t.Fatalf("the interface does not carry the lease with its lifetime:\n%s", addrs)
	}
	if r := cli.IP("-4", "route", "show", "default"); !strings.Contains(r, "default via 10.77.0.1 dev "+cliIf) {
		t.Fatalf("default route: %q", r)
	}
	if got := ResolvConf(l.DNS, l.Domain); got != "# written by rackd-init\nsearch rack.test\nnameserver 10.77.0.53\n" {
		t.Fatalf("resolv.conf %q", got)
	}

	// Renewal: dnsmasq's lease file records a later expiry.
	expiry := func() string {
		b, _ := os.ReadFile(leases)
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return ""
		}
		return f[0]
	}
	first := expiry()
	if first == "" {
		t.Fatal("dnsmasq's lease file is empty")
	}
	keepCtx, stopKeep := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cli.Do(func() error {
			l.Keep(keepCtx, t.Logf)
			return nil
		})
	}()
	defer func() { stopKeep(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for expiry() == first {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal within 30s of a 3s T1 (lease file expiry still %s)", first)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestStatic(t *testing.T) {
	netnstest.Require(t)
	a, b := netnstest.New(t), netnstest.New(t)
	ifA, _ := netnstest.Veth(t, a, b)
	if err := a.Do(func() error {
		return Static(ifA, netip.MustParsePrefix("10.42.0.1/24"), netip.MustParseAddr("10.42.0.254"))
	}); err != nil {
		t.Fatal(err)
	}
	if s := a.IP("-4", "-o", "addr", "show", "dev", ifA); !strings.Contains(s, "10.42.0.1/24") || !strings.Contains(s, "valid_lft forever") {
		t.Fatalf("address: %s", s)
	}
	if r := a.IP("-4", "route", "show", "default"); !strings.Contains(r, "default via 10.42.0.254 dev "+ifA) {
		t.Fatalf("default route: %q", r)
	}
	var got netip.Addr
	a.Do(func() error { got = Addr4(ifA); return nil })
	if got != netip.MustParseAddr("10.42.0.1") {
		t.Fatalf("Addr4 = %s", got)
	}
}
