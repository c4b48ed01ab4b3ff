// Package consolehub shares a BMC's one serial console session among the
// parties of one rackd: the console recorder of a machine in a phase, and
// one user at a time (rackd console). A BMC serves a single Serial-over-LAN
// session per serial port, so rackd holds at most one per BMC and fans its
// output out: the recorder gets every byte (it writes to disk), the user's
// copy is buffered and, when the user reads too slowly, cut with a notice
// rather than holding the BMC's stream back. The user may type (Write) when
// attached for writing; the recorder never types.
//
// The session is started by the first party and ended when the last one
// leaves; a party attaching while it is being ended waits for the BMC to be
// free again.
package consolehub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"rackd/power"
)

// Holder is who holds a BMC's console in this rackd.
type Holder struct {
	Name    string    // the user's name
	Machine string    // the machine they attached to
	Write   bool      // attached for writing
	Since   time.Time // when
}

// BusyError: the console is held. Holder is this rackd's user when Outside
// is false; when Outside is true another SOL client (an operator's
// ipmitool) holds it on the BMC.
type BusyError struct {
	Holder  Holder
	Outside bool
	Err     error // the driver's refusal, when Outside
}

func (e *BusyError) Error() string {
	if e.Outside {
		return fmt.Sprintf("the BMC's serial console is held by a session outside rackd: %v", e.Err)
	}
	mode := "read-only"
	if e.Holder.Write {
		mode = "read-write"
	}
	return fmt.Sprintf("the serial console of %s is in use by %s (%s, since %s); one user at a time: ask them to detach",
		e.Holder.Machine, e.Holder.Name, mode, e.Holder.Since.UTC().Format(time.RFC3339))
}

func (e *BusyError) Unwrap() error { return e.Err }

// ErrClosed: the hub is shutting down.
var ErrClosed = errors.New("rackd is shutting down: the console is closed")

// userBuffer is how many output chunks a user may be behind before output
// is dropped for them.
const userBuffer = 256

// Hub holds the console sessions of one rackd, by BMC.
type Hub struct {
	log      *slog.Logger
	isBusy   func(error) bool
	mu       sync.Mutex
	sessions map[string]*session
	closed   bool
	now      func() time.Time
}

// New returns an empty hub. isBusy recognises the drivers' "the BMC's
// console is held by another session" errors (the ipmi driver's
// ErrConsoleBusy): this package does not import drivers.
func New(log *slog.Logger, isBusy func(error) bool) *Hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Hub{log: log, isBusy: isBusy, sessions: map[string]*session{}, now: time.Now}
}

// Key names a BMC's console: one session per key.
func Key(t power.Target) string { return t.Driver + " " + t.Address }

// session is one SOL session and its parties.
type session struct {
	key    string
	cancel context.CancelFunc
	ready  chan struct{} // closed once the BMC accepted the session
	done   chan struct{} // closed once the driver's Console returned
	err    error         // its error, set before done closes
	in     *io.PipeWriter

	// Guarded by Hub.mu.
	recorder *Attachment
	user     *Attachment
	ending   bool // no party left: being ended
}

// AttachOptions say who attaches.
type AttachOptions struct {
	Who     string // user name, for BusyError
	Machine string // hostname, for BusyError
	// Write lets the user type. The recorder never writes.
	Write bool
	// Recorder attaches the recorder: Sink gets every byte, synchronously;
	// there is at most one recorder per BMC and it never conflicts with a
	// user.
	Recorder bool
	Sink     io.Writer
}

// Attachment is one party's view of a session.
type Attachment struct {
	h    *Hub
	s    *session
	opts AttachOptions
	hold Holder
	out  chan []byte   // users: the output
	gone chan struct{} // closed when the party left or the session ended
	once sync.Once     // closes gone
	drop int           // bytes dropped since the last delivered chunk (users; under Hub.mu)
	wmu  sync.Mutex    // orders writes
}

// Output is the user's copy of the machine's output; it is closed when the
// session ends or the user detaches. Nil for the recorder.
func (a *Attachment) Output() <-chan []byte { return a.out }

// Done is closed when the session has ended (Err says why) or the party
// detached.
func (a *Attachment) Done() <-chan struct{} { return a.gone }

// Err is why the session ended: nil while it runs or after a detach, the
// driver's error when the BMC ended it.
func (a *Attachment) Err() error {
	select {
	case <-a.s.done:
		return a.s.err
	default:
		return nil
	}
}

// Write types p on the console (users attached for writing).
func (a *Attachment) Write(p []byte) (int, error) {
	if !a.opts.Write || a.opts.Recorder {
		return 0, errors.New("the console is attached read-only")
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	select {
	case <-a.gone:
		return 0, io.ErrClosedPipe
	default:
	}
	return a.s.in.Write(p)
}

// Close detaches; the last party's detach ends the session (the driver
// then frees the BMC's console).
func (a *Attachment) Close() error {
	h := a.h
	h.mu.Lock()
	s := a.s
	if s.recorder == a {
		s.recorder = nil
	}
	if s.user == a {
		s.user = nil
		close(a.out)
	}
	last := s.recorder == nil && s.user == nil && !s.ending
	if last {
		s.ending = true
	}
	h.mu.Unlock()
	a.once.Do(func() { close(a.gone) })
	if last {
		s.cancel()
	}
	return nil
}

// Holder says who holds the BMC's console for a user (false: no user).
func (h *Hub) Holder(t power.Target) (Holder, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[Key(t)]
	if s == nil || s.user == nil {
		return Holder{}, false
	}
	return s.user.hold, true
}

// Attach joins the console session of t's BMC, starting it through drv if
// there is none, and returns once the BMC has accepted the session (or
// refused it: a *BusyError when another SOL client has it). A user is
// refused with a *BusyError while another user is attached.
func (h *Hub) Attach(ctx context.Context, drv power.Consoler, t power.Target, opts AttachOptions) (*Attachment, error) {
	if opts.Recorder && opts.Sink == nil {
		return nil, errors.New("consolehub: a recorder needs a sink")
	}
	key := Key(t)
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		s := h.sessions[key]
		if s != nil && s.ending {
			// The last party just left: wait for the BMC to be free.
			h.mu.Unlock()
			select {
			case <-s.done:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if s != nil {
			switch {
			case opts.Recorder && s.recorder != nil:
				h.mu.Unlock()
				return nil, errors.New("consolehub: the console already has a recorder")
			case !opts.Recorder && s.user != nil:
				hold := s.user.hold
				h.mu.Unlock()
				return nil, &BusyError{Holder: hold}
			}
		}
		started := s == nil
		if started {
			s = h.start(drv, t, key)
		}
		a := &Attachment{h: h, s: s, opts: opts, gone: make(chan struct{}),
			hold: Holder{Name: opts.Who, Machine: opts.Machine, Write: opts.Write, Since: h.now()}}
		if opts.Recorder {
			s.recorder = a
		} else {
			a.out = make(chan []byte, userBuffer)
			s.user = a
		}
		h.mu.Unlock()

		select {
		case <-s.ready:
			return a, nil
		case <-s.done:
			a.Close()
			err := s.err
			if h.isBusy != nil && h.isBusy(err) {
				return nil, &BusyError{Outside: true, Err: err}
			}
			if err == nil {
				err = errors.New("the console ended before it was attached")
			}
			return nil, err
		case <-ctx.Done():
			a.Close()
			return nil, ctx.Err()
		}
	}
}

// start runs a new session for key; h.mu is held.
func (h *Hub) start(drv power.Consoler, t power.Target, key string) *session {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &session{key: key, cancel: cancel, ready: make(chan struct{}), done: make(chan struct{}), in: pw}
	h.sessions[key] = s
	go func() {
		err := drv.Console(ctx, t, pr, &fanout{h: h, s: s})
		// Whoever still writes, and the driver's own reader of pr, stop.
		pw.CloseWithError(io.ErrClosedPipe)
		pr.Close()
		cancel()
		h.mu.Lock()
		s.err = err
		if h.sessions[key] == s {
			delete(h.sessions, key)
		}
		parties := []*Attachment{s.recorder, s.user}
		s.recorder, s.user = nil, nil
		if u := parties[1]; u != nil {
			close(u.out)
		}
		h.mu.Unlock()
		close(s.done)
		for _, a := range parties {
			if a != nil {
				a.once.Do(func() { close(a.gone) })
			}
		}
		// A session the BMC never accepted is its attacher's to report
		// (Attach returns the error): a recorder retrying an unreachable
		// BMC would otherwise log every try.
		select {
		case <-s.ready:
			if err != nil {
				h.log.Info("console session ended", "bmc", t.Address, "err", err)
			}
		default:
			if err != nil {
				h.log.Debug("console session failed to start", "bmc", t.Address, "err", err)
			}
		}
	}()
	return s
}

// fanout is the driver's out: it hands each chunk to the parties.
type fanout struct {
	h    *Hub
	s    *session
	once sync.Once
}

func (f *fanout) ConsoleReady() { f.once.Do(func() { close(f.s.ready) }) }

func (f *fanout) Write(p []byte) (int, error) {
	// A driver that never says it is ready is ready at its first output.
	f.ConsoleReady()
	f.h.mu.Lock()
	rec, user := f.s.recorder, f.s.user
	if user != nil {
		chunk := p
		if user.drop > 0 {
			chunk = append([]byte(fmt.Sprintf("\r\n[rackd: %d bytes of console output dropped: the client read too slowly]\r\n", user.drop)), p...)
		} else {
			chunk = append([]byte(nil), p...)
		}
		select {
		case user.out <- chunk:
			user.drop = 0
		default:
			user.drop += len(p)
		}
	}
	f.h.mu.Unlock()
	if rec != nil {
		// A recorder that just detached may have closed its sink.
		if _, err := rec.opts.Sink.Write(p); err != nil && !errors.Is(err, os.ErrClosed) {
			f.h.log.Warn("console recorder: write", "err", err)
		}
	}
	return len(p), nil
}

// Close ends every session and waits (bounded by ctx) for the drivers to
// free the BMCs' consoles.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	var ss []*session
	for _, s := range h.sessions {
		s.ending = true
		ss = append(ss, s)
	}
	h.mu.Unlock()
	for _, s := range ss {
		s.cancel()
	}
	for _, s := range ss {
		select {
		case <-s.done:
		case <-ctx.Done():
			return fmt.Errorf("console sessions still ending: %w", ctx.Err())
		}
	}
	return nil
}
