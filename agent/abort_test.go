package agent

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/store/storetest"
)

// TestAbortAPI: POST /api/v1/machines/{id}/abort stops a commissioning (an
// admin's) and a deployment (its owner's), the machine ends off through the
// power queue (the fake driver's state), and a machine in no phase is a
// 409 naming its state.
func TestAbortAPI(t *testing.T) {
	ta := startAgent(t, func(c *Config) {
		c.Power.Fake.Enabled = true
		c.Power.VerifyInterval = Duration(10 * time.Millisecond)
	})
	bob := ta.addUser(t, "bob", false)
	carol := ta.addUser(t, "carol", false)
	ta.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"},
		Power: &api.PowerParams{Driver: "fake", Address: "n1-bmc"}})
	ta.addMachine(t, api.CreateMachine{Hostname: "n2", MACs: []string{"52:54:00:00:00:02"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "n2-bmc"}})
	storetest.DeployImages(t, ta.Store(), "amd64", "noble")

	act := func(token, path string, body any, wantStatus int, wantState string) api.Machine {
		t.Helper()
		var m api.Machine
		status, raw := ta.call(t, token, "POST", path, body, &m)
		if status != wantStatus || (wantState != "" && m.State != wantState) {
			t.Fatalf("POST %s: %d %s; want %d %s", path, status, raw, wantStatus, wantState)
		}
		return m
	}
	// The machine ends off: the abort's power-off goes through the queue
	// to the driver, after the phase's power-on.
	waitOff := func(name string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var p api.MachinePower
			ta.call(t, ta.admin, "GET", "/api/v1/machines/"+name+"/power", nil, &p)
			if p.Desired == "off" && p.Observed == "off" && len(p.Pending) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("machine %s power after the abort: %+v, want off with nothing pending", name, p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	act(ta.admin, "/api/v1/machines/n1/commission", nil, http.StatusOK, "COMMISSIONING")
	status, raw := ta.call(t, bob, "POST", "/api/v1/machines/n1/abort", nil, nil)
	if e := wantError(t, status, raw, http.StatusForbidden, api.CodeForbidden); !strings.Contains(e.Error, "only an admin may abort its commissioning") {
		t.Fatalf("bob aborts a commissioning: %q", e.Error)
	}
	act(ta.admin, "/api/v1/machines/n1/abort", `{"reason":"wrong rack"}`, http.StatusOK, "NEW")
	waitOff("n1")

	if status, raw := ta.call(t, bob, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "n2", AgentName: "j"}, nil); status != http.StatusCreated {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	act(bob, "/api/v1/machines/n2/deploy", `{"image":"noble"}`, http.StatusOK, "DEPLOYING")
	status, raw = ta.call(t, carol, "POST", "/api/v1/machines/n2/abort", nil, nil)
	// As a release of another's machine is: 403, not yours.
	if e := wantError(t, status, raw, http.StatusForbidden, api.CodeForbidden); !strings.Contains(e.Error, "not yours") {
		t.Fatalf("carol aborts bob's deployment: %q", e.Error)
	}
	m := act(bob, "/api/v1/machines/n2/abort", nil, http.StatusOK, "ALLOCATED")
	if m.Owner != "bob" {
		t.Fatalf("the aborted deployment's machine is %q's, want still bob's", m.Owner)
	}
	waitOff("n2")

	// Not in a phase: 409, naming the state; and a body abort does not take.
	status, raw = ta.call(t, bob, "POST", "/api/v1/machines/n2/abort", nil, nil)
	if e := wantError(t, status, raw, http.StatusConflict, "invalid_transition"); !strings.Contains(e.Error, "cannot abort a machine that is ALLOCATED") {
		t.Fatalf("abort of an ALLOCATED machine: %q", e.Error)
	}
	status, raw = ta.call(t, bob, "POST", "/api/v1/machines/n2/abort", `{"erase":true}`, nil)
	wantError(t, status, raw, http.StatusBadRequest, api.CodeBadRequest)

	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/n1/events", nil, &evs)
	var last api.Event
	for _, e := range evs {
		if e.Action == "abort" {
			last = e
		}
	}
	if last.Actor != "admin" || last.From != "COMMISSIONING" || last.To != "NEW" || last.Reason != "commissioning aborted; wrong rack" {
		t.Fatalf("abort event %+v", last)
	}
}
