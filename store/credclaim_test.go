package store_test

import (
	"strings"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

func claim(s *store.Store, machine, mac, src string) (store.ClaimedCredential, error) {
	return s.ClaimCredential(bg, store.CredentialClaim{Machine: machine, MAC: mac, Source: addr(src)})
}

// claimLab is the lab subnet with web1 (two interfaces) and web2, both
// commissioning; web1's first interface holds the lease it returns.
func claimLab(t *testing.T) (*store.Store, *fakeClock, string) {
	t.Helper()
	s, clk := newIPAM(t, []store.Subnet{lab()})
	create(t, s, store.NewMachine{Hostname: "web1", MACs: []string{macWeb1, macWeb1b}, Power: manual})
	create(t, s, store.NewMachine{Hostname: "web2", MACs: []string{macWeb2}, Power: manual})
	transition(t, s, admin, "web1", store.ActionCommission)
	transition(t, s, admin, "web2", store.ActionCommission)
	ip := lease(t, s, macWeb1, link, "")
	return s, clk, ip.String()
}

// TestClaimCredentialRefusals: every refusal but the second claim answers
// the same text, so the caller learns nothing about which rule failed;
// those of a machine in its phase are events naming the source; none hands
// out a token or marks the credential claimed.
func TestClaimCredentialRefusals(t *testing.T) {
	tests := map[string]struct {
		setup func(t *testing.T, s *store.Store, clk *fakeClock, ip string)
		// machine, mac, src of the claim; src "lease" is web1's lease.
		machine, mac, src string
		event             string // "" when the refusal writes none
	}{
		"another address":         {machine: "web1", mac: macWeb1, src: "10.0.0.150", event: "does not hold the DHCP binding of " + macWeb1},
		"another machine's lease": {machine: "web2", mac: macWeb2, src: "lease", event: "does not hold the DHCP binding of " + macWeb2},
		"a lease of another MAC":  {machine: "web1", mac: macWeb1b, src: "lease", event: "does not hold the DHCP binding of " + macWeb1b},
		"a MAC not the machine's": {machine: "web1", mac: macA, src: "lease", event: macA + " is not an interface of this machine"},
		"another machine's MAC":   {machine: "web2", mac: macWeb1, src: "lease", event: macWeb1 + " is not an interface of this machine"},
		"unknown machine":         {machine: "m-nosuch", mac: macWeb1, src: "lease"},
		"a malformed MAC":         {machine: "web1", mac: "52:54", src: "lease"},
		"an expired lease":        {setup: func(t *testing.T, s *store.Store, clk *fakeClock, ip string) { clk.Advance(2 * time.Hour) }, machine: "web1", mac: macWeb1, src: "lease", event: "it has none"},
		"a released lease": {setup: func(t *testing.T, s *store.Store, clk *fakeClock, ip string) {
			if err := s.DHCPRelease(bg, macWeb1, addr(ip)); err != nil {
				t.Fatal(err)
			}
		}, machine: "web1", mac: macWeb1, src: "lease", event: "it has none"},
		"a machine not in a phase": {setup: func(t *testing.T, s *store.Store, clk *fakeClock, ip string) {
			transition(t, s, admin, "web1", store.ActionMarkBroken)
		}, machine: "web1", mac: macWeb1, src: "lease"},
		"the sticky address of another interface": {
			setup: func(t *testing.T, s *store.Store, clk *fakeClock, ip string) {
				mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1b, IP: addr("10.0.0.11")})
			},
			machine: "web1", mac: macWeb1, src: "10.0.0.11", event: "does not hold the DHCP binding of " + macWeb1},
	}
	var refusal string
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, clk, ip := claimLab(t)
			if tc.setup != nil {
				tc.setup(t, s, clk, ip)
			}
			src := tc.src
			if src == "lease" {
				src = ip
			}
			before, _ := s.Events(tc.machine, 0)
			res, err := claim(s, tc.machine, tc.mac, src)
			wantCode(t, err, store.CodeForbidden)
			if res.Token != "" {
				t.Fatalf("a refusal handed out %+v", res)
			}
			if refusal == "" {
				refusal = err.Error()
			} else if err.Error() != refusal {
				t.Fatalf("refusal %q, another case said %q: the caller must not learn which rule failed", err, refusal)
			}
			after, _ := s.Events(tc.machine, 0)
			if tc.event == "" {
				if len(after) != len(before) {
					t.Fatalf("refusal wrote events %+v", after[len(before):])
				}
			} else {
				e := lastEvent(t, s, tc.machine)
				if len(after) != len(before)+1 || e.Action != "credential-refused" || !strings.Contains(e.Reason, tc.event) ||
					!strings.Contains(e.Reason, "from "+src) {
					t.Fatalf("events %+v; want one credential-refused naming %s and %q", after[len(before):], src, tc.event)
				}
			}
			if m, err := s.Machine("web1"); err != nil || (m.Credential != nil && !m.Credential.Claimed.IsZero()) {
				t.Fatalf("web1's credential claimed by a refusal: %+v %v", m.Credential, err)
			}
			// The machine's own environment can still claim when it
			// is in its phase.
			if m, _ := s.Machine("web1"); m.Credential != nil {
				if _, err := claim(s, "web1", macWeb1, ip); err != nil && tc.setup == nil {
					t.Fatalf("the lease's holder refused after %s: %v", name, err)
				}
			}
		})
	}
}

// TestClaimCredentialOnce: the holder of the lease gets the token the
// report accepts, once; a second claim is a conflict and an event naming
// both addresses; the next phase has a credential of its own to claim.
func TestClaimCredentialOnce(t *testing.T) {
	s, clk, ip := claimLab(t)
	got, err := claim(s, "web1", macWeb1, ip)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Machine("web1")
	if got.Phase != store.PhaseCommission || got.Token == "" || got.Token != s.PhaseToken(m) {
		t.Fatalf("claim = %+v; the credential's token is %q", got, s.PhaseToken(m))
	}
	if c := m.Credential; !c.Claimed.Equal(t0) || c.ClaimedBy != ip || strings.Contains(c.Hash, got.Token) {
		t.Fatalf("credential after the claim %+v", c)
	}
	if e := lastEvent(t, s, "web1"); e.Action != "credential-claimed" || !strings.Contains(e.Reason, ip) || strings.Contains(e.Reason, got.Token) {
		t.Fatalf("claim event %+v", e)
	}
	clk.Advance(time.Minute)
	for _, src := range []string{ip, "10.0.0.150"} {
		_, err = claim(s, "web1", macWeb1, src)
		if src == ip {
			wantCode(t, err, store.CodeConflict)
			if e := lastEvent(t, s, "web1"); e.Action != "credential-refused" ||
				e.Reason != "commission credential already claimed by "+ip+" at 2026-03-01T12:00:00Z; refused "+ip {
				t.Fatalf("second claim event %+v", e)
			}
		} else {
			// Not the binding's holder: refused as any stranger,
			// without learning that the credential was claimed.
			wantCode(t, err, store.CodeForbidden)
		}
	}
	// The report with the claimed token ends the phase; the claim of a
	// phase that ended is refused.
	if _, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseCommission, Token: got.Token,
		Inventory: &store.CommissionInventory{MACs: []string{macWeb1}}}); err != nil {
		t.Fatal(err)
	}
	_, err = claim(s, "web1", macWeb1, ip)
	wantCode(t, err, store.CodeForbidden)
	// A new phase: a new credential, not claimed yet.
	allocate(t, s, admin, "web1", "t")
	storetest.DeployImages(t, s, "amd64", "raw")
	if _, err := s.Transition(bg, admin, store.TransitionRequest{Machine: "web1", Action: store.ActionDeploy, Image: "raw"}); err != nil {
		t.Fatal(err)
	}
	dep, err := claim(s, "web1", macWeb1, ip)
	if err != nil || dep.Phase != store.PhaseDeploy || dep.Token == got.Token {
		t.Fatalf("deploy claim %+v, %v", dep, err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestClaimCredentialSticky: a machine with a sticky address claims from
// it (rackd's DHCP answers its MAC with that address and no other), not
// from a leftover dynamic address.
func TestClaimCredentialSticky(t *testing.T) {
	s, _, ip := claimLab(t)
	withSticky(t, s, nil) // 10.0.0.10 on macWeb1; its lease is dropped
	_, err := claim(s, "web1", macWeb1, ip)
	wantCode(t, err, store.CodeForbidden)
	if _, err := claim(s, "web1", macWeb1, "10.0.0.10"); err != nil {
		t.Fatal(err)
	}
}

// TestClaimCredentialAnySource: with the binding rule lifted, any address
// claims, still once.
func TestClaimCredentialAnySource(t *testing.T) {
	s, _, _ := claimLab(t)
	c := store.CredentialClaim{Machine: "web2", MAC: macWeb2, Source: addr("192.0.2.7"), AnySource: true}
	if _, err := s.ClaimCredential(bg, c); err != nil {
		t.Fatal(err)
	}
	c.Source = addr("192.0.2.8")
	_, err := s.ClaimCredential(bg, c)
	wantCode(t, err, store.CodeConflict)
	if e := lastEvent(t, s, "web2"); !strings.Contains(e.Reason, "claimed by 192.0.2.7") || !strings.Contains(e.Reason, "refused 192.0.2.8") {
		t.Fatalf("event %+v", e)
	}
	// Still only for a MAC of the machine.
	c.MAC = macWeb1
	_, err = s.ClaimCredential(bg, c)
	wantCode(t, err, store.CodeForbidden)
}

// TestClaimCredentialRace: of many claims at once from the binding's
// holder, exactly one wins.
func TestClaimCredentialRace(t *testing.T) {
	s, _, ip := claimLab(t)
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() { _, err := claim(s, "web1", macWeb1, ip); errs <- err }()
	}
	won := 0
	for range n {
		if err := <-errs; err == nil {
			won++
		} else if store.CodeOf(err) != store.CodeConflict {
			t.Fatal(err)
		}
	}
	if won != 1 {
		t.Fatalf("%d claims won", won)
	}
}
