package etcdmember

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Process supervises one etcd process: Start launches it and waits
// (bounded) until it answers; when it exits it is started again after a
// back-off; Stop ends it by its PID. Its log lines go to Log.
type Process struct {
	// Binary is the etcd executable ("etcd": looked up on PATH).
	Binary string
	// ConfigFile is passed as --config-file (Settings.Write).
	ConfigFile string
	// ClientURL and TLS are how Start sees that the member answers.
	ClientURL string
	TLS       *tls.Config
	Log       *slog.Logger
	// StartTimeout bounds Start (default 60 s); MaxBackoff bounds the wait
	// between restarts (default 30 s, starting at 1 s, doubling).
	StartTimeout time.Duration
	MaxBackoff   time.Duration

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited
	stop     chan struct{} // closed by Stop
	done     chan struct{} // closed when the supervisor loop ends
	restarts atomic.Int64
	stopOnce sync.Once
	// supervising is set once the supervisor loop runs (Start succeeded).
	supervising atomic.Bool
}

// ErrStopped is returned by Start when Stop was called meanwhile.
var ErrStopped = errors.New("etcdmember: stopped")

// Start launches the member and returns once it answers on its client
// URL (any HTTP answer: its health needs a quorum, which may be the other
// members' business), or fails after StartTimeout with what it logged.
func (p *Process) Start(ctx context.Context) error {
	if p.Binary == "" {
		p.Binary = "etcd"
	}
	if p.StartTimeout <= 0 {
		p.StartTimeout = 60 * time.Second
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 30 * time.Second
	}
	if p.Log == nil {
		p.Log = slog.New(slog.DiscardHandler)
	}
	bin, err := exec.LookPath(p.Binary)
	if err != nil {
		return fmt.Errorf("etcdmember: %w (install Debian's etcd-server, or set cluster.etcd_binary)", err)
	}
	p.Binary = bin
	p.stop = make(chan struct{})
	p.done = make(chan struct{})
	if err := p.launch(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.StartTimeout)
	defer cancel()
	if err := p.waitAnswer(ctx); err != nil {
		p.Stop()
		return err
	}
	p.supervising.Store(true)
	go p.supervise()
	return nil
}

// PID is the running member's process id (0 when none runs).
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

// Restarts is how many times the member was started again after exiting.
func (p *Process) Restarts() int64 { return p.restarts.Load() }

// launch starts one etcd process.
func (p *Process) launch() error {
	cmd := exec.Command(p.Binary, "--config-file", p.ConfigFile)
	lw := &lineLog{log: p.Log}
	cmd.Stdout, cmd.Stderr = lw, lw
	// Its own process group: a terminal's ^C reaches rackd, which stops
	// the member in order, rather than both at once. Pdeathsig: a rackd
	// killed outright takes its member with it, so the next rackd finds
	// the ports and the data directory free.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdmember: start %s: %w", p.Binary, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		lw.flush()
		p.Log.Debug("etcd member exited", "pid", cmd.Process.Pid, "err", err)
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	p.Log.Info("etcd member started", "pid", cmd.Process.Pid, "config", p.ConfigFile)
	return nil
}

// waitAnswer polls the client URL until the member answers HTTP.
func (p *Process) waitAnswer(ctx context.Context) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: p.TLS}}
	defer hc.CloseIdleConnections()
	var last error
	for {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("etcdmember: etcd exited before it answered on %s (its log is in rackd's, service=etcd)", p.ClientURL)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.ClientURL+"/health", nil)
		if err != nil {
			return fmt.Errorf("etcdmember: %w", err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdmember: etcd did not answer on %s within %v: %w", p.ClientURL, p.StartTimeout, last)
		case <-p.stop:
			return ErrStopped
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// supervise starts the member again whenever it exits, until Stop.
func (p *Process) supervise() {
	defer close(p.done)
	backoff := time.Second
	for {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		started := time.Now()
		select {
		case <-p.stop:
			return
		case <-exited:
		}
		// A member that ran a while earns a fresh back-off.
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		p.Log.Error("etcd member exited; starting it again", "after", backoff)
		select {
		case <-p.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, p.MaxBackoff)
		if err := p.launch(); err != nil {
			p.Log.Error("start the etcd member", "err", err)
			// launch left the last exited process in place: the loop
			// waits the back-off again.
			continue
		}
		p.restarts.Add(1)
	}
}

// Stop ends the member: SIGTERM to its PID, SIGKILL after 10 s, and waits
// for it and the supervisor loop.
func (p *Process) Stop() error {
	if p.stop == nil {
		return nil
	}
	p.stopOnce.Do(func() { close(p.stop) })
	// The loop ends first, so that it cannot start another process
	// behind this one's back.
	if p.supervising.Load() {
		<-p.done
	}
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("etcdmember: stop pid %d: %w", cmd.Process.Pid, err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		p.Log.Warn("etcd member did not stop within 10s of SIGTERM; killing it", "pid", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

// lineLog turns etcd's output (zap JSON lines) into rackd log records.
type lineLog struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.line(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	// A line that never ends is logged in pieces, not kept growing.
	if len(l.buf) > 64<<10 {
		l.line(l.buf)
		l.buf = nil
	}
	return len(b), nil
}

func (l *lineLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.line(l.buf)
		l.buf = nil
	}
}

func (l *lineLog) line(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	var rec map[string]any
	if json.Unmarshal(b, &rec) != nil {
		l.log.Info(string(b), "service", "etcd")
		return
	}
	level := slog.LevelInfo
	switch rec["level"] {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error", "dpanic", "panic", "fatal":
		level = slog.LevelError
	}
	msg, _ := rec["msg"].(string)
	attrs := []any{"service", "etcd"}
	for k, v := range rec {
		switch k {
		case "level", "msg", "ts", "caller":
			continue
		}
		attrs = append(attrs, k, v)
	}
	l.log.Log(context.Background(), level, msg, attrs...)
}
