package store

import (
	"context"
	"testing"

	"rackd/power"
)

// releasing creates a DEPLOYED machine with power driver driver ("" for
// none) and releases it; with a driver, the RELEASING policy queues an off.
func releasing(t *testing.T, s *Store, hostname string, i int, driver string, erase bool) Machine {
	t.Helper()
	ctx := context.Background()
	nm := NewMachine{Hostname: hostname, MACs: []string{testMAC(i)}, State: StateDeployed}
	if driver != "" {
		nm.Power = PowerParams{Driver: driver, Address: hostname}
	}
	m, err := s.CreateMachine(ctx, testAdmin, nm)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = s.StartRelease(ctx, testAdmin, m.ID, "", erase); err != nil || m.State != StateReleasing {
		t.Fatalf("release %s: %+v, %v", hostname, m, err)
	}
	return m
}

// runPower runs the machine's open requests to the end: each is started and
// finished with state and observed.
func runPower(t *testing.T, s *Store, m Machine, state PowerRequestState, observed power.State) {
	t.Helper()
	ctx := context.Background()
	open, err := s.OpenPowerRequests(m.ID)
	if err != nil || len(open) == 0 {
		t.Fatalf("open power requests of %s: %v, %v; want some", m.Hostname, open, err)
	}
	for _, r := range open {
		if _, err := s.StartPower(ctx, r.ID, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.FinishPower(ctx, r.ID, state, 1, "", observed); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFinishRelease(t *testing.T) {
	drivesFake := func(d string) bool { return d == "fake" }
	tests := map[string]struct {
		driver string
		erase  bool
		// setup runs after the release, before FinishRelease.
		setup  func(t *testing.T, s *Store, m Machine)
		drives func(string) bool
		id     string // FinishRelease's argument instead of the machine's id
		want   ReleaseWait
		code   Code // a refusal
	}{
		"no power driver": {drives: drivesFake},
		// Its off is never going to run: nothing to wait for.
		"a driver rackd does not have": {driver: "amt", drives: drivesFake},
		"no driver set given":          {driver: "fake"},
		"off queued":                   {driver: "fake", drives: drivesFake, want: WaitPowerQueue},
		"off running": {driver: "fake", drives: drivesFake, want: WaitPowerQueue,
			setup: func(t *testing.T, s *Store, m Machine) {
				open, _ := s.OpenPowerRequests(m.ID)
				if _, err := s.StartPower(context.Background(), open[0].ID, nil); err != nil {
					t.Fatal(err)
				}
			}},
		"off done": {driver: "fake", drives: drivesFake,
			setup: func(t *testing.T, s *Store, m Machine) { runPower(t, s, m, PowerDone, power.StateOff) }},
		"off done, power not observed": {driver: "fake", drives: drivesFake,
			setup: func(t *testing.T, s *Store, m Machine) { runPower(t, s, m, PowerDone, power.StateUnknown) }},
		"off failed": {driver: "fake", drives: drivesFake, want: WaitPowerOff,
			setup: func(t *testing.T, s *Store, m Machine) { runPower(t, s, m, PowerFailed, power.StateUnknown) }},
		"off done but seen on since": {driver: "fake", drives: drivesFake, want: WaitPowerOff,
			setup: func(t *testing.T, s *Store, m Machine) {
				runPower(t, s, m, PowerDone, power.StateOff)
				// A poll sees it on again: enforcement queues an off.
				if _, err := s.ObservePower(context.Background(), m.ID, power.StateOn); err != nil {
					t.Fatal(err)
				}
				runPower(t, s, m, PowerDone, power.StateOn)
			}},
		"erase": {driver: "fake", erase: true, drives: drivesFake, want: WaitErase,
			setup: func(t *testing.T, s *Store, m Machine) { runPower(t, s, m, PowerDone, power.StateOff) }},
		"erase without a driver": {erase: true, drives: drivesFake, want: WaitErase},
		"completed already": {drives: drivesFake, code: CodeInvalidTransition,
			setup: func(t *testing.T, s *Store, m Machine) {
				if _, err := s.CompleteRelease(context.Background(), m.ID); err != nil {
					t.Fatal(err)
				}
			}},
		"no such machine": {drives: drivesFake, id: "m-nonexistent", code: CodeNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, Options{}, true)
			m := releasing(t, s, "r1", 1, tc.driver, tc.erase)
			if tc.setup != nil {
				tc.setup(t, s, m)
			}
			before, _ := s.Machine(m.ID)
			beforeEvents, _ := s.Events(m.ID, 0)
			id := m.ID
			if tc.id != "" {
				id = tc.id
			}
			res, err := s.FinishRelease(context.Background(), id, tc.drives)
			if tc.code != "" {
				if CodeOf(err) != tc.code {
					t.Fatalf("FinishRelease = %+v, %v; want %s", res, err, tc.code)
				}
				if after, _ := s.Machine(m.ID); after.State != before.State {
					t.Errorf("a refusal moved the machine: %s -> %s", before.State, after.State)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			after, _ := s.Machine(m.ID)
			events, _ := s.Events(m.ID, 0)
			if res.Wait != tc.want {
				t.Fatalf("FinishRelease waits %q, want %q (machine %s, power %+v)", res.Wait, tc.want, res.Machine.State, res.Power)
			}
			if tc.want != "" {
				if after.State != StateReleasing || res.Machine.State != StateReleasing || len(events) != len(beforeEvents) {
					t.Errorf("a waiting release changed the machine: %s, %d -> %d events", after.State, len(beforeEvents), len(events))
				}
				return
			}
			if after.State != StateReady || res.Machine.State != StateReady || after.Owner != "" {
				t.Errorf("released machine is %s (answer %s), owner %q; want READY, nobody's", after.State, res.Machine.State, after.Owner)
			}
			last := events[len(events)-1]
			if last.Action != string(ActionReleaseDone) || last.Actor != System.Name || last.From != StateReleasing ||
				last.To != StateReady || last.Reason != "machine released" {
				t.Errorf("last event %+v, want release-done by %s", last, System.Name)
			}
			// Done once: a second completion is refused.
			if _, err := s.FinishRelease(context.Background(), m.ID, tc.drives); CodeOf(err) != CodeInvalidTransition {
				t.Errorf("second FinishRelease: %v, want %s", err, CodeInvalidTransition)
			}
		})
	}
}

// A power request queued while a release is being decided. Deciding from
// separate reads (open requests, then the power status, then completing)
// sees no request and a done off, and completes the release in the commit
// after the request: a READY machine with a power cycle pending. Deciding in
// the transaction that completes, the decision comes after the request in
// commit order and waits for it; a request queued after the decision finds
// the machine READY.
func TestFinishReleaseRacesPowerRequest(t *testing.T) {
	drives := func(d string) bool { return d == "fake" }
	for _, requestFirst := range []bool{true, false} {
		name := "release decided first"
		if requestFirst {
			name = "power request first"
		}
		t.Run(name, func(t *testing.T) {
			// One operation at a time on a shared engine too: the
			// order they queue in is the order they run in.
			s := openTest(t, Options{MaxInFlight: 1}, true)
			ctx := context.Background()
			m := releasing(t, s, "r1", 1, "fake", false)
			runPower(t, s, m, PowerDone, power.StateOff)

			// Both operations queue behind a parked committer, in a
			// known order, and then share one batch.
			release := blockCommitter(t, s)
			type result struct {
				res ReleaseResult
				err error
			}
			finished := make(chan result, 1)
			requested := make(chan error, 1)
			request := func() {
				n := len(s.ops)
				go func() {
					_, err := s.RequestPower(ctx, testAdmin, m.ID, PowerCycle, "debugging")
					requested <- err
				}()
				waitQueued(t, s, n+1)
			}
			finish := func() {
				n := len(s.ops)
				go func() {
					res, err := s.FinishRelease(ctx, m.ID, drives)
					finished <- result{res, err}
				}()
				waitQueued(t, s, n+1)
			}
			if requestFirst {
				request()
				finish()
			} else {
				finish()
				request()
			}
			release()
			if err := <-requested; err != nil {
				t.Fatal(err)
			}
			got := <-finished
			if got.err != nil {
				t.Fatal(got.err)
			}
			after, _ := s.Machine(m.ID)
			open, _ := s.OpenPowerRequests(m.ID)
			if len(open) != 1 || open[0].Action != PowerCycle {
				t.Fatalf("open power requests %+v, want the cycle", open)
			}
			if requestFirst {
				if got.res.Wait != WaitPowerQueue || after.State != StateReleasing {
					t.Errorf("release decided after a queued cycle: wait %q, machine %s; want it waiting for the queue, RELEASING",
						got.res.Wait, after.State)
				}
				return
			}
			if got.res.Wait != "" || after.State != StateReady {
				t.Errorf("release decided before the cycle: wait %q, machine %s; want READY", got.res.Wait, after.State)
			}
		})
	}
}
