package enlist

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// These tests use a scripted server: the real rackd is exercised by the
// agent's tests and by enlist/cmd/enlist's tests.

func newClient(t *testing.T, h http.HandlerFunc) (*Client, *[]time.Duration) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	var waits []time.Duration
	// Attempt bounds one request: generous, because an attempt timing out
	// on a loaded machine (a 16 MiB answer under -race) is retried, and the
	// tests count requests. No test here relies on the bound.
	c := &Client{Base: u, Backoff: Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Attempt: time.Minute, Tries: 5},
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return ctx.Err() },
		rnd:   func() float64 { return 0.5 }}
	return c, &waits
}

func TestWhoAmIRetries(t *testing.T) {
	var n atomic.Int32
	c, waits := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathWhoAmI || strings.Join(r.URL.Query()["mac"], ",") != "52:54:00:00:00:01,52:54:00:00:00:02" {
			t.Errorf("request %s", r.URL)
		}
		switch n.Add(1) {
		case 1:
			http.Error(w, "down", http.StatusBadGateway)
		case 2:
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":"slow down","code":"rate_limited"}`))
		default:
			w.Write([]byte(`{"known":true,"state":"DEPLOYING","action":"reboot"}`))
		}
	})
	got, err := c.WhoAmI(t.Context(), []string{"52:54:00:00:00:01", "52:54:00:00:00:02"})
	if err != nil {
		t.Fatal(err)
	}
	if got != (WhoAmI{Known: true, State: "DEPLOYING", Action: ActionReboot}) {
		t.Errorf("got %+v", got)
	}
	// Exponential with the jitter pinned at its middle; Retry-After wins
	// when it asks for longer.
	if len(*waits) != 2 || (*waits)[0] != 100*time.Millisecond || (*waits)[1] != 3*time.Second {
		t.Errorf("waits %v", *waits)
	}
}

func TestWhoAmIPermanent(t *testing.T) {
	var n atomic.Int32
	c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":"mac \"x\" is not a MAC","code":"bad_request"}`))
	})
	_, err := c.WhoAmI(t.Context(), []string{"x"})
	var perm *PermanentError
	if !errors.As(err, &perm) || perm.Code != "bad_request" || n.Load() != 1 {
		t.Fatalf("err = %v after %d requests", err, n.Load())
	}
}

func TestWhoAmIGivesUp(t *testing.T) {
	c, waits := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"known":false,"action":"dance"}`)) // not an action: a broken server
	})
	_, err := c.WhoAmI(t.Context(), []string{"52:54:00:00:00:01"})
	if err == nil || !strings.Contains(err.Error(), "giving up after 5 attempts") {
		t.Fatalf("err = %v", err)
	}
	want := []time.Duration{100, 200, 400, 800}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if len(*waits) != 4 || (*waits)[3] != want[3] || (*waits)[0] != want[0] {
		t.Errorf("waits %v, want %v", *waits, want)
	}
}

func TestUnreachable(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1") // nothing listens on port 1
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	c := &Client{Base: u, Backoff: Backoff{Initial: time.Millisecond, Max: time.Millisecond},
		Sleep: func(ctx context.Context, d time.Duration) error {
			if calls++; calls == 3 {
				cancel() // unbounded tries: only the context ends it
			}
			return ctx.Err()
		}}
	_, err := c.WhoAmI(ctx, []string{"52:54:00:00:00:01"})
	if !errors.Is(err, context.Canceled) || calls != 3 {
		t.Fatalf("err = %v after %d waits", err, calls)
	}
}

func TestEnlist(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		body      string
		want      Enlisted
		wantKnown bool
		wantErr   string
	}{
		{"created", 201, `{"id":"m-abc","action":"poweroff"}`, Enlisted{ID: "m-abc", Action: ActionPowerOff}, false, ""},
		{"known", 409, `{"error":"known","code":"already_known","action":"reboot"}`, Enlisted{Action: ActionReboot}, true, ""},
		{"conflict", 409, `{"error":"MAC has a reservation","code":"conflict"}`, Enlisted{}, false, "MAC has a reservation"},
		{"invalid", 400, `{"error":"macs: bad","code":"bad_request"}`, Enlisted{}, false, "macs: bad"},
		{"not json", 400, `oops`, Enlisted{}, false, "oops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) {
				var inv Inventory
				if r.Method != "POST" || r.URL.Path != PathEnlist || r.Header.Get("Content-Type") != "application/json" ||
					json.NewDecoder(r.Body).Decode(&inv) != nil || inv.MACs[0] != "52:54:00:00:00:01" {
					t.Errorf("bad request %s %s", r.Method, r.URL)
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			})
			got, known, err := c.Enlist(t.Context(), Inventory{MACs: []string{"52:54:00:00:00:01"}, Arch: "amd64"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || known != tc.wantKnown {
				t.Fatalf("got %+v %v %v", got, known, err)
			}
		})
	}
}

func TestBackoffWait(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 30 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 6: 30 * time.Second, 100: 30 * time.Second} {
		if got := b.wait(n, func() float64 { return 0.5 }); got != want {
			t.Errorf("wait(%d) = %s, want %s", n, got, want)
		}
	}
	if lo, hi := b.wait(1, func() float64 { return 0 }), b.wait(1, func() float64 { return 0.999 }); lo != 500*time.Millisecond || hi < 1490*time.Millisecond {
		t.Errorf("jitter range %s..%s", lo, hi)
	}
}

func TestValidate(t *testing.T) {
	ok := Inventory{MACs: []string{"52:54:00:00:00:01"}, Arch: "amd64", CPUCount: 4, MemoryMB: 1024,
		Disks: []Disk{{Name: "nvme0n1", SizeBytes: 1 << 40, Model: "X"}}, DMI: DMI{Vendor: "QEMU", UUID: "u"}, BMCAddress: "10.0.0.1"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid inventory refused: %v", err)
	}
	for name, mutate := range map[string]func(*Inventory){
		"no macs":       func(i *Inventory) { i.MACs = nil },
		"bad mac":       func(i *Inventory) { i.MACs = []string{"52:54:00"} },
		"too many macs": func(i *Inventory) { i.MACs = make([]string, MaxMACs+1) },
		"arch":          func(i *Inventory) { i.Arch = "AMD 64" },
		"cpus":          func(i *Inventory) { i.CPUCount = -1 },
		"memory":        func(i *Inventory) { i.MemoryMB = MaxMemoryMB + 1 },
		"disk name":     func(i *Inventory) { i.Disks[0].Name = "../etc" },
		"disk size":     func(i *Inventory) { i.Disks[0].SizeBytes = -1 },
		"disk model":    func(i *Inventory) { i.Disks[0].Model = strings.Repeat("x", MaxTextLen+1) },
		"vendor ctl":    func(i *Inventory) { i.DMI.Vendor = "a\nb" },
		"uuid utf8":     func(i *Inventory) { i.DMI.UUID = "\xff" },
		"bmc":           func(i *Inventory) { i.BMCAddress = "bmc.example" },
		"hostname":      func(i *Inventory) { i.Hostname = strings.Repeat("a", 254) },
	} {
		inv := ok
		inv.MACs = append([]string(nil), ok.MACs...)
		inv.Disks = append([]Disk(nil), ok.Disks...)
		mutate(&inv)
		if err := inv.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzValidate: whatever JSON a client sends, decoding then validating
// never panics, and a validated inventory re-encodes and validates again.
func FuzzValidate(f *testing.F) {
	f.Add(`{"macs":["52:54:00:00:00:01"],"arch":"amd64","cpu_count":2,"memory_mb":1024,"disks":[{"name":"vda","size_bytes":1}],"dmi":{"uuid":"x"}}`)
	f.Add(`{"macs":[],"disks":null}`)
	f.Add(`{"macs":["zz"],"bmc_address":"::1","dmi":{"vendor":"\u0000"}}`)
	f.Fuzz(func(t *testing.T, s string) {
		var inv Inventory
		if json.Unmarshal([]byte(s), &inv) != nil {
			return
		}
		if inv.Validate() != nil {
			return
		}
		b, err := json.Marshal(inv)
		if err != nil {
			t.Fatal(err)
		}
		var again Inventory
		if err := json.Unmarshal(b, &again); err != nil || again.Validate() != nil {
			t.Fatalf("round trip of %s: %v / %v", b, err, again.Validate())
		}
	})
}

func TestSeed(t *testing.T) {
	seed := strings.Repeat("FAT", 1<<20) // larger than the 1 MiB other answers get
	var n atomic.Int32
	c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathSeed || r.Method != http.MethodGet {
			t.Errorf("request %s %s", r.Method, r.URL)
		}
		switch r.Header.Get("Authorization") {
		case "Bearer ok":
			if n.Add(1) == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write([]byte(seed))
		case "Bearer none":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"no seed","code":"not_found"}`))
		case "Bearer empty":
		case "Bearer huge":
			w.Write(make([]byte, MaxSeed+1))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"rejected credential","code":"unauthorized"}`))
		}
	})
	got, err := c.Seed(t.Context(), "ok")
	if err != nil || string(got) != seed || n.Load() != 2 {
		t.Fatalf("%d bytes, %v after %d requests", len(got), err, n.Load())
	}
	if _, err := c.Seed(t.Context(), "none"); !errors.Is(err, ErrNoSeed) {
		t.Fatalf("404: %v", err)
	}
	var perm *PermanentError
	for tok, want := range map[string]string{"forged": "rejected credential", "empty": "empty", "huge": "larger than"} {
		if _, err := c.Seed(t.Context(), tok); !errors.As(err, &perm) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", tok, err, want)
		}
	}
}

// TestClaimCredential: the claim retries what rackd could not answer
// (5xx, a dropped connection, 429) and stops at once at a refusal (403, or
// 409 for a credential claimed already): the credential is handed out once.
func TestClaimCredential(t *testing.T) {
	tests := map[string]struct {
		answers  []func(w http.ResponseWriter) // one per request; the last repeats
		want     Credential
		status   int // of the PermanentError, 0 for success
		requests int
	}{
		"granted after a 502 and a dropped connection": {
			answers: []func(http.ResponseWriter){
				func(w http.ResponseWriter) { http.Error(w, "down", http.StatusBadGateway) },
				func(w http.ResponseWriter) { panic(http.ErrAbortHandler) },
				func(w http.ResponseWriter) { w.Write([]byte(`{"token":"tok","phase":"deploy"}`)) },
			},
			want: Credential{Token: "tok", Phase: "deploy"}, requests: 3,
		},
		"claimed already": {
			answers: []func(http.ResponseWriter){func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusConflict)
				w.Write([]byte(`{"error":"the deploy credential of this machine was already claimed","code":"conflict"}`))
			}},
			status: http.StatusConflict, requests: 1,
		},
		"refused": {
			answers: []func(http.ResponseWriter){func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusForbidden)
				w.Write([]byte(`{"error":"credential refused","code":"forbidden"}`))
			}},
			status: http.StatusForbidden, requests: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) {
				var req CredentialRequest
				if r.Method != http.MethodPost || r.URL.Path != PathCredential || json.NewDecoder(r.Body).Decode(&req) != nil ||
					req != (CredentialRequest{Machine: "m-1", MAC: "52:54:00:00:00:01"}) {
					t.Errorf("request %s %s %+v", r.Method, r.URL, req)
				}
				i := min(int(n.Add(1)), len(tc.answers)) - 1
				tc.answers[i](w)
			})
			got, err := c.ClaimCredential(t.Context(), "m-1", "52:54:00:00:00:01")
			var perm *PermanentError
			switch {
			case tc.status == 0 && (err != nil || got != tc.want):
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			case tc.status != 0 && (!errors.As(err, &perm) || perm.Status != tc.status || got.Token != ""):
				t.Fatalf("got %+v, %v; want a permanent %d", got, err, tc.status)
			}
			if int(n.Load()) != tc.requests {
				t.Fatalf("%d requests, want %d", n.Load(), tc.requests)
			}
		})
	}
}
