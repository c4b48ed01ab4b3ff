package boot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Backoff is the pause before restarting rackd: Initial after its first
// exit, doubling up to Max, and back to Initial once it ran for Reset.
type Backoff struct {
	Initial, Max, Reset time.Duration
}

// DefaultBackoff is 1s doubling to 30s, reset after a minute up.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 30 * time.Second, Reset: time.Minute}

// Next is the pause after a run of uptime, when the previous pause was
// prev (0 before the first restart).
func (b Backoff) Next(prev, uptime time.Duration) time.Duration {
	if prev == 0 || uptime >= b.Reset {
		return b.Initial
	}
	return min(2*prev, b.Max)
}

// Tail keeps the last Lines lines written to it (a partial last line
// included): what the status file says of why rackd kept exiting.
type Tail struct {
	Lines int

	mu    sync.Mutex
	lines []string
	part  string
}

func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		t.lines = append(t.lines, l)
	}
	if over := len(t.lines) - t.Lines; over > 0 {
		t.lines = append(t.lines[:0], t.lines[over:]...)
	}
	if len(t.part) > 4096 {
		t.part = t.part[len(t.part)-4096:]
	}
	return len(p), nil
}

// String is the kept lines joined with " | ", for one status line.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := append([]string(nil), t.lines...)
	if t.part != "" {
		l = append(l, t.part)
	}
	if over := len(l) - t.Lines; over > 0 {
		l = l[over:]
	}
	return strings.Join(l, " | ")
}

// Supervisor runs a program and restarts it with backoff when it exits,
// until it exits with StopCode or ctx ends.
type Supervisor struct {
	// Command makes the command of one run; its Stdout and Stderr are
	// set by Run.
	Command func(ctx context.Context) *exec.Cmd
	// Out receives the program's output (the console and the log).
	Out      io.Writer
	Backoff  Backoff
	StopCode int
	// Log reports starts and exits.
	Log func(format string, a ...any)
	// Sleep waits (tests make it instant); nil is a timer bounded by ctx.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnExit, when set, is told the number of exits so far each time the
	// program exits other than with StopCode, before the pause.
	OnExit func(exits int)

	mu       sync.Mutex
	exits    int
	lastExit string
	up       bool
}

// Exits is how many times the program exited so far, and how the last
// exit went.
func (s *Supervisor) Exits() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exits, s.lastExit
}

// Running reports whether the program is running now.
func (s *Supervisor) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// ErrStopCode is Run's result when the program asked to stop.
var ErrStopCode = errors.New("the program exited with its stop code")

// Run supervises until the program exits with StopCode (ErrStopCode) or
// ctx ends (ctx's error, after the running program got SIGTERM and
// exited: exec.Cmd's Cancel and WaitDelay say how).
func (s *Supervisor) Run(ctx context.Context) error {
	sleep := s.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	logf := s.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var pause time.Duration
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		cmd := s.Command(ctx)
		cmd.Stdout, cmd.Stderr = s.Out, s.Out
		start := time.Now()
		err := cmd.Start()
		if err == nil {
			s.setUp(true)
			logf("started %s (pid %d)", cmd.Path, cmd.Process.Pid)
			err = cmd.Wait()
			s.setUp(false)
		}
		uptime := time.Since(start)
		code := -1
		var ee *exec.ExitError
		switch {
		case err == nil:
			code = 0
		case errors.As(err, &ee):
			code = ee.ExitCode()
		}
		if code == s.StopCode && s.StopCode != 0 {
			s.recordExit(fmt.Sprintf("exit code %d", code))
			logf("%s exited with code %d after %s: stopping", cmd.Path, code, uptime.Round(time.Millisecond))
			return ErrStopCode
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		why := "exit code 0"
		if err != nil {
			why = err.Error()
		}
		if n := s.recordExit(why); s.OnExit != nil {
			s.OnExit(n)
		}
		pause = s.Backoff.Next(pause, uptime)
		logf("%s: %s after %s; restarting in %s", cmd.Path, why, uptime.Round(time.Millisecond), pause)
		if err := sleep(ctx, pause); err != nil {
			return err
		}
	}
}

func (s *Supervisor) setUp(up bool) {
	s.mu.Lock()
	s.up = up
	s.mu.Unlock()
}

func (s *Supervisor) recordExit(why string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exits++
	s.lastExit = why
	return s.exits
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
