// Package benchrackd runs a real rackd process for a benchmark: on a free
// loopback port, with the benchmark's config, until stopped by its PID.
package benchrackd

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Rackd is a running rackd.
type Rackd struct {
	Base string // http://127.0.0.1:PORT
	PID  int
	cmd  *exec.Cmd
}

// Start writes config as work/rackd.toml, runs bin serve with its state in
// work/state on a free loopback port, and returns once /healthz answers 200
// (within ready). The caller stops it with Stop.
func Start(ctx context.Context, bin, work, config string, ready time.Duration) (*Rackd, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(work, "rackd.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfg, "--state-dir", filepath.Join(work, "state"), "--listen", addr)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	r := &Rackd{Base: "http://" + addr, PID: cmd.Process.Pid, cmd: cmd}
	deadline := time.Now().Add(ready)
	for {
		resp, err := http.Get(r.Base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("rackd did not answer /healthz on %s within %v: %v", addr, ready, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends rackd by its PID: SIGTERM, then SIGKILL after 15 s.
func (r *Rackd) Stop() {
	r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		r.cmd.Process.Kill()
		<-done
	}
}
