package tftp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pin/tftp/v3"
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
	// holds a socket (the library opens the transfer's socket before the
	// handler runs) and an open file.
	DefaultMaxQueued = 1024
	// DefaultQueueTimeout is the longest a request waits for a slot. PXE
	// ROMs retransmit a silent RRQ a few times over some tens of seconds
	// before giving up; a request still waiting after this long is
	// answered "busy" rather than served to a client that has left.
	DefaultQueueTimeout = 10 * time.Second
	// DefaultSmallFileSize: files up to this size skip the queue (see the
	// package doc). 64 KiB is 45 blocks of 1468 bytes, more than any config.
	DefaultSmallFileSize = 64 << 10
	// DefaultTimeout is the retransmission timeout. Shorter than the
	// library's 5s: on a LAN a second is a long time, and a client that
	// vanished holds its slot for Retries times this.
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
)

// readBuffer is the read-ahead between the file and the library, which
// reads one block at a time: one read(2) per 64 KiB rather than per block.
const readBuffer = 64 << 10

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
	// Timeout is the retransmission timeout. Default DefaultTimeout.
	Timeout time.Duration
	// Retries is the number of sends of a packet before giving up. Default
	// DefaultRetries.
	Retries int
	// MaxBlockSize caps the negotiated blksize below the interface's MTU.
	// Zero: the MTU alone (less IP and UDP headers) caps it.
	MaxBlockSize int
	// OpenTimeout bounds each Source.Open. Default DefaultOpenTimeout.
	OpenTimeout time.Duration
	// ShutdownGrace is how long transfers in flight may finish after
	// Serve's context ends. Default DefaultShutdownGrace.
	ShutdownGrace time.Duration
}

// withDefaults fills in the zero fields and checks the others.
func (c Config) withDefaults() (Config, error) {
	if c.MaxTransfers < 0 || c.MaxQueued < 0 || c.QueueTimeout < 0 || c.Timeout < 0 ||
		c.Retries < 0 || c.OpenTimeout < 0 || c.ShutdownGrace < 0 {
		return c, errors.New("tftp: negative limit in config")
	}
	if c.MaxBlockSize != 0 && (c.MaxBlockSize < 512 || c.MaxBlockSize > 65464) {
		// RFC 2348 section 2: blksize is 8 to 65464; below 512 the
		// library would not use it.
		return c, fmt.Errorf("tftp: MaxBlockSize %d outside 512-65464", c.MaxBlockSize)
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

	slots  chan struct{} // one per running transfer (not small files)
	queued atomic.Int64  // requests waiting for a slot

	// clients holds the address:port of every request being handled, to
	// recognise retransmitted requests (see the package doc).
	clientsMu sync.Mutex
	clients   map[string]struct{}

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
		slots:   make(chan struct{}, cfg.MaxTransfers),
		clients: make(map[string]struct{}),
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
// after which each is aborted at its next block. A transfer whose client
// went silent cannot be cut short (the library offers no way to): it ends
// when its retries run out, Retries times Timeout plus the library's random
// backoff of up to a second per retry. It returns nil after ctx is done, or
// the error that stopped it.
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
// test). It must be a *net.UDPConn: the library reads the destination
// address and interface of each request from its control messages, to
// answer from the address the client asked and to cap blksize at that
// interface's MTU; without them it would fall back to 512-byte blocks. The
// server closes conn.
//
// conn must belong to the process's own network namespace: the library
// opens each transfer's socket (its TID, RFC 1350 section 4) with
// net.ListenUDP on whatever thread runs the transfer, so a socket opened
// in another namespace would answer from the wrong one.
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

	// stop is closed when the shutdown grace is over: transfers still
	// running then fail on their next read, and the library aborts them
	// with an ERROR packet to the client.
	stop := make(chan struct{})
	srv := tftp.NewServer(
		func(name string, rf io.ReaderFrom) error { return s.read(ctx, stop, name, rf) },
		func(name string, _ io.WriterTo) error { return errWrite },
	)
	srv.SetHook(hook{s})
	srv.SetTimeout(s.cfg.Timeout)
	srv.SetRetries(s.cfg.Retries)
	if s.cfg.MaxBlockSize > 0 {
		srv.SetBlockSize(s.cfg.MaxBlockSize)
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(conn) }()
	close(s.ready)
	s.log.Info("tftp: serving", "addr", ap.String(), "max_transfers", s.cfg.MaxTransfers)

	select {
	case err := <-errc:
		// The library returns only after Shutdown, or when it cannot
		// start (an address it cannot classify).
		srv.Shutdown()
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		return fmt.Errorf("tftp: serving: %w", err)
	case <-ctx.Done():
	}
	grace := time.AfterFunc(s.cfg.ShutdownGrace, func() { close(stop) })
	defer grace.Stop()
	// Shutdown closes the socket and waits for every transfer; ctx being
	// done already released the queued ones.
	srv.Shutdown()
	_ = conn.Close() // in case Shutdown ran before the library stored it
	<-errc
	s.log.Info("tftp: stopped", "addr", ap.String())
	return nil
}

// Errors of the read handler. The library sends Error() to the client, so
// the messages are RFC 1350's error names; the sentinels they wrap are for
// the hook to count outcomes.
var (
	errBusy     = errors.New("tftp: no transfer slot")
	errShutdown = errors.New("tftp: shutting down")
	errOpen     = errors.New("tftp: cannot open file")
	errRead     = errors.New("tftp: cannot read file")
	errWrite    = &clientError{"Access violation: read-only server", errWriteRefused}

	errWriteRefused = errors.New("tftp: write request refused")
)

// clientError is an error whose message goes to the client.
type clientError struct {
	msg string
	err error
}

func (e *clientError) Error() string { return e.msg }
func (e *clientError) Unwrap() error { return e.err }

// read is the library's read handler: one per RRQ, on its own goroutine.
func (s *Server) read(ctx context.Context, stop <-chan struct{}, name string, rf io.ReaderFrom) error {
	var client string
	ot, _ := rf.(tftp.OutgoingTransfer) // always, in v3.1.0
	if ot != nil {
		ra := ot.RemoteAddr()
		client = ra.String()
	}
	if client != "" {
		if !s.claim(client) {
			// A retransmitted RRQ of a transfer we are already
			// handling (queued, most likely). Returning nil without
			// calling ReadFrom sends nothing; the library's transfer
			// socket for this duplicate is left to the garbage
			// collector's finalizer, as the library offers no way to
			// close it unused.
			s.m.duplicates.Inc()
			s.log.Debug("tftp: retransmitted request ignored", "client", client, "file", name)
			return nil
		}
		defer s.unclaim(client)
	}
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpenTimeout)
	f, err := s.src.Open(octx, name)
	cancel()
	if err != nil {
		return s.openError(ctx, name, client, err)
	}
	defer f.Close()
	size := f.Size()

	if s.cfg.SmallFileSize < 0 || size > s.cfg.SmallFileSize {
		if err := s.acquire(ctx); err != nil {
			return err
		}
		defer func() { s.running.Add(-1); <-s.slots }() // in this order, so running <= MaxTransfers
	}
	s.m.inFlight.Inc()
	defer s.m.inFlight.Dec()

	if ot != nil {
		// Always, not only when the file can Seek: that is the
		// library's own way of finding the size, and tsize is what
		// keeps firmware off its slow path (RFC 2349 section 3).
		ot.SetSize(size)
	}
	buf := readBuffer
	if size < int64(buf) {
		buf = int(size) + 1 // bufio's minimum is 16
	}
	n, err := rf.ReadFrom(&transferReader{r: bufio.NewReaderSize(f, buf), stop: stop})
	s.m.bytes.Add(float64(n))
	// On error the library has already sent the ERROR and told the hook;
	// returning it makes the library's own abort a no-op.
	return err
}

// claim records client as being handled, or reports that it already is.
func (s *Server) claim(client string) bool {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	if _, ok := s.clients[client]; ok {
		return false
	}
	s.clients[client] = struct{}{}
	return true
}

func (s *Server) unclaim(client string) {
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

// wait waits in the queue for a slot, unless the queue is full.
func (s *Server) wait(ctx context.Context) error {
	if s.queued.Add(1) > int64(s.cfg.MaxQueued) {
		s.queued.Add(-1)
		return &clientError{"Server busy, try again later", errBusy}
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
		return &clientError{"Server busy, try again later", errBusy}
	case <-ctx.Done():
		return &clientError{"Server shutting down", errShutdown}
	}
}

// openError turns a Source error into the error sent to the client.
func (s *Server) openError(ctx context.Context, name, client string, err error) error {
	switch {
	case errors.Is(err, files.ErrNotFound):
		return &clientError{"File not found", err}
	case errors.Is(err, files.ErrRefused):
		// Logged at Info: it is what a scan or a misconfigured loader
		// looks like, and worth seeing without debug logging.
		s.log.Info("tftp: name refused", "client", client, "file", name, "err", err)
		return &clientError{"Access violation", err}
	case ctx.Err() != nil:
		return &clientError{"Server shutting down", errShutdown}
	}
	s.log.Warn("tftp: open", "client", client, "file", name, "err", err)
	return &clientError{"Error opening file", errors.Join(errOpen, err)}
}

// transferReader feeds a file to the library, and fails once the shutdown
// grace is over so that the library aborts the transfer.
type transferReader struct {
	r    *bufio.Reader
	stop <-chan struct{}
}

func (t *transferReader) Read(p []byte) (int, error) {
	select {
	case <-t.stop:
		return 0, &clientError{"Server shutting down", errShutdown}
	default:
	}
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		// io.EOF is compared with == by the library, so only other
		// errors are wrapped, for the hook to count them as ours.
		err = &clientError{"Error reading file", errors.Join(errRead, err)}
	}
	return n, err
}
