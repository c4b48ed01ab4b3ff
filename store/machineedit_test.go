package store_test

import (
	"reflect"
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

func ptr[T any](v T) *T { return &v }

// enlisted adds a machine the way the enlistment environment does: no power
// parameters, an inventory that names the BMC (when bmc is not empty).
func enlisted(t *testing.T, s *store.Store, hostname, bmc string) store.Machine {
	t.Helper()
	res, err := s.Enlist(t.Context(), store.EnlistRequest{Hostname: hostname, Arch: "amd64", MACs: []string{nextMAC()},
		Inventory: store.Inventory{BMCAddress: bmc}})
	if err != nil || !res.Created {
		t.Fatalf("enlist %s: %+v %v", hostname, res, err)
	}
	return res.Machine
}

func TestUpdateMachine(t *testing.T) {
	secret := "s3cret-pw"
	tests := map[string]struct {
		bmc   string // the enlisted machine's inventory BMC address
		actor store.Actor
		patch store.MachinePatch
		code  store.Code
		check func(t *testing.T, m store.Machine)
		// noEvent: nothing changed, so nothing is recorded.
		noEvent bool
		reason  string // in the update event
	}{
		"credentials only: ipmi at the inventory's BMC": {bmc: "10.0.0.9",
			patch: store.MachinePatch{Power: store.PowerPatch{Username: ptr("admin"), Password: &secret}},
			check: func(t *testing.T, m store.Machine) {
				// The password is sealed: only the power driver's read
				// opens it.
				want := store.PowerParams{Driver: "ipmi", Address: "10.0.0.9", Username: "admin"}
				if m.Power != want {
					t.Errorf("power %+v, want %+v", m.Power, want)
				}
				if len(m.Secrets["power.password"]) == 0 {
					t.Errorf("no sealed password: %+v", m.Secrets)
				}
			}, reason: "power address 10.0.0.9 from the inventory"},
		"driver without address: the inventory's BMC": {bmc: "10.0.0.9",
			patch: store.MachinePatch{Power: store.PowerPatch{Driver: ptr("IPMI")}},
			check: func(t *testing.T, m store.Machine) {
				if m.Power.Driver != "ipmi" || m.Power.Address != "10.0.0.9" {
					t.Errorf("power %+v", m.Power)
				}
			}},
		"explicit address wins over the inventory": {bmc: "10.0.0.9",
			patch: store.MachinePatch{Power: store.PowerPatch{Driver: ptr("ipmi"), Address: ptr("10.0.0.50:623")}},
			check: func(t *testing.T, m store.Machine) {
				if m.Power.Address != "10.0.0.50:623" {
					t.Errorf("power %+v", m.Power)
				}
			}},
		"manual driver takes no BMC address": {bmc: "10.0.0.9",
			patch: store.MachinePatch{Power: store.PowerPatch{Driver: ptr("manual")}},
			check: func(t *testing.T, m store.Machine) {
				if m.Power != (store.PowerParams{Driver: "manual"}) {
					t.Errorf("power %+v", m.Power)
				}
			}},
		"credentials without driver or known BMC": {
			patch: store.MachinePatch{Power: store.PowerPatch{Username: ptr("admin")}}, code: store.CodeInvalid},
		"address without driver": {
			patch: store.MachinePatch{Power: store.PowerPatch{Address: ptr("10.0.0.9")}}, code: store.CodeInvalid},
		"bad driver name": {
			patch: store.MachinePatch{Power: store.PowerPatch{Driver: ptr("ipmi v2")}}, code: store.CodeInvalid},
		"address with a space": {
			patch: store.MachinePatch{Power: store.PowerPatch{Driver: ptr("ipmi"), Address: ptr("10.0.0.9 623")}}, code: store.CodeInvalid},
		"cipher suite out of range": {
			patch: store.MachinePatch{Power: store.PowerPatch{Driver: ptr("ipmi"), CipherSuite: ptr(18)}}, code: store.CodeInvalid},
		"hostname": {patch: store.MachinePatch{Hostname: ptr("Web9")},
			check: func(t *testing.T, m store.Machine) {
				if m.Hostname != "web9" {
					t.Errorf("hostname %q", m.Hostname)
				}
			}, reason: `hostname "n1" -> "web9"`},
		"hostname taken":   {patch: store.MachinePatch{Hostname: ptr("other")}, code: store.CodeConflict},
		"hostname invalid": {patch: store.MachinePatch{Hostname: ptr("-x-")}, code: store.CodeInvalid},
		"hostname empty":   {patch: store.MachinePatch{Hostname: ptr("")}, code: store.CodeInvalid},
		"arch, tags, zone, cpu, memory": {
			patch: store.MachinePatch{Arch: ptr("arm64"), Tags: &[]string{"gpu", "ssd"}, Zone: ptr("rack2"), CPUCount: ptr(8), MemoryMB: ptr(16384)},
			check: func(t *testing.T, m store.Machine) {
				if m.Arch != "arm64" || !reflect.DeepEqual(m.Tags, []string{"gpu", "ssd"}) || m.Zone != "rack2" || m.CPUCount != 8 || m.MemoryMB != 16384 {
					t.Errorf("got %+v", m)
				}
			}},
		"bad tag":         {patch: store.MachinePatch{Tags: &[]string{"a b"}}, code: store.CodeInvalid},
		"bad arch":        {patch: store.MachinePatch{Arch: ptr("x86 64")}, code: store.CodeInvalid},
		"negative cpu":    {patch: store.MachinePatch{CPUCount: ptr(-1)}, code: store.CodeInvalid},
		"nothing changes": {patch: store.MachinePatch{Zone: ptr("")}, noEvent: true},
		"by a user":       {actor: alice, patch: store.MachinePatch{Zone: ptr("z")}, code: store.CodeForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := storetest.New(t)
			create(t, s, store.NewMachine{Hostname: "other"})
			m := enlisted(t, s, "n1", tc.bmc)
			before, _ := s.Events(m.ID, 0)
			actor := tc.actor
			if actor.Name == "" {
				actor = admin
			}
			got, err := s.UpdateMachine(t.Context(), actor, "n1", tc.patch)
			after, _ := s.Events(m.ID, 0)
			stored, serr := s.Machine(m.ID)
			if serr != nil {
				t.Fatal(serr)
			}
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if !reflect.DeepEqual(stored, m) || len(after) != len(before) {
					t.Errorf("a refused patch changed the machine or its history:\n%+v\n%+v", m, stored)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, stored) {
				t.Errorf("returned %+v, stored %+v", got, stored)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			if tc.noEvent {
				if len(after) != len(before) {
					t.Errorf("a patch that changes nothing recorded %+v", after[len(after)-1])
				}
				return
			}
			if len(after) != len(before)+1 {
				t.Fatalf("events %d -> %d, want one more", len(before), len(after))
			}
			e := after[len(after)-1]
			if e.Action != "update" || e.Actor != actor.Name || !strings.Contains(e.Reason, tc.reason) || strings.Contains(e.Reason, secret) {
				t.Errorf("event %+v (want reason with %q, never the password)", e, tc.reason)
			}
		})
	}
}

// TestUpdateMachineKeepsWhatIsAbsent: a patch changes what it names only;
// the password in particular survives a change of the address.
func TestUpdateMachineKeepsWhatIsAbsent(t *testing.T) {
	s := storetest.New(t)
	m := create(t, s, store.NewMachine{Hostname: "b1", Tags: []string{"t"}, Zone: "z",
		Power: store.PowerParams{Driver: "ipmi", Address: "10.0.0.9", Username: "root", Password: "pw", CipherSuite: 17}})
	got, err := s.UpdateMachine(t.Context(), admin, "b1", store.MachinePatch{Power: store.PowerPatch{Address: ptr("10.0.0.10")}})
	if err != nil {
		t.Fatal(err)
	}
	want := m.Power
	want.Address = "10.0.0.10"
	if got.Power != want || !reflect.DeepEqual(got.Tags, m.Tags) || got.Zone != m.Zone || got.Hostname != m.Hostname {
		t.Errorf("got %+v, want power %+v and the rest unchanged", got, want)
	}
	if p, err := s.MachineForPower("b1"); err != nil || p.Power.Password != "pw" {
		t.Errorf("the sealed password after an address change: %q %v", p.Power.Password, err)
	}
	// Clearing the power parameters, then asking a commission: refused.
	if _, err := s.UpdateMachine(t.Context(), admin, "b1", store.MachinePatch{ClearPower: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Machine("b1"); got.Power != (store.PowerParams{}) || got.Secrets != nil {
		t.Errorf("cleared power: %+v, secrets %v", got.Power, got.Secrets)
	}
	_, err = s.Transition(t.Context(), admin, store.TransitionRequest{Machine: "b1", Action: store.ActionCommission})
	wantCode(t, err, store.CodeConflict)
	if !strings.Contains(err.Error(), "rackd machines set b1 --power-driver") {
		t.Errorf("the refusal does not say how to set a driver: %v", err)
	}
}

// TestUpdateMachineHostnameIndexes: the old name is free at once and the
// new one finds the machine (the free index follows: Check at the end).
func TestUpdateMachineHostnameIndexes(t *testing.T) {
	s := storetest.New(t)
	m := ready(t, s, "old")
	if _, err := s.UpdateMachine(t.Context(), admin, "old", store.MachinePatch{Hostname: ptr("new")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Machine("old"); store.CodeOf(err) != store.CodeNotFound {
		t.Errorf("old name still finds a machine: %v", err)
	}
	if got, err := s.Machine("new"); err != nil || got.ID != m.ID {
		t.Errorf("new name: %+v %v", got, err)
	}
	if res, err := s.Allocate(t.Context(), alice, store.AllocateRequest{AgentName: "a"}); err != nil || res.Machine.Hostname != "new" {
		t.Errorf("allocate by constraints after a rename: %+v %v", res.Machine, err)
	}
	create(t, s, store.NewMachine{Hostname: "old"})
}

func TestDeleteMachine(t *testing.T) {
	tests := map[string]struct {
		// setup brings the machine "n1" (NEW, manual power) where the case
		// wants it.
		setup []store.Action
		force bool
		code  store.Code
	}{
		"NEW":                  {},
		"READY":                {setup: []store.Action{store.ActionCommission, store.ActionCommissioningDone}},
		"FAILED_COMMISSIONING": {setup: []store.Action{store.ActionCommission, store.ActionCommissioningFailed}},
		"BROKEN, unheld":       {setup: []store.Action{store.ActionMarkBroken}},
		"RETIRED":              {setup: []store.Action{store.ActionRetire}},
		"COMMISSIONING":        {setup: []store.Action{store.ActionCommission}, code: store.CodeConflict},
		"COMMISSIONING, force": {setup: []store.Action{store.ActionCommission}, force: true},
		"ALLOCATED": {setup: []store.Action{store.ActionCommission, store.ActionCommissioningDone, store.ActionAllocate},
			code: store.CodeConflict},
		"DEPLOYED": {setup: []store.Action{store.ActionCommission, store.ActionCommissioningDone, store.ActionAllocate,
			store.ActionDeploy, store.ActionDeploymentDone}, code: store.CodeConflict},
		"DEPLOYED, force": {setup: []store.Action{store.ActionCommission, store.ActionCommissioningDone, store.ActionAllocate,
			store.ActionDeploy, store.ActionDeploymentDone}, force: true},
		"BROKEN, held": {setup: []store.Action{store.ActionCommission, store.ActionCommissioningDone, store.ActionAllocate,
			store.ActionMarkBroken}, code: store.CodeConflict},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, []store.Subnet{lab()})
			m := create(t, s, store.NewMachine{Hostname: "n1", MACs: []string{macWeb1, macWeb1b}, Power: manual})
			lease(t, s, macWeb1b, link, "")
			mustAssign(t, s, store.AssignRequest{Machine: "n1", MAC: macWeb1, IP: addr("10.0.0.10")})
			for _, a := range tc.setup {
				if a == store.ActionAllocate {
					allocate(t, s, alice, "n1", "juju")
					continue
				}
				transition(t, s, admin, "n1", a)
			}
			m, _ = s.Machine("n1")
			before := addressMap(t, s)
			_, err := s.DeleteMachine(t.Context(), alice, store.DeleteRequest{Machine: "n1", Force: true})
			wantCode(t, err, store.CodeForbidden)
			got, err := s.DeleteMachine(t.Context(), admin, store.DeleteRequest{Machine: "n1", Force: tc.force, Reason: "left the rack"})
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if still, err := s.Machine("n1"); err != nil || !reflect.DeepEqual(still, m) {
					t.Errorf("a refused delete changed the machine: %+v %v", still, err)
				}
				if !reflect.DeepEqual(addressMap(t, s), before) {
					t.Error("a refused delete changed the addresses")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != m.ID {
				t.Errorf("deleted %+v", got)
			}
			if _, err := s.Machine("n1"); store.CodeOf(err) != store.CodeNotFound {
				t.Errorf("Machine after delete: %v", err)
			}
			if _, err := s.MachineByMAC(macWeb1); store.CodeOf(err) != store.CodeNotFound {
				t.Errorf("MachineByMAC after delete: %v", err)
			}
			if n := len(addressMap(t, s)); n != 0 {
				t.Errorf("%d addresses left: %+v", n, addressMap(t, s))
			}
			if n, err := s.OpenPowerCount(); err != nil || n != 0 {
				t.Errorf("%d open power requests left (%v)", n, err)
			}
			// The history stays, under the id, and says who deleted it.
			evs, err := s.Events(m.ID, 0)
			if err != nil || len(evs) < 2 {
				t.Fatalf("events after delete: %+v %v", evs, err)
			}
			if e := evs[len(evs)-1]; e.Action != "delete" || e.Actor != admin.Name || e.From != m.State ||
				!strings.Contains(e.Reason, "left the rack") || tc.force != strings.Contains(e.Reason, "forced") {
				t.Errorf("last event %+v", e)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("invariants after delete: %v", err)
			}
			// The same MACs and hostname make a new machine.
			again := create(t, s, store.NewMachine{Hostname: "n1", MACs: []string{macWeb1b, macWeb1}})
			if again.ID == m.ID {
				t.Error("the new machine has the deleted one's id")
			}
			if evs, _ := s.Events("n1", 0); len(evs) != 1 || evs[0].Action != "create" {
				t.Errorf("the new machine inherits history: %+v", evs)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		s := storetest.New(t)
		_, err := s.DeleteMachine(t.Context(), admin, store.DeleteRequest{Machine: "nosuch"})
		wantCode(t, err, store.CodeNotFound)
	})
}

// TestRetiredMACConflictSaysHow: re-adding a retired machine's MAC is a
// conflict that names the way out.
func TestRetiredMACConflictSaysHow(t *testing.T) {
	s := storetest.New(t)
	m := ready(t, s, "gone")
	transition(t, s, admin, "gone", store.ActionRetire)
	_, err := s.CreateMachine(t.Context(), admin, store.NewMachine{Hostname: "back", MACs: m.MACs})
	wantCode(t, err, store.CodeConflict)
	if !strings.Contains(err.Error(), "RETIRED") || !strings.Contains(err.Error(), "rackd machines rm gone") {
		t.Errorf("conflict: %v", err)
	}
	if _, err := s.DeleteMachine(t.Context(), admin, store.DeleteRequest{Machine: "gone"}); err != nil {
		t.Fatal(err)
	}
	create(t, s, store.NewMachine{Hostname: "back", MACs: m.MACs})
}
