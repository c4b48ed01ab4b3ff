package dns

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeZone is an in-memory Zone. Every method is safe for concurrent use,
// so a test may change it while the server answers.
type fakeZone struct {
	mu    sync.Mutex
	zones []string
	fwd   map[string][]netip.Addr
	rev   map[netip.Addr]string
	err   error // returned by every method when set

	// When block is set, Forward signals entered and waits for block.
	block   chan struct{}
	entered chan struct{}

	calls atomic.Int64
}

// newFakeZone holds the data most tests use: a forward domain, a v4 and a
// v6 reverse zone.
func newFakeZone() *fakeZone {
	z := &fakeZone{
		zones: []string{"rack.example.", "0.10.in-addr.arpa.", "8.b.d.0.1.0.0.2.ip6.arpa."},
		fwd:   map[string][]netip.Addr{},
		rev:   map[netip.Addr]string{},
	}
	z.set("node1.rack.example.", "10.0.0.11", "2001:db8::11")
	z.set("v6only.rack.example.", "2001:db8::12")
	z.set("v4only.rack.example.", "10.0.0.13")
	z.set("mapped.rack.example.", "::ffff:10.0.0.14")
	z.set("sw1.mgmt.rack.example.", "10.0.1.1")
	var many []string
	for i := range 100 {
		many = append(many, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}).String())
	}
	z.set("many.rack.example.", many...)
	z.setPTR("10.0.0.11", "node1.rack.example.")
	z.setPTR("2001:db8::11", "node1.rack.example")
	return z
}

// set gives name these addresses (none: the name is gone).
func (z *fakeZone) set(name string, addrs ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	z.fwd[name] = as
}

func (z *fakeZone) setPTR(addr, name string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rev[netip.MustParseAddr(addr)] = name
}

func (z *fakeZone) setErr(err error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.err = err
}

func (z *fakeZone) Authority(_ context.Context, name string) (string, bool, error) {
	z.calls.Add(1)
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err != nil {
		return "", false, z.err
	}
	best := ""
	for _, zone := range z.zones {
		if miekg.IsSubDomain(zone, name) && len(zone) > len(best) {
			best = zone
		}
	}
	return best, best != "", nil
}

func (z *fakeZone) Forward(ctx context.Context, name string) ([]netip.Addr, error) {
	z.calls.Add(1)
	z.mu.Lock()
	block, entered := z.block, z.entered
	z.mu.Unlock()
	if block != nil {
		select {
		case entered <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err != nil {
		return nil, z.err
	}
	return append([]netip.Addr(nil), z.fwd[name]...), nil
}

func (z *fakeZone) Reverse(_ context.Context, ip netip.Addr) (string, error) {
	z.calls.Add(1)
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err != nil {
		return "", z.err
	}
	return z.rev[ip], nil
}

// testNow pins SOA serials.
var testNow = time.Unix(1700000000, 0)

// testLogger writes the server's log into the test's output, shown when the
// test fails or runs with -v.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newServer makes a server on zone with a pinned clock and its own registry.
func newServer(t testing.TB, cfg Config, zone Zone) (*Server, *prometheus.Registry) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	reg := prometheus.NewRegistry()
	s := New(cfg, zone, testLogger(t), reg)
	s.now = func() time.Time { return testNow }
	return s, reg
}

// startServer runs a server on 127.0.0.1:0 until the test ends, and checks
// that it then stops cleanly.
func startServer(t testing.TB, cfg Config, zone Zone) (*Server, *prometheus.Registry) {
	t.Helper()
	s, reg := newServer(t, cfg, zone)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	select {
	case <-s.Ready():
	case err := <-errc:
		cancel()
		t.Fatalf("Serve: %v", err)
	case <-time.After(5 * time.Second):
		cancel()
		t.Fatal("server not ready after 5s")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Serve returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return within 10s of cancel")
		}
	})
	return s, reg
}

// exchange sends m over UDP or TCP and returns the reply.
func exchange(t testing.TB, addr netip.AddrPort, m *miekg.Msg, tcp bool) *miekg.Msg {
	t.Helper()
	r, err := tryExchange(addr, m, tcp, 2*time.Second)
	if err != nil {
		t.Fatalf("exchange %v over tcp=%v: %v", m.Question, tcp, err)
	}
	return r
}

func tryExchange(addr netip.AddrPort, m *miekg.Msg, tcp bool, timeout time.Duration) (*miekg.Msg, error) {
	c := &miekg.Client{Net: "udp", Timeout: timeout}
	if tcp {
		c.Net = "tcp"
	}
	r, _, err := c.Exchange(m, addr.String())
	return r, err
}

// query is a question with RD clear, as a resolver asks an authoritative
// server.
func query(name string, qtype uint16) *miekg.Msg {
	m := new(miekg.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = false
	return m
}

// rrStrings renders records for comparison, OPT left out.
func rrStrings(rrs []miekg.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype == miekg.TypeOPT {
			continue
		}
		out = append(out, rr.String())
	}
	return out
}
