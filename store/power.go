package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"rackd/power"
)

// Power requests and each machine's desired and observed power
// (docs/ARCHITECTURE.md section 6). The store keeps the durable half of the power queue: a request
// is committed before the API answers 202, and its fate (done, failed,
// superseded by another) is written as the queue decides it, so a restart
// resumes exactly what was open.

var (
	bucketPowerRequests = []byte("power_requests") // 8-byte seq -> PowerRequest
	bucketPowerOpen     = []byte("power_open")     // machine id NUL 8-byte seq -> nothing: pending and running requests
	bucketPowerState    = []byte("power_state")    // machine id -> PowerStatus
)

// PowerAction is what a power request asks of a BMC.
type PowerAction string

// The power actions.
const (
	PowerOn    PowerAction = "on"
	PowerOff   PowerAction = "off"
	PowerCycle PowerAction = "cycle"
	PowerQuery PowerAction = "query"
)

// Valid reports whether a is one of the power actions.
func (a PowerAction) Valid() bool {
	switch a {
	case PowerOn, PowerOff, PowerCycle, PowerQuery:
		return true
	}
	return false
}

// Final is the power a machine should have once a done request of this
// action is through (unknown for a query, which changes nothing).
func (a PowerAction) Final() power.State {
	switch a {
	case PowerOn, PowerCycle:
		return power.StateOn
	case PowerOff:
		return power.StateOff
	}
	return power.StateUnknown
}

// actionTo is the action that brings a machine to power s (on or off).
func actionTo(s power.State) (PowerAction, error) {
	switch s {
	case power.StateOn:
		return PowerOn, nil
	case power.StateOff:
		return PowerOff, nil
	}
	return "", fmt.Errorf("store: no power action leads to %s", s)
}

// PowerRequestState is where a power request is in its life.
type PowerRequestState string

// The states of a power request. pending and running are open; the others
// are final and never change again.
const (
	PowerPending    PowerRequestState = "pending"
	PowerRunning    PowerRequestState = "running"
	PowerDone       PowerRequestState = "done"
	PowerFailed     PowerRequestState = "failed"
	PowerSuperseded PowerRequestState = "superseded"
)

// Open reports whether the request may still change.
func (s PowerRequestState) Open() bool { return s == PowerPending || s == PowerRunning }

// Cycle phases. A cycle records that it is about to be sent before it is
// sent, so that a crash after sending never leads to a second cycle.
const (
	PhaseCycleSent = "cycle-sent"
)

// PowerRequest is one queued power action and its fate.
type PowerRequest struct {
	ID      string      `json:"id"`
	Machine string      `json:"machine"`
	Action  PowerAction `json:"action"`
	// NextBoot ("pxe" or "disk") is set before powering on.
	NextBoot     string            `json:"next_boot,omitempty"`
	Who          string            `json:"who"`
	Why          string            `json:"why,omitempty"`
	State        PowerRequestState `json:"state"`
	SupersededBy string            `json:"superseded_by,omitempty"`
	Error        string            `json:"error,omitempty"`
	Attempts     int               `json:"attempts"`
	Phase        string            `json:"phase,omitempty"`
	Created      time.Time         `json:"created"`
	Started      time.Time         `json:"started,omitzero"`
	Finished     time.Time         `json:"finished,omitzero"`
}

// PowerMode says what rackd does about a machine's desired power.
type PowerMode string

// The power modes: enforce re-applies the desired power whenever drift is
// seen; expect reports drift and leaves it alone (a human may be debugging);
// none is the owner's business.
const (
	ModeEnforce PowerMode = "enforce"
	ModeExpect  PowerMode = "expect"
	ModeNone    PowerMode = "none"
)

// PowerStatus is a machine's desired and observed power.
type PowerStatus struct {
	Desired    power.State `json:"desired,omitempty"` // on, off, or unknown (nothing asked)
	Mode       PowerMode   `json:"mode"`
	Observed   power.State `json:"observed"`
	ObservedAt time.Time   `json:"observed_at,omitzero"`
	// Drift is set while a machine under expect has been seen away from its
	// desired power (reported once, in an event).
	Drift bool `json:"drift,omitempty"`
	// LastRequest and LastOutcome are the newest request that ended and how.
	LastRequest string            `json:"last_request,omitempty"`
	LastOutcome PowerRequestState `json:"last_outcome,omitempty"`
}

// PowerPolicy is what a lifecycle state asks of a machine's power.
type PowerPolicy struct {
	// Desired is on or off; unknown leaves the desired power as it is.
	Desired power.State
	Mode    PowerMode
	// Once: queue the request at every entry into the state, even when
	// nothing seems to change (failed states: off once, then expect; a
	// release: the power-off it waits for, whatever was asked before).
	Once bool
}

// PowerPolicyFor is the per-state policy table (docs/ARCHITECTURE.md
// section 3): idle machines are kept off; a release powers its machine off
// at every entry (FinishRelease waits for that request: a machine released
// from ALLOCATED was "off" by policy already, and without a request of its
// own its release waited for one nobody queued); machines being
// commissioned or deployed are kept on and boot from the network
// (NextBootFor); failed, broken and retired machines are powered off once
// and then only watched, so a human can debug them; a deployed machine's
// power is its owner's business.
func PowerPolicyFor(s State) PowerPolicy {
	switch s {
	case StateNew, StateReady, StateAllocated:
		return PowerPolicy{Desired: power.StateOff, Mode: ModeEnforce}
	case StateReleasing:
		return PowerPolicy{Desired: power.StateOff, Mode: ModeEnforce, Once: true}
	case StateCommissioning, StateDeploying:
		return PowerPolicy{Desired: power.StateOn, Mode: ModeEnforce}
	case StateFailedCommissioning, StateFailedDeployment, StateBroken, StateRetired:
		return PowerPolicy{Desired: power.StateOff, Mode: ModeExpect, Once: true}
	case StateDeployed:
		return PowerPolicy{Mode: ModeNone}
	}
	// Unknown states (a newer database?) are left alone.
	return PowerPolicy{Mode: ModeNone}
}

// NextBootFor is the next-boot rule, and the only place that decides it:
// a power-on (on, or a cycle) of a machine in a phase that runs rackd's
// environment (commissioning, deployment, a release with an erase: phaseOf)
// sets next boot PXE first, every time, whoever asks for it: the transition
// into the phase, enforcement after the machine was seen off, an admin. A
// machine with an installed disk that is powered on without it boots that
// disk, and the phase waits for a report that never comes. Otherwise the
// machine boots in its firmware's order (BootNone): so does a DEPLOYING
// machine whose image is written, which now boots that image.
func NextBootFor(m Machine, action PowerAction) power.BootDevice {
	if action != PowerOn && action != PowerCycle {
		return power.BootNone
	}
	if phaseOf(m) != "" && m.DiskWritten.IsZero() {
		return power.BootPXE
	}
	return power.BootNone
}

// powerKey orders requests by their sequence number.
func powerKey(seq uint64) []byte { return u64(seq) }

func powerOpenKey(machine string, seq uint64) []byte {
	return append(append([]byte(machine), 0), u64(seq)...)
}

// ParsePowerRequestID returns the sequence number of a request id ("pr-N").
func ParsePowerRequestID(id string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "pr-"), 10, 64)
	if err != nil || !strings.HasPrefix(id, "pr-") || n == 0 {
		return 0, errorf(CodeNotFound, "power request %q not found (ids look like pr-42)", id)
	}
	return n, nil
}

func (t *Tx) powerRequest(id string) (PowerRequest, uint64, error) {
	seq, err := ParsePowerRequestID(id)
	if err != nil {
		return PowerRequest{}, 0, err
	}
	var r PowerRequest
	found, err := t.get(bucketPowerRequests, powerKey(seq), &r)
	if err != nil {
		return PowerRequest{}, 0, err
	}
	if !found {
		return PowerRequest{}, 0, errorf(CodeNotFound, "power request %s not found", id)
	}
	return r, seq, nil
}

func (t *Tx) putPowerRequest(seq uint64, r PowerRequest) error {
	open := powerOpenKey(r.Machine, seq)
	if r.State.Open() {
		if err := t.putRaw(bucketPowerOpen, open, nil); err != nil {
			return err
		}
	} else {
		if r.Finished.IsZero() {
			r.Finished = t.now
		}
		if err := t.del(bucketPowerOpen, open); err != nil {
			return err
		}
	}
	if err := t.put(bucketPowerRequests, powerKey(seq), r); err != nil {
		return err
	}
	return t.recordPower(seq, r)
}

// powerStatus returns m's power status; a machine never touched by the
// power code has its state's policy and has been seen by nobody.
func (t *Tx) powerStatus(m Machine) (PowerStatus, error) {
	var ps PowerStatus
	found, err := t.get(bucketPowerState, []byte(m.ID), &ps)
	if err != nil || found {
		return ps, err
	}
	p := PowerPolicyFor(m.State)
	return PowerStatus{Desired: p.Desired, Mode: p.Mode, Observed: power.StateUnknown}, nil
}

// enqueuePower writes a new pending request and tells the queue. Its next
// boot is NextBootFor's, whoever queues it. A machine that has
// MaxOpenPower open requests already has its oldest pending one
// superseded by the new one (RequestPower refuses instead).
func (t *Tx) enqueuePower(m Machine, action PowerAction, who, why string) (PowerRequest, error) {
	seq, err := t.nextSeq(bucketPowerRequests)
	if err != nil {
		return PowerRequest{}, err
	}
	r := PowerRequest{ID: "pr-" + strconv.FormatUint(seq, 10), Machine: m.ID, Action: action,
		NextBoot: NextBootFor(m, action).String(), Who: who, Why: why, State: PowerPending, Created: t.now}
	if err := t.makeRoomForPower(m.ID, r.ID); err != nil {
		return PowerRequest{}, err
	}
	if err := t.putPowerRequest(seq, r); err != nil {
		return PowerRequest{}, err
	}
	t.powerKicks = append(t.powerKicks, m.ID)
	return r, nil
}

// applyPowerPolicy sets a machine's desired power from its (new) lifecycle
// state and, when that asks for something to happen, queues the request.
// It writes nothing when nothing changes (an allocation of a READY machine
// costs no extra write).
func (t *Tx) applyPowerPolicy(m Machine, from State, who, why string) error {
	p := PowerPolicyFor(m.State)
	// A machine without a record yet had the policy of the state it leaves.
	before := m
	before.State = from
	old, err := t.powerStatus(before)
	if err != nil {
		return err
	}
	ps := old
	ps.Mode = p.Mode
	if p.Desired != power.StateUnknown {
		ps.Desired = p.Desired
	}
	if ps.Mode != ModeExpect {
		ps.Drift = false
	}
	// A phase that keeps the machine on (and boots it from the network)
	// powers it on at every entry, even when it was on already.
	phaseOn := p.Desired == power.StateOn && NextBootFor(m, PowerOn) != power.BootNone
	act := p.Mode != ModeNone && (p.Desired != old.Desired || old.Mode != ModeEnforce || phaseOn || p.Once)
	if ps != old {
		if err := t.put(bucketPowerState, []byte(m.ID), ps); err != nil {
			return err
		}
	}
	if !act || m.Power.Driver == "" {
		return nil
	}
	if why == "" {
		why = "policy of " + string(m.State)
	} else {
		why = "policy of " + string(m.State) + ": " + why
	}
	action, err := actionTo(p.Desired)
	if err != nil {
		return err
	}
	_, err = t.enqueuePower(m, action, who, why)
	return err
}

// notifyPower tells the power queue which machines have new requests.
func (s *Store) notifyPower(machines []string) {
	if fn := s.powerNotify.Load(); fn != nil {
		for _, id := range machines {
			(*fn)(id)
		}
	}
}

// OnPowerRequest sets the function told (after the commit) about every
// machine that got a new power request, whoever queued it: the API, a
// lifecycle transition, the watchdog, another agent on a shared engine
// (told from the watch). It may be called from several goroutines at once.
func (s *Store) OnPowerRequest(fn func(machine string)) {
	s.powerNotify.Store(&fn)
}

// RequestPower queues a power action asked for by actor (an admin, or the
// machine's owner) and returns the pending request once it is durable. On,
// off and cycle also set the machine's desired power.
func (s *Store) RequestPower(ctx context.Context, actor Actor, machine string, action PowerAction, why string) (PowerRequest, error) {
	if !action.Valid() {
		return PowerRequest{}, errorf(CodeInvalid, "unknown power action %q: want on, off, cycle or query", action)
	}
	if len(why) > 1024 {
		return PowerRequest{}, errorf(CodeInvalid, "reason is too long (at most 1024 bytes)")
	}
	var (
		r     PowerRequest
		kicks []string
	)
	err := s.update(ctx, func(t *Tx) error {
		m, err := t.machine(machine)
		if err != nil {
			return err
		}
		if err := MayDrivePower(actor, m); err != nil {
			return err
		}
		if m.Power.Driver == "" {
			return errorf(CodeInvalid, "machine %s has no power driver: set one with rackd machines set %s --power-driver ipmi --power-address HOST --power-user USER",
				m.Hostname, m.Hostname)
		}
		if h, err := t.powerHistoryOf(m.ID); err != nil {
			return err
		} else if len(h.Open) >= MaxOpenPower {
			return errorf(CodeConflict, "machine %s already has %d power requests waiting, the most one may have: wait for them (rackd power status %s shows them) and ask again",
				m.Hostname, len(h.Open), m.Hostname)
		}
		if final := action.Final(); final != power.StateUnknown {
			ps, err := t.powerStatus(m)
			if err != nil {
				return err
			}
			if ps.Desired != final {
				ps.Desired = final
				if err := t.put(bucketPowerState, []byte(m.ID), ps); err != nil {
					return err
				}
			}
		}
		t.powerKicks = nil
		r, err = t.enqueuePower(m, action, actor.Name, why)
		kicks = t.powerKicks
		return err
	})
	if err == nil {
		s.notifyPower(kicks)
	}
	return r, err
}

// PowerRequest returns one request by id.
func (s *Store) PowerRequest(id string) (PowerRequest, error) {
	var r PowerRequest
	err := s.view(func(t *Tx) error {
		var err error
		r, _, err = t.powerRequest(id)
		return err
	})
	return r, err
}

// OpenPowerRequests returns a machine's pending and running requests, oldest
// first.
func (s *Store) OpenPowerRequests(machine string) ([]PowerRequest, error) {
	var out []PowerRequest
	err := s.view(func(t *Tx) error {
		var err error
		out, err = t.openPower(machine)
		return err
	})
	return out, err
}

func (t *Tx) openPower(machine string) ([]PowerRequest, error) {
	var out []PowerRequest
	prefix := append([]byte(machine), 0)
	c := t.tx.Bucket(bucketPowerOpen).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		var r PowerRequest
		found, err := t.get(bucketPowerRequests, k[len(prefix):], &r)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("store: open power request %x of machine %s has no record", k[len(prefix):], machine)
		}
		out = append(out, r)
	}
	return out, nil
}

// MachinesWithOpenPower returns the machines that have pending or running
// requests (what a restarted queue resumes).
func (s *Store) MachinesWithOpenPower() ([]string, error) {
	var out []string
	err := s.view(func(t *Tx) error {
		return t.tx.Bucket(bucketPowerOpen).ForEach(func(k, _ []byte) error {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				return fmt.Errorf("store: bad power_open key %x", k)
			}
			if id := string(k[:i]); len(out) == 0 || out[len(out)-1] != id {
				out = append(out, id)
			}
			return nil
		})
	})
	return out, err
}

// PowerStatusOf returns a machine's desired and observed power.
func (s *Store) PowerStatusOf(machine string) (PowerStatus, error) {
	var ps PowerStatus
	err := s.view(func(t *Tx) error {
		m, err := t.machine(machine)
		if err != nil {
			return err
		}
		ps, err = t.powerStatus(m)
		return err
	})
	return ps, err
}

// StartPower marks request id running and every request in fold superseded
// by it, in one commit. Requests that are no longer open are left as they
// are (their fate is already written).
func (s *Store) StartPower(ctx context.Context, id string, fold []string) (PowerRequest, error) {
	var r PowerRequest
	err := s.update(ctx, func(t *Tx) error {
		var (
			seq uint64
			err error
		)
		r, seq, err = t.powerRequest(id)
		if err != nil {
			return err
		}
		if !r.State.Open() {
			return errorf(CodeConflict, "power request %s is already %s", id, r.State)
		}
		for _, f := range fold {
			if err := t.supersede(f, id); err != nil {
				return err
			}
		}
		if r.State == PowerPending {
			r.State, r.Started = PowerRunning, t.now
			return t.putPowerRequest(seq, r)
		}
		return nil
	})
	return r, err
}

func (t *Tx) supersede(id, by string) error {
	r, seq, err := t.powerRequest(id)
	if err != nil {
		return err
	}
	if !r.State.Open() {
		return nil
	}
	r.State, r.SupersededBy = PowerSuperseded, by
	return t.putPowerRequest(seq, r)
}

// SupersedePower ends an open request: a newer one (by) wants something else.
func (s *Store) SupersedePower(ctx context.Context, id, by string) error {
	return s.update(ctx, func(t *Tx) error { return t.supersede(id, by) })
}

// PowerProgress records a request's attempts so far and its phase.
func (s *Store) PowerProgress(ctx context.Context, id string, attempts int, phase string) error {
	return s.update(ctx, func(t *Tx) error {
		r, seq, err := t.powerRequest(id)
		if err != nil {
			return err
		}
		if !r.State.Open() {
			return errorf(CodeConflict, "power request %s is already %s", id, r.State)
		}
		r.Attempts, r.Phase = attempts, phase
		return t.putPowerRequest(seq, r)
	})
}

// FinishPower writes a running request's fate: done or failed (with the
// BMC's error, which also goes into the machine's history) after attempts
// tries. observed, when not unknown, is the power the queue saw last.
//
// A failed request that the machine's state needed (powerFailure) moves
// the machine out of that state in the same transaction: a phase that
// cannot power its machine on fails with the BMC's error as the reason, a
// release that cannot power it off is BROKEN.
func (s *Store) FinishPower(ctx context.Context, id string, state PowerRequestState, attempts int, errText string, observed power.State) (PowerRequest, error) {
	if state != PowerDone && state != PowerFailed {
		return PowerRequest{}, fmt.Errorf("store: FinishPower with state %q", state)
	}
	var (
		r     PowerRequest
		kicks []string
	)
	defer func() { s.notifyPower(kicks) }()
	err := s.update(ctx, func(t *Tx) error {
		t.powerKicks = nil
		defer func() { kicks = t.powerKicks }()
		var (
			seq uint64
			err error
		)
		r, seq, err = t.powerRequest(id)
		if err != nil {
			return err
		}
		if !r.State.Open() {
			return errorf(CodeConflict, "power request %s is already %s", id, r.State)
		}
		r.State, r.Error = state, errText
		if attempts > r.Attempts {
			r.Attempts = attempts
		}
		if err := t.putPowerRequest(seq, r); err != nil {
			return err
		}
		m, err := t.machine(r.Machine)
		if err != nil {
			return err
		}
		ps, err := t.powerStatus(m)
		if err != nil {
			return err
		}
		ps.LastRequest, ps.LastOutcome = r.ID, state
		if observed != power.StateUnknown {
			ps.Observed, ps.ObservedAt = observed, t.now
		}
		if err := t.put(bucketPowerState, []byte(m.ID), ps); err != nil {
			return err
		}
		if state != PowerFailed {
			return nil
		}
		failure := fmt.Sprintf("%s %s (asked by %s) failed after %d attempt(s): %s", r.ID, r.Action, r.Who, r.Attempts, errText)
		if err := t.addEvent(Event{Machine: m.ID, Actor: PowerActor.Name, Action: "power-failed", Reason: failure}); err != nil {
			return err
		}
		action, why, ok := powerFailure(m, r)
		if !ok {
			return nil
		}
		_, err = t.transitionMachine(PowerActor, m, TransitionRequest{Machine: m.ID, Action: action, Reason: why + ": " + failure})
		return err
	})
	if err != nil {
		kicks = nil
	}
	return r, err
}

// PowerActor is the actor of the power queue's outcomes in events: a
// failed request, drift, and the transitions a failed request forces.
var PowerActor = Actor{Name: "rackd/power", Admin: true}

// powerFailure is the rule of a power request r that failed after the
// queue's retries: the transition it forces on m, and the reason's start;
// false when it forces none. A state that needs its machine powered
// cannot wait for a power change that will not happen:
//   - COMMISSIONING and DEPLOYING need the machine on (to boot the
//     environment, or the image written): a failed on or cycle fails the
//     phase at once, as MAAS does, rather than leaving it to the watchdog;
//   - an erasing release needs it on to boot the erase environment, a
//     release without an erase needs it off: either failing is a failed
//     release (BROKEN), since the machine may still run what its last user
//     left on it.
//
// Only a request made in the current state counts (created at or after
// m.StateSince): an older one that fails late (an admin's on before the
// commission) did not decide the phase, and the phase's own request
// follows it in the queue. Queries and requests that lead away from what
// the state needs (an admin's off during a deployment) force nothing.
func powerFailure(m Machine, r PowerRequest) (Action, string, bool) {
	if r.Created.Before(m.StateSince) {
		return "", "", false
	}
	final := r.Action.Final()
	switch {
	case m.State == StateCommissioning && final == power.StateOn:
		return ActionCommissioningFailed, "commission failed: rackd could not power the machine on", true
	case m.State == StateDeploying && final == power.StateOn:
		return ActionDeploymentFailed, "deploy failed: rackd could not power the machine on", true
	case m.State == StateReleasing && m.Erase && final == power.StateOn:
		return ActionReleaseFailed, "release failed: rackd could not power the machine on to erase its disks", true
	case m.State == StateReleasing && !m.Erase && final == power.StateOff:
		return ActionReleaseFailed, "release failed: rackd could not power the machine off (it may still run what its last user left on it)", true
	}
	return "", "", false
}

// Observation is what ObservePower concluded.
type Observation struct {
	Status PowerStatus
	// Drift: the machine is away from its desired power under expect, and
	// this is the first time it is seen so (an event was written).
	Drift bool
	// Correction is the request queued to enforce the desired power, if any.
	Correction *PowerRequest
}

// ObservePower records a machine's power as polled and acts on drift: under
// enforce it queues a correction (when nothing is queued already), under
// expect it writes an event the first time the drift is seen.
func (s *Store) ObservePower(ctx context.Context, machine string, observed power.State) (Observation, error) {
	var (
		o     Observation
		kicks []string
	)
	err := s.update(ctx, func(t *Tx) error {
		o = Observation{}
		t.powerKicks = nil
		m, err := t.machine(machine)
		if err != nil {
			return err
		}
		ps, err := t.powerStatus(m)
		if err != nil {
			return err
		}
		ps.Observed, ps.ObservedAt = observed, t.now
		drifted := observed != power.StateUnknown && ps.Desired != power.StateUnknown && observed != ps.Desired
		switch {
		case !drifted:
			ps.Drift = false
		case ps.Mode == ModeExpect && !ps.Drift:
			ps.Drift, o.Drift = true, true
			if err := t.addEvent(Event{Machine: m.ID, Actor: PowerActor.Name, Action: "power-drift",
				Reason: fmt.Sprintf("power is %s, expected %s (%s: reported, not corrected)", observed, ps.Desired, m.State)}); err != nil {
				return err
			}
		case ps.Mode == ModeEnforce && m.Power.Driver != "":
			open, err := t.openPower(m.ID)
			if err != nil {
				return err
			}
			if len(open) == 0 {
				action, err := actionTo(ps.Desired)
				if err != nil {
					return err
				}
				r, err := t.enqueuePower(m, action, "rackd/enforce",
					fmt.Sprintf("drift: power is %s, desired %s (%s)", observed, ps.Desired, m.State))
				if err != nil {
					return err
				}
				o.Correction = &r
			}
		}
		o.Status = ps
		kicks = t.powerKicks
		return t.put(bucketPowerState, []byte(m.ID), ps)
	})
	if err == nil {
		s.notifyPower(kicks)
	}
	return o, err
}

// PowerStatuses returns the power status of every machine that has one
// recorded (machine lists show desired and observed without a read each).
func (s *Store) PowerStatuses() (map[string]PowerStatus, error) {
	out := map[string]PowerStatus{}
	err := s.view(func(t *Tx) error {
		return t.tx.Bucket(bucketPowerState).ForEach(func(k, v []byte) error {
			var ps PowerStatus
			if err := json.Unmarshal(v, &ps); err != nil {
				return fmt.Errorf("decode power state of %s: %w", k, err)
			}
			out[string(k)] = ps
			return nil
		})
	})
	return out, err
}

// PowerStatusFor is m's power status from a PowerStatuses map, with the
// policy's defaults for a machine that has none recorded.
func PowerStatusFor(all map[string]PowerStatus, m Machine) PowerStatus {
	if ps, ok := all[m.ID]; ok {
		return ps
	}
	p := PowerPolicyFor(m.State)
	return PowerStatus{Desired: p.Desired, Mode: p.Mode, Observed: power.StateUnknown}
}

// checkPower verifies the power buckets: every request belongs to a machine
// and is well formed, the open index holds exactly the open requests, a
// superseded request names an existing one, every power status belongs
// to a machine, and each machine's history lists exactly its requests
// (checkPowerHistory).
func (t *Tx) checkPower(machines map[string]Machine, bad func(string, ...any)) {
	open := map[string]bool{}
	reqs := map[uint64]PowerRequest{}
	t.tx.Bucket(bucketPowerRequests).ForEach(func(k, v []byte) error {
		var r PowerRequest
		if err := json.Unmarshal(v, &r); err != nil {
			bad("power request %x: undecodable: %v", k, err)
			return nil
		}
		seq, err := ParsePowerRequestID(r.ID)
		if err == nil {
			reqs[seq] = r
		}
		switch {
		case err != nil || !bytes.Equal(powerKey(seq), k):
			bad("power request %s stored under key %x", r.ID, k)
		case !r.Action.Valid():
			bad("power request %s: unknown action %q", r.ID, r.Action)
		}
		if _, err := power.ParseBootDevice(r.NextBoot); err != nil {
			bad("power request %s: %v", r.ID, err)
		}
		if _, ok := machines[r.Machine]; !ok {
			bad("power request %s: machine %s does not exist", r.ID, r.Machine)
		}
		switch r.State {
		case PowerPending, PowerRunning:
			open[string(powerOpenKey(r.Machine, seq))] = true
		case PowerDone, PowerFailed:
		case PowerSuperseded:
			if r.SupersededBy == "" {
				bad("power request %s is superseded by nobody", r.ID)
			} else if bs, err := ParsePowerRequestID(r.SupersededBy); err != nil || t.tx.Bucket(bucketPowerRequests).Get(powerKey(bs)) == nil {
				bad("power request %s: superseded by %s, which does not exist", r.ID, r.SupersededBy)
			}
		default:
			bad("power request %s: unknown state %q", r.ID, r.State)
		}
		if !r.State.Open() && r.Finished.IsZero() {
			bad("power request %s is %s but has no finish time", r.ID, r.State)
		}
		if r.State.Open() && t.tx.Bucket(bucketPowerOpen).Get(powerOpenKey(r.Machine, seq)) == nil {
			bad("power request %s is %s but not in the open index", r.ID, r.State)
		}
		return nil
	})
	t.tx.Bucket(bucketPowerOpen).ForEach(func(k, _ []byte) error {
		if !open[string(k)] {
			bad("power_open entry %q names no open request", k)
		}
		return nil
	})
	t.checkPowerHistory(machines, reqs, bad)
	t.tx.Bucket(bucketPowerState).ForEach(func(k, v []byte) error {
		var ps PowerStatus
		if err := json.Unmarshal(v, &ps); err != nil {
			bad("power state of %s: undecodable: %v", k, err)
			return nil
		}
		if _, ok := machines[string(k)]; !ok {
			bad("power state of %s: no such machine", k)
		}
		switch ps.Mode {
		case ModeEnforce, ModeExpect, ModeNone:
		default:
			bad("power state of %s: unknown mode %q", k, ps.Mode)
		}
		return nil
	})
}

// OpenPowerCount is how many requests are pending or running.
func (s *Store) OpenPowerCount() (int, error) {
	n := 0
	err := s.view(func(t *Tx) error {
		n = t.tx.Bucket(bucketPowerOpen).KeyN()
		return nil
	})
	return n, err
}

// MachinePower returns m's power status (m as read by the caller).
func (s *Store) MachinePower(m Machine) (PowerStatus, error) {
	var ps PowerStatus
	err := s.view(func(t *Tx) error {
		var err error
		ps, err = t.powerStatus(m)
		return err
	})
	return ps, err
}
