package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"rackd/power/powertest"
	"rackd/store"
)

// FuzzAPIBodies throws arbitrary bodies at every endpoint that reads one. The
// answer must be a 2xx or a 4xx with a JSON error, never a 5xx or a panic,
// and the store's invariants must hold afterwards.
func FuzzAPIBodies(f *testing.F) {
	for _, seed := range []string{
		`{"hostname":"n1","macs":["52:54:00:00:00:01"],"state":"READY"}`,
		`{"name":"n1","agent_name":"U","token":"x"}`,
		`{"constraints":{"arch":"amd64","min_cpu":2,"tags":["a"]}}`,
		`{"name":"bob","admin":true}`,
		`{"reason":"r","image":"i"}`,
		`{"name":"ci","expires":"30d"}`, `{"name":"ci","expires":"2027-01-31","user":"fuzz"}`,
		`{"hostname":"n1","macs":["52-54-00-00-00-01"],"power":{"driver":"ipmi","password":"p"}}`,
		`{"power":{"username":"u","password":"p"},"tags":null,"zone":"z"}`,
		`{"power":null,"hostname":"n2","cpu_count":null}`, `{"power":{"driver":"manual","x":1}}`,
		`{"force":true,"reason":"r"}`,
		`{"machine":"m-1","mac":"52:54:00:00:00:01"}`, `{"machine":"n1","mac":"52:54:00:00:00:01","x":1}`,
		`{"image":"i","user_data":"I2Nsb3VkLWNvbmZpZwo=","ssh_keys":["ssh-ed25519 AAAA x"]}`, `{"user_data":"=="}`,
		`{"a":1}`, `[]`, `null`, `"x"`, `{"hostname":1e999}`, `{"macs":[null]}`, "\x00\xff", ``,
	} {
		for path := range 10 {
			f.Add(uint8(path), []byte(seed))
		}
	}
	cfg := DefaultConfig()
	cfg.StateDir = f.TempDir()
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithFakePowerDriver(powertest.Driver))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := a.Store().Check(); err != nil {
			f.Errorf("invariants after fuzzing:\n%v", err)
		}
		a.Close()
	})
	_, token, err := a.store.CreateUser(f.Context(), store.System, "fuzz", true, "")
	if err != nil {
		f.Fatal(err)
	}
	h := a.Handler()
	targets := []struct{ method, path string }{
		{"POST", "/api/v1/machines"},
		{"POST", "/api/v1/allocations"},
		{"POST", "/api/v1/users"},
		{"POST", "/api/v1/machines/n1/commission"},
		{"POST", "/api/v1/machines/n1/deploy"},
		{"DELETE", "/api/v1/allocations/n1"},
		{"POST", "/api/v1/tokens"},
		{"PATCH", "/api/v1/machines/n1"},
		{"DELETE", "/api/v1/machines/n1"},
		{"POST", "/metadata/v1/credential"},
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		target := targets[int(which)%len(targets)]
		req := httptest.NewRequest(target.method, target.path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", target.method, target.path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var e struct{ Error, Code string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" || e.Code == "" {
				t.Fatalf("%d answer is not a JSON error: %q", rec.Code, rec.Body)
			}
		} else if rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
			t.Fatalf("unexpected status %d", rec.Code)
		}
	})
}

// FuzzConfig: any config file text either decodes or is refused with an
// error; it never panics.
func FuzzConfig(f *testing.F) {
	f.Add(DefaultConfigTOML)
	f.Add("listen = 5\n")
	f.Add("[lifecycle]\ncommissioning_timeout = \"-1s\"\n")
	f.Add("[[api]]\n")
	f.Fuzz(func(t *testing.T, text string) {
		c := DefaultConfig()
		if err := decodeConfig(text, &c); err == nil {
			_ = c.Validate()
		}
	})
}
