package store

import (
	"fmt"
	"testing"
)

// TestLifecycleExhaustive checks every state x every action against the
// lifecycle written out by hand from docs/ARCHITECTURE.md section 3 (not derived from the
// table under test): either the exact next state or the exact refusal.
func TestLifecycleExhaustive(t *testing.T) {
	const (
		N   = StateNew
		C   = StateCommissioning
		FC  = StateFailedCommissioning
		R   = StateReady
		A   = StateAllocated
		D   = StateDeploying
		DD  = StateDeployed
		FD  = StateFailedDeployment
		REL = StateReleasing
		B   = StateBroken
		RET = StateRetired
	)
	// allowed[action][from] = to, for machines that were commissioned.
	allowed := map[Action]map[State]State{
		ActionCommission:          {N: C, R: C, FC: C},
		ActionCommissioningDone:   {C: R},
		ActionCommissioningFailed: {C: FC},
		ActionAllocate:            {R: A},
		ActionDeploy:              {A: D, FD: D},
		ActionDeploymentDone:      {D: DD},
		ActionDeploymentFailed:    {D: FD},
		ActionRelease:             {A: REL, D: REL, DD: REL, FD: REL},
		ActionReleaseDone:         {REL: R},
		ActionReleaseFailed:       {REL: B},
		ActionMarkBroken:          {N: B, C: B, FC: B, R: B, A: B, D: B, DD: B, FD: B, REL: B, RET: B},
		ActionMarkFixed:           {B: R},
		ActionRetire:              {N: RET, R: RET, FC: RET, B: RET},
		ActionAbort:               {C: R, D: A, REL: B},
	}
	// target is where each action leads, as named in the refusal.
	target := map[Action]State{
		ActionCommission: C, ActionCommissioningDone: R, ActionCommissioningFailed: FC,
		ActionAllocate: A, ActionDeploy: D, ActionDeploymentDone: DD, ActionDeploymentFailed: FD,
		ActionRelease: REL, ActionReleaseDone: R, ActionReleaseFailed: B, ActionMarkBroken: B, ActionMarkFixed: R, ActionRetire: RET,
	}
	// Abort has no single target to name: its refusal names the state and
	// the states it stops.
	abortRefusal := "cannot abort a machine that is %s: only a phase in progress can be aborted (a machine COMMISSIONING, DEPLOYING or RELEASING)"
	if len(allowed) != len(Actions) || len(States) != 11 {
		t.Fatalf("the test's table covers %d actions of %d, %d states", len(allowed), len(Actions), len(States))
	}
	cells := 0
	for _, from := range States {
		for _, action := range Actions {
			cells++
			t.Run(fmt.Sprintf("%s/%s", from, action), func(t *testing.T) {
				got, err := Next(from, action, true)
				want, ok := allowed[action][from]
				if ok {
					if err != nil || got != want {
						t.Fatalf("Next(%s, %s) = %q, %v; want %s", from, action, got, err, want)
					}
					return
				}
				wantMsg := fmt.Sprintf("cannot %s a machine that is %s: %s -> %s is not allowed", action, from, from, target[action])
				if action == ActionAbort {
					wantMsg = fmt.Sprintf(abortRefusal, from)
				}
				if err == nil || CodeOf(err) != CodeInvalidTransition || err.Error() != wantMsg {
					t.Fatalf("Next(%s, %s) = %q, %v; want refusal %q", from, action, got, err, wantMsg)
				}
			})
		}
	}
	if cells != 11*14 {
		t.Fatalf("covered %d cells, want 154", cells)
	}
}

// A machine whose hardware was never learnt goes back to NEW when fixed,
// and when its commissioning is aborted; the other aborts do not depend on
// it.
func TestMarkFixedUncommissioned(t *testing.T) {
	tests := map[string]struct {
		from         State
		action       Action
		commissioned bool
		want         State
	}{
		"fixed commissioned":     {StateBroken, ActionMarkFixed, true, StateReady},
		"fixed uncommissioned":   {StateBroken, ActionMarkFixed, false, StateNew},
		"abort commissioning":    {StateCommissioning, ActionAbort, true, StateReady},
		"abort first commission": {StateCommissioning, ActionAbort, false, StateNew},
		"abort deploy":           {StateDeploying, ActionAbort, false, StateAllocated},
		"abort release":          {StateReleasing, ActionAbort, false, StateBroken},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Next(tc.from, tc.action, tc.commissioned)
			if err != nil || got != tc.want {
				t.Fatalf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestNextRejectsUnknown(t *testing.T) {
	if _, err := Next("LIMBO", ActionCommission, true); CodeOf(err) != CodeInvalid {
		t.Fatalf("unknown state: got %v", err)
	}
	if _, err := Next(StateReady, "teleport", true); CodeOf(err) != CodeInvalid {
		t.Fatalf("unknown action: got %v", err)
	}
}
