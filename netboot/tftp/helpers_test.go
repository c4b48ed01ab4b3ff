package tftp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/internal/netnstest"
	"rackd/netboot/files"
)

// fixture is a boot tree in a temporary directory, next to a secret that
// must never be served.
type fixture struct {
	dir    string // the tree's root
	secret string // a file outside it
	files  map[string][]byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	fx := &fixture{dir: filepath.Join(base, "root"), secret: filepath.Join(base, "secret"), files: map[string][]byte{}}
	must(t, os.MkdirAll(filepath.Join(fx.dir, "images"), 0o755))
	must(t, os.WriteFile(fx.secret, []byte("SECRET-OUTSIDE-THE-TREE\n"), 0o644))
	// A symlink inside the tree pointing out of it.
	must(t, os.Symlink(fx.secret, filepath.Join(fx.dir, "escape")))
	must(t, os.Symlink("../../secret", filepath.Join(fx.dir, "images", "escape-rel")))
	return fx
}

// add writes a file of n random bytes (or content when given) and returns
// its content.
func (fx *fixture) add(t *testing.T, name string, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	p := filepath.Join(fx.dir, filepath.FromSlash(name))
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, b, 0o644))
	fx.files[name] = b
	return b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeRenderer renders configs from a map, as netboot/bootconf will.
type fakeRenderer struct {
	mu      sync.Mutex
	configs map[string]string
}

func (r *fakeRenderer) Render(_ context.Context, name string) ([]byte, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.configs[name]
	return []byte(s), ok, nil
}

// testServer runs a Server on 127.0.0.1:0 until the test ends.
type testServer struct {
	*Server
	reg  *prometheus.Registry
	host string
	port string
	logs *netnstest.Buffer
}

func startServer(t *testing.T, cfg Config, src files.Source) *testServer {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	logs := &netnstest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewPedanticRegistry()
	s, err := New(cfg, src, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Serve: %v", err)
	case <-time.After(5 * time.Second):
		cancel()
		t.Fatal("server not ready")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	ap := s.Addr()
	return &testServer{Server: s, reg: reg, host: ap.Addr().String(), port: strconv.Itoa(int(ap.Port())), logs: logs}
}

// counter reads one sample of the server's registry.
func (ts *testServer) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := ts.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

// bucket is the cumulative count of a histogram's bucket le.
func (ts *testServer) bucket(t *testing.T, name string, le float64) float64 {
	t.Helper()
	mfs, err := ts.reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				return float64(b.GetCumulativeCount())
			}
		}
	}
	t.Fatalf("%s has no bucket %v", name, le)
	return 0
}

// waitCounter waits until counter reaches want: the hook runs after the
// client has its last ACK answered, so a client may exit first.
func (ts *testServer) waitCounter(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := ts.counter(t, name, labels...)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// peer runs a TFTP client program with a deadline and returns its combined
// output. The exit status is returned but not trusted: tftp-hpa exits 0
// on errors, so every caller checks the file it fetched.
func peer(t *testing.T, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return string(out), err
}

// peerTool returns the path of a client program: a missing one fails the
// test as root or in CI (the CI image must have it) and skips it otherwise.
func peerTool(t *testing.T, name string) string {
	t.Helper()
	return netnstest.Tool(t, name)
}

// The three clients. Each returns what it printed; out is the local file.
func tftpHPA(t *testing.T, ts *testServer, remote, out string) (string, error) {
	// -m binary: octet mode; -c must come last (tftp-hpa's rule). The
	// remote name is given as host:name because tftp-hpa reads a colon in
	// a bare name ("grub.cfg-52:54:...") as a host separator; it splits at
	// the first colon and keeps the port given on the command line.
	return peer(t, 60*time.Second, peerTool(t, "tftp"), "-m", "binary", ts.host, ts.port,
		"-c", "get", ts.host+":"+remote, out)
}

func atftp(t *testing.T, ts *testServer, remote, out string, opts ...string) (string, error) {
	args := []string{}
	for _, o := range opts {
		args = append(args, "--option", o)
	}
	args = append(args, "-g", "-r", remote, "-l", out, ts.host, ts.port)
	return peer(t, 120*time.Second, peerTool(t, "atftp"), args...)
}

func curlTFTP(t *testing.T, ts *testServer, remote, out string, blksize int) (string, error) {
	// --path-as-is: send the name as written, dots and all.
	args := []string{"-sS", "--path-as-is", "--max-time", "120", "-o", out}
	if blksize > 0 {
		args = append(args, "--tftp-blksize", strconv.Itoa(blksize))
	}
	args = append(args, "tftp://"+ts.host+":"+ts.port+"/"+remote)
	return peer(t, 150*time.Second, peerTool(t, "curl"), args...)
}

// checkFile fails unless path holds exactly want.
func checkFile(t *testing.T, client, path string, want []byte, out string, err error) {
	t.Helper()
	got, rerr := os.ReadFile(path)
	if rerr != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes (sha256 %x, %v), want %d bytes (sha256 %x); client said %v: %s",
			client, len(got), sha256.Sum256(got), rerr, len(want), sha256.Sum256(want), err, strings.TrimSpace(out))
	}
}
