package dhcp_test

// Tests against real DHCP peers (ISC dhclient, busybox udhcpc, Kea's
// perfdhcp) and the real kernel (broadcasts, ARP, relay routing), in network
// namespaces the tests create. They need root; CI runs them as root, and
// there a missing peer fails the test rather than skipping it.
//
// Topology of a lab: the server namespace has a bridge with 10.77.0.1/24,
// the address the server serves from; every other namespace (the client, a
// squatter) hangs off that bridge by a veth pair. The client namespace can
// also act as a relay with 10.78.0.1, routed from the server.

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"

	"rackd/internal/netnstest"
	"rackd/netboot"
	"rackd/netboot/arp"
	"rackd/netboot/dhcp"
	"rackd/netboot/dhcp/dhcptest"
)

type lab struct {
	srv, cli *netnstest.NS
	br       string // the server's interface
	cliIf    string
	leases   *dhcptest.MemLeases
	reg      *prometheus.Registry
	quiet    bool // log at info, not per packet (load tests)
}

var (
	labServer = netip.MustParseAddr("10.77.0.1")
	labRelay  = netip.MustParseAddr("10.78.0.1")
)

func labSubnets(lease time.Duration) []dhcptest.Subnet {
	return []dhcptest.Subnet{{
		Prefix: netip.MustParsePrefix("10.77.0.0/24"), Router: labServer,
		DNS: []netip.Addr{labServer, ip("10.77.0.2")}, Domain: "rack.test", LeaseTime: lease,
		Start: ip("10.77.0.100"), End: ip("10.77.0.199"),
	}, {
		Prefix: netip.MustParsePrefix("10.78.0.0/24"), Router: labRelay,
		DNS: []netip.Addr{labServer}, Domain: "far.test", LeaseTime: lease,
		Start: ip("10.78.0.100"), End: ip("10.78.0.199"),
	}}
}

// newLab builds the server and client namespaces; the client's interface
// has no address.
func newLab(t *testing.T, leases *dhcptest.MemLeases) *lab {
	t.Helper()
	srv, cli := netnstest.New(t), netnstest.New(t)
	br := srv.Bridge()
	srv.AddAddr(br, netip.PrefixFrom(labServer, 24))
	port, cliIf := netnstest.Veth(t, srv, cli)
	srv.Attach(port, br)
	return &lab{srv: srv, cli: cli, br: br, cliIf: cliIf, leases: leases}
}

// attach hangs another namespace off the server's bridge and returns its
// interface.
func (l *lab) attach(t *testing.T, ns *netnstest.NS) string {
	port, ifname := netnstest.Veth(t, l.srv, ns)
	l.srv.Attach(port, l.br)
	return ifname
}

// serve runs the server in the server namespace until the test ends: on
// the bridge with ARP probing (the default) or, with addrMode, on a plain
// socket bound to 10.77.0.1.
func (l *lab) serve(t *testing.T, addrMode bool) {
	t.Helper()
	var conn dhcp.Conn
	var probers *arp.Set
	err := l.srv.Do(func() (err error) {
		if addrMode {
			conn, err = dhcp.ListenAddr(labServer, dhcp.DefaultPort)
			return err
		}
		if conn, err = dhcp.ListenInterface(l.br, dhcp.DefaultPort); err != nil {
			return err
		}
		probers, err = arp.ListenSet([]string{l.br}, arp.Config{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if conn.In.Addr != labServer || (!addrMode && conn.In.Name != l.br) {
		t.Fatalf("listening as %+v", conn.In)
	}
	var prober dhcp.Prober
	if probers != nil {
		prober = probers
	}
	l.reg = prometheus.NewPedanticRegistry()
	level := slog.LevelDebug
	if l.quiet {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
	srv, err := dhcp.New(dhcp.Config{}, l.leases, prober, bootCfgLab, log, l.reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeConns(ctx, []dhcp.Conn{conn}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
		if probers != nil {
			probers.Close()
		}
	})
}

var bootCfgLab = netboot.BootConfig{TFTPServer: labServer, HTTPBase: "http://10.77.0.1:5240"}

// tWriter sends the server's log to the test log (shown with -v or on
// failure).
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = tWriter{}

// waitEvent waits for the nth (from 1) event named name.
func waitEvent(t *testing.T, out, name string, n int, timeout time.Duration, proc *netnstest.Proc) map[string]string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		seen := 0
		for _, ev := range dhcptest.HookEvents(t, out) {
			if ev["event"] == name {
				if seen++; seen == n {
					return ev
				}
			}
		}
		if proc != nil {
			select {
			case <-proc.Done():
				t.Fatalf("client exited before event %s #%d: %v\n%s", name, n, proc.Wait(0), proc.Output())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event %s #%d after %v; events: %v", name, n, timeout, dhcptest.HookEvents(t, out))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkBound checks what the client was told: the first dynamic address and
// the subnet's options.
func checkBound(t *testing.T, ev map[string]string, lease time.Duration) {
	t.Helper()
	want := map[string]string{
		"ip": "10.77.0.100", "mask": "255.255.255.0", "routers": "10.77.0.1",
		"dns": "10.77.0.1 10.77.0.2", "lease": strconv.Itoa(int(lease.Seconds())), "domain": "rack.test",
	}
	for k, v := range want {
		if ev[k] != v {
			t.Errorf("client got %s=%q, want %q (event %v)", k, ev[k], v, ev)
		}
	}
}

func (l *lab) waitCall(t *testing.T, op string, ipWant netip.Addr, timeout time.Duration) dhcptest.Call {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, c := range l.leases.CallsOf(op) {
			if c.IP == ipWant {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s of %v within %v; calls: %+v", op, ipWant, timeout, l.leases.Calls())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *lab) hasAddr(t *testing.T, prefix string) bool {
	return strings.Contains(l.cli.MustExec("ip", "-4", "-o", "addr", "show", "dev", l.cliIf), " "+prefix+" ")
}

// TestDhclient: ISC dhclient gets an address with router, DNS, domain and
// lease time; renews it at T1 by unicast; and "dhclient -r" releases it.
func TestDhclient(t *testing.T) {
	netnstest.Require(t)
	dhclient := netnstest.Tool(t, "dhclient")
	const lease = 6 * time.Second // T1 = 3 s: the renewal comes quickly
	l := newLab(t, dhcptest.New(labSubnets(lease)...))
	l.serve(t, false)
	dir := t.TempDir()
	out := filepath.Join(dir, "events")
	hook := dhcptest.ClientHook(t, netnstest.Tool(t, "ip"), dir, out)
	lf, pf := filepath.Join(dir, "leases"), filepath.Join(dir, "pid")
	start := time.Now()

	p := l.cli.Start(dhclient, "-d", "-1", "-v", "-lf", lf, "-pf", pf, "-sf", hook, l.cliIf)
	checkBound(t, waitEvent(t, out, "BOUND", 1, 30*time.Second, p), lease)
	t.Logf("bound after %v", time.Since(start))
	mac := l.cli.MAC(l.cliIf)
	if got, ok := l.leases.Bound(mac); !ok || got != ip("10.77.0.100") {
		t.Fatalf("leases: %v bound to %v (%v)", mac, got, ok)
	}
	if !l.hasAddr(t, "10.77.0.100/24") {
		t.Fatal("address not configured")
	}

	checkBound(t, waitEvent(t, out, "RENEW", 1, 20*time.Second, p), lease)
	t.Logf("renewed after %v", time.Since(start))
	acks := l.leases.CallsOf("ack")
	if last := acks[len(acks)-1]; len(acks) < 2 || last.Req.IP != ip("10.77.0.100") || last.Err != nil {
		t.Fatalf("acks %+v", acks)
	}

	// -r finds the running dhclient by its PID file, stops it and
	// sends DHCPRELEASE.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if outp, err := l.cli.Exec(ctx, dhclient, "-r", "-v", "-lf", lf, "-pf", pf, "-sf", hook, l.cliIf); err != nil {
		t.Fatalf("dhclient -r: %v\n%s", err, outp)
	}
	c := l.waitCall(t, "release", ip("10.77.0.100"), 10*time.Second)
	if c.MAC.String() != mac.String() {
		t.Fatalf("released by %v, want %v", c.MAC, mac)
	}
	if _, ok := l.leases.Bound(mac); ok {
		t.Fatal("still bound after release")
	}
	if err := p.Wait(10 * time.Second); err != nil && !strings.Contains(err.Error(), "signal") {
		t.Logf("dhclient exit: %v", err)
	}
	t.Logf("released after %v", time.Since(start))
}

// TestUdhcpc: busybox udhcpc gets an address in one shot (-n -q); then,
// running, renews on SIGUSR1 and releases on exit (-R).
func TestUdhcpc(t *testing.T) {
	netnstest.Require(t)
	udhcpc := netnstest.Tool(t, "udhcpc")
	const lease = time.Hour
	l := newLab(t, dhcptest.New(labSubnets(lease)...))
	l.serve(t, false)
	dir := t.TempDir()
	out := filepath.Join(dir, "events")
	hook := dhcptest.ClientHook(t, netnstest.Tool(t, "ip"), dir, out)
	start := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if outp, err := l.cli.Exec(ctx, udhcpc, "-i", l.cliIf, "-n", "-q", "-f", "-s", hook, "-t", "5", "-T", "2"); err != nil {
		t.Fatalf("udhcpc: %v\n%s", err, outp)
	}
	checkBound(t, waitEvent(t, out, "bound", 1, time.Second, nil), lease)
	t.Logf("one-shot bound after %v", time.Since(start))
	mac := l.cli.MAC(l.cliIf)
	if got, ok := l.leases.Bound(mac); !ok || got != ip("10.77.0.100") {
		t.Fatalf("leases: %v bound to %v (%v)", mac, got, ok)
	}

	p := l.cli.Start(udhcpc, "-i", l.cliIf, "-f", "-R", "-s", hook, "-t", "5", "-T", "2")
	checkBound(t, waitEvent(t, out, "bound", 2, 30*time.Second, p), lease)
	if !l.hasAddr(t, "10.77.0.100/24") {
		t.Fatal("address not configured")
	}
	nAcks := len(l.leases.CallsOf("ack"))
	if err := p.Signal(syscall.SIGUSR1); err != nil { // udhcpc: renew now
		t.Fatal(err)
	}
	checkBound(t, waitEvent(t, out, "renew", 1, 20*time.Second, p), lease)
	if acks := l.leases.CallsOf("ack"); len(acks) <= nAcks || acks[len(acks)-1].Req.IP != ip("10.77.0.100") {
		t.Fatalf("renewal not acknowledged: %+v", acks)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil { // -R: release on exit
		t.Fatal(err)
	}
	l.waitCall(t, "release", ip("10.77.0.100"), 10*time.Second)
	if _, ok := l.leases.Bound(mac); ok {
		t.Fatal("still bound after release")
	}
	t.Logf("renewed and released after %v", time.Since(start))
}

// rawClient is a UDP socket inside a namespace, bound to one interface,
// standing in for a PXE ROM (port 68) or a relay agent (port 67).
type rawClient struct {
	c *net.UDPConn
}

func newRawClient(t *testing.T, ns *netnstest.NS, ifname string, laddr netip.AddrPort) *rawClient {
	t.Helper()
	return &rawClient{c: ns.ListenUDP(t, ifname, laddr)}
}

// exchange sends req to dst and returns the reply with its transaction ID
// and where it came from, resending every second (the first frames may be
// lost while the links come up) for at most 10 tries.
func (r *rawClient) exchange(t *testing.T, req *dhcpv4.DHCPv4, dst netip.AddrPort) (*dhcpv4.DHCPv4, netip.AddrPort) {
	t.Helper()
	buf := make([]byte, 1500)
	for range 10 {
		if _, err := r.c.WriteToUDPAddrPort(req.ToBytes(), dst); err != nil {
			t.Fatal(err)
		}
		r.c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, from, err := r.c.ReadFromUDPAddrPort(buf)
			if err != nil {
				break // timeout: resend
			}
			m, err := dhcpv4.FromBytes(buf[:n])
			if err != nil || m.OpCode != dhcpv4.OpcodeBootReply || m.TransactionID != req.TransactionID {
				continue // our own broadcast, or someone else's
			}
			return m, from
		}
	}
	t.Fatalf("no reply to %v", req.Summary())
	return nil, netip.AddrPort{}
}

var bcast67 = netip.MustParseAddrPort("255.255.255.255:67")

// TestRelay: a relay agent in the client namespace forwards a DORA for a
// second subnet with giaddr 10.78.0.1: the server answers the relay, at
// port 67, with an address of that subnet, and does not ARP-probe it.
func TestRelay(t *testing.T) {
	l := newLab(t, dhcptest.New(labSubnets(time.Hour)...))
	l.cli.AddAddr(l.cliIf, netip.MustParsePrefix("10.77.0.2/24"))
	l.cli.AddAddr(l.cliIf, netip.PrefixFrom(labRelay, 24))
	l.srv.Route("10.78.0.0/24", "via", "10.77.0.2")
	l.serve(t, false)
	relay := newRawClient(t, l.cli, l.cliIf, netip.AddrPortFrom(labRelay, 67))
	server := netip.AddrPortFrom(labServer, 67)
	farMAC := net.HardwareAddr{0x52, 0x54, 0, 0x78, 0, 1}

	d := discover(t, farMAC, dhcpv4.WithRelay(labRelay.AsSlice()))
	d.HopCount = 1
	offer, from := relay.exchange(t, d, server)
	if from != server {
		t.Errorf("offer from %v, want %v", from, server)
	}
	if offer.MessageType() != dhcpv4.MessageTypeOffer || !offer.YourIPAddr.Equal(net.ParseIP("10.78.0.100")) ||
		!offer.GatewayIPAddr.Equal(labRelay.AsSlice()) {
		t.Fatalf("offer %v", offer.Summary())
	}
	if r := offer.Router(); len(r) != 1 || !r[0].Equal(labRelay.AsSlice()) || offer.DomainName() != "far.test" {
		t.Errorf("options of the wrong subnet: %v", offer.Summary())
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithRelay(labRelay.AsSlice()))
	if err != nil {
		t.Fatal(err)
	}
	ack, _ := relay.exchange(t, req, server)
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(net.ParseIP("10.78.0.100")) {
		t.Fatalf("ack %v", ack.Summary())
	}
	if got, ok := l.leases.Bound(farMAC); !ok || got != ip("10.78.0.100") {
		t.Fatalf("bound %v %v", got, ok)
	}
	if n := counter(t, l.reg, "rackd_dhcp_probe_conflicts_total"); n != 0 {
		t.Fatalf("conflicts %v", n)
	}
}

// TestPXEPeers: firmware-like DHCPDISCOVERs broadcast on the real link get
// the boot file, next-server and vendor class of their architecture.
func TestPXEPeers(t *testing.T) {
	l := newLab(t, dhcptest.New(labSubnets(time.Hour)...))
	l.cli.AddAddr(l.cliIf, netip.MustParsePrefix("10.77.0.2/24"))
	l.serve(t, false)
	rom := newRawClient(t, l.cli, l.cliIf, netip.MustParseAddrPort("0.0.0.0:68"))
	tests := []struct {
		name   string
		mods   []dhcpv4.Modifier
		file   string
		vendor string
	}{
		{"efi x64", []dhcpv4.Modifier{pxe(7, "PXEClient:Arch:00007:UNDI:003016")}, "bootx64.efi", "PXEClient"},
		{"bios", []dhcpv4.Modifier{pxe(0, "PXEClient:Arch:00000:UNDI:002001")}, "pxelinux.0", "PXEClient"},
		{"http boot", []dhcpv4.Modifier{pxe(16, "HTTPClient:Arch:00016:UNDI:003001")}, "http://10.77.0.1:5240/boot/bootx64.efi", "HTTPClient"},
		{"ipxe", []dhcpv4.Modifier{pxe(7, "PXEClient:Arch:00007:UNDI:003010"), dhcpv4.WithUserClass("iPXE", false)},
			"http://10.77.0.1:5240/boot/ipxe?mac=52:54:00:77:00:03", "PXEClient"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mac := net.HardwareAddr{0x52, 0x54, 0, 0x77, 0, byte(i)}
			mods := append([]dhcpv4.Modifier{dhcpv4.WithBroadcast(true)}, tt.mods...)
			offer, _ := rom.exchange(t, discover(t, mac, mods...), bcast67)
			req, err := dhcpv4.NewRequestFromOffer(offer, mods...)
			if err != nil {
				t.Fatal(err)
			}
			ack, _ := rom.exchange(t, req, bcast67)
			for _, m := range []*dhcpv4.DHCPv4{offer, ack} {
				if m.BootFileName != tt.file || m.ClassIdentifier() != tt.vendor || !m.ServerIPAddr.Equal(labServer.AsSlice()) {
					t.Errorf("%v: file %q vendor %q next-server %v; want %q %q %v",
						m.MessageType(), m.BootFileName, m.ClassIdentifier(), m.ServerIPAddr, tt.file, tt.vendor, labServer)
				}
			}
			if ack.MessageType() != dhcpv4.MessageTypeAck {
				t.Fatalf("ack %v", ack.Summary())
			}
		})
	}
	// A plain client on the same link gets no boot fields.
	plain, _ := rom.exchange(t, discover(t, net.HardwareAddr{0x52, 0x54, 0, 0x77, 1, 1}, dhcpv4.WithBroadcast(true)), bcast67)
	if plain.BootFileName != "" || plain.ClassIdentifier() != "" {
		t.Errorf("plain client got boot fields: %v", plain.Summary())
	}
}

// TestSquatter: a host that configured a dynamic-range address by hand
// answers the server's ARP probe on the real link; the address is recorded
// as a conflict and never offered, and the client gets the next one.
func TestSquatter(t *testing.T) {
	l := newLab(t, dhcptest.New(labSubnets(time.Hour)...))
	l.cli.AddAddr(l.cliIf, netip.MustParsePrefix("10.77.0.2/24"))
	sq := netnstest.New(t)
	sqIf := l.attach(t, sq)
	sq.AddAddr(sqIf, netip.MustParsePrefix("10.77.0.100/24"))
	sqMAC := sq.MAC(sqIf)
	l.serve(t, false)
	rom := newRawClient(t, l.cli, l.cliIf, netip.MustParseAddrPort("0.0.0.0:68"))

	for i := range 3 {
		offer, _ := rom.exchange(t, discover(t, net.HardwareAddr{0x52, 0x54, 0, 0x77, 2, byte(i)}, dhcpv4.WithBroadcast(true)), bcast67)
		if offer.YourIPAddr.Equal(net.ParseIP("10.77.0.100")) {
			t.Fatalf("squatted address offered: %v", offer.Summary())
		}
		if i == 0 && !offer.YourIPAddr.Equal(net.ParseIP("10.77.0.101")) {
			t.Errorf("offered %v, want the next address", offer.YourIPAddr)
		}
	}
	c := l.waitCall(t, "conflict", ip("10.77.0.100"), time.Second)
	if c.MAC.String() != sqMAC.String() {
		t.Fatalf("conflict by %v, want the squatter %v", c.MAC, sqMAC)
	}
	if n := counter(t, l.reg, "rackd_dhcp_probe_conflicts_total"); n != 1 {
		t.Fatalf("conflicts counted %v, want 1", n)
	}
}

// TestPerfdhcp drives the listen-on-address mode with Kea's perfdhcp acting
// as a relay: a thousand clients at once, every one of them leased.
func TestPerfdhcp(t *testing.T) {
	netnstest.Require(t)
	perfdhcp := netnstest.Tool(t, "perfdhcp")
	// perfdhcp's giaddr is its own address, so the served subnet is a /16
	// around the /24 of the link, with room for every simulated client.
	sub := labSubnets(time.Hour)[0]
	sub.Prefix = netip.MustParsePrefix("10.77.0.0/16")
	sub.Start, sub.End = ip("10.77.1.0"), ip("10.77.8.255")
	leases := dhcptest.New(sub)
	leases.NoCalls = true
	l := newLab(t, leases)
	l.quiet = true
	l.cli.AddAddr(l.cliIf, netip.MustParsePrefix("10.77.0.2/24"))
	l.serve(t, true)

	const n = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	// The avalanche scenario: every client sends its DHCPDISCOVER at once
	// and retransmits with backoff until it has its ACK, as real clients
	// do (RFC 2131 section 4.1). A fixed request rate with a reply deadline
	// would instead test that the machine keeps up with that rate: the
	// server drops what its queue cannot hold, by design, and a loaded CI
	// machine stalls it beyond any deadline.
	out, err := l.cli.Exec(ctx, perfdhcp, "-4", "-l", "10.77.0.2", "--scenario", "avalanche", "-R", strconv.Itoa(n), labServer.String())
	t.Logf("perfdhcp in %v:\n%s", time.Since(start), out)
	if err != nil {
		t.Fatalf("perfdhcp: %v", err)
	}
	if m := regexp.MustCompile(`to provision (\d+) clients`).FindStringSubmatch(string(out)); m == nil || m[1] != strconv.Itoa(n) {
		t.Errorf("perfdhcp provisioned %v clients, want %d", m, n)
	}
	if got := counter(t, l.reg, "rackd_dhcp_replies_total", "type", "request", "outcome", "ack"); got < n {
		t.Errorf("%v ACKs, want %d", got, n)
	}
}
