package consolehub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/power"
)

var errHeld = errors.New("held by another SOL session")

// fakeBMC is a Consoler for the hub's unit tests: one session at a time,
// like a BMC's SOL; the test plays the machine (print) and reads what was
// typed (typed).
type fakeBMC struct {
	mu       sync.Mutex
	active   int
	sessions int
	outside  bool // another SOL client holds it
	out      io.Writer
	typed    bytes.Buffer
	attached chan struct{}
	end      chan error // the BMC ends the session
}

func newFakeBMC() *fakeBMC {
	return &fakeBMC{attached: make(chan struct{}, 16), end: make(chan error, 1)}
}

func (f *fakeBMC) Console(ctx context.Context, _ power.Target, in io.Reader, out io.Writer) error {
	f.mu.Lock()
	if f.active > 0 || f.outside {
		f.mu.Unlock()
		return errHeld
	}
	f.active++
	f.sessions++
	f.out = out
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.active--; f.out = nil; f.mu.Unlock() }()
	out.(power.ConsoleReadier).ConsoleReady()
	f.attached <- struct{}{}
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := in.Read(buf)
			f.mu.Lock()
			f.typed.Write(buf[:n])
			f.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-f.end:
		return err
	}
}

func (f *fakeBMC) print(t *testing.T, s string) {
	t.Helper()
	f.mu.Lock()
	out := f.out
	f.mu.Unlock()
	if out == nil {
		t.Fatal("no session to print on")
	}
	out.Write([]byte(s))
}

func (f *fakeBMC) state() (active, sessions int, typed string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active, f.sessions, f.typed.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func recv(t *testing.T, a *Attachment) string {
	t.Helper()
	select {
	case b, ok := <-a.Output():
		if !ok {
			t.Fatal("output closed")
		}
		return string(b)
	case <-time.After(10 * time.Second):
		t.Fatal("no output")
		return ""
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var tg = power.Target{Driver: "ipmi", Address: "127.0.1.9:623"}

func isHeld(err error) bool { return errors.Is(err, errHeld) }

// TestShareWithRecorder: a user joins the recorder's session (one SOL
// session on the BMC), both see the output, the user types on it, a second
// user is refused naming the first, and the session ends only when the last
// party leaves.
func TestShareWithRecorder(t *testing.T) {
	bmc := newFakeBMC()
	h := New(nil, isHeld)
	ctx := context.Background()
	var rec syncBuf
	r, err := h.Attach(ctx, bmc, tg, AttachOptions{Recorder: true, Sink: &rec, Machine: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output() != nil {
		t.Error("the recorder has a user's output channel")
	}
	if _, err := r.Write([]byte("x")); err == nil {
		t.Error("the recorder typed")
	}
	u, err := h.Attach(ctx, bmc, tg, AttachOptions{Who: "alice", Machine: "m1", Write: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, n, _ := bmc.state(); n != 1 {
		t.Fatalf("%d BMC sessions for two parties", n)
	}
	bmc.print(t, "login: ")
	if got := recv(t, u); got != "login: " {
		t.Errorf("user got %q", got)
	}
	if rec.String() != "login: " {
		t.Errorf("recorder got %q", rec.String())
	}
	if _, err := u.Write([]byte("root\r")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "typed keys at the BMC", func() bool { _, _, typed := bmc.state(); return typed == "root\r" })

	_, err = h.Attach(ctx, bmc, tg, AttachOptions{Who: "bob", Machine: "m1"})
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Outside || busy.Holder.Name != "alice" || !busy.Holder.Write {
		t.Fatalf("second user: %v", err)
	}
	if !strings.Contains(err.Error(), "alice") || !strings.Contains(err.Error(), "read-write") {
		t.Errorf("message %q does not name the holder", err)
	}
	if hold, ok := h.Holder(tg); !ok || hold.Name != "alice" {
		t.Errorf("Holder: %+v %v", hold, ok)
	}

	u.Close()
	if _, ok := <-u.Output(); ok {
		t.Error("output open after detach")
	}
	if a, _, _ := bmc.state(); a != 1 {
		t.Error("the user's detach ended the recorder's session")
	}
	// Another user may attach now, read-only: typing is refused.
	ro, err := h.Attach(ctx, bmc, tg, AttachOptions{Who: "bob", Machine: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Write([]byte("x")); err == nil {
		t.Error("a read-only user typed")
	}
	ro.Close()
	r.Close()
	waitFor(t, "the BMC session to end", func() bool { a, _, _ := bmc.state(); return a == 0 })
	<-r.Done()
	if r.Err() != nil {
		t.Errorf("detached session's error: %v", r.Err())
	}
	// And a new session starts on the next attach.
	u2, err := h.Attach(ctx, bmc, tg, AttachOptions{Who: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	if _, n, _ := bmc.state(); n != 2 {
		t.Errorf("%d sessions", n)
	}
	u2.Close()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Attach(ctx, bmc, tg, AttachOptions{Who: "dave"}); !errors.Is(err, ErrClosed) {
		t.Errorf("attach after close: %v", err)
	}
}

// TestBusyOutside: a BMC whose console another SOL client holds refuses
// with a BusyError that says so, and nothing is left held.
func TestBusyOutside(t *testing.T) {
	bmc := newFakeBMC()
	bmc.outside = true
	h := New(nil, isHeld)
	_, err := h.Attach(context.Background(), bmc, tg, AttachOptions{Who: "alice"})
	var busy *BusyError
	if !errors.As(err, &busy) || !busy.Outside || !errors.Is(err, errHeld) {
		t.Fatalf("got %v", err)
	}
	if _, ok := h.Holder(tg); ok {
		t.Error("a refused attach holds the console")
	}
	bmc.mu.Lock()
	bmc.outside = false
	bmc.mu.Unlock()
	a, err := h.Attach(context.Background(), bmc, tg, AttachOptions{Who: "alice"})
	if err != nil {
		t.Fatalf("after the other client left: %v", err)
	}
	a.Close()
}

// TestBMCEnds: the BMC ending the session ends every party with its error.
func TestBMCEnds(t *testing.T) {
	bmc := newFakeBMC()
	h := New(nil, isHeld)
	var rec syncBuf
	r, _ := h.Attach(context.Background(), bmc, tg, AttachOptions{Recorder: true, Sink: &rec})
	u, err := h.Attach(context.Background(), bmc, tg, AttachOptions{Who: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	gone := errors.New("session closed by the BMC")
	bmc.end <- gone
	for _, a := range []*Attachment{r, u} {
		select {
		case <-a.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("party not told")
		}
		if !errors.Is(a.Err(), gone) {
			t.Errorf("err %v", a.Err())
		}
	}
	if _, ok := <-u.Output(); ok {
		t.Error("user output open")
	}
	u.Close() // after the end: harmless
	r.Close()
}

// TestSlowUser: a user who does not read loses output (with a notice), the
// recorder and the BMC's stream do not wait for them.
func TestSlowUser(t *testing.T) {
	bmc := newFakeBMC()
	h := New(nil, isHeld)
	var rec syncBuf
	r, _ := h.Attach(context.Background(), bmc, tg, AttachOptions{Recorder: true, Sink: &rec})
	defer r.Close()
	u, err := h.Attach(context.Background(), bmc, tg, AttachOptions{Who: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for range userBuffer + 10 {
		bmc.print(t, "x")
	}
	bmc.print(t, "y")
	if n := len(rec.String()); n != userBuffer+11 {
		t.Errorf("recorder got %d bytes", n)
	}
	for range userBuffer {
		recv(t, u)
	}
	bmc.print(t, "z")
	if got := recv(t, u); !strings.Contains(got, "11 bytes of console output dropped") || !strings.HasSuffix(got, "z") {
		t.Errorf("after the drop: %q", got)
	}
}

// TestAttachCancelled: an attach whose context ends while the BMC has not
// answered leaves nothing behind.
func TestAttachCancelled(t *testing.T) {
	h := New(nil, isHeld)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.Attach(ctx, hungBMC{}, tg, AttachOptions{Who: "alice"})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	waitFor(t, "the session to go", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.sessions) == 0
	})
}

// hungBMC never accepts a session until its context ends.
type hungBMC struct{}

func (hungBMC) Console(ctx context.Context, _ power.Target, _ io.Reader, _ io.Writer) error {
	<-ctx.Done()
	return ctx.Err()
}
