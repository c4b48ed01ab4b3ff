package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rackd/agent/cli"
)

func TestBackup(t *testing.T) {
	db := bytes.Repeat([]byte("a bolt page "), 100000) // larger than one write
	octet := func(w http.ResponseWriter) { w.Header().Set("Content-Type", "application/octet-stream") }
	tests := map[string]struct {
		handler http.HandlerFunc
		// before prepares the directory; old is FILE's content before the
		// backup ("" for none), and keepTmp says a FILE.tmp was there and
		// must stay (it belongs to someone else).
		old     string
		keepTmp bool
		code    int
		errWant string
	}{
		"ok": {
			handler: func(w http.ResponseWriter, r *http.Request) { octet(w); w.Write(db) },
		},
		"ok, replacing the previous backup": {
			handler: func(w http.ResponseWriter, r *http.Request) { octet(w); w.Write(db) },
			old:     "previous backup",
		},
		"server dies mid-stream with a length": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				octet(w)
				w.Header().Set("Content-Length", "10000000")
				w.Write(db[:50000])
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			},
			code: 1, errWant: "broke off after",
		},
		"server dies mid-stream, chunked": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				octet(w)
				w.Write(db[:50000])
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			},
			old:  "previous backup",
			code: 1, errWant: "broke off after",
		},
		"refused": {
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, `{"error":"admin only","code":"forbidden"}`)
			},
			old:  "previous backup",
			code: 1, errWant: "rackd: admin only (forbidden, HTTP 403)\n",
		},
		"another backup is running": {
			handler: func(w http.ResponseWriter, r *http.Request) { octet(w); w.Write(db) },
			keepTmp: true,
			code:    1, errWant: ".tmp exists: another backup may be running",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			isolate(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != "GET" || r.URL.Path != "/api/v1/backup" || r.Header.Get("Authorization") != "Bearer tok" {
					t.Errorf("request %s %s %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
				}
				tc.handler(w, r)
			}))
			defer srv.Close()
			t.Setenv("RACKD_URL", srv.URL)
			t.Setenv("RACKD_TOKEN", "tok")
			dir := t.TempDir()
			file := filepath.Join(dir, "rackd.db.bak")
			if tc.old != "" {
				writeFile(t, file, tc.old)
			}
			if tc.keepTmp {
				writeFile(t, file+".tmp", "theirs")
			}

			code, stdout, stderr := run(t, "backup", file)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr)
			}
			if !strings.Contains(stderr, tc.errWant) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.errWant)
			}

			got, err := os.ReadFile(file)
			switch {
			case tc.code == 0:
				if err != nil || !bytes.Equal(got, db) {
					t.Errorf("FILE has %d bytes (%v), want the %d of the database", len(got), err, len(db))
				}
				if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("FILE mode %v (%v), want 0600", fi.Mode(), err)
				}
				if want := "Wrote 1200000 bytes to " + file + ".\n"; stdout != want {
					t.Errorf("stdout %q, want %q", stdout, want)
				}
			case tc.old != "":
				if string(got) != tc.old {
					t.Errorf("previous FILE changed to %d bytes", len(got))
				}
			default:
				if !os.IsNotExist(err) {
					t.Errorf("FILE exists after a failed backup (%d bytes, %v)", len(got), err)
				}
			}
			tmp, err := os.ReadFile(file + ".tmp")
			if tc.keepTmp {
				if string(tmp) != "theirs" {
					t.Errorf("someone else's FILE.tmp was changed: %q, %v", tmp, err)
				}
			} else if !os.IsNotExist(err) {
				t.Errorf("FILE.tmp left behind (%d bytes, %v)", len(tmp), err)
			}
		})
	}
}

func TestBackupJSONAndDirectory(t *testing.T) {
	isolate(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, "db")
	}))
	defer srv.Close()
	t.Setenv("RACKD_URL", srv.URL)
	t.Setenv("RACKD_TOKEN", "tok")
	dir := t.TempDir()
	t.Chdir(dir)

	code, stdout, stderr := run(t, "backup", "out.db", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		File  string `json:"file"`
		Bytes int64  `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.File != filepath.Join(dir, "out.db") || got.Bytes != 2 {
		t.Errorf("stdout %q (%v)", stdout, err)
	}

	code, _, stderr = run(t, "backup", dir)
	if code != 1 || !strings.Contains(stderr, "is a directory") {
		t.Errorf("backup to a directory: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(dir + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("tmp left next to the directory: %v", err)
	}
}

// An interrupt (Ctrl-C cancels Main's context) mid-stream leaves nothing.
func TestBackupInterrupted(t *testing.T) {
	isolate(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(bytes.Repeat([]byte("x"), 4096))
		w.(http.Flusher).Flush()
		cancel() // the user presses Ctrl-C while the copy is under way
		<-r.Context().Done()
	}))
	defer srv.Close()
	t.Setenv("RACKD_URL", srv.URL)
	t.Setenv("RACKD_TOKEN", "tok")
	file := filepath.Join(t.TempDir(), "b.db")

	var out, errOut bytes.Buffer
	code := cli.Main(ctx, []string{"backup", file}, &out, &errOut, nil)
	if code != 1 || errOut.String() != "rackd: interrupted\n" {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
	for _, p := range []string{file, file + ".tmp"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after an interrupted backup (%v)", p, err)
		}
	}
}
