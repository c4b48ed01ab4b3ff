package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/internal/consolelog"
	"rackd/power"
	"rackd/power/consolehub"
	"rackd/store"
)

// flakyConsole is a power driver whose console fails (an unreachable BMC)
// until told to accept, and then holds the session until told to drop it.
type flakyConsole struct {
	mu       sync.Mutex
	reach    bool
	attempts int
	drop     chan struct{}
}

var errUnreachable = errors.New("console: dial 10.9.9.9:623: no route to host")

func (f *flakyConsole) Console(ctx context.Context, _ power.Target, _ io.Reader, out io.Writer) error {
	f.mu.Lock()
	f.attempts++
	reach, drop := f.reach, f.drop
	f.mu.Unlock()
	if !reach {
		return errUnreachable
	}
	out.(power.ConsoleReadier).ConsoleReady()
	select {
	case <-ctx.Done():
	case <-drop:
	}
	return errors.New("console: session lost")
}

func (f *flakyConsole) set(reach bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reach = reach
	f.drop = make(chan struct{})
}

func (f *flakyConsole) dropSession() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.drop)
}

func (f *flakyConsole) PowerOn(context.Context, power.Target) error    { return nil }
func (f *flakyConsole) PowerOff(context.Context, power.Target) error   { return nil }
func (f *flakyConsole) PowerCycle(context.Context, power.Target) error { return nil }
func (f *flakyConsole) Status(context.Context, power.Target) (power.State, error) {
	return power.StateUnknown, nil
}
func (f *flakyConsole) SetNextBoot(context.Context, power.Target, power.BootDevice) error {
	return nil
}

// syncBuffer is a log shared by the recorder's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRecorderBacksOff: the recorder of a machine whose BMC is unreachable
// waits twice as long after each failed attach, up to a minute, logs the
// outage once (not each try) and the recovery once, and waits the least
// again once it has attached. The waits run on a fake clock: the test
// sees each wait asked for and ends it.
func TestRecorderBacksOff(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(filepath.Join(dir, store.FileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := s.CreateMachine(context.Background(), store.System, store.NewMachine{Hostname: "sol1",
		MACs: []string{"52:54:00:00:00:31"}, State: store.StateReady,
		Power: store.PowerParams{Driver: "flaky", Address: "10.9.9.9"}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil)) // info and up
	cl, err := consolelog.Open(filepath.Join(dir, "console"), consolelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	drv := &flakyConsole{}
	drv.set(false)
	a := &Agent{log: log, store: s, consoleLog: cl, powerDrivers: map[string]power.Driver{"flaky": drv},
		consoles: consolehub.New(log, func(error) bool { return false })}
	a.cfg.Power.CommandTimeout = Duration(5 * time.Second)
	waits := make(chan time.Duration)
	fire := make(chan time.Time)
	rc := newRecorder(a, recorderOptions{after: func(d time.Duration) <-chan time.Time {
		waits <- d
		return fire
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		rc.stop(m.ID)
	}()
	m.State = store.StateCommissioning // the recording's phase; the store's state is not read
	rc.start(ctx, m, true)

	next := func(what string) time.Duration {
		t.Helper()
		select {
		case d := <-waits:
			return d
		case <-time.After(30 * time.Second):
			t.Fatalf("the recorder asked for no wait %s", what)
		}
		return 0
	}
	// Unreachable: 2 s, doubling, a minute at most.
	for i, want := range []time.Duration{2, 4, 8, 16, 32, 60, 60, 60} {
		if got := next("after a failed attach"); got != want*time.Second {
			t.Fatalf("wait %d after failed attaches: %v, want %v", i+1, got, want*time.Second)
		}
		if i == 7 {
			drv.set(true) // the BMC answers from the next try on
		}
		fire <- time.Time{}
	}
	// Attached, then the session drops: the least wait again.
	waitFor(t, "the recorder to log that the console is back", func() bool {
		return strings.Contains(logs.String(), "console reachable again")
	})
	drv.dropSession()
	if got := next("after a dropped session"); got != 2*time.Second {
		t.Fatalf("wait after a session that ran: %v, want 2s", got)
	}
	drv.set(false)
	fire <- time.Time{}
	if got := next("after a new outage's first failure"); got != 2*time.Second {
		t.Fatalf("first wait of a new outage: %v, want 2s", got)
	}
	out := logs.String()
	if n := strings.Count(out, "console unreachable"); n != 2 {
		t.Errorf("%d outage lines for 2 outages (9 failed attaches), want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "console reachable again"); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "\n"); n > 4 {
		t.Errorf("%d log lines for 2 outages and a dropped session, want at most 4 (outage, recovery, session ended, outage):\n%s", n, out)
	}
}

// waitFor polls cond until it holds, for at most 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
