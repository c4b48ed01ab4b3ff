package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"rackd/bench/internal/benchns"
)

// server is one TFTP server under test, running in the server namespace in
// a cgroup of its own.
type server struct {
	name string
	addr string // host:port of its TFTP socket
	p    *benchns.Proc
	cg   *cgroup
	// rackd only
	state string
}

const (
	readyTimeout = 15 * time.Second
	rackdTFTP    = benchns.ServerIP + ":69"
	hpaTFTP      = benchns.ServerIP + ":6969"
	rackdAPI     = "127.0.0.1:5240" // in the server namespace
)

func (s *server) stop() {
	if s.p != nil {
		s.p.Stop(15 * time.Second)
		s.p = nil
	}
	if s.cg != nil {
		if err := s.cg.remove(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-tftp: cleanup:", err)
		}
		s.cg = nil
	}
}

// checkAlive reports a server that died during the run.
func (s *server) checkAlive() error {
	if s.p.Exited() {
		return fmt.Errorf("%s exited during the run: %v\n%s", s.name, s.p.Err, s.p.Out)
	}
	return nil
}

// waitListening waits until p has a UDP socket on port.
func waitListening(ctx context.Context, p *benchns.Proc, port int) error {
	deadline := time.Now().Add(readyTimeout)
	for !benchns.Listening(p.PID(), port, false) {
		if p.Exited() {
			return fmt.Errorf("%s exited at start: %v\n%s", p.Name, p.Err, p.Out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no UDP socket on port %d after %v\n%s", p.Name, port, readyTimeout, p.Out)
		}
		if err := benchns.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// startHPA runs tftpd-hpa in the foreground (-L) on hpaTFTP, chrooted to
// tree (-s) as user tftp, as its Debian service does. It forks a child per
// transfer, in its cgroup.
func startHPA(ctx context.Context, t *benchns.Topology, cgParent, tree string) (*server, error) {
	cg, err := newCgroup(cgParent, "tftpd-hpa")
	if err != nil {
		return nil, err
	}
	s := &server{name: "tftpd-hpa", addr: hpaTFTP, cg: cg}
	bin := "in.tftpd"
	if _, err := os.Stat("/usr/sbin/in.tftpd"); err == nil {
		bin = "/usr/sbin/in.tftpd"
	}
	user := "tftp"
	if _, err := lookupUser(user); err != nil {
		user = "nobody"
	}
	s.p, err = startProc(t.Srv, cg, nil, bin, "-L", "-a", hpaTFTP, "-u", user, "-s", tree)
	if err != nil {
		s.stop()
		return nil, err
	}
	if err := waitListening(ctx, s.p, 6969); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func lookupUser(name string) (string, error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+":") {
			return name, nil
		}
	}
	return "", fmt.Errorf("no user %s", name)
}

const rackdConfig = `# written by bench/tftp
[tftp]
listen = "` + rackdTFTP + `"
`

// startRackd runs rackd serve with its TFTP server on rackdTFTP, its API on
// rackdAPI, and state (with the tree in state/boot).
func startRackd(ctx context.Context, t *benchns.Topology, cgParent, bin, state, cpuprofile string) (*server, error) {
	cg, err := newCgroup(cgParent, "rackd")
	if err != nil {
		return nil, err
	}
	s := &server{name: "rackd", addr: rackdTFTP, cg: cg, state: state}
	cfg := filepath.Join(filepath.Dir(state), "rackd.toml")
	if err := os.WriteFile(cfg, []byte(rackdConfig), 0o600); err != nil {
		s.stop()
		return nil, err
	}
	var env []string
	if cpuprofile != "" {
		abs, err := filepath.Abs(cpuprofile)
		if err != nil {
			s.stop()
			return nil, err
		}
		env = append(env, "RACKD_CPUPROFILE="+abs)
	}
	s.p, err = startProc(t.Srv, cg, env, bin, "serve", "--config", cfg, "--state-dir", state,
		"--listen", rackdAPI, "--log-level", "warn")
	if err != nil {
		s.stop()
		return nil, err
	}
	if err := s.waitHealthy(ctx, t); err != nil {
		s.stop()
		return nil, err
	}
	if err := waitListening(ctx, s.p, 69); err != nil {
		s.stop()
		return nil, fmt.Errorf("%w\n(is tftp.listen wired into rackd serve?)", err)
	}
	return s, nil
}

func apiClient(t *benchns.Topology) *http.Client {
	return &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: benchns.Dialer(t.Srv), DisableKeepAlives: true}}
}

func (s *server) waitHealthy(ctx context.Context, t *benchns.Topology) error {
	c := apiClient(t)
	deadline := time.Now().Add(readyTimeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+rackdAPI+"/healthz", nil)
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if s.p.Exited() {
			return fmt.Errorf("rackd exited at start: %v\n%s", s.p.Err, s.p.Out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rackd: API not healthy after %v (%v)\n%s", readyTimeout, err, s.p.Out)
		}
		if err := benchns.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}
