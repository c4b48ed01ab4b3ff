package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/api"
)

func TestBytesIEC(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB", 2 << 40: "2.0 TiB", 5000 << 40: "5000.0 TiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}

// The same job sequence drawn on a terminal (a bar redrawn with \r) and
// elsewhere (a line every plainEvery), with a fake clock.
func TestProgressDisplay(t *testing.T) {
	job := func(done int64, file string, filesDone int) api.ImportJob {
		return api.ImportJob{ID: "i-7", State: api.ImportRunning, BytesDone: done, BytesTotal: 100 << 20,
			FilesDone: filesDone, Files: 2, File: file}
	}
	steps := []api.ImportJob{job(0, "", 0), job(10<<20, "vmlinuz", 0), job(30<<20, "initrd", 1), job(60<<20, "initrd", 1)}
	final := api.ImportJob{ID: "i-7", State: api.ImportDone, BytesDone: 100 << 20, BytesTotal: 100 << 20, FilesDone: 2, Files: 2}

	for _, tty := range []bool{true, false} {
		var buf bytes.Buffer
		clock := time.Unix(1000, 0)
		p := &progress{w: &buf, tty: tty, now: func() time.Time { return clock }}
		for _, j := range steps {
			p.update(j)
			clock = clock.Add(time.Second)
		}
		p.done(final)
		out := buf.String()
		if tty {
			for _, want := range []string{
				"\r[>                             ]   0%  0 B/100.0 MiB  0 B/s\x1b[K",
				"\r[===>                          ]  10%  10.0 MiB/100.0 MiB  10.0 MiB/s  vmlinuz\x1b[K",
				// 20 MiB in the second second: smoothed 0.7*10+0.3*20.
				"\r[=========>                    ]  30%  30.0 MiB/100.0 MiB  13.0 MiB/s  initrd\x1b[K",
				// done: the mean rate, 100 MiB over 4 s.
				"\r[==============================] 100%  100.0 MiB/100.0 MiB  25.0 MiB/s  done\x1b[K\n",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("terminal output lacks %q:\n%q", want, out)
				}
			}
			if strings.Count(out, "\n") != 1 {
				t.Errorf("terminal output has %d newlines, want 1 (at the end):\n%q", strings.Count(out, "\n"), out)
			}
			continue
		}
		// Lines at 0 s and 2 s (every plainEvery), then the end.
		want := "import i-7: running 0% 0 B of 100.0 MiB, 0 B/s, file 1 of 2\n" +
			"import i-7: running 30% 30.0 MiB of 100.0 MiB, 13.0 MiB/s, file 2 of 2 (initrd)\n" +
			"import i-7: done 100% 100.0 MiB of 100.0 MiB, 25.0 MiB/s, file 2 of 2\n"
		if out != want {
			t.Errorf("plain output:\n%s\nwant:\n%s", out, want)
		}
	}
}

// A buffer is no terminal: the bar's control characters never reach a
// log or a pipe.
func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a bytes.Buffer is a terminal")
	}
}

// Ctrl-C while following an import cancels it on the server, with a fresh
// context since the command's own is gone.
func TestFollowImportCancel(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	cancelled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /api/v1/images/import":
			w.WriteHeader(202)
			io.WriteString(w, `{"id":"i-4","state":"running","bytes_done":0,"bytes_total":100,"files":1}`)
		case "GET /api/v1/images/imports/i-4":
			io.WriteString(w, `{"id":"i-4","state":"running","bytes_done":40,"bytes_total":100,"files":1,"file":"root.tgz"}`)
		case "POST /api/v1/images/imports/i-4/cancel":
			close(cancelled)
			io.WriteString(w, `{"id":"i-4","state":"cancelled","bytes_done":40,"bytes_total":100,"files":1,"error":"cancelled by admin"}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"no","code":"not_found"}`)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer
	stderr := &lockedBuffer{}
	e := &env{ctx: ctx, stdout: &stdout, stderr: stderr, g: globals{url: srv.URL, token: "tok"}}
	done := make(chan error, 1)
	go func() { done <- followImport(e, api.ImportImage{URL: "http://h/img/"}) }()
	// Cancel once the command has seen the job running at 40%.
	deadline := time.After(10 * time.Second)
	for !strings.Contains(stderr.String(), "40%") {
		select {
		case <-deadline:
			t.Fatalf("no progress shown: %q", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("followImport did not return after cancel")
	}
	select {
	case <-cancelled:
	default:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the import was not cancelled on the server; calls %v", calls)
	}
	if err == nil || !strings.Contains(err.Error(), "import i-4 cancelled") {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(stderr.String(), "import i-4: cancelled 40%") {
		t.Fatalf("stderr lacks the final state: %q", stderr.String())
	}
}

// lockedBuffer is a buffer one goroutine writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// What the server does with a file after its download (decompressing a
// disk image to check it, converting a qcow2) shows after the file's name.
func TestProgressStep(t *testing.T) {
	j := api.ImportJob{ID: "i-2", State: api.ImportRunning, BytesDone: 10, BytesTotal: 10, Files: 1, File: "disk.qcow2", Step: "converting qcow2 to raw"}
	if got := plainLine(j, 0); !strings.HasSuffix(got, "(disk.qcow2): converting qcow2 to raw") {
		t.Errorf("plain line %q", got)
	}
	if got := barLine(j, 0, 10); !strings.HasSuffix(got, "  disk.qcow2: converting qcow2 to raw") {
		t.Errorf("bar %q", got)
	}
	j.Step = ""
	if got := plainLine(j, 0); !strings.HasSuffix(got, "(disk.qcow2)") {
		t.Errorf("plain line without a step %q", got)
	}
}
