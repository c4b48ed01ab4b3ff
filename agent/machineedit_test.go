package agent

import (
	"bytes"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/ipmisim"
	"rackd/store"
)

// TestPatchMachine: the HTTP face of UpdateMachine: merge-patch semantics,
// credentials write-only, refusals with their codes.
func TestPatchMachine(t *testing.T) {
	ta := startAgent(t)
	bob := ta.addUser(t, "bob", false)
	ta.addMachine(t, api.CreateMachine{Hostname: "b1", MACs: []string{"52:54:00:00:07:01"}, Tags: []string{"old"}})
	ta.addMachine(t, api.CreateMachine{Hostname: "b2", MACs: []string{"52:54:00:00:07:02"}})
	const password = "pw-Zq81x"

	var m api.Machine
	status, raw := ta.call(t, ta.admin, "PATCH", "/api/v1/machines/b1", api.MachinePatch{
		Power: api.Some(&api.PowerPatch{Driver: api.Some("ipmi"), Address: api.Some("10.0.0.9:623"),
			Username: api.Some("root"), Password: api.Some(password)}),
		Zone: api.Some("rack1"), Reason: "BMC cabled"}, &m)
	if status != http.StatusOK {
		t.Fatalf("patch: %d %s", status, raw)
	}
	if m.Power.Driver != "ipmi" || m.Power.Address != "10.0.0.9:623" || m.Zone != "rack1" || len(m.Tags) != 1 {
		t.Errorf("patched machine %+v", m)
	}
	// Write-only: neither the answer, nor a read, nor the history shows them.
	_, got := ta.call(t, ta.admin, "GET", "/api/v1/machines/b1", nil, nil)
	_, list := ta.call(t, ta.admin, "GET", "/api/v1/machines", nil, nil)
	_, evs := ta.call(t, ta.admin, "GET", "/api/v1/machines/b1/events", nil, nil)
	for what, body := range map[string][]byte{"answer": raw, "get": got, "list": list, "events": evs} {
		if bytes.Contains(body, []byte(password)) || bytes.Contains(body, []byte(`"username"`)) || bytes.Contains(body, []byte(`"password"`)) {
			t.Errorf("%s shows the credentials: %s", what, body)
		}
	}
	if !bytes.Contains(evs, []byte("power password changed")) || !bytes.Contains(evs, []byte("BMC cabled")) {
		t.Errorf("the update event does not say what changed: %s", evs)
	}
	// Absent members are unchanged; null clears; the merge-patch type is
	// accepted.
	req, _ := http.NewRequest("PATCH", ta.url+"/api/v1/machines/b1", strings.NewReader(`{"tags": null, "power": {"address": "10.0.0.10"}}`))
	req.Header.Set("Authorization", "Bearer "+ta.admin)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("merge-patch+json: %d", resp.StatusCode)
	}
	stored, err := ta.store.MachineForPower("b1")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Tags) != 0 || stored.Zone != "rack1" || stored.Power.Address != "10.0.0.10" ||
		stored.Power.Driver != "ipmi" || stored.Power.Username != "root" || stored.Power.Password != password {
		t.Errorf("after a partial patch: %+v", stored)
	}
	if status, raw := ta.call(t, ta.admin, "PATCH", "/api/v1/machines/b1", `{"power": null}`, &m); status != 200 || m.Power.Driver != "" {
		t.Errorf("power null: %d %s", status, raw)
	}
	if s, _ := ta.store.MachineForPower("b1"); s.Power.Password != "" || s.Secrets != nil {
		t.Errorf("power null kept the password")
	}

	for name, tc := range map[string]struct {
		token, path, body string
		status            int
		code, msg         string
	}{
		"unknown driver":      {ta.admin, "b1", `{"power": {"driver": "amt"}}`, 400, api.CodeBadRequest, "not in this rackd"},
		"address, no driver":  {ta.admin, "b1", `{"power": {"address": "10.0.0.9"}}`, 400, api.CodeBadRequest, "need a power driver"},
		"unknown field":       {ta.admin, "b1", `{"macs": ["52:54:00:00:07:09"]}`, 400, api.CodeBadRequest, "macs"},
		"unknown power field": {ta.admin, "b1", `{"power": {"pasword": "x"}}`, 400, api.CodeBadRequest, "pasword"},
		"wrong type":          {ta.admin, "b1", `{"cpu_count": "8"}`, 400, api.CodeBadRequest, ""},
		"bad hostname":        {ta.admin, "b1", `{"hostname": "no spaces"}`, 400, api.CodeBadRequest, "invalid hostname"},
		"hostname taken":      {ta.admin, "b1", `{"hostname": "b2"}`, 409, api.CodeConflict, "already used"},
		"empty body":          {ta.admin, "b1", ``, 400, api.CodeBadRequest, "empty"},
		"unknown machine":     {ta.admin, "nosuch", `{"zone": "z"}`, 404, api.CodeNotFound, "nosuch"},
		"not an admin":        {bob, "b1", `{"zone": "z"}`, 403, api.CodeForbidden, "admin"},
	} {
		t.Run(name, func(t *testing.T) {
			before, _ := ta.store.Machine("b1")
			var body any
			if tc.body != "" {
				body = tc.body
			}
			status, raw := ta.call(t, tc.token, "PATCH", "/api/v1/machines/"+tc.path, body, nil)
			e := wantError(t, status, raw, tc.status, tc.code)
			if !strings.Contains(e.Error, tc.msg) {
				t.Errorf("message %q does not say %q", e.Error, tc.msg)
			}
			if after, _ := ta.store.Machine("b1"); after.Updated != before.Updated {
				t.Errorf("a refused patch wrote the machine")
			}
		})
	}
}

// TestDeleteMachineAPI: refused while allocated, forced, and the MAC is
// free for a new machine at once; the history stays under the id.
func TestDeleteMachineAPI(t *testing.T) {
	ta := startAgent(t)
	bob := ta.addUser(t, "bob", false)
	mac := "52:54:00:00:08:01"
	m := ta.addMachine(t, api.CreateMachine{Hostname: "d1", MACs: []string{mac}, State: "READY"})
	if status, raw := ta.call(t, bob, "DELETE", "/api/v1/machines/d1", nil, nil); status != 403 {
		t.Errorf("a user deletes: %d %s", status, raw)
	}
	if status, raw := ta.call(t, bob, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "d1", AgentName: "t"}, nil); status != 201 {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/machines/d1", nil, nil)
	if e := wantError(t, status, raw, 409, api.CodeConflict); !strings.Contains(e.Error, "allocated to bob") {
		t.Errorf("refusal %q does not say why", e.Error)
	}
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/machines/d1?force=maybe", nil, nil); status != 400 {
		t.Errorf("force=maybe: %d %s", status, raw)
	}
	var gone api.Machine
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/machines/d1?force=true", api.DeleteMachine{Reason: "sold"}, &gone); status != 200 || gone.ID != m.ID {
		t.Fatalf("forced delete: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/machines/d1", nil, nil); status != 404 {
		t.Errorf("get after delete: %d %s", status, raw)
	}
	var evs []api.Event
	if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/machines/"+m.ID+"/events", nil, &evs); status != 200 ||
		len(evs) == 0 || evs[len(evs)-1].Action != "delete" || !strings.Contains(evs[len(evs)-1].Reason, "sold") {
		t.Errorf("events of the deleted machine: %d %s", status, raw)
	}
	again := ta.addMachine(t, api.CreateMachine{Hostname: "d1", MACs: []string{mac}})
	if again.ID == m.ID {
		t.Error("same id again")
	}
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/machines/nosuch", nil, nil); status != 404 {
		t.Errorf("unknown: %d %s", status, raw)
	}
}

// TestCommissionNeedsPower: without a power driver a commission is refused
// with the way out; with the manual driver the answer tells the operator to
// act.
func TestCommissionNeedsPower(t *testing.T) {
	ta := startAgent(t)
	ta.addMachine(t, api.CreateMachine{Hostname: "np", MACs: []string{"52:54:00:00:09:01"}})
	status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/np/commission", nil, nil)
	if e := wantError(t, status, raw, 409, api.CodeConflict); !strings.Contains(e.Error, "rackd machines set np --power-driver ipmi --power-address") {
		t.Errorf("refusal %q does not name the command", e.Error)
	}
	if m, _ := ta.store.Machine("np"); m.State != "NEW" {
		t.Errorf("state %s after a refused commission", m.State)
	}
	status, raw = ta.call(t, ta.admin, "POST", "/api/v1/machines/np/power", api.PowerAction{Action: "on"}, nil)
	if e := wantError(t, status, raw, 400, api.CodeBadRequest); !strings.Contains(e.Error, "rackd machines set np --power-driver") {
		t.Errorf("power without a driver: %q", e.Error)
	}
	if status, raw := ta.call(t, ta.admin, "PATCH", "/api/v1/machines/np", `{"power": {"driver": "manual"}}`, nil); status != 200 {
		t.Fatalf("set manual: %d %s", status, raw)
	}
	var m api.Machine
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/np/commission", nil, &m); status != 200 {
		t.Fatalf("commission, manual: %d %s", status, raw)
	}
	if m.State != "COMMISSIONING" || !strings.Contains(m.Notice, "power it on yourself now") {
		t.Errorf("manual commission: state %s, notice %q", m.State, m.Notice)
	}
	// A GET is not an action: no notice there.
	var again api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines/np", nil, &again)
	if again.Notice != "" {
		t.Errorf("GET has a notice: %q", again.Notice)
	}
}

// TestEnlistedMachineGetsPower: a machine that enlisted itself (no power
// parameters, its BMC's address in the inventory) is given credentials
// only, and rackd then drives its real BMC (ipmi_sim): a query, and the
// commission's power-on with next boot PXE.
func TestEnlistedMachineGetsPower(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	sim := ipmisim.Start(t, ipmisim.Options{})
	host, port, ok := strings.Cut(sim.Addr, ":")
	if !ok || port != "623" {
		t.Fatalf("simulator on %s: the inventory names an IP, so the BMC must listen on 623", sim.Addr)
	}
	ta := startAgent(t, func(c *Config) {
		c.Power.VerifyInterval = Duration(200 * time.Millisecond)
		c.Power.VerifyDeadline = Duration(15 * time.Second)
		c.Power.CommandTimeout = Duration(5 * time.Second)
		c.Power.MinInterval = 0
	})
	inv := enlist.Inventory{MACs: []string{"52:54:00:00:0a:01"}, Arch: "amd64", CPUCount: 2, MemoryMB: 1024, BMCAddress: host}
	var res struct {
		ID string `json:"id"`
	}
	if status, raw := ta.call(t, "", "POST", enlist.PathEnlist, inv, &res); status != 201 {
		t.Fatalf("enlist: %d %s", status, raw)
	}
	var m api.Machine
	if status, raw := ta.call(t, ta.admin, "PATCH", "/api/v1/machines/"+res.ID, api.MachinePatch{
		Power: api.Some(&api.PowerPatch{Username: api.Some(sim.User), Password: api.Some(sim.Password)})}, &m); status != 200 {
		t.Fatalf("patch: %d %s", status, raw)
	}
	if m.Power.Driver != "ipmi" || m.Power.Address != host {
		t.Fatalf("power after credentials only: %+v", m.Power)
	}
	var pr api.PowerRequest
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/"+res.ID+"/power", api.PowerAction{Action: "query"}, &pr); status != 202 {
		t.Fatalf("query: %d %s", status, raw)
	}
	if r := waitPowerLong(t, ta, pr.ID); r.State != "done" {
		t.Fatalf("query through the inventory's BMC address: %+v", r)
	}
	var mp api.MachinePower
	ta.call(t, ta.admin, "GET", "/api/v1/machines/"+res.ID+"/power", nil, &mp)
	if on, err := sim.Power(); err != nil || mp.Observed != map[bool]string{true: "on", false: "off"}[on] {
		t.Errorf("rackd observed %q, the simulator is on=%v (%v)", mp.Observed, on, err)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/"+res.ID+"/commission", nil, &m); status != 200 || m.Notice != "" {
		t.Fatalf("commission: %d %s", status, raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		on, _ := sim.Power()
		boot, _ := sim.BootDevice()
		if on && boot == "pxe" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("commissioning: power %v, boot device %q after 30s", on, boot)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStickyEndsLease: a machine whose hardware becomes known gets its
// sticky address, and the dynamic lease its boot interface had in that
// subnet is gone from /leases in the same step (it used to stay listed
// beside the sticky address until it expired).
func TestStickyEndsLease(t *testing.T) {
	ta := startAgent(t)
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.21.0.0/24", Gateway: "10.21.0.1",
		LeaseSeconds: 600, DynamicRanges: []api.Range{{Start: "10.21.0.100", End: "10.21.0.199"}}}, nil); status != 201 {
		t.Fatalf("subnet: %d %s", status, raw)
	}
	const mac = "52:54:00:00:0c:01"
	if _, err := ta.Store().DHCPAck(t.Context(), store.LeaseRequest{MAC: mac, Link: netip.MustParseAddr("10.21.0.1"),
		IP: netip.MustParseAddr("10.21.0.150"), PXE: true}); err != nil {
		t.Fatal(err)
	}
	// Created READY: the same path as a commissioning that just succeeded.
	m := ta.addMachine(t, api.CreateMachine{Hostname: "s1", MACs: []string{mac}, State: "READY"})
	if len(m.IPs) != 1 || m.IPs[0].Kind != "sticky" || m.IPs[0].IP == "10.21.0.150" {
		t.Fatalf("addresses of s1: %+v", m.IPs)
	}
	var leases []api.Lease
	ta.call(t, ta.admin, "GET", "/api/v1/leases", nil, &leases)
	for _, l := range leases {
		if l.MAC == mac {
			t.Errorf("the lease %s of %s is still listed beside its sticky address %s", l.IP, mac, m.IPs[0].IP)
		}
	}
}
