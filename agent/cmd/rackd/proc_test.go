package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// These tests run the real rackd binary as a child process, as an operator
// (or systemd) would.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// rackdBinary builds rackd once per test run.
func rackdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rackd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "rackd")
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		out, err := exec.Command(goTool, "build", "-tags", "rackd_fakepower", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	// The binaries are built once per process, for every test and every
	// -count run, and removed at its end.
	for _, bin := range []string{binPath, enlistBin} {
		if bin != "" {
			os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

// daemon is one rackd child process.
type daemon struct {
	cmd    *exec.Cmd
	url    string
	stderr *netnstest.Buffer
	exited chan struct{}
	err    error
}

// startDaemon starts `rackd serve` on a random loopback port and waits until
// it serves. The process is killed (by its PID) when the test ends.
func startDaemon(t *testing.T, stateDir string, extra ...string) *daemon {
	t.Helper()
	return launchDaemon(t, nil, stateDir, extra...)
}

// startDaemonIn is startDaemon inside the network namespace named netns:
// "ip netns exec" execs rackd in place, so the child's PID is rackd's own
// and kill/stop signal rackd itself. Its 127.0.0.1 is the namespace's
// loopback: reach the API with a client that dials inside the namespace.
func startDaemonIn(t *testing.T, netns, stateDir string, extra ...string) *daemon {
	t.Helper()
	return launchDaemon(t, []string{"ip", "netns", "exec", netns}, stateDir, extra...)
}

// launchDaemon runs rackd serve, prefixed by the wrapper command prefix
// (none when empty), and waits until it serves.
func launchDaemon(t *testing.T, prefix []string, stateDir string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{"serve", "--state-dir", stateDir, "--listen", "127.0.0.1:0", "--log-format", "json"}, extra...)
	argv := append(append(append([]string{}, prefix...), rackdBinary(t)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	pr, pw := io.Pipe()
	d := &daemon{cmd: cmd, stderr: &netnstest.Buffer{}, exited: make(chan struct{})}
	// The buffer first: whoever reads the pipe and sees "rackd serving"
	// must find everything up to it in d.stderr already.
	cmd.Stderr = io.MultiWriter(d.stderr, pw)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start rackd: %v", err)
	}
	go func() {
		d.err = cmd.Wait()
		pw.Close()
		close(d.exited)
	}()
	t.Cleanup(func() { d.kill() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct {
				Msg string `json:"msg"`
				URL string `json:"url"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "rackd serving" {
				urls <- line.URL
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case d.url = <-urls:
		return d
	case <-d.exited:
		// The last line (rackd's error) first: make test's summary keeps
		// a test's first line of output, not what follows it.
		all := strings.TrimSpace(d.stderr.String())
		t.Fatalf("rackd exited before serving (%v): %s\n%s", d.err, all[strings.LastIndexByte(all, '\n')+1:], all)
	case <-time.After(30 * time.Second):
		t.Fatalf("rackd did not start within 30s:\n%s", d.stderr.String())
	}
	return nil
}

// kill sends SIGKILL to this daemon's PID (never by name) and reaps it.
func (d *daemon) kill() {
	select {
	case <-d.exited:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// stop asks for a graceful shutdown and waits for it.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		if d.err != nil {
			t.Fatalf("rackd exited with %v after SIGTERM:\n%s", d.err, d.stderr.String())
		}
	case <-time.After(20 * time.Second):
		d.kill()
		t.Fatalf("rackd did not stop within 20s of SIGTERM")
	}
}

// runToExit runs rackd with args and returns its exit code and output; it
// must exit on its own within 20s.
func runToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(rackdBinary(t), args...)
	var out netnstest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("rackd %v did not exit within 20s:\n%s", args, out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

func adminToken(t *testing.T, stateDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "admin.token"))
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// api calls the daemon's API; it returns the status (0 when the request
// failed on the network, e.g. because the daemon was killed) and the body.
func (d *daemon) api(client *http.Client, token, method, path string, body any, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, raw, err
		}
	}
	return resp.StatusCode, raw, nil
}
