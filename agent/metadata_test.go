package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/power/powertest"
	"rackd/store"
	"rackd/store/storetest"
)

func whoamiPath(macs ...string) string {
	return enlist.PathWhoAmI + "?" + url.Values{"mac": macs}.Encode()
}

// machineIn creates a machine and walks it to state through the API.
func (ta *testAgent) machineIn(t *testing.T, hostname, mac, state string) api.Machine {
	t.Helper()
	create := map[string]string{"NEW": "NEW", "COMMISSIONING": "NEW", "DEPLOYED": "DEPLOYED"}[state]
	if create == "" {
		create = "READY"
	}
	// Manual power: a machine that nothing could boot is not commissioned.
	m := ta.addMachine(t, api.CreateMachine{Hostname: hostname, MACs: []string{mac}, State: create, Power: &api.PowerParams{Driver: "manual"}})
	step := func(path string, body any) {
		t.Helper()
		if status, raw := ta.call(t, ta.admin, "POST", path, body, nil); status >= 300 {
			t.Fatalf("POST %s: %d %s", path, status, raw)
		}
	}
	switch state {
	case "COMMISSIONING":
		step("/api/v1/machines/"+m.ID+"/commission", nil)
	case "ALLOCATED", "DEPLOYING":
		step("/api/v1/allocations", api.AllocateRequest{Name: hostname, AgentName: "t"})
		if state == "DEPLOYING" {
			storetest.DeployImages(t, ta.Store(), "amd64", "noble")
			step("/api/v1/machines/"+m.ID+"/deploy", api.ActionRequest{Image: "noble"})
		}
	case "BROKEN":
		step("/api/v1/machines/"+m.ID+"/mark-broken", nil)
	}
	var got api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines/"+m.ID, nil, &got)
	if got.State != state {
		t.Fatalf("machine %s is %s, want %s", hostname, got.State, state)
	}
	return got
}

// noLimit turns the metadata rate limit off for tests that make many
// requests from 127.0.0.1 about something else.
func noLimit(c *Config) { c.Enlist.RateLimit = 0 }

func TestWhoAmI(t *testing.T) {
	ta := startAgent(t, noLimit)
	states := []struct {
		state  string
		action enlist.Action
	}{
		{"NEW", enlist.ActionPowerOff},
		{"COMMISSIONING", enlist.ActionReboot},
		{"READY", enlist.ActionPowerOff},
		{"ALLOCATED", enlist.ActionPowerOff},
		{"DEPLOYING", enlist.ActionReboot}, // a known machine must not wait in the wrong environment
		{"DEPLOYED", enlist.ActionPowerOff},
		{"BROKEN", enlist.ActionPowerOff},
	}
	for i, tc := range states {
		mac := fmt.Sprintf("52:54:00:aa:00:%02x", i)
		ta.machineIn(t, fmt.Sprintf("w%d", i), mac, tc.state)
		// Any spelling, any position among the caller's MACs, no token.
		for _, macs := range [][]string{{mac}, {"52:54:00:ff:ff:ff", strings.ToUpper(strings.ReplaceAll(mac, ":", "-"))}} {
			var got enlist.WhoAmI
			status, raw := ta.call(t, "", "GET", whoamiPath(macs...), nil, &got)
			want := enlist.WhoAmI{Known: true, State: tc.state, Action: tc.action}
			if status != http.StatusOK || got != want {
				t.Errorf("%s %v: %d %s, want %+v", tc.state, macs, status, raw, want)
			}
			// Nothing but known, state and action leaves.
			var fields map[string]any
			json.Unmarshal(raw, &fields)
			if len(fields) != 3 {
				t.Errorf("answer has fields %v", fields)
			}
		}
	}
	var got enlist.WhoAmI
	if status, raw := ta.call(t, "", "GET", whoamiPath("52:54:00:ff:ff:ff"), nil, &got); status != 200 ||
		got != (enlist.WhoAmI{Action: enlist.ActionEnlist}) || strings.Contains(string(raw), "state") {
		t.Errorf("unknown: %d %s", status, raw)
	}
	many := make([]string, enlist.MaxMACs+1)
	for i := range many {
		many[i] = fmt.Sprintf("52:54:00:bb:00:%02x", i)
	}
	for name, path := range map[string]string{
		"no mac": enlist.PathWhoAmI, "bad mac": whoamiPath("52:54:00:aa:00:00", "nope"), "too many": whoamiPath(many...),
	} {
		status, raw := ta.call(t, "", "GET", path, nil, nil)
		wantError(t, status, raw, http.StatusBadRequest, api.CodeBadRequest)
		_ = name
	}
	if status, _ := ta.call(t, "", "POST", enlist.PathWhoAmI, nil, nil); status != http.StatusNotFound {
		t.Errorf("POST whoami: %d", status)
	}
}

// TestActionFollowsBootDecision pins whoami to bootconf.Decide for every
// state: a state whose per-MAC config boots a network environment reboots.
func TestActionFollowsBootDecision(t *testing.T) {
	for _, st := range store.States {
		got := actionFor(store.MACOwner{ID: "m-x", State: st}, true).Action
		want := enlist.ActionPowerOff
		if st == store.StateCommissioning || st == store.StateDeploying {
			want = enlist.ActionReboot
		}
		if got != want {
			t.Errorf("%s: %s, want %s", st, got, want)
		}
	}
	if got := actionFor(store.MACOwner{}, false); got != (enlist.WhoAmI{Action: enlist.ActionEnlist}) {
		t.Errorf("unknown: %+v", got)
	}
}

func testInventory(macs ...string) enlist.Inventory {
	return enlist.Inventory{MACs: macs, Arch: "amd64", CPUCount: 4, MemoryMB: 2048,
		Disks:      []enlist.Disk{{Name: "vda", SizeBytes: 20 << 30, Model: "QEMU HARDDISK"}},
		DMI:        enlist.DMI{Vendor: "QEMU", Product: "Standard PC", Serial: "S1", UUID: "5C7A1F2E-0B3D-4E5F-8A9B-0C1D2E3F4A5B"},
		BMCAddress: "10.0.0.13"}
}

func TestEnlist(t *testing.T) {
	ta := startAgent(t, noLimit)
	inv := testInventory("52:54:00:cc:00:01", "52:54:00:cc:00:02")
	var res enlist.Enlisted
	status, raw := ta.call(t, "", "POST", enlist.PathEnlist, inv, &res)
	if status != http.StatusCreated || res.ID == "" || res.Action != enlist.ActionPowerOff {
		t.Fatalf("enlist: %d %s", status, raw)
	}
	var m api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines/"+res.ID, nil, &m)
	wantInv := &api.Inventory{SystemUUID: "5c7a1f2e-0b3d-4e5f-8a9b-0c1d2e3f4a5b", Vendor: "QEMU", Product: "Standard PC",
		Serial: "S1", BMCAddress: "10.0.0.13", Disks: []api.Disk{{Name: "vda", SizeBytes: 20 << 30, Model: "QEMU HARDDISK"}}}
	if m.State != "NEW" || m.CPUCount != 4 || m.MemoryMB != 2048 || m.Arch != "amd64" || m.Hostname != "node-525400cc0001" ||
		!reflect.DeepEqual(m.MACs, inv.MACs) || !reflect.DeepEqual(m.Inventory, wantInv) {
		t.Fatalf("machine %+v\ninventory %+v", m, m.Inventory)
	}
	var w enlist.WhoAmI
	ta.call(t, "", "GET", whoamiPath(inv.MACs...), nil, &w)
	if w != (enlist.WhoAmI{Known: true, State: "NEW", Action: enlist.ActionPowerOff}) {
		t.Errorf("whoami after enlisting: %+v", w)
	}

	// Repeating, with one MAC, or with new NICs but the same system UUID:
	// 409 already_known with the action; the machine is untouched.
	ta.machineIn(t, "busy", "52:54:00:cc:00:09", "DEPLOYING")
	before, _ := ta.Store().Machine(res.ID)
	for name, again := range map[string]struct {
		inv    enlist.Inventory
		action enlist.Action
	}{
		"repeat":    {inv, enlist.ActionPowerOff},
		"one mac":   {testInventory("52:54:00:cc:00:02"), enlist.ActionPowerOff},
		"uuid":      {testInventory("52:54:00:cc:00:03"), enlist.ActionPowerOff},
		"deploying": {enlist.Inventory{MACs: []string{"52:54:00:cc:00:09"}, Hostname: "evil", CPUCount: 1}, enlist.ActionReboot},
	} {
		status, raw := ta.call(t, "", "POST", enlist.PathEnlist, again.inv, nil)
		var r enlist.Refusal
		json.Unmarshal(raw, &r)
		if status != http.StatusConflict || r.Code != enlist.CodeAlreadyKnown || r.Action != again.action || r.Error == "" {
			t.Errorf("%s: %d %s", name, status, raw)
		}
		if strings.Contains(string(raw), res.ID) || strings.Contains(string(raw), "node-") {
			t.Errorf("%s: the refusal names the machine: %s", name, raw)
		}
	}
	after, _ := ta.Store().Machine(res.ID)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("a known machine was modified:\n%+v\n%+v", before, after)
	}
	var all []api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines", nil, &all)
	if len(all) != 2 {
		t.Errorf("%d machines, want 2", len(all))
	}
	evs, _ := ta.Store().Events(res.ID, 0)
	if len(evs) != 1 || evs[0].Actor != "rackd/enlist" {
		t.Errorf("events %+v", evs)
	}
}

func TestEnlistRefusals(t *testing.T) {
	ta := startAgent(t, noLimit)
	for name, tc := range map[string]struct {
		body   any
		status int
		code   string
		msg    string
	}{
		"empty":         {"", 400, api.CodeBadRequest, "empty"},
		"unknown field": {`{"macs":["52:54:00:dd:00:01"],"password":"x"}`, 400, api.CodeBadRequest, "unknown field"},
		"trailing":      {`{"macs":["52:54:00:dd:00:01"]} {}`, 400, api.CodeBadRequest, "after"},
		"wrong type":    {`{"macs":"52:54:00:dd:00:01"}`, 400, api.CodeBadRequest, "macs"},
		"no macs":       {enlist.Inventory{Arch: "amd64"}, 400, api.CodeBadRequest, "at least one MAC"},
		"bad disk":      {enlist.Inventory{MACs: []string{"52:54:00:dd:00:01"}, Disks: []enlist.Disk{{Name: "../x"}}}, 400, api.CodeBadRequest, "disks"},
		"bad hostname":  {enlist.Inventory{MACs: []string{"52:54:00:dd:00:01"}, Hostname: "a_b"}, 400, api.CodeBadRequest, "hostname"},
		"too large":     {`{"macs":["52:54:00:dd:00:01"],"dmi":{"vendor":"` + strings.Repeat("x", 70000) + `"}}`, 413, api.CodeBodyTooLarge, "65536"},
	} {
		status, raw := ta.call(t, "", "POST", enlist.PathEnlist, tc.body, nil)
		e := wantError(t, status, raw, tc.status, tc.code)
		if !strings.Contains(e.Error, tc.msg) {
			t.Errorf("%s: %q does not say %q", name, e.Error, tc.msg)
		}
	}
	if ms, _ := ta.Store().ListMachines(store.Filter{}); len(ms) != 0 {
		t.Errorf("refused enlistments created %d machines", len(ms))
	}
}

func TestEnlistAutoCommission(t *testing.T) {
	ta := startAgent(t, func(c *Config) { c.Enlist.AutoCommission = true })
	var res enlist.Enlisted
	status, raw := ta.call(t, "", "POST", enlist.PathEnlist, testInventory("52:54:00:ee:00:01"), &res)
	if status != http.StatusCreated || res.Action != enlist.ActionReboot {
		t.Fatalf("%d %s", status, raw)
	}
	m, _ := ta.Store().Machine(res.ID)
	if m.State != store.StateCommissioning {
		t.Errorf("state %s", m.State)
	}
	var w enlist.WhoAmI
	ta.call(t, "", "GET", whoamiPath("52:54:00:ee:00:01"), nil, &w)
	if w.Action != enlist.ActionReboot {
		t.Errorf("whoami %+v", w)
	}
}

func TestMetadataRateLimit(t *testing.T) {
	// One token per 100 s: however slow a loaded machine is between the
	// requests, the bucket does not refill during the test.
	ta := startAgent(t, func(c *Config) { c.Enlist.RateLimit, c.Enlist.RateBurst = 0.01, 3 })
	for i := range 3 {
		if status, raw := ta.call(t, "", "GET", whoamiPath("52:54:00:ff:00:01"), nil, nil); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, raw)
		}
	}
	req, _ := http.NewRequest("POST", ta.url+enlist.PathEnlist, strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantError(t, resp.StatusCode, raw, http.StatusTooManyRequests, api.CodeRateLimited)
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 50 || s > 100 {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	// The API itself is not limited.
	if status, _ := ta.call(t, ta.admin, "GET", "/api/v1/machines", nil, nil); status != 200 {
		t.Errorf("API: %d", status)
	}
	_, metrics := ta.call(t, "", "GET", "/metrics", nil, nil)
	for _, want := range []string{
		`rackd_metadata_requests_total{endpoint="whoami",outcome="enlist"} 3`,
		`rackd_metadata_requests_total{endpoint="enlist",outcome="rate_limited"} 1`,
		`rackd_metadata_requests_total{endpoint="enlist",outcome="created"} 0`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestRateLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newRateLimiter(2, 3)
	l.now = func() time.Time { return now }
	l.max = 2
	a, b, c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	for i := range 3 {
		if ok, _ := l.allow(a); !ok {
			t.Fatalf("burst request %d refused", i)
		}
	}
	ok, wait := l.allow(a)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("4th: %v %s", ok, wait)
	}
	if ok, _ := l.allow(b); !ok {
		t.Fatal("another address is limited too")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.allow(a); !ok {
		t.Fatal("no token after the refill")
	}
	// A third address with the table full: idle b (full again) is forgotten.
	now = now.Add(10 * time.Second)
	if ok, _ := l.allow(c); !ok || len(l.limiters) > 2 {
		t.Fatalf("table %d", len(l.limiters))
	}
	if l := newRateLimiter(0, 0); l != nil {
		t.Fatal("rate 0 limits")
	}
	var off *rateLimiter
	if ok, _ := off.allow(a); !ok {
		t.Fatal("the nil limiter refuses")
	}
}

// FuzzEnlistBody throws arbitrary bodies at POST /metadata/v1/enlist: the
// answer is a 201, a 409 already_known or a 4xx JSON error, never a 5xx,
// and the store's invariants hold afterwards.
func FuzzEnlistBody(f *testing.F) {
	seed, _ := json.Marshal(testInventory("52:54:00:12:00:01"))
	for _, s := range []string{string(seed),
		`{"macs":["52:54:00:12:00:01"]}`, `{"macs":["52:54:00:12:00:02"],"hostname":"n1","dmi":{"uuid":"00000000-0000-0000-0000-000000000000"}}`,
		`{"macs":["52-54-00-12-00-03","52:54:00:12:00:03"]}`, `{"macs":[],"disks":[{"name":"sda","size_bytes":-1}]}`,
		`{"macs":["x"],"bmc_address":"::1"}`, `{"macs":null}`, `[]`, `null`, ``, "\x00", `{"cpu_count":1e99}`,
	} {
		f.Add([]byte(s))
	}
	cfg := DefaultConfig()
	cfg.StateDir = f.TempDir()
	cfg.Enlist.RateLimit = 0
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
	h := a.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", enlist.PathEnlist, bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusCreated:
			var e enlist.Enlisted
			if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.ID == "" || !e.Action.Valid() {
				t.Fatalf("201 %q", rec.Body)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e enlist.Refusal
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" || e.Code == "" {
				t.Fatalf("%d answer is not a JSON error: %q", rec.Code, rec.Body)
			}
			if (e.Code == enlist.CodeAlreadyKnown) != (rec.Code == http.StatusConflict && e.Action != "") {
				t.Fatalf("%d %q", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		}
	})
}
