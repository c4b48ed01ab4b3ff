package store

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
		// The failed off failed the release (BROKEN) as it ended:
		// there is nothing left to complete.
		"off failed": {driver: "fake", drives: drivesFake, code: CodeInvalidTransition,
			setup: func(t *testing.T, s *Store, m Machine) { runPower(t, s, m, PowerFailed, power.StateUnknown) }},
		// The release queues the off it now waits for.
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
				// Every wait has something coming that ends it: an open
				// request (queued before, or now), or the erase's report.
				open, _ := s.OpenPowerRequests(m.ID)
				switch {
				case tc.want == WaitPowerOff && (res.Queued == "" || len(open) != 1 || open[0].ID != res.Queued || open[0].Action != PowerOff):
					t.Errorf("waiting for a power-off, queued %q, open %+v; want the off queued", res.Queued, open)
				case tc.want == WaitPowerQueue && (res.Queued != "" || len(open) == 0):
					t.Errorf("waiting for the queue, queued %q, open %+v", res.Queued, open)
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

// TestReleaseQueuesItsPowerOff: a release of a machine rackd drives queues
// the power-off it waits for at every entry into RELEASING, whatever the
// machine's desired power was; the machine is READY once that off is done.
// Released from ALLOCATED (desired off already, enforced) nothing was
// queued, and the release waited for ever ("release waits for the machine
// to be powered off ... last_request=\"\"").
func TestReleaseQueuesItsPowerOff(t *testing.T) {
	drives := func(d string) bool { return d == "fake" || d == "manual" }
	for _, tc := range []struct {
		name, driver string
		created      State
		observed     power.State // what the done off observed
		reason       string      // the release-done event's
	}{
		{"from ALLOCATED, ipmi-like", "fake", StateReady, power.StateOff, "machine released"},
		{"from ALLOCATED, manual", "manual", StateReady, power.StateUnknown,
			"machine released; its power driver is manual: the operator was asked to power it off by hand (rackd cannot check)"},
		{"from DEPLOYED", "fake", StateDeployed, power.StateOff, "machine released"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, Options{}, true)
			ctx := context.Background()
			m, err := s.CreateMachine(ctx, testAdmin, NewMachine{Hostname: "r1", MACs: []string{testMAC(1)}, State: tc.created,
				Power: PowerParams{Driver: tc.driver, Address: "r1"}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.created == StateReady {
				if _, err := s.Allocate(ctx, testAdmin, AllocateRequest{Name: "r1"}); err != nil {
					t.Fatal(err)
				}
			}
			if m, err = s.Release(ctx, testAdmin, "r1", ""); err != nil {
				t.Fatal(err)
			}
			open, _ := s.OpenPowerRequests(m.ID)
			if len(open) != 1 || open[0].Action != PowerOff || !strings.HasPrefix(open[0].Why, "policy of RELEASING") {
				t.Fatalf("the release queued %+v, want one off", open)
			}
			if res, err := s.FinishRelease(ctx, m.ID, drives); err != nil || res.Wait != WaitPowerQueue {
				t.Fatalf("before the off ran: %+v, %v; want it waiting for the queue", res, err)
			}
			runPower(t, s, m, PowerDone, tc.observed)
			res, err := s.FinishRelease(ctx, m.ID, drives)
			if err != nil || res.Wait != "" || res.Machine.State != StateReady {
				t.Fatalf("after the off: %+v, %v; want READY", res, err)
			}
			if e := lastEventOf(t, s, m.ID); e.Action != string(ActionReleaseDone) || e.Reason != tc.reason {
				t.Errorf("event %+v, want release-done %q", e, tc.reason)
			}
		})
	}
}

// TestPowerFailureEndsState: a power request that failed after the queue's
// retries ends the state that needed it, in the transaction that records
// the failure, with the BMC's error in the reason: a phase that cannot
// power its machine on fails (it used to sit in COMMISSIONING until the
// watchdog), a release that cannot power it off or on (to erase) is
// BROKEN. Requests the state did not need, or made before it, end nothing.
func TestPowerFailureEndsState(t *testing.T) {
	const bmcErr = "ipmi 10.0.0.9:623 (user admin): unreachable: i/o timeout"
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, s *Store, m Machine) // brings m into the state under test
		request PowerAction                             // an admin's request to fail instead of the state's own ("" for those)
		want    State
		action  Action
		reason  string
	}{
		{name: "commissioning power-on", want: StateFailedCommissioning, action: ActionCommissioningFailed,
			reason: "commission failed: rackd could not power the machine on: pr-1 on (asked by admin) failed after 3 attempt(s): " + bmcErr,
			setup:  func(t *testing.T, s *Store, m Machine) { transitionTo(t, s, m, ActionCommission) }},
		{name: "deployment power-on", want: StateFailedDeployment, action: ActionDeploymentFailed,
			reason: "deploy failed: rackd could not power the machine on: ",
			setup: func(t *testing.T, s *Store, m Machine) {
				transitionTo(t, s, m, ActionCommission)
				transitionTo(t, s, m, ActionCommissioningDone)
				drainDone(t, s, m)
				if _, err := s.Allocate(context.Background(), testAdmin, AllocateRequest{Name: m.ID}); err != nil {
					t.Fatal(err)
				}
				putDeployImages(t, s, "debian")
				if _, err := s.Transition(context.Background(), testAdmin, TransitionRequest{Machine: m.ID, Action: ActionDeploy, Image: "debian"}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "release power-off", want: StateBroken, action: ActionReleaseFailed,
			reason: "release failed: rackd could not power the machine off (it may still run what its last user left on it): ",
			setup: func(t *testing.T, s *Store, m Machine) {
				transitionTo(t, s, m, ActionCommission)
				transitionTo(t, s, m, ActionCommissioningDone)
				drainDone(t, s, m)
				if _, err := s.Allocate(context.Background(), testAdmin, AllocateRequest{Name: m.ID}); err != nil {
					t.Fatal(err)
				}
				transitionTo(t, s, m, ActionRelease)
			}},
		{name: "erase power-on", want: StateBroken, action: ActionReleaseFailed,
			reason: "release failed: rackd could not power the machine on to erase its disks: ",
			setup: func(t *testing.T, s *Store, m Machine) {
				transitionTo(t, s, m, ActionMarkBroken)
				drainDone(t, s, m)
				transitionTo(t, s, m, ActionMarkFixed)
				drainDone(t, s, m)
				if _, err := s.Allocate(context.Background(), testAdmin, AllocateRequest{Name: m.ID}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.StartRelease(context.Background(), testAdmin, m.ID, "", true); err != nil {
					t.Fatal(err)
				}
			}},
		// An admin's off during commissioning is not what the phase needs.
		{name: "an admin's off while commissioning", request: PowerOff, want: StateCommissioning,
			setup: func(t *testing.T, s *Store, m Machine) { transitionTo(t, s, m, ActionCommission); drainDone(t, s, m) }},
		// A query needs nothing.
		{name: "a query while releasing", request: PowerQuery, want: StateReleasing,
			setup: func(t *testing.T, s *Store, m Machine) {
				if _, err := s.Allocate(context.Background(), testAdmin, AllocateRequest{Name: m.ID}); err != nil {
					t.Fatal(err)
				}
				transitionTo(t, s, m, ActionRelease)
				drainDone(t, s, m)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, Options{}, true)
			ctx := context.Background()
			m := createPowered(t, s, "p1", 1, StateReady)
			if tc.name == "commissioning power-on" || tc.name == "an admin's off while commissioning" {
				m = createPowered(t, s, "p2", 2, StateNew)
			}
			tc.setup(t, s, m)
			if tc.request != "" {
				if _, err := s.RequestPower(ctx, testAdmin, m.ID, tc.request, "test"); err != nil {
					t.Fatal(err)
				}
			}
			open, _ := s.OpenPowerRequests(m.ID)
			if len(open) == 0 {
				t.Fatal("nothing queued")
			}
			r, _ := coalesceForTest(open)
			if _, err := s.StartPower(ctx, r.ID, foldIDs(open, r.ID)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FinishPower(ctx, r.ID, PowerFailed, 3, bmcErr, power.StateUnknown); err != nil {
				t.Fatal(err)
			}
			after, _ := s.Machine(m.ID)
			if after.State != tc.want {
				t.Fatalf("after %s %s failed: %s, want %s", r.ID, r.Action, after.State, tc.want)
			}
			e := lastEventOf(t, s, m.ID)
			if tc.action == "" {
				if e.Action != "power-failed" {
					t.Errorf("last event %+v, want the power-failed event alone", e)
				}
				return
			}
			if e.Action != string(tc.action) || e.Actor != PowerActor.Name || !strings.HasPrefix(e.Reason, tc.reason) || !strings.HasSuffix(e.Reason, bmcErr) {
				t.Errorf("event %+v, want %s by %s: %q... %q", e, tc.action, PowerActor.Name, tc.reason, bmcErr)
			}
			if after.Credential != nil {
				t.Errorf("the failed state keeps a credential: %+v", after.Credential)
			}
		})
	}
}

// TestPowerFailureBeforeTheState: a request made before the state (an
// admin's on of a READY machine) that fails after the machine was
// commissioned does not fail the commissioning: the phase's own request is
// still to run.
func TestPowerFailureBeforeTheState(t *testing.T) {
	var offset atomic.Int64
	s := openTest(t, Options{Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }}, true)
	ctx := context.Background()
	m := createPowered(t, s, "p1", 1, StateNew)
	r, err := s.RequestPower(ctx, testAdmin, m.ID, PowerOn, "before")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartPower(ctx, r.ID, nil); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(time.Second))
	transitionTo(t, s, m, ActionCommission)
	if _, err := s.FinishPower(ctx, r.ID, PowerFailed, 3, "refused", power.StateUnknown); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.Machine(m.ID); after.State != StateCommissioning {
		t.Fatalf("an older request's failure moved the machine to %s", after.State)
	}
}

func transitionTo(t *testing.T, s *Store, m Machine, a Action) {
	t.Helper()
	if _, err := s.Transition(context.Background(), testAdmin, TransitionRequest{Machine: m.ID, Action: a}); err != nil {
		t.Fatal(err)
	}
}

// drainDone ends m's open requests as done.
func drainDone(t *testing.T, s *Store, m Machine) {
	t.Helper()
	open, _ := s.OpenPowerRequests(m.ID)
	for _, r := range open {
		if _, err := s.StartPower(context.Background(), r.ID, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.FinishPower(context.Background(), r.ID, PowerDone, 1, "", r.Action.Final()); err != nil {
			t.Fatal(err)
		}
	}
}

// coalesceForTest picks the newest request that changes power (as the
// queue does) and the rest to fold.
func coalesceForTest(open []PowerRequest) (PowerRequest, []string) {
	w := open[len(open)-1]
	for i := len(open) - 1; i >= 0; i-- {
		if open[i].Action != PowerQuery {
			w = open[i]
			break
		}
	}
	return w, foldIDs(open, w.ID)
}

func foldIDs(open []PowerRequest, except string) []string {
	var out []string
	for _, r := range open {
		if r.ID != except {
			out = append(out, r.ID)
		}
	}
	return out
}

func lastEventOf(t *testing.T, s *Store, id string) Event {
	t.Helper()
	ev, err := s.Events(id, 0)
	if err != nil || len(ev) == 0 {
		t.Fatalf("events of %s: %v, %v", id, ev, err)
	}
	return ev[len(ev)-1]
}

// TestEraseNeedsPowerDriver: an erasing release of a machine without a power
// driver is refused, as a commission is: nothing would boot the erase
// environment, and the release would wait for its timeout and end READY
// without erasing. The release without an erase goes on.
func TestEraseNeedsPowerDriver(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	m, err := s.CreateMachine(ctx, testAdmin, NewMachine{Hostname: "r1", MACs: []string{testMAC(1)}, State: StateDeployed})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.StartRelease(ctx, testAdmin, m.ID, "", true)
	if CodeOf(err) != CodeConflict || !strings.Contains(err.Error(), "nothing would boot the erase environment") {
		t.Fatalf("erase without a power driver: %v", err)
	}
	if after, _ := s.Machine(m.ID); after.State != StateDeployed {
		t.Fatalf("the refusal moved the machine to %s", after.State)
	}
	if m, err = s.StartRelease(ctx, testAdmin, m.ID, "", false); err != nil || m.State != StateReleasing {
		t.Fatalf("release without erase: %+v, %v", m, err)
	}
}
