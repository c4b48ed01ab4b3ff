package tftp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/netboot/files"
)

// Defaults for the zero fields of Config.
const (
	// DefaultMaxTransfers bounds transfers running at once. 64 saturates
	// a 10 Gb/s link with lock-step 1468-byte blocks at LAN round trips,
	// and keeps a PXE storm of a full rack from exhausting sockets.
	DefaultMaxTransfers = 64
	// DefaultMaxQueued bounds requests waiting for a transfer slot. Each
	// holds an open file and a goroutine.
	DefaultMaxQueued = 1024
	// DefaultQueueTimeout is the longest a request waits for a slot. PXE
	// ROMs retransmit a silent RRQ a few times over some tens of seconds
	// before giving up; a request still waiting after this long is
	// answered "busy" rather than served to a client that has left.
	DefaultQueueTimeout = 10 * time.Second
	// DefaultSmallFileSize: files up to this size skip the queue (see the
	// package doc). 64 KiB is 45 blocks of 1468 bytes, more than any config.
	DefaultSmallFileSize = 64 << 10
	// DefaultTimeout is the retransmission timeout, unless the client
	// asks for another (RFC 2349). On a LAN a second is a long time, and
	// a client that vanished holds its slot for Retries times this.
	DefaultTimeout = 2 * time.Second
	// DefaultRetries is how many times a packet is sent before the
	// transfer is given up.
	DefaultRetries = 5
	// DefaultOpenTimeout bounds Source.Open, which may render a config
	// from the store.
	DefaultOpenTimeout = 5 * time.Second
	// DefaultShutdownGrace is how long transfers may go on after Serve's
	// context ends before they are aborted.
	DefaultShutdownGrace = 10 * time.Second
	// DefaultMaxWindowSize caps the RFC 7440 windowsize a client may ask
	// for. 64 blocks of 1468 bytes are 94 KB in flight per transfer: at
	// LAN round trips that is more than a gigabit per client, and it fits
	// the default socket buffers of the client.
	DefaultMaxWindowSize = 64
)

// ErrServing is returned by Serve and ServeConn when the Server is already
// serving or has served: a Server serves once.
var ErrServing = errors.New("tftp: server already started")

// Config says where and how the server serves. Every field but Listen has a
// default for its zero value.
type Config struct {
	// Listen is the host:port that Serve binds (UDP), normally ":69".
	// Port 0 picks a free port; Addr tells which.
	Listen string
	// MaxTransfers bounds transfers running at once. Default
	// DefaultMaxTransfers.
	MaxTransfers int
	// MaxQueued bounds requests waiting for a slot; beyond it requests
	// that need a slot are answered "busy" at once (small files never
	// wait, so never count). Default DefaultMaxQueued.
	MaxQueued int
	// QueueTimeout is the longest a request waits for a slot. Default
	// DefaultQueueTimeout.
	QueueTimeout time.Duration
	// SmallFileSize: files of at most this many bytes are sent at once,
	// without a slot. Default DefaultSmallFileSize; negative: every
	// transfer takes a slot.
	SmallFileSize int64
	// Timeout is the retransmission timeout when the client does not ask
	// for one. Default DefaultTimeout.
	Timeout time.Duration
	// Retries is the number of sends of a packet before giving up. Default
	// DefaultRetries.
	Retries int
	// MaxBlockSize caps the negotiated blksize below the interface's MTU.
	// Zero: the MTU alone (less IP and UDP headers) caps it.
	MaxBlockSize int
	// MaxWindowSize caps the negotiated windowsize (RFC 7440). Default
	// DefaultMaxWindowSize; 1 turns windowing off (the option is then not
	// acknowledged).
	MaxWindowSize int
	// OpenTimeout bounds each Source.Open. Default DefaultOpenTimeout.
	OpenTimeout time.Duration
	// ShutdownGrace is how long transfers in flight may finish after
	// Serve's context ends. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
}

// withDefaults fills in the zero fields and checks the others.
func (c Config) withDefaults() (Config, error) {
	if c.MaxTransfers < 0 || c.MaxQueued < 0 || c.QueueTimeout < 0 || c.Timeout < 0 ||
		c.Retries < 0 || c.OpenTimeout < 0 || c.ShutdownGrace < 0 || c.MaxWindowSize < 0 {
		return c, errors.New("tftp: negative limit in config")
	}
	if c.MaxBlockSize != 0 && (c.MaxBlockSize < 512 || c.MaxBlockSize > maxBlockSize) {
		// RFC 2348 allows 8, but a server capping a client below 512
		// makes no sense on any network that boots machines.
		return c, fmt.Errorf("tftp: MaxBlockSize %d outside 512-%d", c.MaxBlockSize, maxBlockSize)
	}
	if c.MaxWindowSize > maxWindowSize {
		return c, fmt.Errorf("tftp: MaxWindowSize %d above %d", c.MaxWindowSize, maxWindowSize)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxTransfers, DefaultMaxTransfers)
	def(&c.MaxQueued, DefaultMaxQueued)
	def(&c.Retries, DefaultRetries)
	def(&c.MaxWindowSize, DefaultMaxWindowSize)
	defDur(&c.QueueTimeout, DefaultQueueTimeout)
	defDur(&c.Timeout, DefaultTimeout)
	defDur(&c.OpenTimeout, DefaultOpenTimeout)
	defDur(&c.ShutdownGrace, DefaultShutdownGrace)
	if c.SmallFileSize == 0 {
		c.SmallFileSize = DefaultSmallFileSize
	}
	return c, nil
}

// Server is rackd's TFTP server. Create it with New.
type Server struct {
	cfg Config
	src files.Source
	log *slog.Logger
	m   *metrics
	mtu *mtuCache

	slots  chan struct{} // one per running transfer (not small files)
	queued atomic.Int64  // requests waiting for a slot

	// clients holds the address:port of every request being handled, to
	// recognise retransmitted requests (see the package doc).
	clientsMu sync.Mutex
	clients   map[netip.AddrPort]struct{}

	// active holds the transfers sending, for the end of the shutdown
	// grace to wake them; wg counts every request being handled.
	activeMu sync.Mutex
	active   map[*transfer]struct{}
	stopped  bool
	stop     chan struct{} // closed when the shutdown grace is over
	wg       sync.WaitGroup

	// running counts transfers holding a slot, and peak the most at
	// once; tests read peak.
	running atomic.Int64
	peak    atomic.Int64

	started atomic.Bool
	ready   chan struct{}
	mu      sync.Mutex
	addr    netip.AddrPort
}

// New makes a server of src. A nil log discards; a nil reg registers no
// metrics.
func New(cfg Config, src files.Source, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("tftp: no files.Source")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		cfg:     cfg,
		src:     src,
		log:     log,
		m:       newMetrics(reg),
		mtu:     newMTUCache(),
		slots:   make(chan struct{}, cfg.MaxTransfers),
		clients: make(map[netip.AddrPort]struct{}),
		active:  make(map[*transfer]struct{}),
		stop:    make(chan struct{}),
		ready:   make(chan struct{}),
	}, nil
}

// Ready is closed once the server is serving (and Addr is known). It is
// never closed if serving fails to start.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the server serves on, valid once Ready is closed.
func (s *Server) Addr() netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Serve binds cfg.Listen and serves until ctx is done, then stops
// gracefully: the socket closes at once, queued requests are answered
// "shutting down", and transfers in flight may finish for ShutdownGrace,
// after which each is aborted with an ERROR to its client. It returns nil
// after ctx is done, or the error that stopped it.
func (s *Server) Serve(ctx context.Context) error {
	if s.cfg.Listen == "" {
		return errors.New("tftp: no listen address")
	}
	if s.started.Load() {
		return ErrServing
	}
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("tftp: listening on %s: %w", s.cfg.Listen, err)
	}
	return s.ServeConn(ctx, pc.(*net.UDPConn))
}

// ServeConn is Serve on a socket the caller bound (the agent at startup, a
// test). The server closes conn. It asks the kernel for each request's
// destination address and interface (IP_PKTINFO): the answer goes out from
// the address the client asked, and blksize is capped at that interface's
// MTU; without them (a platform that has no such option) replies come from
// the system's choice of address and blksize is capped at an Ethernet MTU's
// worth.
//
// conn must belong to the process's own network namespace: each transfer's
// socket (its TID, RFC 1350 section 4) is opened on whatever thread runs
// the transfer, so a socket opened in another namespace would answer from
// the wrong one.
func (s *Server) ServeConn(ctx context.Context, conn *net.UDPConn) error {
	if !s.started.CompareAndSwap(false, true) {
		_ = conn.Close()
		return ErrServing
	}
	defer conn.Close()
	ap := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	s.mu.Lock()
	s.addr = ap
	s.mu.Unlock()
	if err := setPktInfo(conn); err != nil {
		s.log.Warn("tftp: no destination addresses of requests; replies use the system's source address", "err", err)
	}
	s.mtu.conn = conn

	errc := make(chan error, 1)
	go func() { errc <- s.readLoop(ctx, conn) }()
	close(s.ready)
	s.log.Info("tftp: serving", "addr", ap.String(), "max_transfers", s.cfg.MaxTransfers)

	var serr error
	select {
	case serr = <-errc:
	case <-ctx.Done():
	}
	_ = conn.Close()
	if serr == nil {
		<-errc
	}
	// Transfers in flight may finish within the grace; then they are
	// woken and abort at once.
	grace := time.AfterFunc(s.cfg.ShutdownGrace, s.abortAll)
	defer grace.Stop()
	s.wg.Wait()
	if serr != nil {
		return fmt.Errorf("tftp: serving: %w", serr)
	}
	s.log.Info("tftp: stopped", "addr", ap.String())
	return nil
}

// abortAll ends the shutdown grace: every transfer is woken and stops.
func (s *Server) abortAll() {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	if !s.stopped {
		s.stopped = true
		close(s.stop)
	}
	for t := range s.active {
		_ = t.conn.SetReadDeadline(time.Now())
	}
}

// readLoop reads requests from the server socket until it is closed. Each
// request is handled on its own goroutine, with its own socket.
func (s *Server) readLoop(ctx context.Context, conn *net.UDPConn) error {
	buf := make([]byte, maxRequest)
	oob := make([]byte, 256)
	var errs int
	for {
		n, oobn, _, from, err := conn.ReadMsgUDPAddrPort(buf, oob)
		received := time.Now()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Transient (ENOMEM, an ICMP error surfacing): go on,
			// but not forever in a tight loop.
			errs++
			s.log.Warn("tftp: reading requests", "err", err)
			if errs > 100 {
				return fmt.Errorf("reading requests: %w", err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		errs = 0
		req, err := parseRequest(buf[:n])
		if err != nil {
			// Not answered: an ERROR to whatever sent an ACK or
			// an ERROR to port 69 (another server, a spoofed
			// source) could start an exchange of errors.
			s.m.outcome(outcomeMalformed)
			s.log.Debug("tftp: malformed packet", "client", from.String(), "err", err)
			continue
		}
		dst, ifindex := parsePktInfo(oob[:oobn])
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if rest := s.begin(ctx, req, from, dst, ifindex, received); rest != nil {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				rest()
			}()
		}
	}
}

// Errors of a transfer: outcomes for the metrics, messages for the client.
var (
	errBusy     = errors.New("tftp: no transfer slot")
	errShutdown = errors.New("tftp: shutting down")
)

// clientError is an error whose message (and code) goes to the client.
type clientError struct {
	code uint16
	msg  string
	// detail, when set, follows msg on the wire ("File not found:
	// <detail>"): which file and why, so that the operator watching a
	// client sees the cause rather than only rackd's log.
	detail  string
	outcome string
	err     error
}

// maxErrMsg bounds the message of an ERROR packet: a client's receive
// buffer holds a 512-byte block (tftp-hpa's and firmware's do), and the
// packet has 4 bytes of header and a NUL.
const maxErrMsg = 400

// wire is the message sent in the ERROR packet: msg and detail, in
// printable ASCII (the field is netascii, RFC 1350 section 5), bounded.
func (e *clientError) wire() string {
	m := e.msg
	if e.detail != "" {
		m += ": " + e.detail
	}
	b := make([]byte, 0, min(len(m), maxErrMsg))
	for i := 0; i < len(m) && len(b) < maxErrMsg; i++ {
		c := m[i]
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return string(b)
}

func (e *clientError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}
func (e *clientError) Unwrap() error { return e.err }

// begin answers a request up to its first packet, on the read loop's
// goroutine, and returns the rest of the work, to run on a goroutine of its
// own (nil when there is none). Done inline, a config's answer does not
// wait behind the goroutines of running transfers for a turn on a CPU
// (under a boot storm there are dozens, each sending a window per turn):
// that wait made most of its latency. The work inline is short: the
// transfer's socket, the Source's Open (a render from the store for a
// config) and one send. Files that need a transfer slot (larger than
// SmallFileSize) are opened inline too, so that "not found" is answered at
// once, and go on a goroutine from there: a slot may have to be waited for.
func (s *Server) begin(ctx context.Context, req request, client netip.AddrPort, dst netip.Addr, ifindex int, received time.Time) func() {
	if !s.claim(client) {
		// A retransmitted request of a transfer we are already
		// handling (queued, most likely): the first one answers it.
		s.m.duplicates.Inc()
		s.log.Debug("tftp: retransmitted request ignored", "client", client.String(), "file", req.filename)
		return nil
	}
	t := &transfer{s: s, req: req, client: client, start: received}
	done := func() {
		t.close()
		s.unclaim(client)
	}
	if err := t.dial(dst, ifindex); err != nil {
		s.m.outcome(outcomeError)
		s.log.Warn("tftp: transfer socket", "client", client.String(), "file", req.filename, "err", err)
		done()
		return nil
	}
	switch {
	case req.op == opWRQ:
		t.fail(&clientError{code: errCodeAccess, msg: "Access violation: read-only server", outcome: outcomeWriteRefused})
		done()
		return nil
	case req.mode == "mail":
		t.fail(&clientError{code: errCodeIllegal, msg: "Illegal TFTP operation: mail mode", outcome: outcomeMalformed})
		done()
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpenTimeout)
	// The transfer socket's own address is the one the client asked
	// (dial binds it), or the system's choice towards the client: either
	// way one the client reaches, which a rendered config can point back
	// at.
	if la, ok := t.conn.LocalAddr().(*net.UDPAddr); ok {
		octx = files.WithLocalAddr(octx, la.AddrPort().Addr())
	}
	f, err := s.src.Open(octx, req.filename)
	cancel()
	if err != nil {
		t.fail(s.openError(ctx, req.filename, client, err))
		done()
		return nil
	}
	t.file = f
	t.size = f.Size()
	// Rendered configs are made on request and have no date (files.File).
	t.rendered = f.ModTime().IsZero()

	if s.cfg.SmallFileSize < 0 || t.size > s.cfg.SmallFileSize {
		return func() {
			defer done()
			if err := s.acquire(ctx); err != nil {
				t.fail(err)
				return
			}
			defer func() { s.running.Add(-1); <-s.slots }() // in this order, so running <= MaxTransfers
			s.run(t, false)
		}
	}
	if !s.track(t) {
		t.fail(shutdownError)
		done()
		return nil
	}
	s.m.inFlight.Inc()
	if err := t.begin(); err != nil {
		s.m.inFlight.Dec()
		s.untrack(t)
		t.end(err)
		done()
		return nil
	}
	return func() {
		defer done()
		s.run(t, true)
	}
}

// run runs transfer t to its end: from its first packet, or after it when
// begun is set (t tracked and counted in flight already).
func (s *Server) run(t *transfer, begun bool) {
	if !begun {
		if !s.track(t) {
			t.fail(shutdownError)
			return
		}
		s.m.inFlight.Inc()
	}
	defer s.untrack(t)
	defer s.m.inFlight.Dec()
	if !begun {
		if err := t.begin(); err != nil {
			t.end(err)
			return
		}
	}
	t.end(t.finish())
}

func (s *Server) track(t *transfer) bool {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	if s.stopped {
		return false
	}
	s.active[t] = struct{}{}
	return true
}

func (s *Server) untrack(t *transfer) {
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	delete(s.active, t)
}

// claim records client as being handled, or reports that it already is.
func (s *Server) claim(client netip.AddrPort) bool {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	if _, ok := s.clients[client]; ok {
		return false
	}
	s.clients[client] = struct{}{}
	return true
}

func (s *Server) unclaim(client netip.AddrPort) {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	delete(s.clients, client)
}

// acquire takes a transfer slot, waiting in line for at most QueueTimeout.
// Blocked senders on a channel are woken in arrival order, so the queue is
// first come, first served.
func (s *Server) acquire(ctx context.Context) error {
	start := time.Now()
	select {
	case s.slots <- struct{}{}:
	default:
		if err := s.wait(ctx); err != nil {
			return err
		}
	}
	s.m.queueWait.Observe(time.Since(start).Seconds())
	n := s.running.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return nil
}

var (
	busyError     = &clientError{code: errCodeUndefined, msg: "Server busy, try again later", outcome: outcomeBusy, err: errBusy}
	shutdownError = &clientError{code: errCodeUndefined, msg: "Server shutting down", outcome: outcomeShutdown, err: errShutdown}
)

// wait waits in the queue for a slot, unless the queue is full.
func (s *Server) wait(ctx context.Context) error {
	if s.queued.Add(1) > int64(s.cfg.MaxQueued) {
		s.queued.Add(-1)
		return busyError
	}
	s.m.queued.Inc()
	defer func() {
		s.queued.Add(-1)
		s.m.queued.Dec()
	}()
	t := time.NewTimer(s.cfg.QueueTimeout)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-t.C:
		return busyError
	case <-ctx.Done():
		return shutdownError
	}
}

// openError turns a Source error into the error sent to the client. The
// message says which file and, when the Source said why, why: "File not
// found: pxelinux.0: no bootloader image is imported ...", "Access
// violation: ../etc/passwd: parent directory element", "Error opening file:
// <the cause>". The code is what clients act on (1 not found, 2 access
// violation, 0 other, RFC 1350); the text is for the person watching.
func (s *Server) openError(ctx context.Context, name string, client netip.AddrPort, err error) error {
	detail := name
	var fe *files.Error
	if errors.As(err, &fe) && fe.Reason != "" {
		detail += ": " + fe.Reason
	}
	switch {
	case errors.Is(err, files.ErrNotFound):
		return &clientError{code: errCodeNotFound, msg: "File not found", detail: detail, outcome: outcomeNotFound}
	case errors.Is(err, files.ErrRefused):
		// Logged at Info: it is what a scan or a misconfigured loader
		// looks like, and worth seeing without debug logging.
		s.log.Info("tftp: name refused", "client", client.String(), "file", name, "err", err)
		return &clientError{code: errCodeAccess, msg: "Access violation", detail: detail, outcome: outcomeRefused}
	case ctx.Err() != nil:
		return shutdownError
	}
	s.log.Warn("tftp: open", "client", client.String(), "file", name, "err", err)
	return &clientError{code: errCodeUndefined, msg: "Error opening file", detail: err.Error(), outcome: outcomeError, err: err}
}
