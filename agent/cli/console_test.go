package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"rackd/api"
)

func TestDetacher(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		typed  string
		detach bool
	}{
		{"first thing", []string{"~."}, "", true},
		{"after CR", []string{"ls\r~."}, "ls\r", true},
		{"after LF", []string{"ls\n~.rest"}, "ls\n", true},
		{"mid-line is typed", []string{"a~.b"}, "a~.b", false},
		{"split across reads", []string{"x\r", "~", "."}, "x\r", true},
		{"tilde tilde types one", []string{"~~."}, "~.", false},
		{"tilde then other", []string{"~a"}, "~a", false},
		{"tilde then newline keeps line start", []string{"~\r~."}, "~\r", true},
		{"plain", []string{"hello\r"}, "hello\r", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := detacher{lineStart: true}
			var typed []byte
			detach := false
			for _, c := range tc.chunks {
				out, stop := d.feed([]byte(c))
				typed = append(typed, out...)
				if stop {
					detach = true
					break
				}
			}
			if string(typed) != tc.typed || detach != tc.detach {
				t.Errorf("typed %q detach %v; want %q %v", typed, detach, tc.typed, tc.detach)
			}
		})
	}
}

// fakeConsole is a server that upgrades GET .../console as rackd does and
// echoes what it reads, upper-cased, after a greeting; it records the
// request.
func fakeConsole(t *testing.T, got chan<- *http.Request, typed chan<- string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: rackd-console\r\n\r\nlogin: ")
		brw.Flush()
		b, _ := io.ReadAll(brw.Reader)
		typed <- string(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestConsoleRelay: rackd console sends the upgrade, shows the output,
// types with --write (not the detach sequence), and detaches on ~.;
// read-only it types nothing.
func TestConsoleRelay(t *testing.T) {
	for _, write := range []bool{true, false} {
		got := make(chan *http.Request, 1)
		typed := make(chan string, 1)
		srv := fakeConsole(t, got, typed)
		pr, pw := io.Pipe()
		old := stdin
		stdin = pr
		var out, errOut syncWriter
		e := &env{ctx: context.Background(), stdout: &out, stderr: &errOut, g: globals{url: srv.URL, token: "tok"}}
		done := make(chan error, 1)
		go func() { done <- runConsole(e, "m1", write) }()
		r := <-got
		if r.Header.Get("Upgrade") != "rackd-console" || r.Header.Get("Authorization") != "Bearer tok" ||
			r.URL.Path != "/api/v1/machines/m1/console" || (r.URL.Query().Get("write") == "true") != write {
			t.Errorf("request %s %v", r.URL, r.Header)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), "login: ") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		go func() { io.WriteString(pw, "root\r~.ignored") }()
		if err := <-done; err != nil {
			t.Fatalf("write=%v: %v", write, err)
		}
		want := "root\r"
		if !write {
			want = ""
		}
		if s := <-typed; s != want {
			t.Errorf("write=%v: typed %q, want %q", write, s, want)
		}
		if !strings.Contains(errOut.String(), "detached from the console of m1") {
			t.Errorf("stderr %q", errOut.String())
		}
		stdin = old
		pw.Close()
	}
}

type syncWriter struct {
	b strings.Builder
}

var syncMu = make(chan struct{}, 1)

func (s *syncWriter) Write(p []byte) (int, error) {
	syncMu <- struct{}{}
	defer func() { <-syncMu }()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	syncMu <- struct{}{}
	defer func() { <-syncMu }()
	return s.b.String()
}

// A failure event's console tail prints under the table, line by line,
// with control characters made harmless.
func TestPrintEventsConsole(t *testing.T) {
	var b strings.Builder
	evs := []api.Event{
		{Action: "create", To: "NEW"},
		{Action: "commissioning-failed", From: "COMMISSIONING", To: "FAILED_COMMISSIONING", Console: "Linux version 6.1\r\n\x1b[31mpanic\r\n"},
	}
	if err := printEvents(&b, evs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"commissioning-failed", "Console before FAILED_COMMISSIONING", "  | Linux version 6.1\n", "  | ?[31mpanic\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Count(out, "Console before") != 1 {
		t.Errorf("output:\n%q", out)
	}
}
