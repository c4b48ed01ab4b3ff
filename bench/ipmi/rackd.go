package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"rackd/agent/api"
	"rackd/agent/client"
	"rackd/internal/ipmisim"
	"rackd/power"
)

// rackd is a real rackd child process whose machines are the simulators.
type rackd struct {
	cmd  *exec.Cmd
	done chan error
	c    *client.Client
	dir  string
}

// startRackd builds rackd, starts it on a free loopback port with periodic
// power polling off (so only the measured queries reach the BMCs), and adds
// one DEPLOYED machine per simulator (power policy none: rackd never
// powers them by itself).
func startRackd(ctx context.Context, sims []*ipmisim.Sim) (*rackd, error) {
	dir, err := os.MkdirTemp("", "rackd-bench-ipmi-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "rackd")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./agent/cmd/rackd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("build rackd: %v: %s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "rackd.toml")
	if err := os.WriteFile(cfg, []byte("[power]\npoll_interval = \"0s\"\n"), 0o644); err != nil {
		return nil, err
	}
	state := filepath.Join(dir, "state")
	logf, err := os.Create(filepath.Join(dir, "rackd.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "serve", "--config", cfg, "--state-dir", state, "--listen", addr, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Dies with the benchmark, should that be killed before its cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &rackd{cmd: cmd, done: make(chan error, 1), dir: dir}
	go func() { r.done <- cmd.Wait() }()

	// Ready when /healthz answers and the admin token exists (bounded).
	var token []byte
	for i := 0; ; i++ {
		if i == 200 {
			r.stop()
			return nil, fmt.Errorf("rackd did not come up; log in %s", filepath.Join(dir, "rackd.log"))
		}
		select {
		case err := <-r.done:
			r.done <- err
			b, _ := os.ReadFile(filepath.Join(dir, "rackd.log"))
			r.stop()
			return nil, fmt.Errorf("rackd exited: %v: %s", err, b)
		default:
		}
		token, _ = os.ReadFile(filepath.Join(state, "admin.token"))
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && len(token) > 0 {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.c = client.New("http://"+addr, strings.TrimSpace(string(token)))
	for i, s := range sims {
		_, err := r.c.CreateMachine(ctx, api.CreateMachine{
			Hostname: fmt.Sprintf("bmc%02d", i),
			MACs:     []string{fmt.Sprintf("52:54:00:77:%02x:%02x", i/256, i%256)},
			State:    "DEPLOYED",
			Power:    &api.PowerParams{Driver: "ipmi", Address: s.Addr, Username: s.User, Password: s.Password},
		})
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("add machine for %s: %w", s.Addr, err)
		}
	}
	return r, nil
}

// round asks rackd to query every machine's BMC at once (POST .../power
// {"action": "query"}) and waits until every request is done; then checks
// what rackd observed.
func (r *rackd) round(ctx context.Context, sims []*ipmisim.Sim, want func(int) power.State) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	var g errgroup.Group
	for i := range sims {
		g.Go(func() error {
			name := fmt.Sprintf("bmc%02d", i)
			req, err := r.c.RequestPower(ctx, name, api.PowerAction{Action: "query", Reason: "bench-ipmi"})
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			res, err := r.c.WaitPower(ctx, req.ID, 5*time.Millisecond)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if res.State != "done" {
				return fmt.Errorf("%s: query %s: %s", name, res.State, res.Error)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	took := time.Since(start).Seconds()
	for i := range sims {
		mp, err := r.c.MachinePower(ctx, fmt.Sprintf("bmc%02d", i))
		if err != nil {
			return 0, err
		}
		if mp.Observed != want(i).String() {
			return 0, fmt.Errorf("bmc%02d: rackd observed %q, want %v", i, mp.Observed, want(i))
		}
	}
	return took, nil
}

// stop ends rackd by its PID (SIGTERM, then SIGKILL) and removes its state.
func (r *rackd) stop() error {
	defer os.RemoveAll(r.dir)
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	r.cmd.Process.Kill()
	select {
	case <-r.done:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("rackd did not exit after SIGKILL")
	}
}
