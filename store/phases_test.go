package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/power"
	"rackd/store"
	"rackd/store/storetest"
)

func report(s *store.Store, r store.PhaseReport) (store.ReportResult, error) {
	return s.Report(context.Background(), r)
}

func TestCredentialIssuedPerPhase(t *testing.T) {
	s := storetest.New(t)
	m := create(t, s, store.NewMachine{Hostname: "c1", Power: manual})
	if m.Credential != nil || s.PhaseToken(m) != "" {
		t.Fatalf("NEW machine has a credential: %+v", m.Credential)
	}
	m = transition(t, s, admin, m.ID, store.ActionCommission)
	tok := s.PhaseToken(m)
	if m.Credential == nil || m.Credential.Phase != store.PhaseCommission || tok == "" {
		t.Fatalf("COMMISSIONING: credential %+v token %q", m.Credential, tok)
	}
	if m.Credential.Hash != store.HashToken(tok) || strings.Contains(m.Credential.Hash, tok) || m.Credential.Nonce == tok {
		t.Fatalf("the record must keep the hash, never the token: %+v", m.Credential)
	}
	// The token is derived, so the boot config renders the same one on
	// every request...
	again, _ := s.Machine(m.ID)
	if s.PhaseToken(again) != tok {
		t.Fatal("token changed between two reads")
	}
	// ...and another machine in the same phase gets another token.
	m2 := create(t, s, store.NewMachine{Hostname: "c2", Power: manual})
	m2 = transition(t, s, admin, m2.ID, store.ActionCommission)
	if s.PhaseToken(m2) == tok {
		t.Fatal("two machines share a token")
	}
	// A token of one machine is not valid for another. Being wrong for a
	// machine in its phase is recorded as an event on it, and nothing else
	// changes: the caller proved nothing, so it cannot end the phase.
	tok2 := s.PhaseToken(m2)
	for _, r := range []store.PhaseReport{
		{Machine: m2.ID, Phase: store.PhaseCommission, Token: tok, Source: "192.0.2.7:4711"},
		{Machine: m2.ID, Phase: store.PhaseCommission, Token: tok, Error: "forged", Source: "192.0.2.7:4711"},
		{Machine: m2.ID, Phase: store.PhaseCommission, Token: "", Source: "192.0.2.7:4711"},
	} {
		res, err := report(s, r)
		wantCode(t, err, store.CodeUnauthorized)
		if !res.Rejected || res.Action != "" {
			t.Errorf("a wrong credential for a machine in its phase: %+v", res)
		}
		after, _ := s.Machine(m2.ID)
		if after.State != store.StateCommissioning || s.PhaseToken(after) != tok2 || !after.StateSince.Equal(m2.StateSince) {
			t.Fatalf("after a rejected credential: %s, credential kept %v", after.State, s.PhaseToken(after) == tok2)
		}
		if e := lastEvent(t, s, m2.ID); e.Action != "report-refused" || e.To != "" ||
			e.Reason != "commission report from 192.0.2.7:4711 refused: rejected credential (not this machine's current commission credential); the machine stays COMMISSIONING" {
			t.Fatalf("event %+v", e)
		}
	}
	// Its own token still ends the phase.
	if _, err := report(s, store.PhaseReport{Machine: m2.ID, Phase: store.PhaseCommission, Token: tok2, Error: "real failure"}); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.Machine(m2.ID); after.State != store.StateFailedCommissioning {
		t.Fatalf("the machine's own report: %s", after.State)
	}
}

func TestCommissionReport(t *testing.T) {
	s := storetest.New(t)
	m := create(t, s, store.NewMachine{Hostname: "c1", MACs: []string{"52:54:00:aa:00:01"}, Power: manual})
	m = transition(t, s, admin, m.ID, store.ActionCommission)
	tok := s.PhaseToken(m)
	inv := &store.CommissionInventory{Arch: "amd64", MACs: []string{"52:54:00:AA:00:01", "52:54:00:aa:00:02"},
		CPUCount: 2, MemoryMB: 1024, SystemUUID: "5C7A1F2E-0B3D-4E5F-8A9B-0C1D2E3F4A5B",
		Inventory: store.Inventory{Vendor: "QEMU", Disks: []store.Disk{{Name: "vda", SizeBytes: 1 << 30}}}}
	// The right token for the wrong phase changes nothing.
	before := snap(t, s)
	_, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: tok})
	wantCode(t, err, store.CodeUnauthorized)
	before.mustEqual(t, snap(t, s))

	res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseCommission, Token: tok, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Machine
	if got.State != store.StateReady || !got.Commissioned || got.Credential != nil || res.Action != store.ActionCommissioningDone ||
		res.From != store.StateCommissioning || got.CPUCount != 2 || got.MemoryMB != 1024 || len(got.MACs) != 2 ||
		got.SystemUUID != "5c7a1f2e-0b3d-4e5f-8a9b-0c1d2e3f4a5b" || got.Inventory == nil || got.Inventory.Disks[0].Name != "vda" {
		t.Fatalf("after the report: %+v (res %+v)", got, res)
	}
	// Sent again (an answer lost on the way back): same answer, no change.
	before = snap(t, s)
	res, err = report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseCommission, Token: tok, Inventory: inv})
	if err != nil || res.Action != "" || res.Machine.State != store.StateReady {
		t.Fatalf("replay: %+v %v", res, err)
	}
	before.mustEqual(t, snap(t, s))
	// Used once: the next commissioning has a new token, the old one is
	// refused (and, being wrong for a machine in its phase, fails it).
	m = transition(t, s, admin, m.ID, store.ActionCommission)
	if s.PhaseToken(m) == tok {
		t.Fatal("re-commissioning reuses the token")
	}
	_, err = report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseCommission, Token: tok})
	wantCode(t, err, store.CodeUnauthorized)
}

func TestCommissionReportConflict(t *testing.T) {
	s := storetest.New(t)
	other := create(t, s, store.NewMachine{Hostname: "other", MACs: []string{"52:54:00:aa:00:09"}})
	m := create(t, s, store.NewMachine{Hostname: "c1", Power: manual})
	m = transition(t, s, admin, m.ID, store.ActionCommission)
	res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseCommission, Token: s.PhaseToken(m),
		Inventory: &store.CommissionInventory{MACs: []string{"52:54:00:aa:00:09"}}})
	if err != nil || res.Machine.State != store.StateFailedCommissioning || len(res.Machine.MACs) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if e := lastEvent(t, s, m.ID); !strings.Contains(e.Reason, "already belongs to machine "+other.ID) {
		t.Fatalf("event %+v", e)
	}
}

func TestCommissionReportFailure(t *testing.T) {
	s := storetest.New(t)
	m := create(t, s, store.NewMachine{Hostname: "c1", Power: manual})
	m = transition(t, s, admin, m.ID, store.ActionCommission)
	res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseCommission, Token: s.PhaseToken(m),
		Error: "no disks\nfound"})
	if err != nil || res.Machine.State != store.StateFailedCommissioning || res.Action != store.ActionCommissioningFailed {
		t.Fatalf("%+v %v", res, err)
	}
	if e := lastEvent(t, s, m.ID); e.Reason != "commission failed: no disks found" || e.Actor != store.ReportActor.Name {
		t.Fatalf("event %+v", e)
	}
}

func TestCredentialExpiresWithPhase(t *testing.T) {
	s := storetest.New(t)
	m := ready(t, s, "d1")
	allocate(t, s, admin, "d1", "a")
	storetest.DeployImages(t, s, "amd64", "raw")
	m, err := s.Transition(context.Background(), admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionDeploy, Image: "raw"})
	if err != nil {
		t.Fatal(err)
	}
	tok := s.PhaseToken(m)
	if m.Credential == nil || m.Credential.Phase != store.PhaseDeploy {
		t.Fatalf("DEPLOYING credential %+v", m.Credential)
	}
	m = transition(t, s, admin, m.ID, store.ActionMarkBroken)
	if m.Credential != nil || s.PhaseToken(m) != "" {
		t.Fatalf("credential outlived the phase: %+v", m.Credential)
	}
	before := snap(t, s)
	_, err = report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: tok})
	wantCode(t, err, store.CodeUnauthorized)
	before.mustEqual(t, snap(t, s))
	_, err = report(s, store.PhaseReport{Machine: "m-nosuchmachine", Phase: store.PhaseDeploy, Token: tok})
	wantCode(t, err, store.CodeUnauthorized)
}

func TestDeployReport(t *testing.T) {
	for _, tc := range []struct {
		name, err string
		want      store.State
	}{
		// Success (the OS reports next) is TestDeploymentFlow's.
		{"failure", "sha256 mismatch: got 00, want 11", store.StateFailedDeployment},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.New(t)
			m := ready(t, s, "d1")
			allocate(t, s, admin, "d1", "a")
			storetest.DeployImages(t, s, "amd64", "raw")
			m, err := s.Transition(context.Background(), admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionDeploy, Image: "raw"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: s.PhaseToken(m),
				Error: tc.err, Detail: "wrote 1 MiB to vda"})
			if err != nil || res.Machine.State != tc.want || res.Machine.Credential != nil {
				t.Fatalf("%+v %v", res, err)
			}
			e := lastEvent(t, s, m.ID)
			if tc.err != "" && e.Reason != "deploy failed: "+tc.err || tc.err == "" && e.Reason != "image raw written: wrote 1 MiB to vda" {
				t.Fatalf("event %+v", e)
			}
			// A failed deployment keeps its owner and may be retried
			// with a fresh credential.
			if tc.err != "" {
				m = transition(t, s, admin, m.ID, store.ActionDeploy)
				if m.State != store.StateDeploying || m.Credential == nil || m.Owner == "" {
					t.Fatalf("retry: %+v", m)
				}
			}
		})
	}
}

func TestEraseRelease(t *testing.T) {
	s := storetest.New(t)
	m := create(t, s, store.NewMachine{Hostname: "e1", State: store.StateReady, Power: manual})
	allocate(t, s, admin, "e1", "a")
	m, err := s.StartRelease(context.Background(), admin, m.ID, "done with it", true)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != store.StateReleasing || !m.Erase || m.Credential == nil || m.Credential.Phase != store.PhaseErase {
		t.Fatalf("erase release: %+v", m)
	}
	ps, err := s.MachinePower(m)
	if err != nil || ps.Desired != power.StateOn {
		t.Fatalf("erase wants the machine on: %+v %v", ps, err)
	}
	res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseErase, Token: s.PhaseToken(m), Detail: "vda"})
	if err != nil || res.Machine.State != store.StateReady || res.Machine.Erase || res.Machine.Credential != nil {
		t.Fatalf("%+v %v", res, err)
	}
	ps, _ = s.MachinePower(res.Machine)
	if ps.Desired != power.StateOff {
		t.Fatalf("READY after erase: desired %q", ps.Desired)
	}
	// A plain release has no erase phase.
	allocate(t, s, admin, "e1", "a")
	m, err = s.StartRelease(context.Background(), admin, m.ID, "", false)
	if err != nil || m.Erase || m.Credential != nil {
		t.Fatalf("plain release: %+v %v", m, err)
	}
	// Erase belongs to releases only.
	_, err = s.Transition(context.Background(), admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionReleaseDone, Erase: true})
	wantCode(t, err, store.CodeInvalid)
}

func TestEraseTimeout(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2025, 5, 1, 7, 36, 0, 0, time.UTC)
	)
	s := storetest.New(t, func(o *store.Options) {
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	m := create(t, s, store.NewMachine{Hostname: "e1", State: store.StateReady, Power: manual})
	allocate(t, s, admin, "e1", "a")
	m, err := s.StartRelease(context.Background(), admin, m.ID, "", true)
	if err != nil {
		t.Fatal(err)
	}
	tok := s.PhaseToken(m)
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	expired, err := s.Expire(context.Background(), store.Timeouts{Commissioning: time.Hour})
	if err != nil || len(expired) != 1 || expired[0].Machine.State != store.StateReady || expired[0].Machine.Credential != nil ||
		expired[0].From != store.StateReleasing || expired[0].Phase != store.PhaseErase {
		t.Fatalf("%+v %v", expired, err)
	}
	if e := lastEvent(t, s, m.ID); !strings.Contains(e.Reason, "released without erasing") {
		t.Fatalf("event %+v", e)
	}
	_, err = report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseErase, Token: tok})
	wantCode(t, err, store.CodeUnauthorized)
}

// Phases that may find the machine running boot it with a power cycle and
// next boot PXE: a release with an erase (it runs its deployed system), a
// retry from FAILED_COMMISSIONING or FAILED_DEPLOYMENT (a human may have
// left it on to debug). A first commissioning or deployment powers on.
func TestPhaseStartPower(t *testing.T) {
	s := storetest.New(t)
	m := create(t, s, store.NewMachine{Hostname: "p1", Power: store.PowerParams{Driver: "ipmi", Address: "10.0.0.9:623"}})
	newest := func() store.PowerRequest {
		t.Helper()
		open, err := s.OpenPowerRequests(m.ID)
		if err != nil || len(open) == 0 {
			t.Fatalf("open power requests: %+v %v", open, err)
		}
		return open[len(open)-1]
	}
	step := func(action store.Action, image, want string) {
		t.Helper()
		var err error
		m, err = s.Transition(context.Background(), admin, store.TransitionRequest{Machine: m.ID, Action: action, Image: image})
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			return
		}
		if r := newest(); string(r.Action)+"/"+r.NextBoot != want {
			t.Fatalf("after %s: newest request %s/%s (%s), want %s", action, r.Action, r.NextBoot, r.Why, want)
		}
	}
	step(store.ActionCommission, "", "on/pxe")
	step(store.ActionCommissioningFailed, "", "off/")
	step(store.ActionCommission, "", "cycle/pxe")
	step(store.ActionCommissioningDone, "", "off/")
	allocate(t, s, admin, "p1", "a")
	storetest.DeployImages(t, s, "amd64", "raw")
	step(store.ActionDeploy, "raw", "on/pxe")
	step(store.ActionDeploymentFailed, "", "off/")
	step(store.ActionDeploy, "", "cycle/pxe")
	step(store.ActionDeploymentDone, "", "")
	m, err := s.StartRelease(context.Background(), admin, m.ID, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if r := newest(); r.Action != store.PowerCycle || r.NextBoot != "pxe" || !strings.Contains(r.Why, "erase before release") {
		t.Fatalf("erase: %+v", r)
	}
}
