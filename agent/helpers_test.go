package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/power/powertest"
	"rackd/store"
)

// testAgent is a rackd serving on a random loopback port for one test.
type testAgent struct {
	*Agent
	url   string
	admin string // the admin token, read from admin.token as an operator would
}

// startAgent runs an agent on 127.0.0.1:0 until the test ends; the store's
// invariants are checked after it has shut down.
func startAgent(t *testing.T, tweak ...func(*Config)) *testAgent {
	t.Helper()
	return startAgentLog(t, nil, tweak...)
}

// startAgentLog is startAgent with the agent's log (debug level and up)
// written to logTo as well, when not nil.
func startAgentLog(t *testing.T, logTo io.Writer, tweak ...func(*Config)) *testAgent {
	t.Helper()
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.Lifecycle.WatchdogInterval = Duration(time.Second)
	for _, f := range tweak {
		f(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if logTo != nil {
		w := logTo
		if testing.Verbose() {
			w = io.MultiWriter(logTo, os.Stderr)
		}
		log = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a, err := New(cfg, log, WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	token, err := os.ReadFile(filepath.Join(cfg.StateDir, AdminTokenFile))
	if err != nil && !(cfg.Store.URL != "" && errors.Is(err, fs.ErrNotExist)) {
		// On a shared store only the agent that seeded it writes the
		// admin token: the test hands it to the others.
		t.Fatalf("read admin token: %v", err)
	}
	ta := &testAgent{Agent: a, url: "http://" + ln.Addr().String(), admin: strings.TrimSpace(string(token))}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if cfg.Store.URL != "" {
			return // no file: a test on a shared store checks it itself
		}
		// The agent is gone: check what it left on disk.
		s, err := store.Open(filepath.Join(cfg.StateDir, store.FileName), store.Options{ReadOnly: true})
		if err != nil {
			t.Errorf("reopen store: %v", err)
			return
		}
		defer s.Close()
		if err := s.Check(); err != nil {
			t.Errorf("store invariants broken:\n%v", err)
		}
	})
	return ta
}

// call sends a request and decodes a JSON answer into out (when not nil). It
// returns the status code and the raw body.
func (ta *testAgent) call(t *testing.T, token, method, path string, body any, out any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, ta.url+path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, raw
}

// wantError checks a refusal's status and code.
func wantError(t *testing.T, status int, raw []byte, wantStatus int, wantCode string) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", raw, err)
	}
	if status != wantStatus || e.Code != wantCode || e.Error == "" {
		t.Fatalf("got %d %+v; want %d %s with a message", status, e, wantStatus, wantCode)
	}
	return e
}

// addMachine creates a machine as admin and fails the test on refusal.
// requestPower asks, as the admin, for a power action on machine and
// returns the accepted request's id.
func (ta *testAgent) requestPower(t *testing.T, machine, action string) string {
	t.Helper()
	var r api.PowerRequest
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/"+machine+"/power", api.PowerAction{Action: action}, &r); status != http.StatusAccepted {
		t.Fatalf("%s %s: %d %s", machine, action, status, raw)
	}
	return r.ID
}

func (ta *testAgent) addMachine(t *testing.T, m api.CreateMachine) api.Machine {
	t.Helper()
	var out api.Machine
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines", m, &out); status != http.StatusCreated {
		t.Fatalf("create machine %s: %d %s", m.Hostname, status, raw)
	}
	return out
}

// addUser creates a user and returns its token.
func (ta *testAgent) addUser(t *testing.T, name string, admin bool) string {
	t.Helper()
	var u api.User
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/users", api.CreateUser{Name: name, Admin: admin}, &u); status != http.StatusCreated {
		t.Fatalf("create user %s: %d %s", name, status, raw)
	}
	return u.Token
}
