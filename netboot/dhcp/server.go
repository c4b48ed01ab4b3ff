package dhcp

// The socket loop is our own rather than insomniacslk's server4, which
// serves one socket with no notion of the interface a packet came in on
// (needed for the server identifier, the subnet of unrelayed clients and
// the ARP probe), starts an unbounded goroutine per packet (a PXE storm of a
// full rack would pile them up), cannot count what it drops, and opens its
// socket with SO_REUSEPORT, which would let a second DHCP server on the host
// silently share our port instead of failing to start. The packets
// themselves are insomniacslk's dhcpv4.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"

	"rackd/netboot"
)

// Defaults for Config's zero values.
const (
	DefaultPort           = dhcpv4.ServerPort // 67
	DefaultQueueSize      = 1024
	DefaultRequestTimeout = 5 * time.Second
	DefaultReadCoalesce   = 2 * time.Millisecond
)

// maxPacket is the read buffer size: the largest UDP payload, so that no
// oversized request is silently truncated into a different one.
const maxPacket = 65535

// Config is the DHCP server's configuration.
type Config struct {
	// Interfaces to serve on, by name: one socket each, bound to the
	// device (SO_BINDTODEVICE) on 0.0.0.0:Port, so that broadcasts from
	// directly attached clients arrive and replies leave by the same
	// link. Each must have an IPv4 address (the server identifier).
	Interfaces []string
	// Addrs is the listen-on-address mode, for tests and benchmarks: a
	// plain UDP socket bound to each address. Only unicast traffic
	// arrives there, i.e. relayed requests (perfdhcp acts as a relay) and
	// renewals; nothing is ARP-probed.
	Addrs []netip.Addr
	// Port is the server port (DefaultPort if 0). Replies always go to
	// the standard ports 68 (client) and 67 (relay).
	Port int
	// Workers is the size of the worker pool (64×GOMAXPROCS if 0): workers
	// wait on Leases (a durable ACK) and ARP probes, so more of them than
	// CPUs keeps the CPUs busy.
	Workers int
	// QueueSize bounds the requests waiting for a worker
	// (DefaultQueueSize if 0). A request that finds the queue full is
	// dropped and counted: the client retransmits (RFC 2131 section
	// 4.1), and a bounded queue keeps a storm from growing memory and
	// latency without limit.
	QueueSize int
	// OfferAttempts bounds the addresses one DHCPDISCOVER may try when
	// probes find them in use (DefaultOfferAttempts if 0).
	OfferAttempts int
	// RequestTimeout bounds the handling of one request
	// (DefaultRequestTimeout if 0); a client retransmits after about 4 s
	// anyway.
	RequestTimeout time.Duration
	// ReadCoalesce is how long a socket's reader waits, while requests
	// keep coming, before it reads again after serving what it read
	// (DefaultReadCoalesce if 0, none if negative): the requests that
	// arrive meanwhile are read, answered and sent in one system call each
	// way and one wake-up, instead of one each per request. It adds at
	// most that much to a reply; clients wait seconds before they
	// retransmit.
	ReadCoalesce time.Duration
}

// Conn is one socket the server reads requests from, and the interface it
// stands for.
type Conn struct {
	// PC is the socket; the server closes it when it stops.
	PC net.PacketConn
	// In is the interface the socket serves.
	In Interface
}

// Server is the DHCPv4 server: one reader per socket, a bounded queue and a
// fixed pool of workers running the Handler, and the sending of replies to
// where RFC 2131 section 4.1 says.
type Server struct {
	cfg     Config
	h       *Handler
	log     *slog.Logger
	m       *metrics
	jobs    chan job
	started atomic.Bool
	// ready is closed once the server serves all its sockets (Ready).
	ready chan struct{}
	// async is the Leases when it binds asynchronously (nil otherwise), and
	// pending bounds the requests waiting on it. acks counts those whose
	// completion has not yet finished (sent and counted its reply):
	// ServeConns returns only after the last one.
	async   AsyncAcker
	pending chan struct{}
	acks    sync.WaitGroup
	// conns are the sockets served, for their kernel drop counters.
	conns atomic.Pointer[[]Conn]
	// group holds the ACKs of the current group when the Leases is a
	// GroupAcker (endGroup sends them).
	group ackGroup
	// bound are the names of the interfaces served while ServeConns runs
	// (Bound).
	bound atomic.Pointer[[]string]
}

// Bound is the interfaces whose sockets are being served: empty before
// Serve has opened them all, and again once it returned. A health check
// reads it to know the DHCP service is up on every configured interface.
func (s *Server) Bound() []string {
	if b := s.bound.Load(); b != nil {
		return *b
	}
	return nil
}

// dropCounter is a socket that knows how many packets the kernel dropped
// for it (udpSocket).
type dropCounter interface {
	kernelDrops() uint64
}

// socketDrops sums the kernel's drop counters of the sockets served.
func (s *Server) socketDrops() float64 {
	conns := s.conns.Load()
	if conns == nil {
		return 0
	}
	var n uint64
	for _, c := range *conns {
		if d, ok := c.PC.(dropCounter); ok {
			n += d.kernelDrops()
		}
	}
	return float64(n)
}

type job struct {
	req  *dhcpv4.DHCPv4
	typ  string
	conn Conn
	at   time.Time
	// handover is what the reader's attempt returned (errWouldBlock, or a
	// *needsProbe carrying the offer to probe).
	handover error
}

// New returns a server that answers from leases, probes with prober (nil:
// no probing; pass an untyped nil, not a nil *arp.Set), and boots network
// clients from boot. log may be nil (no
// logs); the metrics are registered on reg (nil: not registered).
func New(cfg Config, leases Leases, prober Prober, boot netboot.BootConfig, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if leases == nil {
		return nil, errors.New("dhcp: no leases")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 64 * runtime.GOMAXPROCS(0)
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.OfferAttempts <= 0 {
		cfg.OfferAttempts = DefaultOfferAttempts
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.ReadCoalesce == 0 {
		cfg.ReadCoalesce = DefaultReadCoalesce
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, jobs: make(chan job, cfg.QueueSize), ready: make(chan struct{})}
	s.async, _ = leases.(AsyncAcker)
	if g, ok := leases.(GroupAcker); ok {
		s.group.on = true
		g.OnGroupEnd(s.endGroup)
	}
	s.pending = make(chan struct{}, cfg.Workers+cfg.QueueSize)
	m, err := newMetrics(reg, func() float64 { return float64(len(s.jobs)) }, s.socketDrops)
	if err != nil {
		return nil, fmt.Errorf("dhcp: metrics: %w", err)
	}
	s.m = m
	s.h = NewHandler(leases, prober, boot, log)
	s.h.offerAttempts = cfg.OfferAttempts
	s.h.m = m
	return s, nil
}

// Ready is closed once the server serves all its sockets. It is never
// closed if serving fails to start (a socket that cannot be opened).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Serve opens the configured interfaces and addresses and serves them until
// ctx ends (see ServeConns). It fails at once if any cannot be opened.
func (s *Server) Serve(ctx context.Context) error {
	if len(s.cfg.Interfaces) == 0 && len(s.cfg.Addrs) == 0 {
		return errors.New("dhcp: no interfaces or addresses to serve")
	}
	var conns []Conn
	closeAll := func() {
		for _, c := range conns {
			c.PC.Close()
		}
	}
	for _, name := range s.cfg.Interfaces {
		c, err := ListenInterface(name, s.cfg.Port)
		if err != nil {
			closeAll()
			return err
		}
		conns = append(conns, c)
	}
	for _, a := range s.cfg.Addrs {
		c, err := ListenAddr(a, s.cfg.Port)
		if err != nil {
			closeAll()
			return err
		}
		conns = append(conns, c)
	}
	return s.ServeConns(ctx, conns)
}

// ServeConns serves requests on conns until ctx ends, then closes them and
// returns nil once the workers and the pending asynchronous ACKs are done:
// every reply sent by then is counted. A socket that fails ends the whole
// server with the error. A Server serves once.
func (s *Server) ServeConns(ctx context.Context, conns []Conn) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("dhcp: server already started")
	}
	if len(conns) == 0 {
		return errors.New("dhcp: no sockets to serve")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, c := range conns {
		s.log.Info("dhcp: serving", "interface", c.In.Name, "addr", c.In.Addr, "local", c.PC.LocalAddr())
	}
	s.conns.Store(&conns)
	s.group.serve(ctx, s, conns)
	names := make([]string, 0, len(conns))
	for _, c := range conns {
		names = append(names, c.In.Name)
	}
	s.bound.Store(&names)
	defer s.bound.Store(nil)
	close(s.ready)

	var workers sync.WaitGroup
	for range s.cfg.Workers {
		workers.Go(func() {
			for j := range s.jobs {
				s.handle(ctx, j)
			}
		})
	}

	// Closing the sockets is what unblocks the readers.
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		for _, c := range conns {
			c.PC.Close()
		}
		close(stopped)
	}()

	var readers sync.WaitGroup
	errc := make(chan error, len(conns))
	for _, c := range conns {
		readers.Go(func() {
			if err := s.read(ctx, c); err != nil {
				errc <- err
				cancel()
			}
		})
	}
	readers.Wait()
	cancel()
	<-stopped
	// No reader sends any more: let the workers drain and stop.
	close(s.jobs)
	workers.Wait()
	// Only readers add to acks, and they are done: no Add races this Wait.
	s.acks.Wait()
	close(errc)
	return errors.Join(collect(errc)...)
}

func collect(errc <-chan error) []error {
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errs
}

// receiver is a socket that can read a datagram without its source address
// (udpSocket).
type receiver interface {
	recv(b []byte) (int, error)
}

// read serves the packets of one socket until it is closed. It parses
// each and answers itself what needs no wait (most DHCPDISCOVERs, INFORM):
// handing those to a worker would cost more than answering them. What waits
// on a durable commit or an ARP probe is queued for the workers. A socket
// that reads and writes in batches (recvmmsg, sendmmsg) is served by
// readBatched.
func (s *Server) read(ctx context.Context, c Conn) error {
	if ok, err := s.readBatched(ctx, c); ok {
		return err
	}
	buf := make([]byte, maxPacket)
	recv := func(b []byte) (int, error) {
		n, _, err := c.PC.ReadFrom(b)
		return n, err
	}
	if r, ok := c.PC.(receiver); ok {
		recv = r.recv // no source address to build: replies go where RFC 2131 says
	}
	var y yielder
	for {
		n, err := recv(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dhcp: read on %s %v: %w", c.In.Name, c.In.Addr, err)
		}
		at := time.Now()
		y.maybe(at)
		s.packet(ctx, c, buf[:n], at, nil)
	}
}

// yieldEvery is how often a socket reader gives up its processor (yielder).
// It is below the 10 ms after which Go's runtime monitor takes a goroutine
// that was not rescheduled for a long-running one.
const yieldEvery = 5 * time.Millisecond

// yielder makes a socket reader reschedule itself now and then. A reader
// spends its life in blocking reads (socket_linux.go) and returns from each
// to the same goroutine without passing through the scheduler, so to the
// runtime's monitor (sysmon) it looks like one goroutine running for ever:
// every 10 ms it forces a preemption and takes the reader's processor away
// in the middle of its read, and each time it does, the monitor goes back to
// waking every 20 µs (each wake a sleep, a system call and a context switch:
// a fifth of rackd's CPU at 2,000 DORA/s in bench-dhcp's profile, on a
// machine where a system call costs microseconds). A runtime.Gosched every
// few milliseconds is a scheduling point that costs nothing like it.
type yielder struct{ last time.Time }

// maybe yields if the last yield is more than yieldEvery before now.
func (y *yielder) maybe(now time.Time) {
	if now.Sub(y.last) < yieldEvery {
		return
	}
	y.last = now
	runtime.Gosched()
}

// packet serves one datagram that arrived at at on c. The replies the
// reader sends itself go to out (nil: sent at once).
func (s *Server) packet(ctx context.Context, c Conn, pkt []byte, at time.Time, out *outbox) {
	// parseRequest copies what it keeps, so pkt's buffer is free again at once.
	req, err := parseRequest(pkt)
	if err != nil {
		s.m.received.WithLabelValues(typeInvalid).Inc()
		s.m.drop(reasonMalformed)
		s.log.Debug("dhcp: unparseable packet", "interface", c.In.Name, "len", len(pkt), "err", err)
		return
	}
	j := job{req: req, typ: typeLabel(messageType(req)), conn: c, at: at}
	s.m.received.WithLabelValues(j.typ).Inc()
	if s.async != nil && messageType(req) == dhcpv4.MessageTypeRequest {
		// Answered from the durable commit's completion: no worker
		// waits for it. As many may be pending as workers and queue
		// could hold; beyond that they are dropped, and counted.
		select {
		case s.pending <- struct{}{}:
		default:
			s.m.drop(reasonQueueFull)
			return
		}
		s.acks.Add(1)
		err := s.h.requestAsync(ctx, req, c.In, s.async, func(reply *dhcpv4.DHCPv4, err error) {
			if s.group.on {
				s.group.add(ctx, s, j, reply, err) // sent, and done, at endGroup
				return
			}
			s.finish(ctx, j, reply, err)
			<-s.pending
			s.acks.Done()
		})
		if err != nil {
			s.finishTo(ctx, j, nil, err, out)
			<-s.pending
			s.acks.Done()
		}
		return
	}
	reply, err := s.h.serve(ctx, req, c.In, false)
	if !errors.Is(err, errWouldBlock) {
		s.finishTo(ctx, j, reply, err, out)
		return
	}
	j.handover = err
	select {
	case s.jobs <- j:
	default:
		s.m.drop(reasonQueueFull)
	}
}

// ackGroup is the ACKs completed in the current group of a GroupAcker,
// queued per socket until the group ends.
type ackGroup struct {
	on  bool // the Leases is a GroupAcker
	mu  sync.Mutex
	ctx context.Context
	// boxes has an outbox per socket served (set by serve); nil where
	// there are none (replies sent at once).
	boxes map[net.PacketConn]*outbox
	// n is the completions queued since the last end: their pending slot
	// and acks count are released once their replies are sent.
	n int
}

// serve sets up the outboxes of conns, before their readers start.
func (g *ackGroup) serve(ctx context.Context, s *Server, conns []Conn) {
	if !g.on {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ctx = ctx
	g.boxes = make(map[net.PacketConn]*outbox, len(conns))
	for _, c := range conns {
		g.boxes[c.PC] = newOutbox(s, c)
	}
}

// add queues the reply to a completed request (or accounts for why there
// is none) until the group ends.
func (g *ackGroup) add(ctx context.Context, s *Server, j job, reply *dhcpv4.DHCPv4, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.finishTo(ctx, j, reply, err, g.boxes[j.conn.PC])
	g.n++
}

// endGroup sends the ACKs of the group that ended; only then are their
// requests done (ServeConns waits for them).
func (s *Server) endGroup() {
	g := &s.group
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.boxes {
		o.flush(g.ctx)
	}
	for range g.n {
		<-s.pending
		s.acks.Done()
	}
	g.n = 0
}

// handle runs the handler on a request that may wait, and sends the reply.
func (s *Server) handle(ctx context.Context, j job) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	reply, err := s.h.resume(rctx, j.req, j.conn.In, j.handover)
	cancel()
	s.finish(ctx, j, reply, err)
}

// finish sends the reply to a handled request, or accounts for why there is
// none.
func (s *Server) finish(ctx context.Context, j job, reply *dhcpv4.DHCPv4, err error) {
	s.finishTo(ctx, j, reply, err, nil)
}

// finishTo is finish with the reply queued to out (nil: sent at once).
func (s *Server) finishTo(ctx context.Context, j job, reply *dhcpv4.DHCPv4, err error, out *outbox) {
	in, req, typ := j.conn.In, j.req, j.typ
	debug := s.log.Enabled(ctx, slog.LevelDebug)
	switch {
	case err != nil:
		if reason, ok := dropReason(err); ok {
			s.m.drop(reason)
			s.m.observe(typ, outcomeDropped, 0, false)
			if debug {
				s.log.Debug("dhcp: dropped", "type", typ, "mac", req.ClientHWAddr.String(), "xid", req.TransactionID, "interface", in.Name, "reason", err)
			}
			return
		}
		s.m.observe(typ, outcomeError, 0, false)
		if ctx.Err() == nil {
			s.log.Warn("dhcp: request failed", "type", typ, "mac", req.ClientHWAddr.String(), "xid", req.TransactionID, "interface", in.Name, "err", err)
		}
		return
	case reply == nil:
		s.m.observe(typ, outcomeNone, 0, false)
		if debug {
			s.log.Debug("dhcp: handled", "type", typ, "mac", req.ClientHWAddr.String(), "xid", req.TransactionID, "interface", in.Name)
		}
		return
	}
	defer recycle(reply) // the server's own reply: nothing else holds it
	dst := replyAddr(req, reply)
	if out != nil {
		err = out.add(ctx, reply, dst)
	} else {
		err = send(j.conn.PC, reply, dst)
	}
	if err != nil {
		s.m.observe(typ, outcomeError, 0, false)
		if ctx.Err() == nil {
			s.log.Warn("dhcp: send reply", "type", typ, "mac", req.ClientHWAddr.String(), "to", dst, "err", err)
		}
		return
	}
	outcome := replyOutcome(reply)
	s.m.observe(typ, outcome, time.Since(j.at), true)
	if debug {
		s.log.Debug("dhcp: replied", "type", typ, "reply", outcome, "mac", req.ClientHWAddr.String(), "xid", req.TransactionID,
			"interface", in.Name, "yiaddr", reply.YourIPAddr.String(), "to", dst)
	}
}

// send writes reply to dst, encoded in a pooled buffer.
func send(pc net.PacketConn, reply *dhcpv4.DHCPv4, dst net.Addr) error {
	bp := replyBufs.Get().(*[]byte)
	pkt := appendReply((*bp)[:0], reply)
	_, err := pc.WriteTo(pkt, dst)
	*bp = pkt[:0]
	replyBufs.Put(bp)
	return err
}

// replyAddr is where RFC 2131 section 4.1 sends a reply: to the relay
// (giaddr, port 67) if there is one; a DHCPNAK otherwise by broadcast; to
// ciaddr if the client has an address (renewing, INFORM); else by broadcast
// to port 68.
//
// Section 4.1 also allows unicasting to yiaddr when the client did not set
// the broadcast bit; that needs the client's MAC in the ARP table before it
// has answered ARP (a raw L2 send), and broadcast reaches every client, so
// the broadcast is always used.
func replyAddr(req, reply *dhcpv4.DHCPv4) *net.UDPAddr {
	switch {
	case isSet(req.GatewayIPAddr):
		return &net.UDPAddr{IP: req.GatewayIPAddr.To4(), Port: dhcpv4.ServerPort}
	case messageType(reply) == dhcpv4.MessageTypeNak:
		return &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	case isSet(req.ClientIPAddr):
		return &net.UDPAddr{IP: req.ClientIPAddr.To4(), Port: dhcpv4.ClientPort}
	}
	return &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
}
