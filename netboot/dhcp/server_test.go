package dhcp_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"rackd/netboot/dhcp"
	"rackd/netboot/dhcp/dhcptest"
)

// memConn is a net.PacketConn fed and drained by the test.
type memConn struct {
	in     chan []byte
	out    chan sent
	closed chan struct{}
	once   sync.Once
}

type sent struct {
	msg *dhcpv4.DHCPv4
	to  *net.UDPAddr
}

func newMemConn() *memConn {
	return &memConn{in: make(chan []byte, 64), out: make(chan sent, 64), closed: make(chan struct{})}
}

func (c *memConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-c.in:
		return copy(b, p), &net.UDPAddr{IP: net.IPv4zero, Port: 68}, nil
	case <-c.closed:
		return 0, nil, net.ErrClosed
	}
}

func (c *memConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	m, err := dhcpv4.FromBytes(b)
	if err != nil {
		return 0, err
	}
	c.out <- sent{m, addr.(*net.UDPAddr)}
	return len(b), nil
}

func (c *memConn) Close() error                       { c.once.Do(func() { close(c.closed) }); return nil }
func (c *memConn) LocalAddr() net.Addr                { return &net.UDPAddr{IP: net.IPv4zero, Port: 67} }
func (c *memConn) SetDeadline(t time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(t time.Time) error { return nil }

func (c *memConn) next(t *testing.T) sent {
	t.Helper()
	select {
	case s := <-c.out:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no reply")
		return sent{}
	}
}

// startServer serves conn in the background until the test ends.
func startServer(t *testing.T, cfg dhcp.Config, leases dhcp.Leases, conn *memConn) (*prometheus.Registry, func() error) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	srv, err := dhcp.New(cfg, leases, nil, bootCfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeConns(ctx, []dhcp.Conn{{PC: conn, In: eth0}}) }()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("server did not stop")
		}
	})
	t.Cleanup(func() { stop() })
	return reg, stop
}

// counter returns the value of the series of name with the given labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestServerDestinations checks where each kind of reply is sent (RFC 2131
// section 4.1) and what is counted.
// asyncLeases binds asynchronously, as the store does: the server answers
// DHCPREQUESTs from the completion.
type asyncLeases struct{ *dhcptest.MemLeases }

func (a asyncLeases) AckAsync(ctx context.Context, r dhcp.Request, done func(dhcp.Lease, error)) error {
	go func() { done(a.Ack(ctx, r)) }()
	return nil
}

// withLeases runs a test with Leases that bind synchronously and with
// Leases that bind asynchronously.
func withLeases(t *testing.T, test func(t *testing.T, wrap func(*dhcptest.MemLeases) dhcp.Leases)) {
	t.Run("sync", func(t *testing.T) { test(t, func(m *dhcptest.MemLeases) dhcp.Leases { return m }) })
	t.Run("async", func(t *testing.T) { test(t, func(m *dhcptest.MemLeases) dhcp.Leases { return asyncLeases{m} }) })
}

func TestServerDestinations(t *testing.T) {
	withLeases(t, testServerDestinations)
}

func testServerDestinations(t *testing.T, wrap func(*dhcptest.MemLeases) dhcp.Leases) {
	conn := newMemConn()
	reg, stop := startServer(t, dhcp.Config{}, wrap(dhcptest.New(subnets()...)), conn)

	bcast68 := "255.255.255.255:68"
	tests := []struct {
		name string
		req  *dhcpv4.DHCPv4
		to   string
		typ  dhcpv4.MessageType
	}{
		{"discover", discover(t, mac1), bcast68, dhcpv4.MessageTypeOffer},
		{"relayed discover", discover(t, mac2, dhcpv4.WithRelay(relayAddr.AsSlice())), "10.1.0.1:67", dhcpv4.MessageTypeOffer},
		{"init-reboot", request(t, mac1, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 0, 100)))), bcast68, dhcpv4.MessageTypeAck},
		{"renew", request(t, mac1, dhcpv4.WithClientIP(net.IPv4(10, 0, 0, 100))), "10.0.0.100:68", dhcpv4.MessageTypeAck},
		{"nak with ciaddr is broadcast", request(t, mac2, dhcpv4.WithClientIP(net.IPv4(10, 0, 0, 100))), bcast68, dhcpv4.MessageTypeNak},
		{"relayed nak goes to the relay", request(t, mac2, dhcpv4.WithRelay(relayAddr.AsSlice()),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 0, 100)))), "10.1.0.1:67", dhcpv4.MessageTypeNak},
		{"inform", request(t, mac2, dhcpv4.WithMessageType(dhcpv4.MessageTypeInform), dhcpv4.WithClientIP(net.IPv4(10, 0, 0, 50))),
			"10.0.0.50:68", dhcpv4.MessageTypeAck},
	}
	for _, tt := range tests {
		conn.in <- tt.req.ToBytes()
		got := conn.next(t)
		if got.to.String() != tt.to || got.msg.MessageType() != tt.typ || got.msg.TransactionID != tt.req.TransactionID {
			t.Errorf("%s: %v sent to %v; want %v to %s", tt.name, got.msg.MessageType(), got.to, tt.typ, tt.to)
		}
	}
	// No reply for these, but counted.
	conn.in <- []byte("not dhcp")
	conn.in <- request(t, mac1, dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease), dhcpv4.WithClientIP(net.IPv4(10, 0, 0, 100))).ToBytes()
	conn.in <- request(t, mac1, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 9))),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 0, 100)))).ToBytes()
	deadline := time.Now().Add(5 * time.Second)
	for counter(t, reg, "rackd_dhcp_replies_total", "type", "release", "outcome", "none") != 1 ||
		counter(t, reg, "rackd_dhcp_drops_total", "reason", "other_server") != 1 ||
		counter(t, reg, "rackd_dhcp_drops_total", "reason", "malformed") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("release, other-server request and garbage not all counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"rackd_dhcp_packets_received_total", []string{"type", "discover"}, 2},
		{"rackd_dhcp_packets_received_total", []string{"type", "request"}, 5},
		{"rackd_dhcp_packets_received_total", []string{"type", "inform"}, 1},
		{"rackd_dhcp_packets_received_total", []string{"type", "release"}, 1},
		{"rackd_dhcp_packets_received_total", []string{"type", "invalid"}, 1},
		{"rackd_dhcp_replies_total", []string{"type", "discover", "outcome", "offer"}, 2},
		{"rackd_dhcp_replies_total", []string{"type", "request", "outcome", "ack"}, 2},
		{"rackd_dhcp_replies_total", []string{"type", "request", "outcome", "nak"}, 2},
		{"rackd_dhcp_replies_total", []string{"type", "request", "outcome", "dropped"}, 1},
		{"rackd_dhcp_replies_total", []string{"type", "inform", "outcome", "ack"}, 1},
		{"rackd_dhcp_reply_duration_seconds", []string{"type", "discover"}, 2},
		{"rackd_dhcp_reply_duration_seconds", []string{"type", "request"}, 4},
		{"rackd_dhcp_drops_total", []string{"reason", "queue_full"}, 0},
		{"rackd_dhcp_probe_conflicts_total", nil, 0},
		{"rackd_dhcp_queue_length", nil, 0},
	} {
		if got := counter(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// gatedLeases binds asynchronously, but only completes an ACK once the
// server is being stopped and the test opens the gate.
type gatedLeases struct {
	*dhcptest.MemLeases
	gate chan struct{}
}

func (g gatedLeases) AckAsync(ctx context.Context, r dhcp.Request, done func(dhcp.Lease, error)) error {
	go func() {
		<-ctx.Done()
		<-g.gate
		done(g.Ack(context.Background(), r))
	}()
	return nil
}

// TestServerStopWaitsForAsyncAck: an asynchronous ACK still pending when the
// server is told to stop is answered and counted before ServeConns returns.
// The bubble makes the ordering certain: once every goroutine is blocked,
// ServeConns must still be waiting on the pending ACK.
func TestServerStopWaitsForAsyncAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		leases := gatedLeases{dhcptest.New(subnets()...), make(chan struct{})}
		reg := prometheus.NewPedanticRegistry()
		srv, err := dhcp.New(dhcp.Config{Workers: 1}, leases, nil, bootCfg, nil, reg)
		if err != nil {
			t.Fatal(err)
		}
		conn := newMemConn()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- srv.ServeConns(ctx, []dhcp.Conn{{PC: conn, In: eth0}}) }()
		req := request(t, mac1, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 0, 100))))
		conn.in <- req.ToBytes()
		synctest.Wait() // the request is taken and waits on its commit
		cancel()
		synctest.Wait() // everything that can stop has stopped
		select {
		case err := <-done:
			close(leases.gate) // let the completion end before the bubble does
			synctest.Wait()
			t.Fatalf("ServeConns returned (%v) with an ACK still pending", err)
		default:
		}
		close(leases.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-conn.out:
			if got.msg.MessageType() != dhcpv4.MessageTypeAck || got.msg.TransactionID != req.TransactionID {
				t.Errorf("sent %v (xid %v), want the ACK to %v", got.msg.MessageType(), got.msg.TransactionID, req.TransactionID)
			}
		default:
			t.Fatal("the pending ACK was not sent before ServeConns returned")
		}
		if got := counter(t, reg, "rackd_dhcp_replies_total", "type", "request", "outcome", "ack"); got != 1 {
			t.Errorf("rackd_dhcp_replies_total[request ack] = %v after stop, want 1", got)
		}
	})
}

// TestServerQueueFull: with the one worker stuck on a durable ACK, one
// request waits in the queue and the rest are dropped and counted; a
// DHCPDISCOVER, which waits on nothing, is still answered by the reader; the
// server still stops.
func TestServerQueueFull(t *testing.T) {
	withLeases(t, testServerQueueFull)
}

func testServerQueueFull(t *testing.T, wrap func(*dhcptest.MemLeases) dhcp.Leases) {
	leases := dhcptest.New(subnets()...)
	entered := make(chan struct{}, 100)
	release := make(chan struct{})
	leases.Fail = func(op string, _ dhcp.Request) error {
		if op != "ack" {
			return nil
		}
		entered <- struct{}{}
		<-release
		return nil
	}
	conn := newMemConn()
	reg, stop := startServer(t, dhcp.Config{Workers: 1, QueueSize: 1}, wrap(leases), conn)
	initReboot := func(mac net.HardwareAddr) []byte {
		return request(t, mac, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 0, 100)))).ToBytes()
	}
	conn.in <- initReboot(mac1)
	<-entered // the worker is busy
	for range 9 {
		conn.in <- initReboot(mac2)
	}
	d := discover(t, net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 0x03})
	conn.in <- d.ToBytes()
	if got := conn.next(t); got.msg.MessageType() != dhcpv4.MessageTypeOffer || got.msg.TransactionID != d.TransactionID {
		t.Fatalf("with the workers busy a DISCOVER got %v (xid %v), want its OFFER", got.msg.MessageType(), got.msg.TransactionID)
	}
	deadline := time.Now().Add(5 * time.Second)
	for counter(t, reg, "rackd_dhcp_drops_total", "reason", "queue_full") != 8 {
		if time.Now().After(deadline) {
			t.Fatalf("queue_full drops = %v, want 8", counter(t, reg, "rackd_dhcp_drops_total", "reason", "queue_full"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, async := wrap(leases).(dhcp.AsyncAcker); !async {
		// (Asynchronous binds wait on the commit, not in the queue.)
		if q := counter(t, reg, "rackd_dhcp_queue_length"); q != 1 {
			t.Errorf("queue length %v, want 1", q)
		}
	}
	close(release)
	conn.next(t)
	conn.next(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestServerSocketError: a socket that fails (not by our closing it) ends
// the server with the error.
func TestServerSocketError(t *testing.T) {
	srv, err := dhcp.New(dhcp.Config{}, dhcptest.New(subnets()...), nil, bootCfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := newMemConn()
	conn.Close() // looks like a failure: the server did not close it
	err = srv.ServeConns(context.Background(), []dhcp.Conn{{PC: conn, In: eth0}})
	if !errors.Is(err, net.ErrClosed) {
		t.Fatalf("err = %v, want the read error", err)
	}
	if err := srv.ServeConns(context.Background(), []dhcp.Conn{{PC: newMemConn(), In: eth0}}); err == nil {
		t.Fatal("second ServeConns accepted")
	}
}

func TestNewRegistersOnce(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := dhcp.New(dhcp.Config{}, dhcptest.New(), nil, bootCfg, nil, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := dhcp.New(dhcp.Config{}, dhcptest.New(), nil, bootCfg, nil, reg); err == nil {
		t.Fatal("two servers registered the same metrics")
	}
	if _, err := dhcp.New(dhcp.Config{}, nil, nil, bootCfg, nil, nil); err == nil {
		t.Fatal("New without leases")
	}
	srv, _ := dhcp.New(dhcp.Config{}, dhcptest.New(), nil, bootCfg, nil, nil)
	if err := srv.Serve(context.Background()); err == nil {
		t.Fatal("Serve with nothing configured")
	}
}

// Bound names the served interfaces while the server runs, and nothing
// before or after: a health check reads it.
func TestServerBound(t *testing.T) {
	srv, err := dhcp.New(dhcp.Config{}, dhcptest.New(subnets()...), nil, bootCfg, nil, prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if b := srv.Bound(); len(b) != 0 {
		t.Fatalf("bound before serving: %v", b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeConns(ctx, []dhcp.Conn{{PC: newMemConn(), In: eth0}}) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(srv.Bound()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if b := srv.Bound(); len(b) != 1 || b[0] != "eth0" {
		t.Fatalf("bound while serving: %v", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b := srv.Bound(); len(b) != 0 {
		t.Fatalf("bound after serving: %v", b)
	}
}

// groupLeases completes asynchronous ACKs in groups, as the store's group
// commit does: the test completes the queued ones from one goroutine, then
// ends the group.
type groupLeases struct {
	*dhcptest.MemLeases
	mu    sync.Mutex
	queue []func()
	end   func()
}

func (g *groupLeases) AckAsync(ctx context.Context, r dhcp.Request, done func(dhcp.Lease, error)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = append(g.queue, func() { done(g.Ack(ctx, r)) })
	return nil
}

func (g *groupLeases) OnGroupEnd(end func()) { g.end = end }

// complete runs the completions queued so far, as one group, without ending it.
func (g *groupLeases) complete() int {
	g.mu.Lock()
	q := g.queue
	g.queue = nil
	g.mu.Unlock()
	for _, f := range q {
		f()
	}
	return len(q)
}

// TestServerGroupAcks: the ACKs of a group leave only once the group ends,
// all of them, each to its client; a server told to stop waits for the
// group to end before it returns, and has then sent and counted them.
func TestServerGroupAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		leases := &groupLeases{MemLeases: dhcptest.New(subnets()...)}
		reg := prometheus.NewPedanticRegistry()
		srv, err := dhcp.New(dhcp.Config{Workers: 1}, leases, nil, bootCfg, nil, reg)
		if err != nil {
			t.Fatal(err)
		}
		if leases.end == nil {
			t.Fatal("the server did not ask to be told when a group ends")
		}
		conn := newMemConn()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- srv.ServeConns(ctx, []dhcp.Conn{{PC: conn, In: eth0}}) }()
		xids := map[dhcpv4.TransactionID]net.HardwareAddr{}
		for i, mac := range []net.HardwareAddr{mac1, mac2} {
			req := request(t, mac, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 0, byte(100+i)))))
			xids[req.TransactionID] = mac
			conn.in <- req.ToBytes()
		}
		synctest.Wait() // both requests are taken and wait on their commit
		if n := leases.complete(); n != 2 {
			t.Fatalf("%d completions queued, want 2", n)
		}
		if len(conn.out) != 0 {
			t.Fatalf("%d ACKs sent before their group ended", len(conn.out))
		}
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("ServeConns returned (%v) before the group of its ACKs ended", err)
		default:
		}
		leases.end()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case got := <-conn.out:
				mac, ok := xids[got.msg.TransactionID]
				if got.msg.MessageType() != dhcpv4.MessageTypeAck || !ok || got.msg.ClientHWAddr.String() != mac.String() {
					t.Errorf("sent %v xid %v to %v, want an ACK to one of the requests", got.msg.MessageType(), got.msg.TransactionID, got.msg.ClientHWAddr)
				}
				delete(xids, got.msg.TransactionID)
			default:
				t.Fatalf("ACKs not sent after their group ended: %d missing", len(xids))
			}
		}
		if got := counter(t, reg, "rackd_dhcp_replies_total", "type", "request", "outcome", "ack"); got != 2 {
			t.Errorf("rackd_dhcp_replies_total[request ack] = %v, want 2", got)
		}
	})
}
