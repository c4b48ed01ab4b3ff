package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	miekg "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

// Defaults for the zero fields of Config.
const (
	// DefaultTTL is short because nothing invalidates resolvers' caches
	// when the store changes: an address moved is wrong for at most this.
	DefaultTTL = 30 * time.Second
	// DefaultUDPSize is the EDNS0 payload size advertised (RFC 6891
	// section 6.2.5): 1232 bytes fits an IPv6 packet in a 1280-byte MTU,
	// so no answer relies on IP fragmentation (the DNS Flag Day 2020 value).
	DefaultUDPSize = 1232
	// DefaultMaxInFlight bounds concurrent queries.
	DefaultMaxInFlight = 1024
	// DefaultQueryTimeout bounds the Zone calls of one query.
	DefaultQueryTimeout = 2 * time.Second
)

// Timers of the synthesised SOA (RFC 1035 section 3.3.13). Nothing
// transfers rackd's zones (AXFR and IXFR are refused), so these matter only
// to tools that read them; they follow the RFC 1912 section 2.2 advice.
const (
	soaRefresh = 3600    // 1h
	soaRetry   = 900     // 15m, shorter than refresh
	soaExpire  = 1209600 // 2 weeks
)

// ErrServing is returned by Serve and ServeConns when the Server is already
// serving or has served: a Server serves once.
var ErrServing = errors.New("dns: server already started")

// Config says where and how the server answers. Every field but Listen has a
// default for its zero value.
type Config struct {
	// Listen is the host:port that Serve binds, for UDP and TCP alike.
	// Port 0 picks a free port (the same for both); Addr tells which.
	Listen string
	// TTL of every answer record. Default DefaultTTL.
	TTL time.Duration
	// NegativeTTL is how long resolvers may cache NXDOMAIN and NODATA: it
	// is the SOA MINIMUM field and the TTL of the SOA put in negative
	// answers (RFC 2308 sections 4 and 5). Default: TTL.
	NegativeTTL time.Duration
	// NS is the name server's name, the SOA MNAME and the NS record of
	// every managed zone. Default "ns.<zone>" in each zone.
	NS string
	// NSAddrs are the addresses the NS name resolves to when it lies in a
	// managed zone and the Zone knows no address for it; they are also the
	// glue of NS answers, so that the zone's own NS name resolves. Default:
	// the host of Listen, when that is an IP address and not unspecified.
	NSAddrs []netip.Addr
	// Hostmaster is the SOA RNAME, a mailbox in domain-name form
	// ("hostmaster.example.", RFC 1035 section 8). Default
	// "hostmaster.<zone>".
	Hostmaster string
	// UDPSize is the EDNS0 UDP payload size advertised, and the most sent
	// over UDP to a client that advertises more. At least 512. Default
	// DefaultUDPSize.
	UDPSize uint16
	// MaxInFlight bounds the queries answered at once. Over UDP a query
	// beyond it is dropped and counted (the client retries, and dropping
	// is cheaper than queueing in a flood); over TCP it waits. Default
	// DefaultMaxInFlight.
	MaxInFlight int
	// QueryTimeout bounds the Zone calls of one query; a query that runs
	// out is answered SERVFAIL. Default DefaultQueryTimeout.
	QueryTimeout time.Duration
}

// withDefaults fills in the zero fields and checks the names.
func (c Config) withDefaults() (Config, error) {
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.NegativeTTL <= 0 {
		c.NegativeTTL = c.TTL
	}
	if c.UDPSize < miekg.MinMsgSize {
		if c.UDPSize != 0 {
			return c, fmt.Errorf("dns: UDP size %d is below %d", c.UDPSize, miekg.MinMsgSize)
		}
		c.UDPSize = DefaultUDPSize
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.QueryTimeout <= 0 {
		c.QueryTimeout = DefaultQueryTimeout
	}
	for _, n := range []*string{&c.NS, &c.Hostmaster} {
		if *n == "" {
			continue
		}
		*n = miekg.CanonicalName(*n)
		if _, ok := miekg.IsDomainName(*n); !ok {
			return c, fmt.Errorf("dns: %q is not a domain name", *n)
		}
	}
	if len(c.NSAddrs) == 0 {
		if ap, err := netip.ParseAddrPort(c.Listen); err == nil && !ap.Addr().IsUnspecified() {
			c.NSAddrs = []netip.Addr{ap.Addr().Unmap().WithZone("")}
		}
	}
	return c, nil
}

// Server is rackd's authoritative DNS server. It answers every query from
// its Zone, with no cache of its own, so that a change in the store shows in
// the very next answer. Create it with New.
type Server struct {
	cfg    Config
	cfgErr error
	zone   Zone
	log    *slog.Logger
	m      *metrics
	now    func() time.Time // SOA serials; tests pin it
	sem    chan struct{}    // one slot per query in flight

	started atomic.Bool
	ready   chan struct{}
	mu      sync.Mutex
	addr    netip.AddrPort
}

// New makes a server that answers from zone. A nil log discards; a nil reg
// registers no metrics. Errors in cfg are reported by Serve.
func New(cfg Config, zone Zone, log *slog.Logger, reg prometheus.Registerer) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := cfg.withDefaults()
	return &Server{
		cfg:    cfg,
		cfgErr: err,
		zone:   zone,
		log:    log,
		m:      newMetrics(reg),
		now:    time.Now,
		sem:    make(chan struct{}, cfg.MaxInFlight),
		ready:  make(chan struct{}),
	}
}

// Ready is closed once the server is serving on all its sockets (and Addr is
// known). It is never closed if serving fails to start.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the server is serving on, valid once Ready is closed:
// the UDP socket's (Serve binds TCP on the same port), or the TCP
// listener's when ServeConns was given no UDP socket.
func (s *Server) Addr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Serve binds UDP and TCP on cfg.Listen and answers queries until ctx is
// done, then stops gracefully: the sockets close at once, and queries being
// answered finish (bounded by QueryTimeout). It returns nil after ctx is
// done, or the error that stopped it.
func (s *Server) Serve(ctx context.Context) error {
	if s.cfgErr != nil {
		return s.cfgErr
	}
	if s.cfg.Listen == "" {
		return errors.New("dns: no listen address")
	}
	if s.started.Load() {
		return ErrServing
	}
	pc, ln, err := listen(ctx, s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("dns: listening on %s: %w", s.cfg.Listen, err)
	}
	return s.ServeConns(ctx, pc, ln)
}

// listen binds UDP, then TCP on the same address and port. Both must share
// it: a client repeats a truncated UDP answer's query over TCP to the same
// address and port (RFC 1035 section 4.2.2, RFC 7766 section 5). TCP binds
// the address UDP got, so a host name resolving to several addresses cannot
// split them. With port 0 the port UDP got may be taken for TCP, so it
// tries again a few times.
func listen(ctx context.Context, addr string) (net.PacketConn, net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	var lc net.ListenConfig
	for try := 0; ; try++ {
		pc, err := lc.ListenPacket(ctx, "udp", addr)
		if err != nil {
			return nil, nil, err
		}
		ln, err := lc.Listen(ctx, "tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		_ = pc.Close()
		if (port != "0" && port != "") || try == 9 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, err
		}
	}
}

// ServeConns is Serve on sockets the caller made (the agent binding at
// startup, a test, socket activation). Either may be nil, not both. The
// server closes them.
func (s *Server) ServeConns(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	closeAll := func() {
		if pc != nil {
			_ = pc.Close()
		}
		if ln != nil {
			_ = ln.Close()
		}
	}
	if err := s.take(pc, ln); err != nil {
		closeAll()
		return err
	}
	defer closeAll() // if a server failed before taking ownership
	s.setAddr(pc, ln)
	// Queries run on a context that outlives ctx, so that those in flight
	// at shutdown are answered rather than failed; QueryTimeout bounds them.
	return s.run(ctx, s.servers(context.WithoutCancel(ctx), pc, ln))
}

// take checks that the server may serve pc and ln: its configuration is
// valid, there is a socket, and it is not serving already (from then on it
// is).
func (s *Server) take(pc net.PacketConn, ln net.Listener) error {
	if s.cfgErr != nil {
		return s.cfgErr
	}
	if pc == nil && ln == nil {
		return errors.New("dns: no socket to serve")
	}
	if !s.started.CompareAndSwap(false, true) {
		return ErrServing
	}
	return nil
}

// setAddr records the address Addr reports: UDP's, else TCP's.
func (s *Server) setAddr(pc net.PacketConn, ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pc != nil {
		s.addr = addrPort(pc.LocalAddr())
	} else {
		s.addr = addrPort(ln.Addr())
	}
}

// servers makes a miekg/dns server for each socket given, answering on
// qctx.
func (s *Server) servers(qctx context.Context, pc net.PacketConn, ln net.Listener) []*miekg.Server {
	var servers []*miekg.Server
	if pc != nil {
		servers = append(servers, &miekg.Server{
			PacketConn: pc,
			Handler:    s.handler(qctx, false),
			// The read buffer: queries are small, but EDNS options
			// (cookies, padding) may take a query past 512 bytes.
			UDPSize:        4096,
			MsgAcceptFunc:  accept,
			MsgInvalidFunc: s.invalid,
		})
	}
	if ln != nil {
		servers = append(servers, &miekg.Server{
			Listener:       ln,
			Handler:        s.handler(qctx, true),
			MsgAcceptFunc:  accept,
			MsgInvalidFunc: s.invalid,
		})
	}
	return servers
}

// run serves on every server until ctx is done or one fails, then shuts
// them all down; Ready is closed once all have started.
func (s *Server) run(ctx context.Context, servers []*miekg.Server) error {
	g, gctx := errgroup.WithContext(ctx)
	var startedAll []chan struct{}
	for _, srv := range servers {
		started, done := make(chan struct{}), make(chan struct{})
		startedAll = append(startedAll, started)
		srv.NotifyStartedFunc = func() { close(started) }
		g.Go(func() error {
			defer close(done)
			return serveOne(gctx, srv)
		})
		g.Go(func() error {
			s.shutdownOne(gctx, srv, started, done)
			return nil
		})
	}
	go s.signalReady(gctx, startedAll)
	return g.Wait()
}

// serveOne serves srv until it is shut down; stopping for any other reason
// than gctx ending is an error.
func serveOne(gctx context.Context, srv *miekg.Server) error {
	err := srv.ActivateAndServe()
	if gctx.Err() != nil {
		return nil // stopped by us
	}
	if err == nil {
		err = errors.New("stopped unexpectedly")
	}
	return fmt.Errorf("dns: serving %s: %w", network(srv), err)
}

// shutdownOne shuts srv down when gctx ends, letting the queries it is
// answering finish; it returns at once when srv stops by itself.
func (s *Server) shutdownOne(gctx context.Context, srv *miekg.Server, started, done <-chan struct{}) {
	select {
	case <-gctx.Done():
	case <-done:
		return
	}
	// Shutting down a miekg server that has not started yet is a no-op,
	// after which it would start and serve forever.
	select {
	case <-started:
	case <-done:
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.QueryTimeout+time.Second)
	defer cancel()
	if err := srv.ShutdownContext(sctx); err != nil {
		s.log.Warn("dns: shutdown", "net", network(srv), "err", err)
	}
}

// signalReady closes Ready when every server has started; if one fails
// first, never (gctx ends when run returns, and so does this).
func (s *Server) signalReady(gctx context.Context, startedAll []chan struct{}) {
	for _, started := range startedAll {
		select {
		case <-started:
		case <-gctx.Done():
			return
		}
	}
	close(s.ready)
}

// network names a miekg server's transport, for messages.
func network(srv *miekg.Server) string {
	if srv.PacketConn != nil {
		return "udp"
	}
	return "tcp"
}

// addrPort reads a socket address, whatever the socket's kind.
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort()
	case *net.TCPAddr:
		return a.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// accept is the first look at a message, at its header alone. A response
// (QR set) is never answered: answering it could start a loop between two
// servers, or reflect a spoofed packet (RFC 1035 section 4.1.1). Everything
// else is parsed and left to the handler, which decides FORMERR and NOTIMP
// itself so that they are counted like any other answer.
func accept(dh miekg.Header) miekg.MsgAcceptAction {
	const qr = 1 << 15
	if dh.Bits&qr != 0 {
		return miekg.MsgIgnore
	}
	return miekg.MsgAccept
}

// invalid counts the messages miekg/dns could not parse. It answers FORMERR
// itself when the header was readable and drops the message otherwise.
func (s *Server) invalid(_ []byte, err error) {
	s.m.malformed.Inc()
	s.log.Debug("dns: malformed message", "err", err)
}

// handler adapts miekg/dns's handler to respond, with the bound on queries
// in flight and the metrics.
func (s *Server) handler(ctx context.Context, tcp bool) miekg.Handler {
	return miekg.HandlerFunc(func(w miekg.ResponseWriter, req *miekg.Msg) {
		if tcp {
			// A TCP client waits for its answer in order; it is not
			// retrying, so make it wait rather than drop.
			s.sem <- struct{}{}
		} else {
			select {
			case s.sem <- struct{}{}:
			default:
				s.m.dropped.Inc()
				return
			}
		}
		defer func() { <-s.sem }()

		start := time.Now()
		qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
		defer cancel()
		wire, rcode := s.respond(qctx, req, tcp)
		if wire == nil {
			return
		}
		// Counted before the reply leaves, so that a client holding its
		// answer finds it counted.
		qtype := qtypeLabel(req)
		s.m.queries.WithLabelValues(qtype, rcodeLabel(rcode)).Inc()
		s.m.duration.Observe(time.Since(start).Seconds())
		if _, err := w.Write(wire); err != nil {
			s.log.Debug("dns: writing reply", "remote", w.RemoteAddr().String(), "err", err)
		}
		if s.log.Enabled(qctx, slog.LevelDebug) {
			var qname string
			if len(req.Question) > 0 {
				qname = req.Question[0].Name
			}
			s.log.LogAttrs(qctx, slog.LevelDebug, "dns: query",
				slog.String("remote", w.RemoteAddr().String()), slog.Bool("tcp", tcp),
				slog.String("qname", qname), slog.String("qtype", qtype),
				slog.String("rcode", rcodeLabel(rcode)))
		}
	})
}
