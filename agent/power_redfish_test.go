package agent

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/redfishsim"
)

// TestPowerRedfish drives simulated Redfish BMCs through rackd's API and
// the redfish driver, cross-checked with the simulators' own state: on,
// off, cycle, query against a BMC with vendor quirks; the certificate
// trusted on first use shows on the machine and is enforced (a changed one
// fails the request naming both fingerprints, until the operator clears the
// pin); next boot PXE for commissioning; a wrong password fails clearly; a
// hung BMC fails with a timeout while the other machines keep working.
func TestPowerRedfish(t *testing.T) {
	quirky := redfishsim.Quirks{RequireIfMatch: true, SettingsObject: true, RequireBootMode: true, FlakeEvery: 5}
	simA := redfishsim.Start(t, redfishsim.Options{Quirks: quirky})
	simB := redfishsim.Start(t, redfishsim.Options{Quirks: quirky, BootMode: "Legacy"})
	simC := redfishsim.Start(t, redfishsim.Options{})
	t.Cleanup(simC.Resume)
	ta := startAgent(t, func(c *Config) {
		c.Power.VerifyInterval = Duration(200 * time.Millisecond)
		c.Power.VerifyDeadline = Duration(15 * time.Second)
		c.Power.CommandTimeout = Duration(5 * time.Second)
		c.Power.Retries = 1
		c.Power.Backoff = Duration(100 * time.Millisecond)
		c.Power.MinInterval = 0
	})
	add := func(name, mac, state string, sim *redfishsim.Sim, password string) {
		ta.addMachine(t, api.CreateMachine{Hostname: name, MACs: []string{mac}, State: state,
			Power: &api.PowerParams{Driver: "redfish", Address: sim.URL, Username: sim.User, Password: password}})
	}
	add("a", "52:54:00:00:03:01", "READY", simA, simA.Password)
	add("b", "52:54:00:00:03:02", "NEW", simB, simB.Password)
	add("c", "52:54:00:00:03:03", "READY", simC, simC.Password)
	add("bad", "52:54:00:00:03:04", "READY", simC, "wrong-"+simC.Password)

	request := func(machine, action string) string { return ta.requestPower(t, machine, action) }
	machine := func(name string) api.Machine {
		t.Helper()
		var m api.Machine
		if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/machines/"+name, nil, &m); status != http.StatusOK {
			t.Fatalf("get %s: %d %s", name, status, raw)
		}
		return m
	}
	for _, tc := range []struct{ action, want string }{{"on", "On"}, {"off", "Off"}, {"on", "On"}, {"cycle", "On"}, {"query", "On"}} {
		r := waitPowerLong(t, ta, request("a", tc.action))
		if r.State != "done" {
			t.Fatalf("%s: %+v", tc.action, r)
		}
		if got := simA.Power(); got != tc.want {
			t.Errorf("after %s the BMC's PowerState is %s", tc.action, got)
		}
	}
	if st := simA.Stats(); st.SessionsCreated != 1 || st.BasicAuth != 0 {
		t.Errorf("rackd's sessions on the BMC: %+v (want one, reused)", st)
	}
	if m := machine("a"); m.Power.TLSFingerprint != simA.Fingerprint() || strings.ToLower(m.Power.Observed) != "on" {
		t.Fatalf("machine a's power view %+v: want the BMC's certificate sha256 %s pinned", m.Power, simA.Fingerprint())
	}

	// The certificate changes: refused, naming both, the machine untouched.
	first := simA.Fingerprint()
	if err := simA.RotateCertificate(); err != nil {
		t.Fatal(err)
	}
	r := waitPowerLong(t, ta, request("a", "off"))
	if r.State != "failed" || !strings.Contains(r.Error, "certificate changed") || !strings.Contains(r.Error, first) ||
		!strings.Contains(r.Error, simA.Fingerprint()) || r.Attempts != 1 {
		t.Fatalf("off through a changed certificate: %+v", r)
	}
	if simA.Power() != "On" {
		t.Fatal("the machine was powered off through a certificate that changed")
	}
	// The operator accepts the new certificate by clearing the pin.
	if status, raw := ta.call(t, ta.admin, "PATCH", "/api/v1/machines/a", map[string]any{"power": map[string]any{"tls_fingerprint": ""}}, nil); status != http.StatusOK {
		t.Fatalf("clear the pin: %d %s", status, raw)
	}
	if r := waitPowerLong(t, ta, request("a", "off")); r.State != "done" || simA.Power() != "Off" {
		t.Fatalf("off after the pin was cleared: %+v, power %s", r, simA.Power())
	}
	if m := machine("a"); m.Power.TLSFingerprint != simA.Fingerprint() {
		t.Fatalf("the new certificate was not pinned: %+v", m.Power)
	}

	// Commissioning powers the machine on to boot from the network, in
	// the BMC's (echoed) mode, through its settings object.
	var m api.Machine
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/b/commission", nil, &m); status != 200 {
		t.Fatalf("commission: %d %s", status, raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		last, _ := simB.LastBoot()
		if simB.Power() == "On" && last == "Pxe" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("commissioning: power %s, last boot %q after 30s", simB.Power(), last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b := simB.Boot(); b.Mode != "Legacy" {
		t.Errorf("the boot override changed the mode: %+v", b)
	}

	// A wrong password fails, says why on one line, and does not repeat
	// the password.
	r = waitPowerLong(t, ta, request("bad", "on"))
	if r.State != "failed" || !strings.Contains(r.Error, "authentication failed (wrong user or password") ||
		strings.Contains(r.Error, simC.Password) || strings.ContainsAny(r.Error, "\n\r") {
		t.Errorf("wrong password: %+v", r)
	}

	// A hung BMC fails with a timeout; the others go on meanwhile.
	simC.Hang()
	hung := request("c", "on")
	a := request("a", "on")
	ra := waitPowerLong(t, ta, a)
	if ra.State != "done" {
		t.Errorf("a beside a hung BMC: %+v", ra)
	}
	rh := waitPowerLong(t, ta, hung)
	if rh.State != "failed" || !strings.Contains(rh.Error, "timeout") {
		t.Errorf("hung BMC: %+v", rh)
	}
	if !ra.Started.Before(rh.Finished) {
		t.Errorf("a started at %v, after the hung BMC's request ended at %v: it waited for it", ra.Started, rh.Finished)
	}
}

// TestRedfishAddressChecked: the driver's address rules apply when the
// power parameters are set, not at the first power request.
func TestRedfishAddressChecked(t *testing.T) {
	ta := startAgent(t)
	var raw []byte
	var status int
	status, raw = ta.call(t, ta.admin, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "r1", MACs: []string{"52:54:00:00:04:01"},
		Power: &api.PowerParams{Driver: "redfish", Address: "http://10.0.0.5", Username: "u", Password: "p"}}, nil)
	if status != http.StatusBadRequest || !strings.Contains(string(raw), "only https") {
		t.Fatalf("create with a plain-http BMC: %d %s", status, raw)
	}
	ta.addMachine(t, api.CreateMachine{Hostname: "r2", MACs: []string{"52:54:00:00:04:02"},
		Power: &api.PowerParams{Driver: "redfish", Address: "https://10.0.0.6", Username: "u", Password: "p"}})
	status, raw = ta.call(t, ta.admin, "PATCH", "/api/v1/machines/r2", map[string]any{"power": map[string]any{"address": "https://10.0.0.6/not/a/system"}}, nil)
	if status != http.StatusBadRequest || !strings.Contains(string(raw), "may only name a system") {
		t.Fatalf("patch to a bad address: %d %s", status, raw)
	}
	status, raw = ta.call(t, ta.admin, "PATCH", "/api/v1/machines/r2", map[string]any{"power": map[string]any{"tls_fingerprint": "abc"}}, nil)
	if status != http.StatusBadRequest || !strings.Contains(string(raw), "64 hex digits") {
		t.Fatalf("patch to a bad fingerprint: %d %s", status, raw)
	}
}

// TestPowerRedfishGracefulOff: with power.redfish_off = "graceful" an off
// through the API asks the BMC for GracefulShutdown; by default, ForceOff.
func TestPowerRedfishGracefulOff(t *testing.T) {
	for _, tc := range []struct{ off, want string }{{"", "ForceOff"}, {"graceful", "GracefulShutdown"}} {
		t.Run("redfish_off="+tc.off, func(t *testing.T) {
			sim := redfishsim.Start(t, redfishsim.Options{PowerOn: true})
			ta := startAgent(t, func(c *Config) {
				c.Power.RedfishOff = tc.off
				c.Power.VerifyInterval = Duration(100 * time.Millisecond)
				c.Power.MinInterval = 0
			})
			ta.addMachine(t, api.CreateMachine{Hostname: "g", MACs: []string{"52:54:00:00:03:21"}, State: "DEPLOYED",
				Power: &api.PowerParams{Driver: "redfish", Address: sim.URL, Username: sim.User, Password: sim.Password}})
			if r := waitPowerLong(t, ta, ta.requestPower(t, "g", "off")); r.State != "done" {
				t.Fatalf("off: %+v", r)
			}
			if got := sim.Stats().Resets; len(got) != 1 || got[0] != tc.want {
				t.Errorf("resets %v, want [%s]", got, tc.want)
			}
		})
	}
}

// TestPowerAddressChecked: every driver that can tell a bad BMC address
// (ipmi, redfish) refuses it when the power parameters are set, with a 400
// saying what is wrong, and nothing is created or changed; a good one
// passes. An ipmi port beyond 65535 used to be accepted and failed every
// power request later.
func TestPowerAddressChecked(t *testing.T) {
	ta := startAgent(t)
	for i, tc := range []struct {
		driver, addr string
		err          string // "" for accepted
	}{
		{"ipmi", "10.0.0.1:99999", `port "99999": want a number from 1 to 65535`},
		{"ipmi", "10.0.0.1:0", "from 1 to 65535"},
		{"ipmi", "10.0.0.300", "neither an IP address nor a DNS name"},
		{"ipmi", "https://10.0.0.1", "no scheme"},
		{"ipmi", "fd00::1:623:x", "in brackets"},
		{"redfish", "https://10.0.0.1:99999", "from 1 to 65535"},
		{"redfish", "10.0.0.1:70000", "from 1 to 65535"},
		{"ipmi", "10.0.0.1:623", ""},
		{"ipmi", "[fd00::1]:6230", ""},
		{"ipmi", "bmc-7.example", ""},
		{"redfish", "https://10.0.0.2:8443", ""},
		// The manual driver's address is free text (a rack position).
		{"manual", "rack3/U12", ""},
	} {
		name := fmt.Sprintf("p%d", i)
		status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines", api.CreateMachine{Hostname: name,
			MACs: []string{fmt.Sprintf("52:54:00:00:05:%02x", i)}, Power: &api.PowerParams{Driver: tc.driver, Address: tc.addr}}, nil)
		if tc.err == "" {
			if status != http.StatusCreated {
				t.Errorf("%s %q: %d %s, want 201", tc.driver, tc.addr, status, raw)
			}
			continue
		}
		e := wantError(t, status, raw, http.StatusBadRequest, api.CodeBadRequest)
		if !strings.Contains(e.Error, tc.err) || !strings.Contains(e.Error, "power address") {
			t.Errorf("%s %q refused with %q, want it to say %q", tc.driver, tc.addr, e.Error, tc.err)
		}
		if status, _ := ta.call(t, ta.admin, "GET", "/api/v1/machines/"+name, nil, nil); status != http.StatusNotFound {
			t.Errorf("%s %q: refused, yet the machine exists (%d)", tc.driver, tc.addr, status)
		}
	}
	// A change of address alone is checked against the machine's driver.
	ta.addMachine(t, api.CreateMachine{Hostname: "q", MACs: []string{"52:54:00:00:05:ff"},
		Power: &api.PowerParams{Driver: "ipmi", Address: "10.0.0.9"}})
	status, raw := ta.call(t, ta.admin, "PATCH", "/api/v1/machines/q", map[string]any{"power": map[string]any{"address": "10.0.0.9:99999"}}, nil)
	if e := wantError(t, status, raw, http.StatusBadRequest, api.CodeBadRequest); !strings.Contains(e.Error, "from 1 to 65535") {
		t.Errorf("patch to a bad port: %q", e.Error)
	}
	var m api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines/q", nil, &m)
	if m.Power.Address != "10.0.0.9" {
		t.Errorf("after the refused patch the address is %q", m.Power.Address)
	}
}
