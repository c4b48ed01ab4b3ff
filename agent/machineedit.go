package agent

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"rackd/api"
	"rackd/power"
	"rackd/store"
)

// This file is the HTTP face of changing and deleting machines. The rules
// (validation, defaults from the inventory, what a deletion frees) live in
// store/machineedit.go.

// patchFromAPI turns a merge patch as sent into the store's.
func patchFromAPI(req api.MachinePatch) store.MachinePatch {
	str := func(f api.Field[string]) *string {
		if !f.Set {
			return nil
		}
		return &f.Value
	}
	flag := func(f api.Field[bool]) *bool {
		if !f.Set {
			return nil
		}
		return &f.Value
	}
	num := func(f api.Field[int]) *int {
		if !f.Set {
			return nil
		}
		return &f.Value
	}
	p := store.MachinePatch{Hostname: str(req.Hostname), Arch: str(req.Arch), CPUCount: num(req.CPUCount),
		MemoryMB: num(req.MemoryMB), Zone: str(req.Zone), Reason: req.Reason}
	if req.Tags.Set {
		tags := req.Tags.Value
		if tags == nil {
			tags = []string{}
		}
		p.Tags = &tags
	}
	if req.Power.Set {
		if pp := req.Power.Value; pp == nil {
			p.ClearPower = true
		} else {
			p.Power = store.PowerPatch{Driver: str(pp.Driver), Address: str(pp.Address), Username: str(pp.Username),
				Password: str(pp.Password), CipherSuite: num(pp.CipherSuite),
				TLSFingerprint: str(pp.TLSFingerprint), InsecureTLS: flag(pp.InsecureTLS), BootMode: str(pp.BootMode)}
		}
	}
	return p
}

// checkPowerAddress asks the machine's driver whether it takes the BMC
// address, where the driver can tell (power.AddressChecker): a bad one is
// refused now, not at the first power request.
func (a *Agent) checkPowerAddress(driver, addr string) error {
	addr = strings.TrimSpace(addr)
	c, ok := a.powerDrivers[strings.ToLower(strings.TrimSpace(driver))].(power.AddressChecker)
	if !ok || addr == "" {
		return nil
	}
	if err := c.CheckAddress(addr); err != nil {
		return fmt.Errorf("power address: %w", err)
	}
	return nil
}

// patchMachineHandler changes a machine's record (admin): JSON merge patch.
func (a *Agent) patchMachineHandler(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.MachinePatch
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	m, err := a.updateMachine(r.Context(), who, r.PathValue("id"), patchFromAPI(req))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.machineView(m))
}

// deleteMachineHandler removes a machine (admin). Refused with 409 while it is
// allocated, deployed or in a phase, unless forced (body or ?force=true).
func (a *Agent) deleteMachineHandler(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.DeleteMachine
	if a.decodeBody(w, r, &req, true) != nil {
		return
	}
	if s := r.URL.Query().Get("force"); s != "" {
		force, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("force=%q is not true or false", s))
			return
		}
		req.Force = req.Force || force
	}
	m, err := a.deleteMachine(r.Context(), who, store.DeleteRequest{Machine: r.PathValue("id"), Force: req.Force, Reason: req.Reason})
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	// What it was, without addresses (they are free now) or power status.
	writeJSON(w, http.StatusOK, machineFields(m))
}

// manualNotice is what the operator must do by hand after a transition of
// a machine with the manual power driver: rackd asks, nobody presses.
func manualNotice(m store.Machine) string {
	if m.Power.Driver != "manual" {
		return ""
	}
	switch p := store.PowerPolicyFor(m.State); p.Desired {
	case power.StateOn:
		return fmt.Sprintf("machine %s has the manual power driver, so rackd cannot power it: power it on yourself now, booting from the network (PXE)", m.Hostname)
	case power.StateOff:
		return fmt.Sprintf("machine %s has the manual power driver, so rackd cannot power it: power it off yourself now", m.Hostname)
	}
	return ""
}
