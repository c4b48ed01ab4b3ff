package agent

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/power"
	"rackd/power/powertest"
)

// waitPower polls a power request until it is final (10 s bound).
func waitPower(t *testing.T, ta *testAgent, id string) api.PowerRequest {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var r api.PowerRequest
		if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/power/requests/"+id, nil, &r); status != http.StatusOK {
			t.Fatalf("get %s: %d %s", id, status, raw)
		}
		switch r.State {
		case "done", "failed", "superseded":
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("power request %s still %s after 10s", id, r.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPowerAPI(t *testing.T) {
	ta := startAgent(t, func(c *Config) {
		c.Power.Fake.Enabled = true
		c.Power.VerifyInterval = Duration(10 * time.Millisecond)
	})
	bob := ta.addUser(t, "bob", false)
	m := ta.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc1", Username: "n1"}})
	bare := ta.addMachine(t, api.CreateMachine{Hostname: "bare", MACs: []string{"52:54:00:00:00:02"}, State: "READY"})
	other := ta.addMachine(t, api.CreateMachine{Hostname: "ipmi1", MACs: []string{"52:54:00:00:00:03"}, State: "READY",
		Power: &api.PowerParams{Driver: "nosuchdriver", Address: "x"}})
	if m.Power.Desired != "off" || m.Power.Observed != "unknown" {
		t.Errorf("new machine's power %+v, want desired off (READY), observed unknown", m.Power)
	}

	var r api.PowerRequest
	status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/n1/power", api.PowerAction{Action: "on", Reason: "test"}, &r)
	if status != http.StatusAccepted || r.ID == "" || r.Machine != m.ID || r.Action != "on" || r.State != "pending" || r.Who != "admin" {
		t.Fatalf("POST power on: %d %s", status, raw)
	}
	if got := waitPower(t, ta, r.ID); got.State != "done" || got.Finished.IsZero() {
		t.Errorf("on: %+v", got)
	}
	if s := ta.FakePower().(*powertest.Fake).State(powertest.Key(power.Target{Address: "bmc1", Username: "n1"})); s != power.StateOn {
		t.Errorf("the simulated machine is %v", s)
	}
	var mp api.MachinePower
	ta.call(t, ta.admin, "GET", "/api/v1/machines/n1/power", nil, &mp)
	if mp.Desired != "on" || mp.Observed != "on" || mp.Policy != "enforce" || mp.ObservedAt.IsZero() || len(mp.Pending) != 0 || mp.Driver != "fake" {
		t.Errorf("machine power %+v", mp)
	}
	var mv api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines/n1", nil, &mv)
	if mv.Power.Desired != "on" || mv.Power.Observed != "on" {
		t.Errorf("machine view power %+v", mv.Power)
	}

	for _, tc := range []struct {
		token, path string
		body        any
		status      int
		code, msg   string
	}{
		{ta.admin, "/api/v1/machines/n1/power", api.PowerAction{Action: "reboot"}, 400, "bad_request", "unknown power action"},
		{ta.admin, "/api/v1/machines/nope/power", api.PowerAction{Action: "on"}, 404, "not_found", "not found"},
		{bob, "/api/v1/machines/n1/power", api.PowerAction{Action: "off"}, 403, "forbidden", "not yours"},
		{ta.admin, "/api/v1/machines/" + bare.ID + "/power", api.PowerAction{Action: "on"}, 400, "bad_request", "no power driver"},
		{ta.admin, "/api/v1/machines/" + other.ID + "/power", api.PowerAction{Action: "on"}, 400, "bad_request", "nosuchdriver"},
		{ta.admin, "/api/v1/machines/n1/power", map[string]string{"action": "on", "bogus": "x"}, 400, "bad_request", "unknown field"},
	} {
		status, raw := ta.call(t, tc.token, "POST", tc.path, tc.body, nil)
		if status != tc.status || !strings.Contains(string(raw), `"code": "`+tc.code+`"`) || !strings.Contains(string(raw), tc.msg) {
			t.Errorf("POST %s %v: %d %s; want %d %s %q", tc.path, tc.body, status, raw, tc.status, tc.code, tc.msg)
		}
	}
	if status, _ := ta.call(t, ta.admin, "GET", "/api/v1/power/requests/pr-999999", nil, nil); status != 404 {
		t.Errorf("unknown request: %d", status)
	}

	// The owner may drive its machine's power.
	var alloc api.Allocation
	if status, raw := ta.call(t, bob, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "n1"}, &alloc); status != 201 {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	status, raw = ta.call(t, bob, "POST", "/api/v1/machines/n1/power", api.PowerAction{Action: "cycle"}, &r)
	if status != http.StatusAccepted {
		t.Fatalf("owner's cycle: %d %s", status, raw)
	}
	if got := waitPower(t, ta, r.ID); got.State != "done" || got.Who != "bob" {
		t.Errorf("cycle: %+v", got)
	}

	// The power series, linted with promtool with the rest.
	deadline := time.Now().Add(10 * time.Second)
	text := scrape(t, ta)
	for !strings.Contains(text, `rackd_power_requests_total{action="cycle",outcome="done"} 1`) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // the counter follows the durable write
		text = scrape(t, ta)
	}
	for _, want := range []string{
		`rackd_power_requests_total{action="on",outcome="done"} 1`,
		`rackd_power_requests_total{action="cycle",outcome="done"} 1`,
		`rackd_power_command_duration_seconds_count{action="on",driver="fake"} 1`,
		`rackd_power_queue_depth 0`,
		`rackd_power_commands_in_flight 0`,
		`rackd_power_bmc_errors_total{kind="timeout"} 0`,
		`rackd_power_drift_total{event="corrected"} 0`,
		`rackd_power_circuit_breakers_open 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	lintMetrics(t, text)
}
