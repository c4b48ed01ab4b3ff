package main

// End-to-end DHCP tests: the real rackd binary serves DHCPv4 from its store
// inside a server network namespace, and real peers (ISC dhclient, busybox
// udhcpc, the kernel's ARP, a relay agent, a load client) talk to it from
// other namespaces hung off the server's bridge. Every address these tests
// touch lives in namespaces they create.
//
// They NEED ROOT (network namespaces): without root they skip; as root, or
// whenever CI is set, a missing tool (ip, dhclient, udhcpc) fails them
// (netnstest.Require, netnstest.Tool). Run them with
//
//	sudo go test -race -count=1 -run E2E -v ./agent/cmd/rackd/
//
// Topology of a lab: the server namespace has a bridge with 10.77.0.1/24
// (rackd's [dhcp] interfaces, ARP probing on), rackd's API on 127.0.0.1:0
// inside that namespace; every client namespace hangs off the bridge by a
// veth pair.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"rackd/api"
	"rackd/internal/netnstest"
	"rackd/netboot/dhcp/dhcptest"
	"rackd/store"
)

var (
	e2eServer = netip.MustParseAddr("10.77.0.1")
	e2eRelay  = netip.MustParseAddr("10.78.0.1")
	// The dynamic range of the lab subnet.
	e2eDynStart = netip.MustParseAddr("10.77.0.100")
	e2eDynEnd   = netip.MustParseAddr("10.77.0.199")
)

const e2eLeaseSeconds = 600

// e2eSubnet is the subnet of the lab's bridge.
func e2eSubnet() api.Subnet {
	return api.Subnet{CIDR: "10.77.0.0/24", Gateway: "10.77.0.1", DNSServers: []string{"10.77.0.1"},
		Domain: "rack.test", LeaseSeconds: e2eLeaseSeconds,
		DynamicRanges: []api.Range{{Start: e2eDynStart.String(), End: e2eDynEnd.String()}}}
}

// e2eLab is one server namespace running rackd with DHCP on its bridge.
type e2eLab struct {
	srv    *netnstest.NS
	br     string
	state  string
	config string
	d      *daemon
	client *http.Client
	token  string
}

// newE2ELab builds the server namespace and its bridge, writes rackd's
// configuration and starts rackd in the namespace. No subnet exists yet.
func newE2ELab(t *testing.T) *e2eLab {
	t.Helper()
	netnstest.Require(t)
	srv := netnstest.New(t)
	br := srv.Bridge()
	// The bridge's MAC is left to change as ports join (as on a hypervisor
	// bridge): the prober must follow it (TestE2ESquatter catches it).
	srv.AddAddr(br, netip.PrefixFrom(e2eServer, 24))
	dir := t.TempDir()
	l := &e2eLab{srv: srv, br: br, state: filepath.Join(dir, "state"), config: filepath.Join(dir, "rackd.toml")}
	cfg := fmt.Sprintf("[dhcp]\ninterfaces = [%q]\nprobe_timeout = \"200ms\"\n", br)
	if err := os.WriteFile(l.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// rackd's loopback is the server namespace's: dial there.
	l.client = nsClient(t, srv)
	l.start(t)
	l.token = adminToken(t, l.state)
	return l
}

// start (re)starts rackd in the server namespace on the lab's state dir.
func (l *e2eLab) start(t *testing.T) {
	t.Helper()
	d := startDaemonIn(t, l.srv.Name, l.state, "--config", l.config)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rackd (pid %d) log:\n%s", d.cmd.Process.Pid, d.stderr.String())
		}
	})
	l.d = d
}

// attach hangs ns off the bridge and returns its interface.
func (l *e2eLab) attach(t *testing.T, ns *netnstest.NS) string {
	t.Helper()
	port, ifname := netnstest.Veth(t, l.srv, ns)
	l.srv.Attach(port, l.br)
	return ifname
}

// client creates a namespace on the bridge and returns it with its
// interface.
func (l *e2eLab) newClient(t *testing.T) (*netnstest.NS, string) {
	t.Helper()
	ns := netnstest.New(t)
	return ns, l.attach(t, ns)
}

// call makes an API call that must answer want; out receives the body.
func (l *e2eLab) call(t *testing.T, want int, method, path string, body, out any) {
	t.Helper()
	status, raw, err := l.d.api(l.client, l.token, method, path, body, out)
	if err != nil || status != want {
		t.Fatalf("%s %s: %d %s (%v), want %d", method, path, status, raw, err, want)
	}
}

func (l *e2eLab) createSubnet(t *testing.T, sn api.Subnet) {
	t.Helper()
	l.call(t, http.StatusCreated, "POST", "/api/v1/subnets", sn, nil)
}

func (l *e2eLab) leases(t *testing.T) []api.Lease {
	t.Helper()
	var out []api.Lease
	l.call(t, http.StatusOK, "GET", "/api/v1/leases", nil, &out)
	return out
}

// leaseOf returns the lease of mac, if there is one.
func (l *e2eLab) leaseOf(t *testing.T, mac net.HardwareAddr) (api.Lease, bool) {
	t.Helper()
	for _, ls := range l.leases(t) {
		if ls.MAC == mac.String() {
			return ls, true
		}
	}
	return api.Lease{}, false
}

// waitNoLease waits until mac has no lease.
func (l *e2eLab) waitNoLease(t *testing.T, mac net.HardwareAddr, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ls, ok := l.leaseOf(t, mac)
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v still holds %+v %v after its release", mac, ls, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHook waits for the nth (from 1) event whose name is one of names.
func waitHook(t *testing.T, out string, n int, timeout time.Duration, proc *netnstest.Proc, names ...string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		seen := 0
		for _, ev := range dhcptest.HookEvents(t, out) {
			if slices.Contains(names, ev["event"]) {
				if seen++; seen == n {
					return ev
				}
			}
		}
		if proc != nil {
			select {
			case <-proc.Done():
				t.Fatalf("client exited before event %v #%d: %v\n%s", names, n, proc.Wait(0), proc.Output())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event %v #%d after %v; events: %v", names, n, timeout, dhcptest.HookEvents(t, out))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkOptions checks what the client was told about the lab subnet, and
// returns its address.
func checkOptions(t *testing.T, ev map[string]string) netip.Addr {
	t.Helper()
	want := map[string]string{"mask": "255.255.255.0", "routers": "10.77.0.1", "dns": "10.77.0.1",
		"lease": fmt.Sprint(e2eLeaseSeconds), "domain": "rack.test"}
	for k, v := range want {
		if ev[k] != v {
			t.Errorf("client got %s=%q, want %q (event %v)", k, ev[k], v, ev)
		}
	}
	ip, err := netip.ParseAddr(ev["ip"])
	if err != nil {
		t.Fatalf("client got no address: %v", ev)
	}
	return ip
}

func inDynamic(ip netip.Addr) bool {
	return ip.Compare(e2eDynStart) >= 0 && ip.Compare(e2eDynEnd) <= 0
}

// hasAddr reports whether ifname in ns carries prefix.
func hasAddr(t *testing.T, ns *netnstest.NS, ifname, prefix string) bool {
	t.Helper()
	return strings.Contains(ns.MustExec("ip", "-4", "-o", "addr", "show", "dev", ifname), " "+prefix+" ")
}

// udhcpcOnce runs busybox udhcpc in one shot (-n -q) in ns and returns its
// bound event.
func udhcpcOnce(t *testing.T, ns *netnstest.NS, ifname string) map[string]string {
	t.Helper()
	udhcpc := netnstest.Tool(t, "udhcpc")
	dir := t.TempDir()
	out := filepath.Join(dir, "events")
	hook := dhcptest.ClientHook(t, netnstest.Tool(t, "ip"), dir, out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if outp, err := ns.Exec(ctx, udhcpc, "-i", ifname, "-n", "-q", "-f", "-s", hook, "-t", "5", "-T", "2"); err != nil {
		t.Fatalf("udhcpc: %v\n%s", err, outp)
	}
	return waitHook(t, out, 1, time.Second, nil, "bound")
}

// dhclientRun is one ISC dhclient in the foreground (-d -1) in a namespace.
type dhclientRun struct {
	bin, ifname, lf, pf, hook, out string
	ns                             *netnstest.NS
	p                              *netnstest.Proc
}

func newDhclient(t *testing.T, ns *netnstest.NS, ifname string) *dhclientRun {
	t.Helper()
	dir := t.TempDir()
	c := &dhclientRun{bin: netnstest.Tool(t, "dhclient"), ifname: ifname, ns: ns,
		lf: filepath.Join(dir, "leases"), pf: filepath.Join(dir, "pid"), out: filepath.Join(dir, "events")}
	c.hook = dhcptest.ClientHook(t, netnstest.Tool(t, "ip"), dir, c.out)
	return c
}

// start starts dhclient (again) with the same lease file.
func (c *dhclientRun) start() {
	c.p = c.ns.Start(c.bin, "-d", "-1", "-v", "-lf", c.lf, "-pf", c.pf, "-sf", c.hook, c.ifname)
}

// wait waits for the nth event (from 1) among names.
func (c *dhclientRun) wait(t *testing.T, n int, names ...string) map[string]string {
	t.Helper()
	return waitHook(t, c.out, n, 30*time.Second, c.p, names...)
}

// ctl runs "dhclient flag" against the running one (found by its PID file),
// e.g. -r (release) or -x (stop without releasing), and waits for the
// running one to exit.
func (c *dhclientRun) ctl(t *testing.T, flag string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if outp, err := c.ns.Exec(ctx, c.bin, flag, "-v", "-lf", c.lf, "-pf", c.pf, "-sf", c.hook, c.ifname); err != nil {
		t.Fatalf("dhclient %s: %v\n%s", flag, err, outp)
	}
	if err := c.p.Wait(10 * time.Second); err != nil && !strings.Contains(err.Error(), "signal") && !strings.Contains(err.Error(), "exit status") {
		t.Fatalf("dhclient after %s: %v", flag, err)
	}
}

// TestE2EDhclientUdhcpc: ISC dhclient and busybox udhcpc, each in its own
// namespace, get dynamic addresses from rackd with the subnet's router, DNS,
// domain and lease time; the lease shows in the API with the client's MAC;
// a renewal extends it; a release removes it.
func TestE2EDhclientUdhcpc(t *testing.T) {
	netnstest.Require(t)
	netnstest.Tool(t, "dhclient")
	udhcpc := netnstest.Tool(t, "udhcpc")
	l := newE2ELab(t)
	l.createSubnet(t, e2eSubnet())

	t.Run("dhclient", func(t *testing.T) {
		start := time.Now()
		ns, ifname := l.newClient(t)
		mac := ns.MAC(ifname)
		c := newDhclient(t, ns, ifname)
		c.start()
		ip := checkOptions(t, c.wait(t, 1, "BOUND"))
		t.Logf("dhclient bound %v after %v", ip, time.Since(start))
		if !inDynamic(ip) {
			t.Fatalf("dhclient got %v, outside the dynamic range", ip)
		}
		if !hasAddr(t, ns, ifname, ip.String()+"/24") {
			t.Fatal("address not configured")
		}
		before, ok := l.leaseOf(t, mac)
		if !ok || before.IP != ip.String() || before.Subnet != "10.77.0.0/24" {
			t.Fatalf("lease of %v: %+v (%v), want %v", mac, before, ok, ip)
		}

		// Renew: stop dhclient without releasing (-x) and run it again
		// on the same lease file: it asks for its address back
		// (INIT-REBOOT), which rackd acknowledges, extending the lease.
		c.ctl(t, "-x")
		if _, ok := l.leaseOf(t, mac); !ok {
			t.Fatal("dhclient -x released the lease")
		}
		time.Sleep(20 * time.Millisecond) // the new expiry is later
		c.start()
		again := c.wait(t, 2, "BOUND", "REBOOT", "RENEW")
		if got := checkOptions(t, again); got != ip {
			t.Fatalf("dhclient again got %v (%s), want %v", got, again["event"], ip)
		}
		after, ok := l.leaseOf(t, mac)
		if !ok || after.IP != ip.String() || !after.Expires.After(before.Expires) {
			t.Fatalf("lease after the renewal: %+v (%v); before: %+v", after, ok, before)
		}
		t.Logf("dhclient renewed (%s) after %v", again["event"], time.Since(start))

		c.ctl(t, "-r")
		l.waitNoLease(t, mac, 10*time.Second)
		t.Logf("dhclient released after %v", time.Since(start))
	})

	t.Run("udhcpc", func(t *testing.T) {
		start := time.Now()
		ns, ifname := l.newClient(t)
		mac := ns.MAC(ifname)
		dir := t.TempDir()
		out := filepath.Join(dir, "events")
		hook := dhcptest.ClientHook(t, netnstest.Tool(t, "ip"), dir, out)
		p := ns.Start(udhcpc, "-i", ifname, "-f", "-R", "-s", hook, "-t", "5", "-T", "2")
		ip := checkOptions(t, waitHook(t, out, 1, 30*time.Second, p, "bound"))
		t.Logf("udhcpc bound %v after %v", ip, time.Since(start))
		if !inDynamic(ip) {
			t.Fatalf("udhcpc got %v, outside the dynamic range", ip)
		}
		if !hasAddr(t, ns, ifname, ip.String()+"/24") {
			t.Fatal("address not configured")
		}
		before, ok := l.leaseOf(t, mac)
		if !ok || before.IP != ip.String() {
			t.Fatalf("lease of %v: %+v (%v), want %v", mac, before, ok, ip)
		}
		time.Sleep(20 * time.Millisecond)
		if err := p.Signal(syscall.SIGUSR1); err != nil { // udhcpc: renew now
			t.Fatal(err)
		}
		if got := checkOptions(t, waitHook(t, out, 1, 20*time.Second, p, "renew")); got != ip {
			t.Fatalf("renewed to %v, want %v", got, ip)
		}
		after, ok := l.leaseOf(t, mac)
		if !ok || after.IP != ip.String() || !after.Expires.After(before.Expires) {
			t.Fatalf("lease after the renewal: %+v (%v); before: %+v", after, ok, before)
		}
		if err := p.Signal(syscall.SIGTERM); err != nil { // -R: release on exit
			t.Fatal(err)
		}
		l.waitNoLease(t, mac, 10*time.Second)
		t.Logf("udhcpc renewed and released after %v", time.Since(start))
	})
}

// TestE2EReservationAndSticky: an unmanaged "switch" whose MAC is reserved
// gets exactly its reserved address; a machine created READY gets a sticky
// address outside the dynamic range, its DHCP client gets exactly that, and
// still does after rackd is SIGKILLed and restarted on the same state.
func TestE2EReservationAndSticky(t *testing.T) {
	netnstest.Require(t)
	netnstest.Tool(t, "dhclient")
	netnstest.Tool(t, "udhcpc")
	l := newE2ELab(t)
	l.createSubnet(t, e2eSubnet())

	// (a) The switch, with a MAC of our choosing.
	sw, swIf := l.newClient(t)
	swMAC := "02:00:00:77:00:50"
	sw.IP("link", "set", swIf, "down")
	sw.IP("link", "set", swIf, "address", swMAC)
	sw.Up(swIf)
	var res api.Address
	l.call(t, http.StatusCreated, "POST", "/api/v1/ips/reservations",
		api.ReserveRequest{IP: "10.77.0.50", MAC: swMAC, Hostname: "switch1"}, &res)
	if res.Kind != "reserved" || res.MAC != swMAC {
		t.Fatalf("reservation %+v", res)
	}
	ev := udhcpcOnce(t, sw, swIf)
	if got := checkOptions(t, ev); got != netip.MustParseAddr("10.77.0.50") {
		t.Fatalf("the switch got %v, want its reservation 10.77.0.50", got)
	}
	if ev["hostname"] != "switch1" {
		t.Errorf("the switch was named %q, want switch1", ev["hostname"])
	}
	if _, ok := l.leaseOf(t, sw.MAC(swIf)); ok {
		t.Errorf("the reserved switch holds a dynamic lease too")
	}

	// (b) A machine, READY: its boot interface gets a sticky address.
	node, nodeIf := l.newClient(t)
	nodeMAC := node.MAC(nodeIf)
	var m api.Machine
	l.call(t, http.StatusCreated, "POST", "/api/v1/machines",
		api.CreateMachine{Hostname: "node1", MACs: []string{nodeMAC.String()}, State: "READY"}, &m)
	var sticky netip.Addr
	for _, x := range m.IPs {
		if x.Kind == "sticky" && x.MAC == nodeMAC.String() {
			sticky = netip.MustParseAddr(x.IP)
		}
	}
	if !sticky.IsValid() || inDynamic(sticky) || !netip.MustParsePrefix("10.77.0.0/24").Contains(sticky) ||
		sticky == e2eServer || sticky == netip.MustParseAddr("10.77.0.50") {
		t.Fatalf("machine created READY has addresses %+v; want a sticky one in 10.77.0.0/24 outside the dynamic range", m.IPs)
	}
	t.Logf("node1's sticky address: %v", sticky)

	c := newDhclient(t, node, nodeIf)
	c.start()
	ev = c.wait(t, 1, "BOUND")
	if got := checkOptions(t, ev); got != sticky {
		t.Fatalf("node1 got %v, want its sticky %v", got, sticky)
	}
	if ev["hostname"] != "node1" {
		t.Errorf("node1 was named %q", ev["hostname"])
	}
	c.ctl(t, "-x")

	// SIGKILL rackd and restart it on the same state; a fresh dhclient
	// (new lease file: a full DISCOVER) gets the same address.
	l.d.kill()
	l.start(t)
	node.IP("addr", "flush", "dev", nodeIf, "scope", "global")
	c2 := newDhclient(t, node, nodeIf)
	c2.start()
	if got := checkOptions(t, c2.wait(t, 1, "BOUND")); got != sticky {
		t.Fatalf("after a SIGKILL and restart node1 got %v, want its sticky %v", got, sticky)
	}
	c2.ctl(t, "-r")
	var m2 api.Machine
	l.call(t, http.StatusOK, "GET", "/api/v1/machines/node1", nil, &m2)
	if !slices.ContainsFunc(m2.IPs, func(x api.IP) bool { return x.Kind == "sticky" && x.IP == sticky.String() }) {
		t.Fatalf("node1 lost its sticky address: %+v", m2.IPs)
	}
	// And the switch, asking again from scratch.
	sw.IP("addr", "flush", "dev", swIf, "scope", "global")
	if got := checkOptions(t, udhcpcOnce(t, sw, swIf)); got != netip.MustParseAddr("10.77.0.50") {
		t.Fatalf("after the restart the switch got %v", got)
	}
}

// TestE2ESquatter: a host that configured the first dynamic address by hand
// answers rackd's ARP probe on the real bridge: a client gets another
// address, and the API lists the squatted one as discovered, with the
// squatter's MAC.
func TestE2ESquatter(t *testing.T) {
	netnstest.Require(t)
	netnstest.Tool(t, "udhcpc")
	l := newE2ELab(t)
	l.createSubnet(t, e2eSubnet())
	sq, sqIf := l.newClient(t)
	sq.AddAddr(sqIf, netip.PrefixFrom(e2eDynStart, 24))
	sqMAC := sq.MAC(sqIf)

	for range 2 {
		cl, clIf := l.newClient(t)
		got := checkOptions(t, udhcpcOnce(t, cl, clIf))
		if got == e2eDynStart || !inDynamic(got) {
			t.Fatalf("client got %v; want a dynamic address other than the squatted %v", got, e2eDynStart)
		}
	}
	var found []api.Address
	l.call(t, http.StatusOK, "GET", "/api/v1/ips?kind=discovered", nil, &found)
	ok := slices.ContainsFunc(found, func(a api.Address) bool {
		return a.IP == e2eDynStart.String() && a.MAC == sqMAC.String() && a.Kind == "discovered"
	})
	if !ok {
		t.Fatalf("discovered addresses %+v; want %v by %v", found, e2eDynStart, sqMAC)
	}
	for _, ls := range l.leases(t) {
		if ls.IP == e2eDynStart.String() {
			t.Fatalf("the squatted address is leased: %+v", ls)
		}
	}
}

// relayExchange sends req to dst and returns the reply with its
// transaction ID and its source, resending every second up to 10 times.
func relayExchange(t *testing.T, c *net.UDPConn, req *dhcpv4.DHCPv4, dst netip.AddrPort) (*dhcpv4.DHCPv4, netip.AddrPort) {
	t.Helper()
	buf := make([]byte, 1500)
	for range 10 {
		if _, err := c.WriteToUDPAddrPort(req.ToBytes(), dst); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				break // timeout: resend
			}
			m, err := dhcpv4.FromBytes(buf[:n])
			if err != nil || m.OpCode != dhcpv4.OpcodeBootReply || m.TransactionID != req.TransactionID {
				continue
			}
			return m, from
		}
	}
	t.Fatalf("no reply to %v", req.Summary())
	return nil, netip.AddrPort{}
}

// TestE2ERelay: a second subnet served through a relay: DISCOVER and
// REQUEST relayed with giaddr 10.78.0.1 get answers, at the relay, with
// addresses and options of 10.78.0.0/24, and the leases show in the API.
func TestE2ERelay(t *testing.T) {
	netnstest.Require(t)
	l := newE2ELab(t)
	l.createSubnet(t, e2eSubnet())
	far := api.Subnet{CIDR: "10.78.0.0/24", Gateway: e2eRelay.String(), DNSServers: []string{"10.77.0.1"},
		Domain: "far.test", LeaseSeconds: e2eLeaseSeconds,
		DynamicRanges: []api.Range{{Start: "10.78.0.100", End: "10.78.0.199"}}}
	l.createSubnet(t, far)
	rl, rlIf := l.newClient(t)
	rl.AddAddr(rlIf, netip.MustParsePrefix("10.77.0.2/24"))
	rl.AddAddr(rlIf, netip.PrefixFrom(e2eRelay, 24))
	l.srv.Route("10.78.0.0/24", "via", "10.77.0.2")
	relay := rl.ListenUDP(t, rlIf, netip.AddrPortFrom(e2eRelay, 67))
	server := netip.AddrPortFrom(e2eServer, 67)
	farNet := netip.MustParsePrefix("10.78.0.0/24")

	got := map[netip.Addr]string{}
	for i := range 3 {
		mac := net.HardwareAddr{0x02, 0x78, 0, 0, 0, byte(i + 1)}
		d, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithRelay(e2eRelay.AsSlice()))
		if err != nil {
			t.Fatal(err)
		}
		d.HopCount = 1
		offer, from := relayExchange(t, relay, d, server)
		yi, _ := netip.AddrFromSlice(offer.YourIPAddr.To4())
		if offer.MessageType() != dhcpv4.MessageTypeOffer || !farNet.Contains(yi) ||
			!offer.GatewayIPAddr.Equal(e2eRelay.AsSlice()) || from != server {
			t.Fatalf("offer from %v: %v", from, offer.Summary())
		}
		if r := offer.Router(); len(r) != 1 || !r[0].Equal(e2eRelay.AsSlice()) || offer.DomainName() != "far.test" ||
			offer.IPAddressLeaseTime(0) != e2eLeaseSeconds*time.Second {
			t.Errorf("options of the wrong subnet: %v", offer.Summary())
		}
		req, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithRelay(e2eRelay.AsSlice()))
		if err != nil {
			t.Fatal(err)
		}
		req.HopCount = 1
		ack, from := relayExchange(t, relay, req, server)
		if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(offer.YourIPAddr) || from != server {
			t.Fatalf("ack from %v: %v", from, ack.Summary())
		}
		if prev, dup := got[yi]; dup {
			t.Fatalf("%v handed to %v and %v", yi, prev, mac)
		}
		got[yi] = mac.String()
	}
	leased := map[netip.Addr]string{}
	for _, ls := range l.leases(t) {
		if ls.Subnet == farNet.String() {
			leased[netip.MustParseAddr(ls.IP)] = ls.MAC
		}
	}
	if fmt.Sprint(leased) != fmt.Sprint(got) {
		t.Fatalf("leases in %v: %v; acknowledged: %v", farNet, leased, got)
	}
}

// loadLedger records what the load client was told.
type loadLedger struct {
	mu    sync.Mutex
	acked map[string]netip.Addr // MAC -> acknowledged address
	owner map[netip.Addr]string // address -> MAC
	naks  int
	bad   []string
}

func (lg *loadLedger) ack(mac string, ip netip.Addr) int {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if prev, ok := lg.acked[mac]; ok && prev != ip {
		lg.bad = append(lg.bad, fmt.Sprintf("%s acknowledged %v, then %v", mac, prev, ip))
	}
	if o, ok := lg.owner[ip]; ok && o != mac {
		lg.bad = append(lg.bad, fmt.Sprintf("%v acknowledged to %s and to %s", ip, o, mac))
	}
	lg.acked[mac] = ip
	lg.owner[ip] = mac
	return len(lg.acked)
}

// loadClient is a relay agent on the lab link doing whole DORAs for many
// clients at once over one socket.
type loadClient struct {
	c      *net.UDPConn
	giaddr net.IP
	server netip.AddrPort
	mu     sync.Mutex
	wait   map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
}

// read dispatches replies to the exchanges waiting for them until the
// socket is closed.
func (lc *loadClient) read() {
	buf := make([]byte, 1500)
	for {
		n, _, err := lc.c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		m, err := dhcpv4.FromBytes(buf[:n])
		if err != nil || m.OpCode != dhcpv4.OpcodeBootReply {
			continue
		}
		lc.mu.Lock()
		ch := lc.wait[m.TransactionID]
		lc.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default: // a duplicate answer to a resent request
			}
		}
	}
}

// exchange sends req and waits for a reply of type want, resending after
// each timeout, at most tries times; it gives up early when stop closes.
func (lc *loadClient) exchange(req *dhcpv4.DHCPv4, want dhcpv4.MessageType, stop <-chan struct{}) (*dhcpv4.DHCPv4, error) {
	ch := make(chan *dhcpv4.DHCPv4, 4)
	lc.mu.Lock()
	lc.wait[req.TransactionID] = ch
	lc.mu.Unlock()
	defer func() {
		lc.mu.Lock()
		delete(lc.wait, req.TransactionID)
		lc.mu.Unlock()
	}()
	const tries = 4
	for range tries {
		if _, err := lc.c.WriteToUDPAddrPort(req.ToBytes(), lc.server); err != nil {
			return nil, err
		}
		timer := time.NewTimer(time.Second)
	recv:
		for {
			select {
			case m := <-ch:
				if m.MessageType() == want || m.MessageType() == dhcpv4.MessageTypeNak {
					timer.Stop()
					return m, nil
				}
			case <-timer.C:
				break recv
			case <-stop:
				timer.Stop()
				return nil, fmt.Errorf("stopped")
			}
		}
	}
	return nil, fmt.Errorf("no %v after %d tries", want, tries)
}

// TestE2ELeasesSurviveSIGKILL: a relay-style load client runs full DORAs for
// 2,000 distinct MACs (at most 128 in flight) against rackd; rackd is
// SIGKILLed after a random number of ACKs. After a restart on the same
// state, every acknowledged (MAC, address) is a lease, no address is leased
// twice and no MAC holds two leases; after a clean stop the database passes
// its consistency check.
func TestE2ELeasesSurviveSIGKILL(t *testing.T) {
	netnstest.Require(t)
	const (
		n        = 2000
		inFlight = 128
	)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	killAt := n/10 + rng.IntN(n*7/10) // ACKs before the SIGKILL
	t.Logf("seed %d: SIGKILL after %d ACKs of %d DORAs", seed, killAt, n)

	l := newE2ELab(t)
	// The load client relays from its own address, 10.77.0.2, so the
	// subnet holding it must have room for n clients: a /19 around the
	// bridge's /24, its dynamic range off the bridge's /24 (relayed
	// requests are not probed anyway).
	big := e2eSubnet()
	big.CIDR = "10.77.0.0/19"
	big.DynamicRanges = []api.Range{{Start: "10.77.8.0", End: "10.77.23.255"}}
	l.createSubnet(t, big)
	cl, clIf := l.newClient(t)
	relayAddr := netip.MustParseAddr("10.77.0.2")
	cl.AddAddr(clIf, netip.PrefixFrom(relayAddr, 24))
	lc := &loadClient{c: cl.ListenUDP(t, clIf, netip.AddrPortFrom(relayAddr, 67)), giaddr: relayAddr.AsSlice(),
		server: netip.AddrPortFrom(e2eServer, 67), wait: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}}
	lc.c.SetReadBuffer(4 << 20)
	readDone := make(chan struct{})
	go func() { lc.read(); close(readDone) }()

	lg := &loadLedger{acked: map[string]netip.Addr{}, owner: map[netip.Addr]string{}}
	var (
		next    atomic.Int64
		killed  atomic.Bool
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		failsMu sync.Mutex
		fails   []string
	)
	d := l.d
	killedAt := make(chan time.Time, 1)
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	// The run is bounded in time too: a stalled rackd ends it, and the
	// test then fails for not reaching the kill point.
	budget := time.AfterFunc(30*time.Second, func() { killed.Store(true); halt() })
	defer budget.Stop()
	start := time.Now()
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !killed.Load() {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				mac := net.HardwareAddr{0x02, 0x77, 0xee, byte(i >> 16), byte(i >> 8), byte(i)}
				disc, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithRelay(lc.giaddr))
				if err != nil {
					panic(err)
				}
				disc.HopCount = 1
				offer, err := lc.exchange(disc, dhcpv4.MessageTypeOffer, stop)
				if err == nil && offer.MessageType() != dhcpv4.MessageTypeOffer {
					err = fmt.Errorf("answered %v", offer.Summary())
				}
				var ack *dhcpv4.DHCPv4
				if err == nil {
					var req *dhcpv4.DHCPv4
					req, err = dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithRelay(lc.giaddr))
					if err != nil {
						panic(err)
					}
					req.HopCount = 1
					ack, err = lc.exchange(req, dhcpv4.MessageTypeAck, stop)
				}
				if err != nil {
					if !killed.Load() {
						failsMu.Lock()
						fails = append(fails, fmt.Sprintf("%v: %v", mac, err))
						failsMu.Unlock()
					}
					continue
				}
				if ack.MessageType() == dhcpv4.MessageTypeNak {
					lg.mu.Lock()
					lg.naks++
					lg.mu.Unlock()
					continue
				}
				yi, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
				if !ok || !yi.IsValid() {
					failsMu.Lock()
					fails = append(fails, fmt.Sprintf("ack without an address: %v", ack.Summary()))
					failsMu.Unlock()
					continue
				}
				// Every ACK counts, also those that arrive while the kill
				// is under way: rackd sent them, so their leases must
				// have been durable.
				if lg.ack(mac.String(), yi) == killAt && killed.CompareAndSwap(false, true) {
					d.kill() // SIGKILL, by PID, mid-run
					killedAt <- time.Now()
					halt()
				}
			}
		}()
	}
	wg.Wait()
	lc.c.Close()
	<-readDone
	budget.Stop()
	if len(killedAt) == 0 {
		t.Fatalf("the run ended before the kill point: %d ACKs of %d wanted (%d failures: %v)", len(lg.acked), killAt, len(fails), fails[:min(len(fails), 5)])
	}
	kt := <-killedAt
	lg.mu.Lock()
	nAcked, naks := len(lg.acked), lg.naks
	lg.mu.Unlock()
	t.Logf("%d ACKs in %v (%.0f DORA/s) before the kill; %d after it; %d NAKs", killAt, kt.Sub(start),
		float64(killAt)/kt.Sub(start).Seconds(), nAcked-killAt, naks)
	for _, b := range lg.bad {
		t.Error(b)
	}
	if naks > 0 {
		t.Errorf("%d NAKs to distinct new clients", naks)
	}
	if len(fails) > 0 {
		t.Errorf("%d exchanges failed before the kill, e.g. %v", len(fails), fails[:min(len(fails), 5)])
	}

	// Restart on the same state and compare.
	l.start(t)
	leases := l.leases(t)
	byMAC := map[string]netip.Addr{}
	byIP := map[netip.Addr]string{}
	for _, ls := range leases {
		ip := netip.MustParseAddr(ls.IP)
		if prev, ok := byIP[ip]; ok {
			t.Errorf("%v leased twice: to %s and %s", ip, prev, ls.MAC)
		}
		byIP[ip] = ls.MAC
		if prev, ok := byMAC[ls.MAC]; ok {
			t.Errorf("%s holds two leases: %v and %v", ls.MAC, prev, ip)
		}
		byMAC[ls.MAC] = ip
	}
	lost := 0
	for mac, ip := range lg.acked {
		if got, ok := byMAC[mac]; !ok || got != ip {
			if lost++; lost <= 10 {
				t.Errorf("acknowledged lease lost: %s had %v, now %v (%v)", mac, ip, got, ok)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged leases lost", lost, len(lg.acked))
	}
	if len(leases) < len(lg.acked) || len(leases) > len(lg.acked)+inFlight {
		t.Errorf("%d leases after the restart for %d acknowledged (at most %d in flight)", len(leases), len(lg.acked), inFlight)
	}
	t.Logf("%d leases after the restart, %d acknowledged", len(leases), len(lg.acked))

	l.d.stop(t)
	s, err := store.Open(filepath.Join(l.state, store.FileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open the database after the run: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("store invariants after SIGKILL and restart:\n%v", err)
	}
}
