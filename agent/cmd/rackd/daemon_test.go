package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
)

// TestDaemonLifecycle: first start writes a private admin token; SIGTERM
// shuts down cleanly; a restart keeps the data and the token.
func TestDaemonLifecycle(t *testing.T) {
	state := t.TempDir()
	d := startDaemon(t, state)
	fi, err := os.Stat(filepath.Join(state, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token mode %v, want 0600", fi.Mode().Perm())
	}
	if !strings.Contains(d.stderr.String(), filepath.Join(state, "admin.token")) {
		t.Fatalf("the log does not say where the admin token is:\n%s", d.stderr.String())
	}
	token := adminToken(t, state)
	client := &http.Client{Timeout: 5 * time.Second}
	if status, raw, err := d.api(client, token, "POST", "/api/v1/machines",
		api.CreateMachine{Hostname: "keep", MACs: []string{"52:54:00:00:00:01"}}, nil); err != nil || status != 201 {
		t.Fatalf("create: %d %s %v", status, raw, err)
	}
	d.stop(t)
	if !strings.Contains(d.stderr.String(), "rackd stopped") {
		t.Fatalf("no clean stop in the log:\n%s", d.stderr.String())
	}
	d2 := startDaemon(t, state)
	if got := adminToken(t, state); got != token {
		t.Fatalf("the admin token changed across a restart")
	}
	var m api.Machine
	if status, raw, err := d2.api(client, token, "GET", "/api/v1/machines/keep", nil, &m); err != nil || status != 200 {
		t.Fatalf("machine lost across a restart: %d %s %v", status, raw, err)
	}
}

// TestDaemonFailsFast: a second rackd on a locked database, a busy port, a
// corrupt database and a bad config each stop at once with a message that
// says what is wrong, and a non-zero status.
func TestDaemonFailsFast(t *testing.T) {
	state := t.TempDir()
	d := startDaemon(t, state)

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	corrupt := t.TempDir()
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(corrupt, "rackd.db"), junk, 0o600); err != nil {
		t.Fatal(err)
	}
	badConfig := filepath.Join(t.TempDir(), "rackd.toml")
	os.WriteFile(badConfig, []byte("listen = \"127.0.0.1:0\"\nlisten_adress = \"x\"\n"), 0o600)

	tests := map[string]struct {
		args []string
		code int
		want string
	}{
		"locked database": {[]string{"serve", "--state-dir", state, "--listen", "127.0.0.1:0"}, 1, "is locked"},
		"busy port":       {[]string{"serve", "--state-dir", t.TempDir(), "--listen", busy.Addr().String()}, 1, "already in use"},
		"corrupt db":      {[]string{"serve", "--state-dir", corrupt, "--listen", "127.0.0.1:0"}, 1, "corrupt"},
		"unknown setting": {[]string{"serve", "--config", badConfig, "--state-dir", t.TempDir()}, 1, "listen_adress"},
		"bad log level":   {[]string{"serve", "--state-dir", t.TempDir(), "--log-level", "loud"}, 1, "log_level"},
		"bad flag":        {[]string{"serve", "--bogus"}, 2, "bogus"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			code, out := runToExit(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit %d mentioning %q", code, out, tc.code, tc.want)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("took %v to fail", time.Since(start))
			}
		})
	}
	// The corrupt file is left as it was, for a human to look at.
	if got, _ := os.ReadFile(filepath.Join(corrupt, "rackd.db")); len(got) != len(junk) {
		t.Fatalf("the corrupt database was modified")
	}
	// The first rackd is unharmed by all this.
	if resp, err := http.Get(d.url + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after the failed starts: %v %v", resp, err)
	}
}

// TestFailedStartLeavesNoState: a start that fails (the API's port taken;
// the TFTP port taken, which fails after the database is made) exits
// non-zero and leaves the state directory as it found it, absent or
// empty; the next start on free ports is a first start: it makes the
// admin user and its token file, and the token works.
func TestFailedStartLeavesNoState(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyUDP.Close()
	tftpTaken := filepath.Join(t.TempDir(), "rackd.toml")
	if err := os.WriteFile(tftpTaken, []byte("[tftp]\nlisten = \""+busyUDP.LocalAddr().String()+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		state func(t *testing.T) string
		args  []string
		want  string
	}{
		"API port taken, no state directory": {
			state: func(t *testing.T) string { return filepath.Join(t.TempDir(), "var", "state") },
			args:  []string{"--listen", busy.Addr().String()},
			want:  "already in use",
		},
		"TFTP port taken, empty state directory": {
			state: func(t *testing.T) string { return t.TempDir() },
			args:  []string{"--config", tftpTaken, "--listen", "127.0.0.1:0"},
			want:  "tftp",
		},
	} {
		t.Run(name, func(t *testing.T) {
			state := tc.state(t)
			_, statErr := os.Stat(state)
			existed := statErr == nil
			code, out := runToExit(t, append([]string{"serve", "--state-dir", state}, tc.args...)...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant a failure mentioning %q", code, out, tc.want)
			}
			entries, err := os.ReadDir(state)
			switch {
			case !existed && !os.IsNotExist(err):
				t.Errorf("the failed start left the state directory %s (%d entries, %v), which it made", state, len(entries), err)
				if !os.IsNotExist(os.RemoveAll(state)) {
					os.MkdirAll(filepath.Dir(state), 0o750) // the parent, for the next start
				}
			case existed && len(entries) != 0:
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("the failed start left %v in the empty state directory", names)
			}
			if !existed {
				if _, err := os.Stat(filepath.Dir(state)); !os.IsNotExist(err) {
					t.Errorf("the failed start left %s, which it made (%v)", filepath.Dir(state), err)
				}
			}
			d := startDaemon(t, state)
			if !strings.Contains(d.stderr.String(), "created the admin user") {
				t.Errorf("the start after the failed one did not make the admin user:\n%s", d.stderr.String())
			}
			client := &http.Client{Timeout: 5 * time.Second}
			if status, raw, err := d.api(client, adminToken(t, state), "GET", "/api/v1/users", nil, nil); err != nil || status != 200 {
				t.Errorf("the new admin token: %d %s %v", status, raw, err)
			}
			d.stop(t)
		})
	}
}
