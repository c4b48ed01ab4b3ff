package httpboot

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"rackd/internal/netnstest"
	"rackd/netboot/files"
)

const mac = "52:54:00:12:34:56"

var configs = map[string]string{
	"ipxe?mac=" + mac:                   "#!ipxe\nkernel http://10.0.0.1/boot/images/kernel\ninitrd http://10.0.0.1/boot/images/initrd\nboot\n",
	"grub/grub.cfg-" + mac:              "set default=0\n",
	"pxelinux.cfg/01-52-54-00-12-34-56": "DEFAULT local\n",
}

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

func (r *fakeRenderer) set(name, content string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.configs[name] = content
}

// fixture is a tree beside a secret, with symlinks pointing at it, served
// by a Handler on an httptest server.
type fixture struct {
	dir    string
	kernel []byte
	r      *fakeRenderer
	reg    *prometheus.Registry
	h      *Handler
	srv    *httptest.Server
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	base := t.TempDir()
	fx := &fixture{dir: filepath.Join(base, "root"), r: &fakeRenderer{configs: map[string]string{}}}
	for k, v := range configs {
		fx.r.configs[k] = v
	}
	must(t, os.MkdirAll(filepath.Join(fx.dir, "images"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "secret"), []byte("SECRET-OUTSIDE-THE-TREE\n"), 0o644))
	must(t, os.Symlink(filepath.Join(base, "secret"), filepath.Join(fx.dir, "escape")))
	must(t, os.Symlink("../../secret", filepath.Join(fx.dir, "images", "escape-rel")))
	must(t, os.Symlink("/etc", filepath.Join(fx.dir, "etc-link")))
	fx.kernel = make([]byte, 3<<20+17)
	_, _ = rand.Read(fx.kernel)
	must(t, os.WriteFile(filepath.Join(fx.dir, "images", "kernel"), fx.kernel, 0o644))
	tree, err := files.NewTree(fx.dir)
	must(t, err)
	t.Cleanup(func() { _ = tree.Close() })
	fx.reg = prometheus.NewPedanticRegistry()
	fx.h = New(files.NewOverlay(fx.r, tree), slog.New(slog.DiscardHandler), fx.reg)
	return fx
}

func (fx *fixture) serve(t testing.TB) string {
	t.Helper()
	fx.srv = httptest.NewServer(fx.h)
	t.Cleanup(fx.srv.Close)
	return fx.srv.URL
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// curl runs curl with args and returns the status code, the response
// headers (lower-cased names) and the body.
func curl(t *testing.T, args ...string) (int, http.Header, []byte) {
	t.Helper()
	bin := netnstest.Tool(t, "curl") // fails as root or in CI when missing
	dir := t.TempDir()
	hdrFile, bodyFile := filepath.Join(dir, "h"), filepath.Join(dir, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all := append([]string{"-sS", "-D", hdrFile, "-o", bodyFile, "-w", "%{http_code}"}, args...)
	out, err := exec.CommandContext(ctx, bin, all...).Output()
	if err != nil {
		t.Fatalf("curl %v: %v: %s", args, err, out)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(out)))
	must(t, err)
	h := http.Header{}
	raw, _ := os.ReadFile(hdrFile)
	for _, line := range strings.Split(string(raw), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	body, _ := os.ReadFile(bodyFile)
	return code, h, body
}

// TestCurl drives the handler with curl: whole files, ranges, ETags, HEAD,
// rendered configs and traversal attempts.
func TestCurl(t *testing.T) {
	fx := newFixture(t)
	url := fx.serve(t)
	size := len(fx.kernel)

	t.Run("whole file", func(t *testing.T) {
		code, h, body := curl(t, url+"/boot/images/kernel")
		if code != 200 || !bytes.Equal(body, fx.kernel) || h.Get("Content-Length") != strconv.Itoa(size) {
			t.Fatalf("%d, %d bytes, Content-Length %s", code, len(body), h.Get("Content-Length"))
		}
		if h.Get("Etag") == "" || h.Get("Last-Modified") == "" || h.Get("Accept-Ranges") != "bytes" {
			t.Errorf("headers %v", h)
		}
	})
	t.Run("range", func(t *testing.T) {
		for _, r := range []struct {
			spec       string
			start, end int // inclusive
		}{
			{"100-199", 100, 199},
			{"0-0", 0, 0},
			{fmt.Sprintf("%d-", size-10), size - 10, size - 1},
			{"-4096", size - 4096, size - 1},
			{fmt.Sprintf("1048570-%d", size+1000), 1048570, size - 1}, // clamped at the end
		} {
			code, h, body := curl(t, "-r", r.spec, url+"/boot/images/kernel")
			want := fx.kernel[r.start : r.end+1]
			cr := fmt.Sprintf("bytes %d-%d/%d", r.start, r.end, size)
			if code != 206 || !bytes.Equal(body, want) || h.Get("Content-Range") != cr ||
				h.Get("Content-Length") != strconv.Itoa(len(want)) {
				t.Errorf("range %s: %d, %d bytes, Content-Range %q (want %q), Content-Length %s",
					r.spec, code, len(body), h.Get("Content-Range"), cr, h.Get("Content-Length"))
			}
		}
		if code, h, _ := curl(t, "-r", fmt.Sprintf("%d-", size+5), url+"/boot/images/kernel"); code != 416 ||
			h.Get("Content-Range") != fmt.Sprintf("bytes */%d", size) {
			t.Errorf("range past the end: %d %v", code, h)
		}
	})
	t.Run("etag", func(t *testing.T) {
		for _, p := range []string{"/boot/images/kernel", "/boot/ipxe?mac=" + mac} {
			_, h, _ := curl(t, url+p)
			etag := h.Get("Etag")
			if !strings.HasPrefix(etag, `"`) {
				t.Fatalf("%s: ETag %q", p, etag)
			}
			if code, _, body := curl(t, "-H", "If-None-Match: "+etag, url+p); code != 304 || len(body) != 0 {
				t.Errorf("%s: If-None-Match %s: %d, %d bytes", p, etag, code, len(body))
			}
			if code, _, _ := curl(t, "-H", `If-None-Match: "other"`, url+p); code != 200 {
				t.Errorf("%s: If-None-Match other: %d", p, code)
			}
			// If-Range with the current tag: the range; with another: all.
			if code, _, body := curl(t, "-r", "0-3", "-H", "If-Range: "+etag, url+p); code != 206 || len(body) != 4 {
				t.Errorf("%s: If-Range current: %d, %d bytes", p, code, len(body))
			}
			if code, _, _ := curl(t, "-r", "0-3", "-H", `If-Range: "stale"`, url+p); code != 200 {
				t.Errorf("%s: If-Range stale: %d", p, code)
			}
		}
	})
	t.Run("head", func(t *testing.T) {
		// curl -I writes the headers as the body, and reads no body.
		code, h, _ := curl(t, "-I", url+"/boot/images/kernel")
		if code != 200 || h.Get("Content-Length") != strconv.Itoa(size) {
			t.Errorf("HEAD: %d, Content-Length %s", code, h.Get("Content-Length"))
		}
		want := configs["ipxe?mac="+mac]
		code, h, _ = curl(t, "-I", url+"/boot/ipxe?mac="+mac)
		if code != 200 || h.Get("Content-Length") != strconv.Itoa(len(want)) {
			t.Errorf("HEAD rendered: %d, Content-Length %s", code, h.Get("Content-Length"))
		}
	})
	t.Run("rendered", func(t *testing.T) {
		for _, p := range []string{"/boot/ipxe?mac=" + mac, "/boot/ipxe?mac=52%3A54%3A00%3A12%3A34%3A56&x=1",
			"/boot/grub/grub.cfg-" + mac, "/boot/pxelinux.cfg/01-52-54-00-12-34-56"} {
			code, h, body := curl(t, url+p)
			name, _, _ := strings.Cut(strings.TrimPrefix(p, "/boot/"), "&")
			name = strings.ReplaceAll(name, "%3A", ":")
			if code != 200 || string(body) != configs[name] || h.Get("Content-Type") != "text/plain; charset=utf-8" ||
				h.Get("Cache-Control") != "no-cache" || h.Get("Last-Modified") != "" {
				t.Errorf("%s: %d %q %v", p, code, body, h)
			}
		}
		// A changed config is served at once (no cache), under a new ETag.
		_, h, _ := curl(t, url+"/boot/ipxe?mac="+mac)
		fx.r.set("ipxe?mac="+mac, "#!ipxe\nexit\n")
		code, h2, body := curl(t, "-H", "If-None-Match: "+h.Get("Etag"), url+"/boot/ipxe?mac="+mac)
		if code != 200 || string(body) != "#!ipxe\nexit\n" || h2.Get("Etag") == h.Get("Etag") {
			t.Errorf("after a change: %d %q, ETag %s then %s", code, body, h.Get("Etag"), h2.Get("Etag"))
		}
		for _, p := range []string{"/boot/ipxe?mac=de:ad:be:ef:00:01", "/boot/ipxe", "/boot/nope"} {
			if code, _, _ := curl(t, url+p); code != 404 {
				t.Errorf("%s: %d, want 404", p, code)
			}
		}
		if code, _, _ := curl(t, url+"/boot/ipxe?mac=a&mac=b"); code != 400 {
			t.Errorf("two macs: %d, want 400", code)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			code int
		}{
			{"/boot/../../etc/passwd", 403},
			{"/boot/images/../../../etc/passwd", 403},
			{"/boot/%2e%2e/%2e%2e/etc/passwd", 403},
			{"/boot/..%2f..%2fetc%2fpasswd", 403},
			{"/boot//etc/passwd", 403}, // a second leading slash: absolute
			{"/boot/escape", 403},
			{"/boot/images/escape-rel", 403},
			{"/boot/etc-link/passwd", 403},
			{"/boot/" + strings.Repeat("x", 300), 400},
			{"/boot/a%00b", 400},
			{"/boot/..%5c..%5cetc%5cpasswd", 400}, // backslashes
			{"/boot/images/./kernel", 400},
			{"/etc/passwd", 404}, // outside /boot/
			{"/boot/images", 404},
			{"/boot/", 400},
		} {
			code, _, body := curl(t, "--path-as-is", url+tc.path)
			if code != tc.code || bytes.Contains(body, []byte("SECRET")) || bytes.Contains(body, []byte("root:")) {
				t.Errorf("%s: %d (want %d): %.60q", tc.path, code, tc.code, body)
			}
		}
	})
	t.Run("methods", func(t *testing.T) {
		for _, m := range []string{"POST", "PUT", "DELETE", "OPTIONS"} {
			code, h, _ := curl(t, "-X", m, url+"/boot/images/kernel")
			if code != 405 || h.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s: %d, Allow %q", m, code, h.Get("Allow"))
			}
		}
	})

	// The counters saw all of it.
	mfs, err := fx.reg.Gather()
	must(t, err)
	byCode := map[string]float64{}
	var sent float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "rackd_httpboot_requests_total":
				byCode[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			case "rackd_httpboot_bytes_total":
				sent = m.GetCounter().GetValue()
			}
		}
	}
	for _, c := range []string{"200", "206", "304", "400", "403", "404", "405", "416"} {
		if byCode[c] == 0 {
			t.Errorf("no request counted with code %s: %v", c, byCode)
		}
	}
	if sent < float64(size) {
		t.Errorf("bytes_total %v < one kernel (%d)", sent, size)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	must(t, err)
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

// TestMux: mounted on a ServeMux as the agent will, the handler still
// serves, and the mux's own path cleaning never hands it a path outside
// /boot/.
func TestMux(t *testing.T) {
	fx := newFixture(t)
	mux := http.NewServeMux()
	mux.Handle(Prefix, fx.h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if code, _, body := curl(t, srv.URL+"/boot/images/kernel"); code != 200 || !bytes.Equal(body, fx.kernel) {
		t.Errorf("kernel through the mux: %d, %d bytes", code, len(body))
	}
	if code, _, body := curl(t, "--path-as-is", "-L", srv.URL+"/boot/../../etc/passwd"); code == 200 || bytes.Contains(body, []byte("root:")) {
		t.Errorf("traversal through the mux: %d %.60q", code, body)
	}
}

// TestSendfile checks the conditions of net/http's sendfile path: the
// handler's recorder passes ReadFrom on to the wrapped writer, with
// ServeContent's *io.LimitedReader around a source that is a syscall.Conn
// (the tree file's embedded *os.File), which is what net.sendFile looks for.
func TestSendfile(t *testing.T) {
	fx := newFixture(t)
	var got io.Reader
	w := &readFromSpy{ResponseWriter: httptest.NewRecorder(), got: &got}
	req := httptest.NewRequest("GET", "/boot/images/kernel", nil)
	fx.h.ServeHTTP(w, req)
	lr, ok := got.(*io.LimitedReader)
	if !ok {
		t.Fatalf("ReadFrom got %T, want the *io.LimitedReader of io.CopyN", got)
	}
	if _, ok := lr.R.(syscall.Conn); !ok {
		t.Fatalf("ReadFrom's source %T is no syscall.Conn: net/http would not use sendfile", lr.R)
	}
}

// TestNoRegistry: a nil registerer is allowed.
func TestNoRegistry(t *testing.T) {
	h := New(files.NewOverlay(nil, nil), nil, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/boot/x", nil))
	if rec.Code != 404 {
		t.Errorf("%d", rec.Code)
	}
}
