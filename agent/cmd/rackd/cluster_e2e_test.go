package main

// TestE2ECluster: three real rackd agents on one store on a real 3-member
// etcd, their DHCP interfaces on one bridge with the clients. It NEEDS ROOT
// (network namespaces) and etcd; without root it skips.
//
// Topology: a switch namespace holds the bridge; each agent runs in a
// namespace of its own with a veth on the bridge (10.77.0.1, .2, .3), and
// reaches the etcd members (on the host's loopback) through forwarders the
// test listens with inside its namespace; the clients are namespaces on
// the bridge too.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/agent"
	"rackd/api"
	"rackd/cluster"
	"rackd/internal/etcdtest"
	"rackd/internal/netnstest"
	"rackd/power/powertest"
)

// clusterTTL is the agents' session TTL; failoverBound is how long a
// subnet or shard may go unanswered after its leader stopped: the TTL and
// 2 s.
const (
	clusterTTL    = 2 * time.Second
	failoverBound = clusterTTL + 2*time.Second
)

// clusterAgent is one rackd of the cluster.
type clusterAgent struct {
	name     string
	ns       *netnstest.NS
	ifname   string
	addr     netip.Addr
	state    string
	config   string
	powerLog string
	d        *daemon
	client   *http.Client
}

// nsClient is an HTTP client that dials inside ns (the agent's API is on
// its namespace's loopback).
func nsClient(t *testing.T, ns *netnstest.NS) *http.Client {
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 4,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// forward listens on 127.0.0.1 inside ns and relays every connection to
// target (an etcd member on the host's loopback); it returns the address
// inside ns. Stopping the member (SIGSTOP) stalls its forwarded
// connections as it would stall direct ones.
func forward(t *testing.T, ns *netnstest.NS, target string) string {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return ln.Addr().String()
}

func (a *clusterAgent) start(t *testing.T) {
	t.Helper()
	a.d = startDaemonIn(t, a.ns.Name, a.state, "--config", a.config)
	d := a.d
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (pid %d) log:\n%s", a.name, d.cmd.Process.Pid, d.stderr.String())
		}
	})
}

func (a *clusterAgent) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	pid := a.d.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("%s: %v: %v", a.name, sig, err)
	}
	if sig == syscall.SIGSTOP {
		waitStopped(t, a.name, pid)
	}
}

// waitStopped returns once every thread of pid is stopped. kill(2) returns
// before a SIGSTOP has stopped a thread running on another CPU (on a
// loaded virtual machine, a preempted vCPU's thread runs on for a while),
// and what that thread answers meanwhile it answers as the leader it still
// is: "paused" starts when the last thread stops.
func waitStopped(t *testing.T, name string, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		running, err := runningThreads(pid)
		if err == nil && running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d): %d threads still running 10s after SIGSTOP (%v)", name, pid, running, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts pid's threads whose state (/proc/PID/task/TID/stat)
// is not stopped.
func runningThreads(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	running := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread has exited
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("%s/%s/stat: %q", dir, task.Name(), b)
		}
		if state := b[i+2]; state != 'T' && state != 't' {
			running++
		}
	}
	return running, nil
}

// call makes an API call on a that must answer want.
func (a *clusterAgent) call(t *testing.T, token string, want int, method, path string, body, out any) {
	t.Helper()
	status, raw, err := a.d.api(a.client, token, method, path, body, out)
	if err != nil || status != want {
		t.Fatalf("%s: %s %s: %d %s (%v), want %d", a.name, method, path, status, raw, err, want)
	}
}

// metric reads one sample of a's /metrics (name with its labels, as
// exposed), 0 when absent.
func (a *clusterAgent) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := a.client.Get(a.d.url + "/metrics")
	if err != nil {
		t.Fatalf("%s: metrics: %v", a.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

// answer is what one DHCP exchange of the load got.
type answer struct {
	mac     string
	offers  []netip.Addr // the server identifiers of the offers heard
	server  netip.Addr   // who ACKed (invalid: no ACK)
	ip      netip.Addr
	nak     bool
	sent    time.Time
	ackedAt time.Time
}

// dhcpLoad is a DHCP client standing for many: one socket on port 68 in a
// client namespace, exchanges told apart by xid.
type dhcpLoad struct {
	conn    *net.UDPConn
	mu      sync.Mutex
	waiting map[uint32]chan *dhcpv4.DHCPv4
	n       atomic.Uint32
	prefix  byte
}

func newDHCPLoad(t *testing.T, ns *netnstest.NS, ifname string, prefix byte) *dhcpLoad {
	l := &dhcpLoad{conn: ns.ListenUDP(t, ifname, netip.MustParseAddrPort("0.0.0.0:68")),
		waiting: map[uint32]chan *dhcpv4.DHCPv4{}, prefix: prefix}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := l.conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			m, err := dhcpv4.FromBytes(buf[:n])
			if err != nil || m.OpCode != dhcpv4.OpcodeBootReply {
				continue
			}
			l.mu.Lock()
			ch := l.waiting[binary32(m.TransactionID)]
			l.mu.Unlock()
			if ch != nil {
				select {
				case ch <- m:
				default:
				}
			}
		}
	}()
	return l
}

func binary32(x dhcpv4.TransactionID) uint32 {
	return uint32(x[0])<<24 | uint32(x[1])<<16 | uint32(x[2])<<8 | uint32(x[3])
}

var broadcast = &net.UDPAddr{IP: net.IPv4bcast, Port: 67}

// wait returns the channel that gets the replies to m's xid, and the
// function that stops listening for them.
func (l *dhcpLoad) wait(m *dhcpv4.DHCPv4) (<-chan *dhcpv4.DHCPv4, func()) {
	ch := make(chan *dhcpv4.DHCPv4, 16)
	xid := binary32(m.TransactionID)
	l.mu.Lock()
	l.waiting[xid] = ch
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.waiting, xid)
		l.mu.Unlock()
	}
}

// dora runs one DISCOVER/OFFER/REQUEST/ACK for a new MAC; it listens a
// while after the first offer to hear any other server's.
func (l *dhcpLoad) dora() answer {
	i := l.n.Add(1)
	mac := net.HardwareAddr{0x52, 0x54, l.prefix, byte(i >> 16), byte(i >> 8), byte(i)}
	a := answer{mac: mac.String(), sent: time.Now()}
	disc, err := dhcpv4.NewDiscovery(mac, dhcpv4.WithBroadcast(true))
	if err != nil {
		return a
	}
	ch, done := l.wait(disc)
	defer done()
	if _, err := l.conn.WriteToUDP(disc.ToBytes(), broadcast); err != nil {
		return a
	}
	var offer *dhcpv4.DHCPv4
	deadline := time.After(time.Second)
collect:
	for {
		select {
		case m := <-ch:
			if m.MessageType() != dhcpv4.MessageTypeOffer {
				continue
			}
			sid, _ := netip.AddrFromSlice(m.ServerIdentifier().To4())
			a.offers = append(a.offers, sid)
			if offer == nil {
				offer = m
				deadline = time.After(300 * time.Millisecond)
			}
		case <-deadline:
			break collect
		}
	}
	if offer == nil {
		return a
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithBroadcast(true))
	if err != nil {
		return a
	}
	if _, err := l.conn.WriteToUDP(req.ToBytes(), broadcast); err != nil {
		return a
	}
	timeout := time.After(2 * time.Second)
	for {
		select {
		case m := <-ch:
			switch m.MessageType() {
			case dhcpv4.MessageTypeAck:
				a.server, _ = netip.AddrFromSlice(m.ServerIdentifier().To4())
				a.ip, _ = netip.AddrFromSlice(m.YourIPAddr.To4())
				a.ackedAt = time.Now()
				return a
			case dhcpv4.MessageTypeNak:
				a.nak = true
				return a
			}
		case <-timeout:
			return a
		}
	}
}

// requestFrom sends, for a new MAC, a REQUEST in SELECTING state naming
// server and ip (as a client would whose offer came from server just
// before it paused), and reports whether an ACK came within wait.
func (l *dhcpLoad) requestFrom(server, ip netip.Addr, wait time.Duration) bool {
	i := l.n.Add(1)
	mac := net.HardwareAddr{0x52, 0x54, l.prefix, byte(i >> 16), byte(i >> 8), byte(i)}
	req, err := dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithBroadcast(true),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server.AsSlice())),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice())))
	if err != nil {
		return false
	}
	ch, done := l.wait(req)
	defer done()
	if _, err := l.conn.WriteToUDP(req.ToBytes(), broadcast); err != nil {
		return false
	}
	timeout := time.After(wait)
	for {
		select {
		case m := <-ch:
			if m.MessageType() == dhcpv4.MessageTypeAck {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// loadRun runs DORAs from workers goroutines until stop is closed (or
// limit exchanges), and collects their answers.
type loadRun struct {
	mu      sync.Mutex
	answers []answer
	done    chan struct{}
}

func runLoad(l *dhcpLoad, workers, limit int, stop <-chan struct{}) *loadRun {
	r := &loadRun{done: make(chan struct{})}
	var wg sync.WaitGroup
	var count atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for count.Add(1) <= int64(limit) {
				select {
				case <-stop:
					return
				default:
				}
				a := l.dora()
				r.mu.Lock()
				r.answers = append(r.answers, a)
				r.mu.Unlock()
				if len(a.offers) == 0 {
					// Nobody answers (a failover): do not spin.
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	go func() { wg.Wait(); close(r.done) }()
	return r
}

func (r *loadRun) snapshot() []answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]answer{}, r.answers...)
}

// firstAckAfter returns the first ACK, sent after t, from a server other
// than not.
func firstAckAfter(answers []answer, t time.Time, not netip.Addr) (answer, bool) {
	var best answer
	found := false
	for _, a := range answers {
		if a.server.IsValid() && a.server != not && a.sent.After(t) && (!found || a.ackedAt.Before(best.ackedAt)) {
			best, found = a, true
		}
	}
	return best, found
}

func TestE2ECluster(t *testing.T) {
	netnstest.Require(t)
	dhclient := netnstest.Tool(t, "dhclient")
	etcd := etcdtest.Start(t, 3)
	ecli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ecli.Close() })

	sw := netnstest.New(t)
	br := sw.Bridge()
	agents := make([]*clusterAgent, 3)
	dir := t.TempDir()
	for i := range agents {
		ns := netnstest.New(t)
		port, ifname := netnstest.Veth(t, sw, ns)
		sw.Attach(port, br)
		a := &clusterAgent{name: fmt.Sprintf("agent%d", i), ns: ns, ifname: ifname,
			addr:  netip.AddrFrom4([4]byte{10, 77, 0, byte(1 + i)}),
			state: filepath.Join(dir, fmt.Sprintf("state%d", i)), config: filepath.Join(dir, fmt.Sprintf("rackd%d.toml", i)),
			powerLog: filepath.Join(dir, fmt.Sprintf("bmc%d.log", i))}
		ns.AddAddr(ifname, netip.PrefixFrom(a.addr, 20))
		var eps []string
		for m := range 3 {
			eps = append(eps, forward(t, ns, strings.TrimPrefix(etcd.Member(m).ClientURL, "http://")))
		}
		cfg := fmt.Sprintf(`
[store]
url = "etcd://%s"
commit_timeout = "3s"
[dhcp]
interfaces = [%q]
probe_timeout = "0s"
[cluster]
name = %q
advertise_url = "http://%s:5240"
session_ttl = "%ds"
power_shards = 4
[power]
min_interval = "0s"
verify_interval = "100ms"
verify_deadline = "20s"
poll_interval = "0s"
command_timeout = "1h"
[power.fake]
enabled = true
latency = "1s"
log = %q
`, strings.Join(eps, ","), ifname, a.name, a.addr, int(clusterTTL/time.Second), a.powerLog)
		if err := os.WriteFile(a.config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		a.client = nsClient(t, ns)
		agents[i] = a
	}
	// The first agent initialises the store and makes the admin; the
	// others share its keys (configuration every agent of a cluster is
	// given) and its token, and the subnet is made once all three run.
	agents[0].start(t)
	token := adminToken(t, agents[0].state)
	// A /20: the load takes a few thousand addresses.
	sn := e2eSubnet()
	sn.CIDR = "10.77.0.0/20"
	sn.DynamicRanges = []api.Range{{Start: "10.77.1.0", End: "10.77.15.254"}}
	for _, a := range agents[1:] {
		if err := os.MkdirAll(a.state, 0o750); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{agent.SecretsKeyFile, agent.CredentialKeyFile} {
			b, err := os.ReadFile(filepath.Join(agents[0].state, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(a.state, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		a.start(t)
	}
	// Made on one agent, the subnet reaches the others through the
	// store's watch, and all three campaign for it.
	agents[1].call(t, token, http.StatusCreated, "POST", "/api/v1/subnets", sn, nil)
	byAddr := map[netip.Addr]*clusterAgent{}
	for _, a := range agents {
		byAddr[a.addr] = a
	}
	status := func() cluster.State {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := cluster.Status(ctx, ecli, "/rackd/")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// All three campaign for the subnet and every shard.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := status()
		ok := len(st.Agents) == 3 && len(st.DHCP) == 1 && st.DHCP[0].Candidates == 3 && len(st.Power) == 4
		for _, p := range st.Power {
			ok = ok && p.Candidates == 3
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the three agents did not all campaign: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	leaderOf := func(st cluster.State) *clusterAgent {
		for _, a := range agents {
			if st.DHCP[0].Agent == a.name {
				return a
			}
		}
		t.Fatalf("subnet led by %q, not one of the agents", st.DHCP[0].Agent)
		return nil
	}
	lead := leaderOf(status())
	t.Logf("%s leads %s", lead.name, sn.CIDR)

	// A real client: dhclient is answered by the leader.
	cns := netnstest.New(t)
	port, cif := netnstest.Veth(t, sw, cns)
	sw.Attach(port, br)
	dc := newDhclient(t, cns, cif)
	_ = dhclient
	dc.start()
	ev := dc.wait(t, 1, "BOUND")
	// The lease file is written once the hook has run: read it after
	// dhclient stopped.
	dc.ctl(t, "-x")
	lf, _ := os.ReadFile(dc.lf)
	if m := regexp.MustCompile(`dhcp-server-identifier ([0-9.]+);`).FindSubmatch(lf); m == nil || string(m[1]) != lead.addr.String() {
		t.Fatalf("dhclient bound %s from %q, want the leader %s:\n%s", ev["ip"], m, lead.addr, lf)
	}

	lns := netnstest.New(t)
	port, lif := netnstest.Veth(t, sw, lns)
	sw.Attach(port, br)
	load := newDHCPLoad(t, lns, lif, 0xa0)
	var all []answer
	check := func(answers []answer, quiet map[netip.Addr]bool) {
		t.Helper()
		for _, a := range answers {
			seen := map[netip.Addr]bool{}
			for _, o := range a.offers {
				seen[o] = true
			}
			if len(seen) > 1 {
				t.Errorf("%s heard offers from %d servers: %v", a.mac, len(seen), a.offers)
			}
			if quiet[a.server] {
				t.Errorf("%s was ACKed %v by %v, which must be silent", a.mac, a.ip, a.server)
			}
		}
	}

	// Steady: exactly one agent answers.
	stop := make(chan struct{})
	r := runLoad(load, 4, 40, stop)
	<-r.done
	steady := r.snapshot()
	check(steady, nil)
	acked := 0
	for _, a := range steady {
		if a.server.IsValid() {
			acked++
			if a.server != lead.addr {
				t.Errorf("%s ACKed by %v, not the leader %v", a.mac, a.server, lead.addr)
			}
		}
	}
	if acked < 30 {
		t.Fatalf("only %d of %d exchanges ACKed with a healthy leader", acked, len(steady))
	}
	all = append(all, steady...)

	// SIGKILL the leader under load: another answers within the bound.
	stop = make(chan struct{})
	r = runLoad(load, 4, 3000, stop)
	time.Sleep(time.Second)
	killed := lead
	killedAt := time.Now()
	killed.d.kill()
	deadline = time.Now().Add(failoverBound + 5*time.Second)
	var first answer
	for {
		if a, ok := firstAckAfter(r.snapshot(), killedAt, killed.addr); ok {
			first = a
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("no agent ACKed within %v of the leader's SIGKILL", time.Since(killedAt))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after SIGKILL of %s: %s ACKs after %v (offer asked at +%v)", killed.name, byAddr[first.server].name,
		first.ackedAt.Sub(killedAt), first.sent.Sub(killedAt))
	if took := first.sent.Sub(killedAt); took > failoverBound {
		t.Errorf("the first answered exchange after the SIGKILL began %v after it, over TTL+2s", took)
	}
	lead = byAddr[first.server]

	// SIGSTOP the new leader (a partition): the third takes over.
	paused := lead
	pausedAt := time.Now()
	paused.signal(t, syscall.SIGSTOP)
	// Requests in SELECTING state naming the paused leader wait in its
	// socket: its late ACKs, which the fence must refuse.
	var lateAcks atomic.Int32
	var lateWG sync.WaitGroup
	for i := range 8 {
		lateWG.Add(1)
		go func() {
			defer lateWG.Done()
			ip := netip.AddrFrom4([4]byte{10, 77, 15, byte(200 + i)})
			if load.requestFrom(paused.addr, ip, failoverBound+6*time.Second) {
				lateAcks.Add(1)
			}
		}()
	}
	deadline = time.Now().Add(failoverBound + 5*time.Second)
	for {
		if a, ok := firstAckAfter(r.snapshot(), pausedAt, paused.addr); ok && a.server != killed.addr {
			first = a
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			paused.signal(t, syscall.SIGCONT)
			t.Fatalf("no agent ACKed within %v of the leader's SIGSTOP", time.Since(pausedAt))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after SIGSTOP of %s: %s ACKs after %v", paused.name, byAddr[first.server].name, first.ackedAt.Sub(pausedAt))
	if took := first.sent.Sub(pausedAt); took > failoverBound {
		t.Errorf("the first answered exchange after the SIGSTOP began %v after it, over TTL+2s", took)
	}
	lead = byAddr[first.server]
	paused.signal(t, syscall.SIGCONT)
	resumedAt := time.Now()
	lateWG.Wait()
	if n := lateAcks.Load(); n > 0 {
		t.Errorf("the resumed former leader ACKed %d requests it held while paused", n)
	}
	// Why it stayed silent: the fence refused the write (it still
	// thought it led), or it knew already that it no longer leads; which
	// one is a race between its DHCP workers and its watch, both woken by
	// SIGCONT (cluster's and store's tests hold the fence itself).
	fenced := paused.metric(t, `rackd_cluster_fenced_writes_total{kind="dhcp"}`)
	notLeader := paused.metric(t, `rackd_dhcp_drops_total{reason="not_leader"}`)
	t.Logf("resumed %s: %v writes refused by the fence; %v requests dropped as not the leader (the fenced ones among them)", paused.name, fenced, notLeader)
	if v := paused.metric(t, `rackd_cluster_leader{key="10.77.0.0/20",kind="dhcp"}`); v != 0 {
		t.Errorf("the resumed former leader says it leads (%v)", v)
	}
	// Once it knows (a TTL at most), it stays silent: from then on only
	// the leader answers.
	time.Sleep(failoverBound)
	settled := time.Now()
	time.Sleep(3 * time.Second)
	close(stop)
	<-r.done
	run := r.snapshot()
	var after []answer
	for _, a := range run {
		if a.sent.After(settled) {
			after = append(after, a)
		}
	}
	check(after, map[netip.Addr]bool{paused.addr: true, killed.addr: true})
	if len(after) == 0 {
		t.Error("no exchange after the resumed agent settled")
	}
	all = append(all, run...)
	t.Logf("resumed at +%v; %d exchanges in all", resumedAt.Sub(pausedAt), len(all))

	// No address ACKed to two MACs, and every ACKed lease is in the store.
	verifyLeases := func(on *clusterAgent, all []answer) {
		t.Helper()
		byIP := map[netip.Addr]string{}
		for _, a := range all {
			if !a.server.IsValid() {
				continue
			}
			if other, ok := byIP[a.ip]; ok && other != a.mac {
				t.Errorf("%v ACKed to %s and to %s", a.ip, other, a.mac)
			}
			byIP[a.ip] = a.mac
		}
		var leases []api.Lease
		on.call(t, token, http.StatusOK, "GET", "/api/v1/leases", nil, &leases)
		stored := map[string]string{}
		for _, l := range leases {
			if other, ok := stored[l.IP]; ok && other != l.MAC {
				t.Errorf("the store holds %s for %s and %s", l.IP, other, l.MAC)
			}
			stored[l.IP] = l.MAC
		}
		for ip, mac := range byIP {
			if stored[ip.String()] != mac {
				t.Errorf("ACKed lease %v of %s: the store has %q", ip, mac, stored[ip.String()])
			}
		}
		t.Logf("%d leases ACKed, all in the store", len(byIP))
	}
	verifyLeases(lead, all)

	// Power: the two agents left share the four shards (the resumed one
	// takes its share back); a request made on one for a machine whose
	// shard the other leads is driven by that other, and when that one is
	// killed mid-request, the first finishes it.
	var st cluster.State
	deadline = time.Now().Add(60 * time.Second)
	for {
		st = status()
		count := map[string]int{}
		for _, p := range st.Power {
			count[p.Agent]++
		}
		if count[paused.name] == 2 && count[lead.name] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shards did not even out between %s and %s: %+v", lead.name, paused.name, st.Power)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var machine api.Machine
	paused.call(t, token, http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{
		Hostname: "pm00", MACs: []string{"52:54:00:ee:00:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc00", Username: "admin", Password: "pw"}}, &machine)
	shard := fmt.Sprint(cluster.Shard(machine.ID, 4))
	var owner, asker *clusterAgent
	for _, p := range st.Power {
		if p.Key == shard {
			owner, asker = lead, paused
			if p.Agent == paused.name {
				owner, asker = paused, lead
			}
		}
	}
	t.Logf("machine %s in shard %s: asked on %s, driven by %s", machine.ID, shard, asker.name, owner.name)
	var req api.PowerRequest
	asker.call(t, token, http.StatusAccepted, "POST", "/api/v1/machines/"+machine.ID+"/power", api.PowerAction{Action: "cycle", Reason: "cluster test"}, &req)
	// The owner sends it (its simulated BMC takes a second a command):
	// kill it while the request runs.
	deadline = time.Now().Add(30 * time.Second)
	for {
		var got api.PowerRequest
		asker.call(t, token, http.StatusOK, "GET", "/api/v1/power/requests/"+req.ID, nil, &got)
		if got.State == "running" {
			break
		}
		if got.State != "pending" || time.Now().After(deadline) {
			t.Fatalf("request %s is %s, want it running on %s", req.ID, got.State, owner.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if log, _ := powertest.ReadLog(asker.powerLog); len(log) > 0 {
		t.Errorf("%s, which does not lead the machine's shard, drove its BMC: %v", asker.name, log)
	}
	owner.d.kill()
	killedAt = time.Now()
	deadline = time.Now().Add(90 * time.Second)
	for {
		var got api.PowerRequest
		asker.call(t, token, http.StatusOK, "GET", "/api/v1/power/requests/"+req.ID, nil, &got)
		if got.State == "done" {
			break
		}
		if got.State == "failed" || time.Now().After(deadline) {
			t.Fatalf("request %s is %s (%s) after its driver was killed, want done by %s", req.ID, got.State, got.Error, asker.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	finished, _ := powertest.ReadLog(asker.powerLog)
	t.Logf("%s finished %s %v after %s's SIGKILL, with %d commands", asker.name, req.ID, time.Since(killedAt), owner.name, len(finished))
	if len(finished) == 0 {
		t.Errorf("%s finished %s without a command to the BMC", asker.name, req.ID)
	}
	var cycles int
	for _, path := range []string{asker.powerLog, owner.powerLog} {
		log, _ := powertest.ReadLog(path)
		for _, e := range log {
			if e.Request == req.ID && e.Cmd == powertest.CmdCycle {
				cycles++
			}
		}
	}
	if cycles > 1 {
		t.Errorf("request %s was cycled %d times", req.ID, cycles)
	}
	if b, _ := json.Marshal(status()); len(b) > 0 {
		t.Logf("cluster after the power failover: %s", b)
	}

	// etcd itself: with one member of three down the agent left goes on;
	// without a quorum its API writes answer 503 (within the store's
	// commit_timeout) and DHCP hands out nothing; with the quorum back
	// both resume, and no address was ACKed twice.
	last := asker
	ackWithin := func(what string, bound time.Duration) {
		t.Helper()
		start := time.Now()
		for time.Since(start) < bound {
			a := load.dora()
			all = append(all, a)
			if a.server.IsValid() {
				t.Logf("%s: %s ACKed %v after %v", what, byAddr[a.server].name, a.ip, time.Since(start))
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: no ACK within %v", what, bound)
	}
	writeWithin := func(what, hostname string, bound time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			status, raw, err := last.d.api(last.client, token, "POST", "/api/v1/machines", api.CreateMachine{
				Hostname: hostname, MACs: []string{"52:54:00:ee:01:" + hostname[len(hostname)-2:]}, State: "READY"}, nil)
			if err == nil && status == http.StatusCreated {
				t.Logf("%s: machine %s made after %v", what, hostname, time.Since(start))
				return
			}
			if time.Since(start) > bound || (err == nil && status != http.StatusServiceUnavailable) {
				t.Fatalf("%s: POST /api/v1/machines: %d %s (%v), want 201 within %v", what, status, raw, err, bound)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Whoever led the subnet, the agent left takes it within the bound.
	ackWithin("one agent left", failoverBound+10*time.Second)
	etcd.Kill(0)
	writeWithin("one etcd member down", "qm01", 10*time.Second)
	ackWithin("one etcd member down", 10*time.Second)

	etcd.Kill(1)
	lostAt := time.Now()
	status503, raw, err := last.d.api(last.client, token, "POST", "/api/v1/machines", api.CreateMachine{
		Hostname: "qm02", MACs: []string{"52:54:00:ee:01:02"}, State: "READY"}, nil)
	if err != nil || status503 != http.StatusServiceUnavailable || !strings.Contains(string(raw), "quorum") {
		t.Fatalf("a write without a quorum: %d %s (%v), want 503 naming the quorum", status503, raw, err)
	}
	t.Logf("without a quorum: %d %s after %v", status503, strings.Join(strings.Fields(string(raw)), " "), time.Since(lostAt))
	for range 5 {
		a := load.dora()
		all = append(all, a)
		if a.server.IsValid() {
			t.Errorf("without a quorum %s ACKed %v to %s", byAddr[a.server].name, a.ip, a.mac)
		}
	}

	etcd.Restart(0)
	t.Logf("quorum back %v after it was lost", time.Since(lostAt))
	writeWithin("quorum back", "qm03", 30*time.Second)
	ackWithin("quorum back", 30*time.Second)
	verifyLeases(last, all)
	if b, _ := json.Marshal(status()); len(b) > 0 {
		t.Logf("cluster at the end: %s", b)
	}
}
