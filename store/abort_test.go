package store_test

import (
	"context"
	"strings"
	"testing"

	"rackd/power"
	"rackd/store"
	"rackd/store/storetest"
)

// TestAbortEachPhase aborts a machine in each phase state and checks what
// the abort promises: the state it lands in, its power (desired off, an
// off queued after the phase's own request, so the queue ends with it
// off), its credentials (the phase's no longer accepted, a deployment's
// seed and OS credential gone) and its event.
func TestAbortEachPhase(t *testing.T) {
	fake := store.PowerParams{Driver: "fake", Address: "bmc1"}
	ctx := context.Background()
	// writtenOSToken is the OS credential of the deployment whose image
	// is written: its seed, which carries it, is not served after that.
	var writtenOSToken string
	tests := map[string]struct {
		// start takes a fresh machine "m1" into its phase and returns
		// who may abort it.
		start func(t *testing.T, s *store.Store) (store.Machine, store.Actor)
		want  store.State
		// reason is how the abort's event begins.
		reason string
		// written: the deploy environment's report was applied (the
		// image is written); a replay of it, answered again while the
		// phase lasts, is refused too once it is aborted.
		written bool
	}{
		"first commissioning": {
			start: func(t *testing.T, s *store.Store) (store.Machine, store.Actor) {
				create(t, s, store.NewMachine{Hostname: "m1", Power: fake})
				return transition(t, s, admin, "m1", store.ActionCommission), admin
			},
			want: store.StateNew, reason: "commissioning aborted",
		},
		"re-commissioning": {
			start: func(t *testing.T, s *store.Store) (store.Machine, store.Actor) {
				create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Power: fake})
				return transition(t, s, admin, "m1", store.ActionCommission), admin
			},
			want: store.StateReady, reason: "commissioning aborted",
		},
		"retried commissioning": {
			start: func(t *testing.T, s *store.Store) (store.Machine, store.Actor) {
				create(t, s, store.NewMachine{Hostname: "m1", Power: fake})
				transition(t, s, admin, "m1", store.ActionCommission)
				transition(t, s, admin, "m1", store.ActionCommissioningFailed)
				return transition(t, s, admin, "m1", store.ActionCommission), admin
			},
			want: store.StateNew, reason: "commissioning aborted",
		},
		"deployment, by its owner": {
			start: func(t *testing.T, s *store.Store) (store.Machine, store.Actor) {
				owner := withUser(t, s, "carol")
				create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Power: fake})
				allocate(t, s, owner, "m1", "juju")
				return deploy(t, s, owner, "m1", store.DeployRequest{UserData: []byte("#cloud-config\n")}), owner
			},
			want: store.StateAllocated, reason: "deployment aborted",
		},
		"deployment with its image written, its OS booting": {
			start: func(t *testing.T, s *store.Store) (store.Machine, store.Actor) {
				owner := withUser(t, s, "carol")
				create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Power: fake})
				allocate(t, s, owner, "m1", "juju")
				m := deploy(t, s, owner, "m1", store.DeployRequest{})
				src, err := s.Seed(ctx, s.PhaseToken(m))
				if err != nil {
					t.Fatal(err)
				}
				writtenOSToken = src.OSToken
				res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: s.PhaseToken(m), Bytes: 1 << 20})
				if err != nil || !res.DiskWritten || res.Machine.DiskWritten.IsZero() {
					t.Fatalf("image written: %+v, %v", res, err)
				}
				// Sent again (its answer lost): answered, nothing changes.
				if again, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: s.PhaseToken(m), Bytes: 1 << 20}); err != nil || again.DiskWritten {
					t.Fatalf("replay before the abort: %+v, %v", again, err)
				}
				return res.Machine, admin
			},
			want: store.StateAllocated, reason: "deployment aborted", written: true,
		},
		"erase": {
			start: func(t *testing.T, s *store.Store) (store.Machine, store.Actor) {
				owner := withUser(t, s, "carol")
				create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Power: fake})
				allocate(t, s, owner, "m1", "juju")
				m, err := s.StartRelease(ctx, owner, "m1", "", true)
				if err != nil {
					t.Fatal(err)
				}
				return m, admin
			},
			want: store.StateBroken, reason: "erase aborted: the disks are not known to be erased",
		},
		"release": {
			start: func(t *testing.T, s *store.Store) (store.Machine, store.Actor) {
				owner := withUser(t, s, "carol")
				create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Power: fake})
				allocate(t, s, owner, "m1", "juju")
				m, err := s.StartRelease(ctx, owner, "m1", "", false)
				if err != nil {
					t.Fatal(err)
				}
				return m, admin
			},
			want: store.StateBroken, reason: "release aborted before the machine was seen powered off",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			m, who := tc.start(t, s)
			phase, tok := store.PhaseOf(m), s.PhaseToken(m)
			var osToken string
			if tc.written {
				osToken = writtenOSToken
			} else if m.State == store.StateDeploying {
				src, err := s.Seed(ctx, tok)
				if err != nil {
					t.Fatal(err)
				}
				osToken = src.OSToken
			}
			owner := m.Owner
			before, err := s.OpenPowerRequests(m.ID)
			if err != nil {
				t.Fatal(err)
			}

			got, err := s.Abort(ctx, who, "m1", "stuck at the BIOS")
			if err != nil {
				t.Fatalf("abort %s: %v", m.State, err)
			}
			if got.State != tc.want || got.Credential != nil || got.Erase || !got.DiskWritten.IsZero() || got.Owner != owner {
				t.Fatalf("after the abort of %s: state %s (want %s), credential %v, erase %v, owner %q (want %q)",
					m.State, got.State, tc.want, got.Credential, got.Erase, got.Owner, owner)
			}
			if again, _ := s.Machine(m.ID); again.State != tc.want {
				t.Fatalf("stored state %s, want %s", again.State, tc.want)
			}

			// Power: off is what the machine must come to, through the
			// queue: the newest open request is an off, queued by the
			// abort, after whatever the phase had queued.
			ps, err := s.PowerStatusOf(m.ID)
			if err != nil || ps.Desired != power.StateOff {
				t.Fatalf("power status %+v, %v: want desired off", ps, err)
			}
			open, err := s.OpenPowerRequests(m.ID)
			if err != nil || len(open) != len(before)+1 {
				t.Fatalf("open power requests %+v, %v: want one more than the %d before", open, err, len(before))
			}
			if last := open[len(open)-1]; last.Action != store.PowerOff || last.Who != who.Name ||
				!strings.Contains(last.Why, "stuck at the BIOS") || last.NextBoot != "" {
				t.Fatalf("the abort's power request %+v: want an off by %s with the reason", last, who.Name)
			}

			// Credentials: the phase's is refused, and so are a
			// deployment's seed and OS credential.
			switch {
			case tc.written:
				// Before the abort this was answered as a replay.
				_, err := report(s, store.PhaseReport{Machine: m.ID, Phase: phase, Token: tok, Bytes: 1 << 20})
				wantCode(t, err, store.CodeUnauthorized)
			case tok != "":
				_, err := report(s, store.PhaseReport{Machine: m.ID, Phase: phase, Token: tok})
				wantCode(t, err, store.CodeUnauthorized)
			}
			if osToken != "" {
				if _, err := s.Seed(ctx, tok); store.CodeOf(err) != store.CodeUnauthorized {
					t.Errorf("seed with the aborted deploy's credential: %v, want unauthorized", err)
				}
				if _, err := s.OSPhoneHome(ctx, store.PhoneHome{Token: osToken, Source: "192.0.2.9:80"}); err == nil {
					t.Errorf("the aborted deployment's OS credential is still accepted")
				}
				if _, err := s.DeploymentOf(admin, m.ID); store.CodeOf(err) != store.CodeNotFound {
					t.Errorf("deployment after the abort: %v, want none", err)
				}
			}
			if got, _ := s.Machine(m.ID); got.State != tc.want {
				t.Fatalf("a refused report moved the machine to %s", got.State)
			}

			// The event: who, from, to, what was stopped, and why.
			evs := eventsOf(t, s, m.ID)
			var e store.Event
			for _, ev := range evs {
				if ev.Action == string(store.ActionAbort) {
					e = ev
				}
			}
			if e.Actor != who.Name || e.From != m.State || e.To != tc.want ||
				e.Reason != tc.reason+"; stuck at the BIOS" && !strings.HasPrefix(e.Reason, tc.reason+":") {
				t.Fatalf("abort event %+v; want by %s, %s -> %s, reason %q", e, who.Name, m.State, tc.want, tc.reason)
			}
			if !strings.HasSuffix(e.Reason, "; stuck at the BIOS") {
				t.Fatalf("abort event's reason %q does not end with the caller's", e.Reason)
			}
		})
	}
}

// TestAbortRefused: abort is refused, changing nothing, in a state with no
// phase (409, naming the state) and to those who may not start the phase
// it would stop (403).
func TestAbortRefused(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	carol := withUser(t, s, "carol")
	dave := withUser(t, s, "dave")
	fake := store.PowerParams{Driver: "fake", Address: "bmc1"}
	create(t, s, store.NewMachine{Hostname: "idle", State: store.StateReady, Power: fake})
	create(t, s, store.NewMachine{Hostname: "held", State: store.StateReady, Power: fake})
	allocate(t, s, carol, "held", "juju")
	create(t, s, store.NewMachine{Hostname: "dep", State: store.StateReady, Power: fake})
	allocate(t, s, carol, "dep", "juju")
	deploy(t, s, carol, "dep", store.DeployRequest{})
	create(t, s, store.NewMachine{Hostname: "com", Power: fake})
	transition(t, s, admin, "com", store.ActionCommission)

	tests := []struct {
		who     store.Actor
		machine string
		code    store.Code
		msg     string
	}{
		{admin, "idle", store.CodeInvalidTransition, "machine idle: cannot abort a machine that is READY: only a phase in progress can be aborted (a machine COMMISSIONING, DEPLOYING or RELEASING)"},
		{carol, "held", store.CodeInvalidTransition, "machine held: cannot abort a machine that is ALLOCATED"},
		// As for deploy and release: MAAS's API answers 404 instead
		// (another user's held machine does not exist there).
		{dave, "dep", store.CodeForbidden, "machine dep is not yours: only its owner or an admin may abort it"},
		{carol, "com", store.CodeForbidden, "machine com is held by nobody: only an admin may abort its commissioning"},
		{carol, "idle", store.CodeForbidden, "machine idle is held by nobody"},
		{admin, "nosuch", store.CodeNotFound, ""},
	}
	for _, tc := range tests {
		before := snap(t, s)
		_, err := s.Abort(ctx, tc.who, tc.machine, "")
		wantCode(t, err, tc.code)
		if !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("%s aborts %s: %q, want it to begin %q", tc.who.Name, tc.machine, err, tc.msg)
		}
		before.mustEqual(t, snap(t, s))
	}
}
