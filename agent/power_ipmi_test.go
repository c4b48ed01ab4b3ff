package agent

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/ipmisim"
)

// TestPowerRealBMC drives real BMCs (ipmi_sim) through rackd's API and the
// ipmi driver, and cross-checks with ipmitool and the simulators' own state:
// on, off, cycle, query; next boot PXE for commissioning; a wrong password
// fails with a clear error; a hung BMC (SIGSTOP) fails with a timeout while
// the other machines keep working.
func TestPowerRealBMC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	simA := ipmisim.Start(t, ipmisim.Options{})
	simB := ipmisim.Start(t, ipmisim.Options{})
	simC := ipmisim.Start(t, ipmisim.Options{})
	t.Cleanup(func() { simC.Resume() })
	ta := startAgent(t, func(c *Config) {
		c.Power.VerifyInterval = Duration(200 * time.Millisecond)
		c.Power.VerifyDeadline = Duration(15 * time.Second)
		c.Power.CommandTimeout = Duration(5 * time.Second)
		c.Power.Retries = 1
		c.Power.Backoff = Duration(100 * time.Millisecond)
		c.Power.MinInterval = 0
	})
	add := func(name, mac, state string, sim *ipmisim.Sim, password string) {
		// Cipher suite 3 said explicitly (ipmi_sim's; the driver's default).
		ta.addMachine(t, api.CreateMachine{Hostname: name, MACs: []string{mac}, State: state,
			Power: &api.PowerParams{Driver: "ipmi", Address: sim.Addr, Username: sim.User, Password: password, CipherSuite: 3}})
	}
	add("a", "52:54:00:00:01:01", "READY", simA, simA.Password)
	add("b", "52:54:00:00:01:02", "NEW", simB, simB.Password)
	add("c", "52:54:00:00:01:03", "READY", simC, simC.Password)
	add("bad", "52:54:00:00:01:04", "READY", simA, "wrong-"+simA.Password)

	request := func(machine, action string) string { return ta.requestPower(t, machine, action) }
	ipmitoolStatus := func(sim *ipmisim.Sim) string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := sim.Ipmitool(ctx, "chassis", "power", "status")
		if err != nil {
			t.Fatalf("ipmitool: %v: %s", err, out)
		}
		return out
	}
	for _, tc := range []struct{ action, want string }{{"on", "on"}, {"off", "off"}, {"on", "on"}, {"cycle", "on"}, {"query", "on"}} {
		r := waitPowerLong(t, ta, request("a", tc.action))
		if r.State != "done" {
			t.Fatalf("%s: %+v", tc.action, r)
		}
		if on, err := simA.Power(); err != nil || on != (tc.want == "on") {
			t.Errorf("after %s the simulator's power bit is %v (%v)", tc.action, on, err)
		}
		if out := ipmitoolStatus(simA); !strings.Contains(out, "is "+tc.want) {
			t.Errorf("after %s ipmitool says %q", tc.action, out)
		}
		var mp api.MachinePower
		ta.call(t, ta.admin, "GET", "/api/v1/machines/a/power", nil, &mp)
		if mp.Observed != tc.want {
			t.Errorf("after %s rackd observed %q", tc.action, mp.Observed)
		}
	}

	// Commissioning powers the machine on to boot from the network.
	var m api.Machine
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/b/commission", nil, &m); status != 200 {
		t.Fatalf("commission: %d %s", status, raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		on, _ := simB.Power()
		boot, _ := simB.BootDevice()
		if on && boot == "pxe" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("commissioning: power %v, boot device %q after 30s", on, boot)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A wrong password fails, says why on one line, and does not repeat
	// the password.
	r := waitPowerLong(t, ta, request("bad", "on"))
	if r.State != "failed" || !strings.Contains(r.Error, "authentication failed (wrong user or password") ||
		strings.Contains(r.Error, simA.Password) || strings.ContainsAny(r.Error, "\n\r") {
		t.Errorf("wrong password: %+v", r)
	}

	// A hung BMC fails with a timeout; the others go on meanwhile.
	if err := simC.Hang(); err != nil {
		t.Fatal(err)
	}
	hung := request("c", "on")
	a := request("a", "off")
	ra := waitPowerLong(t, ta, a)
	if ra.State != "done" {
		t.Errorf("a beside a hung BMC: %+v", ra)
	}
	rh := waitPowerLong(t, ta, hung)
	if rh.State != "failed" || !strings.Contains(rh.Error, "timeout") {
		t.Errorf("hung BMC: %+v", rh)
	}
	// a was not held behind the hung BMC: it started before the hung
	// request ended (by its timeout), whatever the machine's load made
	// of a's own duration.
	if !ra.Started.Before(rh.Finished) {
		t.Errorf("a started at %v, after the hung BMC's request ended at %v: it waited for it", ra.Started, rh.Finished)
	}
	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/c/events", nil, &evs)
	if len(evs) == 0 || evs[len(evs)-1].Action != "power-failed" {
		t.Errorf("no power-failed event on c: %+v", evs)
	}
}

// TestPowerRealBMCRefusesBootDevice: a real BMC (ipmi_sim) that refuses
// set-boot-device fails the commissioning power-on with one clear error and
// a power-failed event saying so, and the machine is not powered on; the
// commissioning cannot go on, so it fails at once with that error; once the
// BMC takes the command again, commissioning again (a retry from
// FAILED_COMMISSIONING: a cycle) powers the machine on with next boot PXE
// set first (a machine with an installed disk powered on without it boots
// the disk).
func TestPowerRealBMCRefusesBootDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	refuse := filepath.Join(t.TempDir(), "refuse-boot")
	if err := os.WriteFile(refuse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sim := ipmisim.Start(t, ipmisim.Options{BootCmd: []string{"test", "!", "-e", refuse}})
	ta := startAgent(t, func(c *Config) {
		c.Power.VerifyInterval = Duration(200 * time.Millisecond)
		c.Power.VerifyDeadline = Duration(15 * time.Second)
		c.Power.CommandTimeout = Duration(5 * time.Second)
		c.Power.Retries = 1
		c.Power.Backoff = Duration(100 * time.Millisecond)
		c.Power.MinInterval = 0
		c.Power.PollInterval = Duration(time.Second)
	})
	ta.addMachine(t, api.CreateMachine{Hostname: "n", MACs: []string{"52:54:00:00:02:01"}, State: "NEW",
		Power: &api.PowerParams{Driver: "ipmi", Address: sim.Addr, Username: sim.User, Password: sim.Password}})
	var m api.Machine
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/n/commission", nil, &m); status != 200 {
		t.Fatalf("commission: %d %s", status, raw)
	}
	var mp api.MachinePower
	ta.call(t, ta.admin, "GET", "/api/v1/machines/n/power", nil, &mp)
	if len(mp.Pending) != 1 || mp.Pending[0].Action != "on" || mp.Pending[0].NextBoot != "pxe" {
		t.Fatalf("commissioning queued %+v, want one on with next boot pxe", mp.Pending)
	}
	first := waitPowerLong(t, ta, mp.Pending[0].ID)
	if first.State != "failed" || !strings.HasPrefix(first.Error, "BMC refused set-boot-device: ") ||
		!strings.Contains(first.Error, "completion code") || strings.ContainsAny(first.Error, "\n\r") {
		t.Errorf("the refused power-on: %s %q", first.State, first.Error)
	}
	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/n/events", nil, &evs)
	found := false
	for _, e := range evs {
		if e.Action == "power-failed" && strings.HasPrefix(e.Reason, first.ID+" on ") {
			found = strings.Contains(e.Reason, "BMC refused set-boot-device: ")
		}
	}
	if !found {
		t.Errorf("no power-failed event for %s saying the BMC refused set-boot-device: %+v", first.ID, evs)
	}
	if on, err := sim.Power(); err != nil || on {
		t.Errorf("the machine was powered on (%v, %v) although the BMC refused set-boot-device", on, err)
	}
	waitStateLong(t, ta, "n", "FAILED_COMMISSIONING")
	evs = ta.events(t, "n")
	var failed api.Event
	for _, e := range evs {
		if e.Action == "commissioning-failed" {
			failed = e
		}
	}
	if failed.Actor != "rackd/power" || !strings.Contains(failed.Reason, "BMC refused set-boot-device: ") {
		t.Errorf("commissioning-failed event %+v, want the BMC's refusal as its reason", failed)
	}

	// The BMC takes set-boot-device again: commissioning again powers the
	// machine on, and the boot device was set to PXE first.
	if err := os.Remove(refuse); err != nil {
		t.Fatal(err)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/n/commission", nil, &m); status != 200 {
		t.Fatalf("commission again: %d %s", status, raw)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		on, _ := sim.Power()
		if on {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second commissioning did not power the machine on within 60s; hook log:\n%s", sim.HookLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if boot, _ := sim.BootDevice(); boot != "pxe" {
		t.Errorf("the second commissioning powered the machine on with boot device %q, want pxe; hook log:\n%s", boot, sim.HookLog())
	}
}

// waitPowerLong is waitPower with room for real BMC timeouts and retries.
func waitPowerLong(t *testing.T, ta *testAgent, id string) api.PowerRequest {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
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
			t.Fatalf("power request %s still %s after 60s", id, r.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
