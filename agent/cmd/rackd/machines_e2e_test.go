package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/ipmisim"
)

// TestCLIEnlistedMachinePower walks what a new operator does with a machine
// that enlisted itself, with the real binary and a real BMC (ipmi_sim): the
// commission is refused and names the command; machines set with the BMC
// user alone (password from the environment) makes it power-managed at the
// address its inventory reported; power status --wait asks the BMC;
// commission powers it on with next boot PXE; machines rm frees its MAC for
// machines add.
func TestCLIEnlistedMachinePower(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	sim := ipmisim.Start(t, ipmisim.Options{})
	host, port, _ := strings.Cut(sim.Addr, ":")
	if port != "623" {
		t.Fatalf("simulator on %s: the inventory names an IP, so the BMC must listen on 623", sim.Addr)
	}
	state := t.TempDir()
	d := startDaemon(t, state)
	asAdmin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	must := func(env []string, args ...string) string { t.Helper(); return mustCLI(t, d, env, args...) }

	const mac = "52:54:00:00:0b:01"
	inv, _ := json.Marshal(enlist.Inventory{MACs: []string{mac}, Arch: "amd64", CPUCount: 2, MemoryMB: 1024, BMCAddress: host})
	resp, err := http.Post(d.url+enlist.PathEnlist, "application/json", bytes.NewReader(inv))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		ID string `json:"id"`
	}
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || res.ID == "" {
		t.Fatalf("enlist: %d %+v", resp.StatusCode, res)
	}

	code, _, errs := runCLI(t, d, asAdmin, "machines", "commission", res.ID)
	if code != 1 || !strings.Contains(errs, "rackd machines set") || !strings.Contains(errs, "--power-driver ipmi") {
		t.Fatalf("commission without power: exit %d, %q", code, errs)
	}

	withPassword := append(append([]string{}, asAdmin...), "RACKD_POWER_PASSWORD="+sim.Password)
	out := must(withPassword, "machines", "set", res.ID, "--power-user", sim.User)
	if !strings.Contains(out, "ipmi at "+host) || strings.Contains(out, sim.Password) {
		t.Fatalf("machines set:\n%s", out)
	}
	out = must(asAdmin, "power", "status", res.ID, "--wait", "--timeout", "60s")
	wantObserved := "off"
	if on, _ := sim.Power(); on {
		wantObserved = "on"
	}
	if !strings.Contains(out, wantObserved) {
		t.Fatalf("power status --wait says\n%s\nthe simulator is %s", out, wantObserved)
	}

	var m api.Machine
	if err := json.Unmarshal([]byte(must(asAdmin, "machines", "commission", res.ID, "--json")), &m); err != nil || m.State != "COMMISSIONING" {
		t.Fatalf("commission: %v %+v", err, m)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		on, _ := sim.Power()
		boot, _ := sim.BootDevice()
		if on && boot == "pxe" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after commission: power %v, boot device %q", on, boot)
		}
		time.Sleep(100 * time.Millisecond)
	}

	code, _, errs = runCLI(t, d, asAdmin, "machines", "rm", res.ID)
	if code != 1 || !strings.Contains(errs, "COMMISSIONING") {
		t.Fatalf("rm while commissioning: exit %d, %q", code, errs)
	}
	if out := must(asAdmin, "machines", "rm", res.ID, "--force", "--reason", "e2e"); !strings.Contains(out, "Deleted") {
		t.Fatalf("rm --force:\n%s", out)
	}
	must(asAdmin, "machines", "add", "--hostname", "again", "--mac", mac)
	if out := must(asAdmin, "machines", "events", res.ID); !strings.Contains(out, "delete") || !strings.Contains(out, "e2e") {
		t.Fatalf("events of the deleted machine:\n%s", out)
	}
}
