package store

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"rackd/power"
)

// TestPowerPolicyTable pins the policy of every lifecycle state.
func TestPowerPolicyTable(t *testing.T) {
	want := map[State]PowerPolicy{
		StateNew:                 {Desired: power.StateOff, Mode: ModeEnforce},
		StateCommissioning:       {Desired: power.StateOn, Mode: ModeEnforce},
		StateFailedCommissioning: {Desired: power.StateOff, Mode: ModeExpect, Once: true},
		StateReady:               {Desired: power.StateOff, Mode: ModeEnforce},
		StateAllocated:           {Desired: power.StateOff, Mode: ModeEnforce},
		StateDeploying:           {Desired: power.StateOn, Mode: ModeEnforce},
		StateDeployed:            {Mode: ModeNone},
		StateFailedDeployment:    {Desired: power.StateOff, Mode: ModeExpect, Once: true},
		StateReleasing:           {Desired: power.StateOff, Mode: ModeEnforce, Once: true},
		StateBroken:              {Desired: power.StateOff, Mode: ModeExpect, Once: true},
		StateRetired:             {Desired: power.StateOff, Mode: ModeExpect, Once: true},
	}
	for _, s := range States {
		w, ok := want[s]
		if !ok {
			t.Errorf("state %s has no expected policy: add it to this table", s)
			continue
		}
		if got := PowerPolicyFor(s); got != w {
			t.Errorf("PowerPolicyFor(%s) = %+v, want %+v", s, got, w)
		}
	}
	if len(want) != len(States) {
		t.Errorf("the table has %d states, the lifecycle %d", len(want), len(States))
	}
	if got := PowerPolicyFor("NOT_A_STATE"); got.Mode != ModeNone || got.Desired != power.StateUnknown {
		t.Errorf("unknown state: %+v, want mode none", got)
	}
}

// TestNextBootFor pins the next-boot rule for every state, with and without
// the erase flag, and every action: power-ons (on, cycle) in commissioning,
// deployment and an erasing release boot from the network; nothing else
// sets a boot device.
func TestNextBootFor(t *testing.T) {
	pxe := map[State]bool{StateCommissioning: true, StateDeploying: true}
	for _, s := range States {
		for _, erase := range []bool{false, true} {
			for _, a := range []PowerAction{PowerOn, PowerCycle, PowerOff, PowerQuery} {
				want := power.BootNone
				if (a == PowerOn || a == PowerCycle) && (pxe[s] || s == StateReleasing && erase) {
					want = power.BootPXE
				}
				if got := NextBootFor(Machine{State: s, Erase: erase}, a); got != want {
					t.Errorf("NextBootFor(%s, erase %v, %s) = %q, want %q", s, erase, a, got, want)
				}
			}
		}
	}
	if got := NextBootFor(Machine{State: "NOT_A_STATE"}, PowerOn); got != power.BootNone {
		t.Errorf("unknown state: %q", got)
	}
}

// TestEveryPhasePowerOnCarriesNextBoot: whoever queues the power-on of a
// machine in a phase (the transition, enforcement after the machine was seen
// off, an admin), it sets next boot PXE; outside a phase none does.
func TestEveryPhasePowerOnCarriesNextBoot(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	// drain ends a machine's open requests as done, without the machine
	// seen on (a failed power-on would end the phase: TestPowerFailureEndsState),
	// and returns them.
	drain := func(id string) []PowerRequest {
		t.Helper()
		open, _ := s.OpenPowerRequests(id)
		for _, o := range open {
			if _, err := s.StartPower(ctx, o.ID, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FinishPower(ctx, o.ID, PowerDone, 1, "", power.StateUnknown); err != nil {
				t.Fatal(err)
			}
		}
		return open
	}
	check := func(what string, open []PowerRequest, action PowerAction, next string) {
		t.Helper()
		if len(open) == 0 || open[len(open)-1].Action != action || open[len(open)-1].NextBoot != next {
			t.Errorf("%s queued %+v, want %s with next boot %q last", what, open, action, next)
		}
	}

	m := createPowered(t, s, "c1", 1, StateNew)
	if _, err := s.Transition(ctx, testAdmin, TransitionRequest{Machine: m.ID, Action: ActionCommission}); err != nil {
		t.Fatal(err)
	}
	check("commissioning", drain(m.ID), PowerOn, "pxe")
	o, err := s.ObservePower(ctx, m.ID, power.StateOff)
	if err != nil || o.Correction == nil {
		t.Fatalf("enforcement of a COMMISSIONING machine seen off: %+v, %v", o, err)
	}
	check("enforcement in COMMISSIONING", drain(m.ID), PowerOn, "pxe")
	if _, err := s.RequestPower(ctx, testAdmin, m.ID, PowerOn, "by hand"); err != nil {
		t.Fatal(err)
	}
	check("an admin's on in COMMISSIONING", drain(m.ID), PowerOn, "pxe")

	// An erasing release: a cycle into the erase environment, and
	// enforcement keeps it on, booting from the network.
	e := createPowered(t, s, "e1", 2, StateDeployed)
	if _, err := s.StartRelease(ctx, testAdmin, e.ID, "", true); err != nil {
		t.Fatal(err)
	}
	check("an erasing release", drain(e.ID), PowerCycle, "pxe")
	if o, err := s.ObservePower(ctx, e.ID, power.StateOff); err != nil || o.Correction == nil {
		t.Fatalf("enforcement of an erasing release seen off: %+v, %v", o, err)
	}
	check("enforcement in an erasing release", drain(e.ID), PowerOn, "pxe")

	// Outside a phase a power-on boots in the firmware's order.
	r := createPowered(t, s, "r1", 3, StateReady)
	if _, err := s.RequestPower(ctx, testAdmin, r.ID, PowerCycle, ""); err != nil {
		t.Fatal(err)
	}
	check("an admin's cycle of a READY machine", drain(r.ID), PowerCycle, "")
}

// A power status is stored as it was before its states were typed: text,
// desired left out when nothing was asked; records written then decode.
func TestPowerStatusRecord(t *testing.T) {
	for _, tc := range []struct {
		ps   PowerStatus
		json string
	}{
		{PowerStatus{Mode: ModeNone, Observed: power.StateUnknown}, `{"mode":"none","observed":"unknown"}`},
		{PowerStatus{Desired: power.StateOff, Mode: ModeEnforce, Observed: power.StateOn}, `{"desired":"off","mode":"enforce","observed":"on"}`},
	} {
		b, err := json.Marshal(tc.ps)
		if err != nil || string(b) != tc.json {
			t.Errorf("%+v stored as %s, %v; want %s", tc.ps, b, err, tc.json)
		}
		var back PowerStatus
		if err := json.Unmarshal([]byte(tc.json), &back); err != nil || back != tc.ps {
			t.Errorf("%s read back as %+v, %v", tc.json, back, err)
		}
	}
	var ps PowerStatus
	if err := json.Unmarshal([]byte(`{"desired":"on","mode":"enforce","observed":""}`), &ps); err != nil ||
		ps.Desired != power.StateOn || ps.Observed != power.StateUnknown {
		t.Errorf("a record with an empty observed: %+v, %v", ps, err)
	}
	if err := json.Unmarshal([]byte(`{"desired":"up","mode":"enforce"}`), &ps); err == nil {
		t.Error("a record with desired \"up\" decoded")
	}
}

func createPowered(t *testing.T, s *Store, hostname string, i int, state State) Machine {
	t.Helper()
	m, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{
		Hostname: hostname, MACs: []string{testMAC(i)}, State: state,
		Power: PowerParams{Driver: "fake", Address: hostname}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPowerRequestLifecycle(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	var mu sync.Mutex
	var kicked []string
	s.OnPowerRequest(func(id string) { mu.Lock(); kicked = append(kicked, id); mu.Unlock() })
	m := createPowered(t, s, "n1", 1, StateReady)
	bare := mustCreate(t, s, "bare", 2, StateReady)

	if _, err := s.RequestPower(ctx, testAdmin, bare.ID, PowerOn, ""); CodeOf(err) != CodeInvalid {
		t.Errorf("power on a machine without a driver: %v, want %s", err, CodeInvalid)
	}
	if _, err := s.RequestPower(ctx, Actor{Name: "bob"}, m.ID, PowerOn, ""); CodeOf(err) != CodeForbidden {
		t.Errorf("a stranger's power on: %v, want %s", err, CodeForbidden)
	}
	if _, err := s.RequestPower(ctx, testAdmin, m.ID, "reboot", ""); CodeOf(err) != CodeInvalid {
		t.Errorf("unknown action: %v", err)
	}
	r1, err := s.RequestPower(ctx, testAdmin, m.ID, PowerCycle, "test")
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := s.RequestPower(ctx, testAdmin, m.ID, PowerOff, "")
	r3, _ := s.RequestPower(ctx, testAdmin, "n1", PowerOn, "")
	if r1.State != PowerPending || r1.ID == r2.ID || r1.Who != "admin" {
		t.Errorf("r1 %+v", r1)
	}
	if ps, _ := s.PowerStatusOf("n1"); ps.Desired != power.StateOn || ps.Mode != ModeEnforce {
		t.Errorf("desired after on: %+v", ps)
	}
	open, _ := s.OpenPowerRequests(m.ID)
	if len(open) != 3 || open[0].ID != r1.ID || open[2].ID != r3.ID {
		t.Fatalf("open %+v", open)
	}
	if ids, _ := s.MachinesWithOpenPower(); !slices.Equal(ids, []string{m.ID}) {
		t.Errorf("machines with open requests %v", ids)
	}
	if _, err := s.StartPower(ctx, r3.ID, []string{r1.ID, r2.ID}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{r1.ID, r2.ID} {
		if r, _ := s.PowerRequest(id); r.State != PowerSuperseded || r.SupersededBy != r3.ID || r.Finished.IsZero() {
			t.Errorf("folded %s: %+v", id, r)
		}
	}
	if err := s.PowerProgress(ctx, r3.ID, 2, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FinishPower(ctx, r3.ID, PowerFailed, 2, "bmc timeout", power.StateUnknown); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FinishPower(ctx, r3.ID, PowerDone, 2, "", power.StateUnknown); CodeOf(err) != CodeConflict {
		t.Errorf("finishing twice: %v", err)
	}
	if open, _ := s.OpenPowerRequests(m.ID); len(open) != 0 {
		t.Errorf("still open: %+v", open)
	}
	evs, _ := s.Events(m.ID, 1)
	if len(evs) != 1 || evs[0].Action != "power-failed" {
		t.Errorf("last event %+v, want power-failed", evs)
	}
	if _, err := s.PowerRequest("pr-999"); CodeOf(err) != CodeNotFound {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := s.PowerRequest("bogus"); CodeOf(err) != CodeNotFound {
		t.Errorf("malformed id: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kicked) != 3 {
		t.Errorf("notified %v, want the machine 3 times", kicked)
	}
}

func TestPowerPolicyOnTransitions(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	m := createPowered(t, s, "n1", 1, StateReady)
	last := func() *PowerRequest {
		open, err := s.OpenPowerRequests(m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(open) == 0 {
			return nil
		}
		r := open[len(open)-1]
		for _, o := range open {
			if _, err := s.StartPower(ctx, o.ID, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FinishPower(ctx, o.ID, PowerDone, 1, "", o.Action.Final()); err != nil {
				t.Fatal(err)
			}
		}
		return &r
	}
	// Allocating a READY machine changes nothing: still off, enforced.
	if _, err := s.Allocate(ctx, testAdmin, AllocateRequest{Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	if r := last(); r != nil {
		t.Errorf("allocation queued %+v", r)
	}
	putDeployImages(t, s, "debian")
	if _, err := s.Transition(ctx, testAdmin, TransitionRequest{Machine: "n1", Action: ActionDeploy, Image: "debian"}); err != nil {
		t.Fatal(err)
	}
	if r := last(); r == nil || r.Action != PowerOn || r.NextBoot != "pxe" || r.Who != "admin" {
		t.Errorf("deploy queued %+v, want on with next boot pxe", r)
	}
	s.Transition(ctx, System, TransitionRequest{Machine: "n1", Action: ActionDeploymentDone})
	if r := last(); r != nil {
		t.Errorf("DEPLOYED queued %+v", r)
	}
	if ps, _ := s.PowerStatusOf("n1"); ps.Mode != ModeNone || ps.Desired != power.StateOn {
		t.Errorf("DEPLOYED power %+v", ps)
	}
	s.Transition(ctx, testAdmin, TransitionRequest{Machine: "n1", Action: ActionMarkBroken})
	if r := last(); r == nil || r.Action != PowerOff {
		t.Errorf("BROKEN queued %+v, want off once", r)
	}
	// Under expect, drift is reported once and never corrected.
	o, err := s.ObservePower(ctx, "n1", power.StateOn)
	if err != nil || !o.Drift || o.Correction != nil {
		t.Errorf("drift under expect: %+v, %v", o, err)
	}
	if o, _ := s.ObservePower(ctx, "n1", power.StateOn); o.Drift {
		t.Error("drift reported twice")
	}
	if r := last(); r != nil {
		t.Errorf("expect corrected the drift: %+v", r)
	}
	// Under enforce (READY after mark-fixed), drift is corrected.
	s.Transition(ctx, testAdmin, TransitionRequest{Machine: "n1", Action: ActionMarkFixed})
	last()
	o, err = s.ObservePower(ctx, "n1", power.StateOn)
	if err != nil || o.Correction == nil || o.Correction.Action != PowerOff || o.Correction.Who != "rackd/enforce" {
		t.Errorf("drift under enforce: %+v, %v", o, err)
	}
	if o, _ := s.ObservePower(ctx, "n1", power.StateOn); o.Correction != nil {
		t.Error("a second correction while the first is open")
	}
}

// TestPowerPolicyWalk: a machine that never had a power record follows its
// lifecycle: on with PXE for commissioning and deployment, off when READY
// and when released.
func TestPowerPolicyWalk(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	m := createPowered(t, s, "n1", 1, StateNew)
	putDeployImages(t, s, "debian")
	var got []string
	step := func(a Action) {
		t.Helper()
		var err error
		if a == ActionAllocate {
			_, err = s.Allocate(ctx, testAdmin, AllocateRequest{Name: "n1"})
		} else {
			req := TransitionRequest{Machine: m.ID, Action: a}
			if a == ActionDeploy {
				req.Image = "debian"
			}
			_, err = s.Transition(ctx, testAdmin, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		open, _ := s.OpenPowerRequests(m.ID)
		for _, o := range open {
			got = append(got, string(a)+":"+string(o.Action)+o.NextBoot)
			s.StartPower(ctx, o.ID, nil)
			if _, err := s.FinishPower(ctx, o.ID, PowerDone, 1, "", o.Action.Final()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range []Action{ActionCommission, ActionCommissioningDone, ActionAllocate, ActionDeploy,
		ActionDeploymentDone, ActionRelease, ActionReleaseDone} {
		step(a)
	}
	want := "commission:onpxe commissioning-done:off deploy:onpxe release:off"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("requests along the lifecycle:\n got %s\nwant %s", g, want)
	}
}

func TestCipherSuiteValidated(t *testing.T) {
	s := openTest(t, Options{}, true)
	for _, cs := range []int{-1, 18} {
		_, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{Hostname: "n1", MACs: []string{testMAC(1)},
			Power: PowerParams{Driver: "ipmi", CipherSuite: cs}})
		if CodeOf(err) != CodeInvalid {
			t.Errorf("cipher suite %d: %v, want %s", cs, err, CodeInvalid)
		}
	}
	m, err := s.CreateMachine(context.Background(), testAdmin, NewMachine{Hostname: "n1", MACs: []string{testMAC(1)},
		Power: PowerParams{Driver: "ipmi", CipherSuite: 17}})
	if err != nil || m.Power.CipherSuite != 17 {
		t.Errorf("cipher suite 17: %+v %v", m.Power, err)
	}
}
