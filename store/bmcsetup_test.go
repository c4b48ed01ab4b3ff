package store_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

var setUpBMC = &store.BMCSetup{Driver: "ipmi", Address: "10.0.0.13", Username: "rackd", Password: "Pw0fTheBMCsetup1",
	Detail: "user 3 created"}

// commissionReport claims the machine's commissioning credential (from any
// source) and reports the inventory with the BMC set-up b; it returns what
// the claim said about the set-up and the machine after the report.
func commissionReport(t *testing.T, s *store.Store, m store.Machine, b *store.BMCSetup) (bool, store.Machine) {
	t.Helper()
	ctx := context.Background()
	claim, err := s.ClaimCredential(ctx, store.CredentialClaim{Machine: m.ID, MAC: m.MACs[0],
		Source: netip.MustParseAddr("10.0.0.50"), AnySource: true})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	res, err := s.Report(ctx, store.PhaseReport{Machine: m.ID, Phase: store.PhaseCommission, Token: claim.Token,
		Inventory: &store.CommissionInventory{Arch: "amd64", MACs: m.MACs, CPUCount: 2, MemoryMB: 1024}, BMC: b})
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if res.Machine.State != store.StateReady {
		t.Fatalf("after the report: %s", res.Machine.State)
	}
	return claim.BMCSetup, res.Machine
}

// noSecretInEvents fails when any event of the machine shows the password.
func noSecretInEvents(t *testing.T, s *store.Store, id, password string) {
	t.Helper()
	evs, err := s.Events(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(e.Reason, password) {
			t.Fatalf("event shows the BMC password: %+v", e)
		}
	}
}

// forPower is the machine's power parameters with the password opened, as
// the power queue reads them.
func forPower(t *testing.T, s *store.Store, id string) store.PowerParams {
	t.Helper()
	m, err := s.MachineForPower(id)
	if err != nil {
		t.Fatal(err)
	}
	return m.Power
}

func bmcEvent(t *testing.T, s *store.Store, id string) store.Event {
	t.Helper()
	evs, err := s.Events(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Action == "bmc-setup" {
			return evs[i]
		}
	}
	t.Fatalf("no bmc-setup event among %+v", evs)
	return store.Event{}
}

func TestBMCSetupWithoutPowerConfig(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	// An enlisted machine nobody configured: auto-commissioned while it
	// runs the environment.
	m := create(t, s, store.NewMachine{Hostname: "n1"})
	m, err := s.Transition(ctx, store.System, store.TransitionRequest{Machine: m.ID, Action: store.ActionCommission, Running: true})
	if err != nil {
		t.Fatal(err)
	}
	if !store.BMCSetupAllowed(m) {
		t.Fatal("a machine without power configuration: set-up not allowed")
	}
	asked, got := commissionReport(t, s, m, setUpBMC)
	if !asked {
		t.Error("the claim did not ask for the BMC set-up")
	}
	want := store.PowerParams{Driver: "ipmi", Address: "10.0.0.13", Username: "rackd", Password: setUpBMC.Password}
	if p := forPower(t, s, m.ID); p != want || got.PowerSetBy != store.PowerSetByCommissioning || got.ForceBMCSetup {
		t.Fatalf("power after the set-up: %+v set by %q, forced %v", p, got.PowerSetBy, got.ForceBMCSetup)
	}
	if e := bmcEvent(t, s, m.ID); !strings.Contains(e.Reason, "power configured by the BMC set-up") ||
		!strings.Contains(e.Reason, `power driver "" -> "ipmi"`) || !strings.Contains(e.Reason, "user 3 created") {
		t.Errorf("event %+v", e)
	}
	noSecretInEvents(t, s, m.ID, setUpBMC.Password)
	// READY powers off, now through the BMC: the power policy queued it in
	// the same transaction.
	open, err := s.OpenPowerRequests(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].Action != store.PowerOff {
		t.Fatalf("open power requests after READY: %+v", open)
	}

	// Commissioned again: the set-up's own configuration is replaced.
	m = transition(t, s, admin, m.ID, store.ActionCommission)
	again := *setUpBMC
	again.Password = "AnotherPassword2"
	asked, got = commissionReport(t, s, m, &again)
	if p := forPower(t, s, m.ID); !asked || p.Password != again.Password || got.PowerSetBy != store.PowerSetByCommissioning {
		t.Fatalf("second commissioning: asked %v, power %+v set by %q", asked, p, got.PowerSetBy)
	}

	// Once the operator changes it, it is theirs.
	pw := "operators-own"
	got, err = s.UpdateMachine(ctx, admin, m.ID, store.MachinePatch{Power: store.PowerPatch{Password: &pw}})
	if err != nil {
		t.Fatal(err)
	}
	if got.PowerSetBy != "" || store.BMCSetupAllowed(got) {
		t.Fatalf("after the operator's change: set by %q, set-up allowed %v", got.PowerSetBy, store.BMCSetupAllowed(got))
	}
}

func TestBMCSetupKeepsOperatorConfig(t *testing.T) {
	s := storetest.New(t)
	op := store.PowerParams{Driver: "ipmi", Address: "10.9.9.9", Username: "ADMIN", Password: "ADMIN"}
	m := create(t, s, store.NewMachine{Hostname: "n1", Power: op})
	m = transition(t, s, admin, m.ID, store.ActionCommission)
	if store.BMCSetupAllowed(m) {
		t.Fatal("set-up allowed over the operator's configuration")
	}
	asked, got := commissionReport(t, s, m, setUpBMC)
	if asked {
		t.Error("the claim asked for a set-up whose result would not be stored")
	}
	if p := forPower(t, s, m.ID); p != op || got.PowerSetBy != "" {
		t.Fatalf("the operator's configuration changed: %+v set by %q", p, got.PowerSetBy)
	}
	e := bmcEvent(t, s, m.ID)
	for _, want := range []string{"not stored", "an operator set the power configuration (driver ipmi)", "--force-bmc-setup"} {
		if !strings.Contains(e.Reason, want) {
			t.Errorf("event %q lacks %q", e.Reason, want)
		}
	}
	noSecretInEvents(t, s, m.ID, setUpBMC.Password)
}

func TestBMCSetupForced(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	m := create(t, s, store.NewMachine{Hostname: "n1", Power: manual})
	m, err := s.Transition(ctx, admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionCommission, ForceBMCSetup: true})
	if err != nil {
		t.Fatal(err)
	}
	if !m.ForceBMCSetup || !store.BMCSetupAllowed(m) {
		t.Fatalf("forced commissioning: force %v allowed %v", m.ForceBMCSetup, store.BMCSetupAllowed(m))
	}
	asked, got := commissionReport(t, s, m, setUpBMC)
	if p := forPower(t, s, m.ID); !asked || p.Driver != "ipmi" || p.Password != setUpBMC.Password || got.PowerSetBy != store.PowerSetByCommissioning {
		t.Fatalf("forced set-up: asked %v power %+v set by %q", asked, p, got.PowerSetBy)
	}
	if got.ForceBMCSetup {
		t.Error("the force outlived its commissioning")
	}
	if e := bmcEvent(t, s, m.ID); !strings.Contains(e.Reason, "forced") || !strings.Contains(e.Reason, `"manual" -> "ipmi"`) {
		t.Errorf("event %+v", e)
	}
	// The force is for one commissioning: a failed one drops it too.
	m = create(t, s, store.NewMachine{Hostname: "n2", Power: manual})
	m, err = s.Transition(ctx, admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionCommission, ForceBMCSetup: true})
	if err != nil {
		t.Fatal(err)
	}
	m = transition(t, s, admin, m.ID, store.ActionCommissioningFailed)
	if m.ForceBMCSetup || store.BMCSetupAllowed(m) {
		t.Errorf("after a failed commissioning: force %v", m.ForceBMCSetup)
	}
	// Only a commission takes it.
	_, err = s.Transition(ctx, admin, store.TransitionRequest{Machine: "n1", Action: store.ActionMarkBroken, ForceBMCSetup: true})
	wantCode(t, err, store.CodeInvalid)
}

func TestBMCSetupFailedOrUnusable(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    store.BMCSetup
		want string
	}{
		{"set-up failed", store.BMCSetup{Driver: "ipmi", Error: "no in-band IPMI: no /dev/ipmi0"},
			"BMC set-up failed, power configuration unchanged: no in-band IPMI: no /dev/ipmi0"},
		{"no password", store.BMCSetup{Driver: "ipmi", Address: "10.0.0.13", Username: "rackd"}, "unusable power parameters"},
		{"bad address", store.BMCSetup{Driver: "ipmi", Address: "10.0.0.13 evil", Username: "rackd", Password: "x"}, "invalid power address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.New(t)
			m := create(t, s, store.NewMachine{Hostname: "n1"})
			m, err := s.Transition(context.Background(), store.System, store.TransitionRequest{Machine: m.ID, Action: store.ActionCommission, Running: true})
			if err != nil {
				t.Fatal(err)
			}
			b := tc.b
			_, got := commissionReport(t, s, m, &b)
			if p := forPower(t, s, m.ID); p != (store.PowerParams{}) || got.PowerSetBy != "" {
				t.Fatalf("power %+v set by %q", p, got.PowerSetBy)
			}
			if e := bmcEvent(t, s, m.ID); !strings.Contains(e.Reason, tc.want) {
				t.Errorf("event %q, want %q", e.Reason, tc.want)
			}
		})
	}
}
