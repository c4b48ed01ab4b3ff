package agent

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/ipmisim"
	"rackd/store/storetest"
)

// Every release ends, and so does every phase that cannot power its
// machine: through the API, with the manual driver and with real BMCs
// (ipmi_sim) that power off, refuse, or do not answer.

// quickPower makes the power queue give up on a BMC in seconds.
func quickPower(c *Config) {
	c.Power.VerifyInterval = Duration(200 * time.Millisecond)
	c.Power.VerifyDeadline = Duration(10 * time.Second)
	c.Power.CommandTimeout = Duration(3 * time.Second)
	c.Power.Retries = 1
	c.Power.Backoff = Duration(100 * time.Millisecond)
	c.Power.MinInterval = 0
}

// waitStateLong is waitState with room for a real BMC's timeouts and the
// queue's retries.
func waitStateLong(t *testing.T, ta *testAgent, machine, want string) api.Machine {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var m api.Machine
		ta.call(t, ta.admin, "GET", "/api/v1/machines/"+machine, nil, &m)
		if m.State == want {
			return m
		}
		if time.Now().After(deadline) {
			var evs []api.Event
			ta.call(t, ta.admin, "GET", "/api/v1/machines/"+machine+"/events", nil, &evs)
			t.Fatalf("machine %s is %s after 90s; want %s; events: %+v", machine, m.State, want, evs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allocateAndRelease allocates a READY machine by name and deletes the
// allocation, as the API's users do.
func (ta *testAgent) allocateAndRelease(t *testing.T, name string) {
	t.Helper()
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/allocations", api.AllocateRequest{Name: name}, nil); status != http.StatusCreated {
		t.Fatalf("allocate %s: %d %s", name, status, raw)
	}
	var m api.Machine
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/allocations/"+name, nil, &m); status != http.StatusOK || m.State != "RELEASING" {
		t.Fatalf("release %s: %d %s", name, status, raw)
	}
}

func (ta *testAgent) events(t *testing.T, machine string) []api.Event {
	t.Helper()
	var evs []api.Event
	if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/machines/"+machine+"/events", nil, &evs); status != http.StatusOK {
		t.Fatalf("events of %s: %d %s", machine, status, raw)
	}
	return evs
}

// TestReleaseManualEnds: a READY machine with the manual power driver,
// allocated by name and released, is READY again once its power-off is
// handed to the operator, and the event says to power it off by hand. It
// stayed RELEASING for ever: nothing queued the power-off its release
// waited for.
func TestReleaseManualEnds(t *testing.T) {
	ta := startAgent(t)
	ta.addMachine(t, api.CreateMachine{Hostname: "m", MACs: []string{"52:54:00:00:0d:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "manual"}})
	ta.allocateAndRelease(t, "m")
	waitState(t, ta, "m", "READY")
	evs := ta.events(t, "m")
	last := evs[len(evs)-1]
	if last.Action != "release-done" || !strings.Contains(last.Reason, "power it off by hand") {
		t.Errorf("last event %+v, want release-done telling the operator to power it off by hand", last)
	}
	var mp api.MachinePower
	ta.call(t, ta.admin, "GET", "/api/v1/machines/m/power", nil, &mp)
	if len(mp.Pending) != 0 {
		t.Errorf("open power requests after the release: %+v", mp.Pending)
	}
}

// TestReleaseRealBMC: releases of machines behind real BMCs (ipmi_sim).
// One that powers off: READY, and the BMC says off (it stayed RELEASING for
// ever before). One whose BMC refuses the power-off, one whose BMC does not
// answer: BROKEN at once after the queue's retries, the BMC's error in the
// reason, never READY for the next user while it may still run.
func TestReleaseRealBMC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	good := ipmisim.Start(t, ipmisim.Options{PowerOn: true})
	refusing := ipmisim.Start(t, ipmisim.Options{PowerOn: true, OffCmd: []string{"false"}})
	gone := ipmisim.Start(t, ipmisim.Options{PowerOn: true})
	ta := startAgent(t, quickPower)
	for i, tc := range []struct {
		name string
		sim  *ipmisim.Sim
	}{{"good", good}, {"refusing", refusing}, {"gone", gone}} {
		ta.addMachine(t, api.CreateMachine{Hostname: tc.name, MACs: []string{"52:54:00:00:0d:1" + string(rune('0'+i))}, State: "READY",
			Power: &api.PowerParams{Driver: "ipmi", Address: tc.sim.Addr, Username: tc.sim.User, Password: tc.sim.Password}})
	}
	// The BMC is turned off after the machine was added: it does not answer.
	if err := gone.Stop(); err != nil {
		t.Fatal(err)
	}

	ta.allocateAndRelease(t, "good")
	waitStateLong(t, ta, "good", "READY")
	if on, err := good.Power(); err != nil || on {
		t.Errorf("released machine: the BMC's power bit is on %v (%v), want off", on, err)
	}

	for _, tc := range []struct{ name, err string }{
		{"refusing", "completion code"},
		{"gone", ""},
	} {
		ta.allocateAndRelease(t, tc.name)
		waitStateLong(t, ta, tc.name, "BROKEN")
		var failed *api.Event
		for _, e := range ta.events(t, tc.name) {
			if e.Action == "release-failed" {
				failed = &e
			}
		}
		if failed == nil || failed.From != "RELEASING" || failed.To != "BROKEN" || failed.Actor != "rackd/power" ||
			!strings.HasPrefix(failed.Reason, "release failed: rackd could not power the machine off") ||
			!strings.Contains(failed.Reason, "ipmi "+map[string]*ipmisim.Sim{"refusing": refusing, "gone": gone}[tc.name].Addr) ||
			!strings.Contains(failed.Reason, tc.err) {
			t.Errorf("%s: release-failed event %+v, want one with the BMC's error", tc.name, failed)
		}
	}
	if on, err := refusing.Power(); err != nil || !on {
		t.Errorf("the refusing BMC's machine: power bit %v (%v), want still on", on, err)
	}
	_, metrics := ta.call(t, "", "GET", "/metrics", nil, nil)
	if want := `rackd_machine_transitions_total{action="release-failed"} 2`; !strings.Contains(string(metrics), want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestPhasePowerOnFailsRealBMC: a phase whose power-on fails after the
// queue's retries fails at once, with the BMC's error as the reason, as
// MAAS does: a commissioning whose BMC refuses the power-on, a deployment
// whose BMC does not answer. They sat in COMMISSIONING / DEPLOYING until the
// watchdog, with nothing failed on the dashboard.
func TestPhasePowerOnFailsRealBMC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	refusing := ipmisim.Start(t, ipmisim.Options{OnCmd: []string{"false"}})
	gone := ipmisim.Start(t, ipmisim.Options{})
	ta := startAgent(t, quickPower, func(c *Config) {
		c.Lifecycle.CommissioningTimeout = Duration(time.Hour)
		c.Lifecycle.DeployingTimeout = Duration(time.Hour)
	})
	ta.addMachine(t, api.CreateMachine{Hostname: "c", MACs: []string{"52:54:00:00:0d:21"},
		Power: &api.PowerParams{Driver: "ipmi", Address: refusing.Addr, Username: refusing.User, Password: refusing.Password}})
	ta.addMachine(t, api.CreateMachine{Hostname: "d", MACs: []string{"52:54:00:00:0d:22"}, State: "READY",
		Power: &api.PowerParams{Driver: "ipmi", Address: gone.Addr, Username: gone.User, Password: gone.Password}})
	storetest.DeployImages(t, ta.Store(), "amd64", "debian")

	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/c/commission", nil, nil); status != http.StatusOK {
		t.Fatalf("commission: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "d"}, nil); status != http.StatusCreated {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	if err := gone.Stop(); err != nil {
		t.Fatal(err)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/d/deploy", api.ActionRequest{Image: "debian"}, nil); status != http.StatusOK {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	for _, tc := range []struct{ machine, state, action, reason, bmc string }{
		{"c", "FAILED_COMMISSIONING", "commissioning-failed", "commission failed: rackd could not power the machine on: ", refusing.Addr},
		{"d", "FAILED_DEPLOYMENT", "deployment-failed", "deploy failed: rackd could not power the machine on: ", gone.Addr},
	} {
		waitStateLong(t, ta, tc.machine, tc.state)
		evs := ta.events(t, tc.machine)
		last := evs[len(evs)-1]
		for _, e := range evs {
			if e.To == tc.state {
				last = e
			}
		}
		if last.Action != tc.action || last.Actor != "rackd/power" || !strings.HasPrefix(last.Reason, tc.reason) ||
			!strings.Contains(last.Reason, "ipmi "+tc.bmc) {
			t.Errorf("%s: event %+v, want %s with the BMC's error", tc.machine, last, tc.action)
		}
	}
	if on, _ := refusing.Power(); on {
		t.Error("the refusing BMC's machine is on")
	}
	_, metrics := ta.call(t, "", "GET", "/metrics", nil, nil)
	for _, want := range []string{
		`rackd_phase_failures_total{phase="commission",reason="power"} 1`,
		`rackd_phase_failures_total{phase="deploy",reason="power"} 1`,
		`rackd_machines{state="FAILED_COMMISSIONING"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
