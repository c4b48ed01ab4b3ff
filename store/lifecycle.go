package store

import "fmt"

// State is a machine's lifecycle state (the transitions: docs/ARCHITECTURE.md
// section 3).
type State string

// The lifecycle states, as the API spells them.
const (
	StateNew                 State = "NEW"
	StateCommissioning       State = "COMMISSIONING"
	StateFailedCommissioning State = "FAILED_COMMISSIONING"
	StateReady               State = "READY"
	StateAllocated           State = "ALLOCATED"
	StateDeploying           State = "DEPLOYING"
	StateDeployed            State = "DEPLOYED"
	StateFailedDeployment    State = "FAILED_DEPLOYMENT"
	StateReleasing           State = "RELEASING"
	StateBroken              State = "BROKEN"
	StateRetired             State = "RETIRED"
)

// States lists every state, in lifecycle order.
var States = []State{
	StateNew, StateCommissioning, StateFailedCommissioning, StateReady,
	StateAllocated, StateDeploying, StateDeployed, StateFailedDeployment,
	StateReleasing, StateBroken, StateRetired,
}

// Valid reports whether s is one of the lifecycle states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Failed reports whether s is a failed phase's state: FAILED_COMMISSIONING
// or FAILED_DEPLOYMENT.
func (s State) Failed() bool { return s == StateFailedCommissioning || s == StateFailedDeployment }

// Action is something that moves a machine from one state to another.
type Action string

// The lifecycle actions. The first group is what users ask for; the second is
// what rackd itself concludes (a commissioning report, a watchdog, the end of
// a release).
const (
	ActionCommission Action = "commission"
	ActionAllocate   Action = "allocate"
	ActionDeploy     Action = "deploy"
	ActionRelease    Action = "release"
	ActionMarkBroken Action = "mark-broken"
	ActionMarkFixed  Action = "mark-fixed"
	ActionRetire     Action = "retire"
	ActionAbort      Action = "abort"

	ActionCommissioningDone   Action = "commissioning-done"
	ActionCommissioningFailed Action = "commissioning-failed"
	ActionDeploymentDone      Action = "deployment-done"
	ActionDeploymentFailed    Action = "deployment-failed"
	ActionReleaseDone         Action = "release-done"
	ActionReleaseFailed       Action = "release-failed"
)

// Actions lists every action.
var Actions = []Action{
	ActionCommission, ActionAllocate, ActionDeploy, ActionRelease,
	ActionMarkBroken, ActionMarkFixed, ActionRetire, ActionAbort,
	ActionCommissioningDone, ActionCommissioningFailed,
	ActionDeploymentDone, ActionDeploymentFailed, ActionReleaseDone, ActionReleaseFailed,
}

// transitions is the lifecycle: for each action, the states it may start
// from and the state it leads to. mark-broken and mark-fixed are handled in
// Next because their edges depend on more than the table can say.
var transitions = map[Action]struct {
	from []State
	to   State
}{
	// Re-commissioning a READY machine refreshes its inventory; a failed one
	// may be tried again.
	ActionCommission:          {[]State{StateNew, StateReady, StateFailedCommissioning}, StateCommissioning},
	ActionCommissioningDone:   {[]State{StateCommissioning}, StateReady},
	ActionCommissioningFailed: {[]State{StateCommissioning}, StateFailedCommissioning},
	ActionAllocate:            {[]State{StateReady}, StateAllocated},
	// A failed deployment may be retried by its owner without giving the
	// machine up.
	ActionDeploy:           {[]State{StateAllocated, StateFailedDeployment}, StateDeploying},
	ActionDeploymentDone:   {[]State{StateDeploying}, StateDeployed},
	ActionDeploymentFailed: {[]State{StateDeploying}, StateFailedDeployment},
	// A deployment may be released before it ends (a cancelled bootstrap,
	// a destroy mid-deploy): its credentials die and the machine is
	// powered off, as from DEPLOYED.
	ActionRelease:     {[]State{StateAllocated, StateDeploying, StateDeployed, StateFailedDeployment}, StateReleasing},
	ActionReleaseDone: {[]State{StateReleasing}, StateReady},
	// A release that cannot power its machine off (the power-off failed
	// after the queue's retries, or the release outlived its timeout) must
	// not hand the machine to the next user, who would find it running
	// what it ran: BROKEN, for a human (mark-fixed then brings it READY,
	// whose policy powers it off).
	ActionReleaseFailed: {[]State{StateReleasing}, StateBroken},
	// Idle: nobody holds the machine and nothing is running on its behalf.
	ActionRetire: {[]State{StateNew, StateReady, StateFailedCommissioning, StateBroken}, StateRetired},
}

// aborts is abort's rule: for each state a phase runs in, the state an
// abort stops it in. An abort powers the machine off (the policy of the
// state it leads to, through the power queue) and ends the phase's
// credential like any transition out of the phase; the event names who.
//
//   - COMMISSIONING: back to the state before the phase. A machine whose
//     hardware is known (commissioned before, or created READY) is READY
//     again with what it had; one never commissioned is NEW (the rule of
//     mark-fixed). Nothing went wrong with the machine, so FAILED_* would
//     say what is not true.
//   - DEPLOYING: ALLOCATED, still its owner's, who may deploy again; the
//     deployment (user-data, the OS's credential) is cancelled with it.
//   - RELEASING, with or without an erase: BROKEN. The allocation has
//     already ended, so there is no state before to go back to, and a
//     release stopped before it saw its machine off (or its disks erased)
//     must not hand the machine to the next user: the release-failed rule.
//     An admin marks it fixed once satisfied.
var aborts = map[State]State{
	StateCommissioning: StateReady,
	StateDeploying:     StateAllocated,
	StateReleasing:     StateBroken,
}

// Next is the lifecycle as a pure function: the state that action leads to
// from state from, or an *Error with CodeInvalidTransition naming both.
// commissioned says whether the machine's hardware is known (it was
// commissioned, or created READY or DEPLOYED); mark-fixed returns such a
// machine to READY and any other to NEW.
func Next(from State, action Action, commissioned bool) (State, error) {
	if !from.Valid() {
		return "", errorf(CodeInvalid, "unknown state %q", from)
	}
	switch action {
	case ActionMarkBroken:
		// Any state may turn out broken, except broken itself.
		if from == StateBroken {
			return "", invalidTransition(from, action, StateBroken)
		}
		return StateBroken, nil
	case ActionMarkFixed:
		to := StateNew
		if commissioned {
			to = StateReady
		}
		if from != StateBroken {
			return "", invalidTransition(from, action, to)
		}
		return to, nil
	case ActionAbort:
		to, ok := aborts[from]
		if !ok {
			return "", &Error{Code: CodeInvalidTransition, Msg: fmt.Sprintf(
				"cannot abort a machine that is %s: only a phase in progress can be aborted (a machine COMMISSIONING, DEPLOYING or RELEASING)", from)}
		}
		if to == StateReady && !commissioned {
			to = StateNew
		}
		return to, nil
	}
	t, ok := transitions[action]
	if !ok {
		return "", errorf(CodeInvalid, "unknown action %q", action)
	}
	for _, s := range t.from {
		if s == from {
			return t.to, nil
		}
	}
	return "", invalidTransition(from, action, t.to)
}

// MayAct is who may ask for a lifecycle action: an admin any, a machine's
// owner deploy, release and abort, nobody else anything (CodeForbidden, in
// words). Transition applies it; the web UI asks it which actions to show.
//
// Abort's rights are those of the operation that started the phase it
// stops: a deploy is the owner's (or an admin's); a commissioning and a
// release (with or without an erase) run on a machine nobody holds any
// more, so only an admin may stop them, as only an admin may start a
// commissioning or act on an unheld machine.
func MayAct(actor Actor, m Machine, action Action) error {
	if actor.Admin {
		return nil
	}
	ownerMay := action == ActionDeploy || action == ActionRelease || action == ActionAbort
	if ownerMay && m.Owner != "" && m.Owner == actor.Name {
		return nil
	}
	if action == ActionRelease && m.Owner == "" {
		// A machine nobody holds (one its owner just released) has
		// nothing to release: that is the lifecycle's answer, not a
		// question of rights (clients take a 403 for a bad credential).
		if _, err := Next(m.State, action, m.Commissioned); err != nil {
			return withMachine(err, m)
		}
	}
	if action == ActionAbort && m.Owner == "" {
		return errorf(CodeForbidden, "machine %s is held by nobody: only an admin may abort its %s", m.Hostname, abortWhat(m))
	}
	if ownerMay {
		return errorf(CodeForbidden, "machine %s is not yours: only its owner or an admin may %s it", m.Hostname, action)
	}
	return errorf(CodeForbidden, "only an admin may %s a machine", action)
}

// MayDrivePower is who may queue power requests for a machine: an admin
// or its owner (CodeForbidden otherwise).
func MayDrivePower(actor Actor, m Machine) error {
	if actor.Admin || (m.Owner != "" && m.Owner == actor.Name) {
		return nil
	}
	return errorf(CodeForbidden, "machine %s is not yours: only its owner or an admin may drive its power", m.Hostname)
}

// abortWhat names, for a refusal, what an abort of m would stop.
func abortWhat(m Machine) string {
	switch {
	case m.State == StateCommissioning:
		return "commissioning"
	case m.State == StateReleasing && m.Erase:
		return "erase"
	case m.State == StateReleasing:
		return "release"
	}
	return "phase"
}

func invalidTransition(from State, action Action, to State) *Error {
	return &Error{Code: CodeInvalidTransition,
		Msg: fmt.Sprintf("cannot %s a machine that is %s: %s -> %s is not allowed", action, from, from, to)}
}
