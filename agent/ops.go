package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"rackd/store"
)

// The operations that change machines, with their follow-ups (metrics, the
// log, the releaser). /api/v1 and MAAS's API (package maasapi, through
// maasOps) both call these and nothing else, so one place decides what an
// allocation, a release, a deploy or a power request may do: the store.

// allocateMachine grants a machine (store.Allocate).
func (a *Agent) allocateMachine(ctx context.Context, who store.Actor, req store.AllocateRequest) (store.AllocateResult, error) {
	res, err := a.store.Allocate(ctx, who, req)
	if err != nil {
		if c := store.CodeOf(err); c != "" {
			a.metrics.allocations.WithLabelValues(string(c)).Inc()
		}
		return res, err
	}
	outcome := "unchanged"
	switch {
	case res.Created:
		outcome = "created"
	case res.Adopted:
		outcome = "adopted"
	}
	a.metrics.allocations.WithLabelValues(outcome).Inc()
	if outcome != "unchanged" {
		a.metrics.transitions.WithLabelValues(string(store.ActionAllocate)).Inc()
		a.log.Info(map[string]string{"created": "machine allocated", "adopted": "allocation adopted"}[outcome], "machine", res.Machine.ID, "hostname", res.Machine.Hostname,
			"owner", res.Machine.Owner, "agent_name", res.Machine.AgentName)
	}
	return res, nil
}

// releaseMachine starts a release (store.StartRelease).
func (a *Agent) releaseMachine(ctx context.Context, who store.Actor, machine, reason string, erase bool) (store.Machine, error) {
	m, err := a.store.StartRelease(ctx, who, machine, reason, erase)
	if err != nil {
		return m, err
	}
	a.transitioned(m, store.ActionRelease, who)
	return m, nil
}

// deployMachine starts a deployment (store.Deploy).
func (a *Agent) deployMachine(ctx context.Context, who store.Actor, req store.DeployRequest) (store.Machine, error) {
	m, err := a.store.Deploy(ctx, who, req)
	if err != nil {
		return m, err
	}
	a.transitioned(m, store.ActionDeploy, who)
	return m, nil
}

// transitionMachine applies a lifecycle action (store.Transition).
func (a *Agent) transitionMachine(ctx context.Context, who store.Actor, req store.TransitionRequest) (store.Machine, error) {
	m, err := a.store.Transition(ctx, who, req)
	if err != nil {
		return m, err
	}
	a.transitioned(m, req.Action, who)
	return m, nil
}

// abortMachine stops the phase a machine is in (store.Abort): the same
// operation for /api/v1, the CLI, the web UI and MAAS's op=abort.
func (a *Agent) abortMachine(ctx context.Context, who store.Actor, machine, reason string) (store.Machine, error) {
	m, err := a.store.Abort(ctx, who, machine, reason)
	if err != nil {
		return m, err
	}
	a.transitioned(m, store.ActionAbort, who)
	return m, nil
}

// requestMachinePower queues a power action (store.RequestPower), once the
// machine's driver is known to be one this rackd has.
func (a *Agent) requestMachinePower(ctx context.Context, who store.Actor, machine string, action store.PowerAction, reason string) (store.PowerRequest, error) {
	m, err := a.store.Machine(machine)
	if err != nil {
		return store.PowerRequest{}, err
	}
	if m.Power.Driver != "" && a.powerDrivers[m.Power.Driver] == nil {
		return store.PowerRequest{}, &store.Error{Code: store.CodeInvalid,
			Msg: fmt.Sprintf("machine %s has power driver %q, which this rackd does not have", m.Hostname, m.Power.Driver)}
	}
	pr, err := a.store.RequestPower(ctx, who, m.ID, action, reason)
	if err != nil {
		return pr, err
	}
	a.log.Info("power request", "request", pr.ID, "machine", m.ID, "hostname", m.Hostname, "action", action, "by", who.Name)
	return pr, nil
}

// createMachine adds a machine (store.CreateMachine), once its power
// address is one its driver takes; a machine of known hardware gets its
// sticky address as a commissioned one does.
func (a *Agent) createMachine(ctx context.Context, who store.Actor, nm store.NewMachine) (store.Machine, error) {
	if err := a.checkPowerAddress(nm.Power.Driver, nm.Power.Address); err != nil {
		return store.Machine{}, &store.Error{Code: store.CodeInvalid, Msg: err.Error()}
	}
	m, err := a.store.CreateMachine(ctx, who, nm)
	if err != nil {
		return m, err
	}
	a.log.Info("machine created", "machine", m.ID, "hostname", m.Hostname, "state", m.State, "by", who.Name)
	a.ensureSticky(ctx, m)
	return m, nil
}

// updateMachine changes a machine's record (store.UpdateMachine), once a
// new power driver and address are ones this rackd takes.
func (a *Agent) updateMachine(ctx context.Context, who store.Actor, machine string, p store.MachinePatch) (store.Machine, error) {
	if d := p.Power.Driver; d != nil {
		if err := a.checkDriver(*d); err != nil {
			return store.Machine{}, err
		}
	}
	if p.Power.Driver != nil || p.Power.Address != nil {
		var driver, addr string
		if old, err := a.store.Machine(machine); err == nil && !p.ClearPower {
			driver, addr = old.Power.Driver, old.Power.Address
		}
		if p.Power.Driver != nil {
			driver = *p.Power.Driver
		}
		if p.Power.Address != nil {
			addr = *p.Power.Address
		}
		if err := a.checkPowerAddress(driver, addr); err != nil {
			return store.Machine{}, &store.Error{Code: store.CodeInvalid, Msg: err.Error()}
		}
	}
	m, err := a.store.UpdateMachine(ctx, who, machine, p)
	if err != nil {
		return m, err
	}
	a.log.Info("machine updated", "machine", m.ID, "hostname", m.Hostname, "by", who.Name)
	return m, nil
}

// deleteMachine removes a machine (store.DeleteMachine).
func (a *Agent) deleteMachine(ctx context.Context, who store.Actor, req store.DeleteRequest) (store.Machine, error) {
	m, err := a.store.DeleteMachine(ctx, who, req)
	if err != nil {
		return m, err
	}
	a.log.Info("machine deleted", "machine", m.ID, "hostname", m.Hostname, "state", m.State, "force", req.Force, "by", who.Name)
	return m, nil
}

// checkDriver refuses a power driver this rackd does not have: the store
// cannot know which it has, and a machine set to one it lacks would fail
// every power request later.
func (a *Agent) checkDriver(driver string) error {
	name := strings.ToLower(strings.TrimSpace(driver))
	if name == "" || a.powerDrivers[name] != nil {
		return nil
	}
	return &store.Error{Code: store.CodeInvalid, Msg: fmt.Sprintf("power driver %q is not in this rackd (known: %s)",
		driver, strings.Join(slices.Sorted(maps.Keys(a.powerDrivers)), ", "))}
}

// maasOps are the operations as package maasapi calls them.
type maasOps struct{ a *Agent }

func (o maasOps) Allocate(ctx context.Context, who store.Actor, req store.AllocateRequest) (store.AllocateResult, error) {
	return o.a.allocateMachine(ctx, who, req)
}

func (o maasOps) Release(ctx context.Context, who store.Actor, machine, reason string, erase bool) (store.Machine, error) {
	return o.a.releaseMachine(ctx, who, machine, reason, erase)
}

func (o maasOps) Deploy(ctx context.Context, who store.Actor, req store.DeployRequest) (store.Machine, error) {
	return o.a.deployMachine(ctx, who, req)
}

func (o maasOps) Transition(ctx context.Context, who store.Actor, req store.TransitionRequest) (store.Machine, error) {
	return o.a.transitionMachine(ctx, who, req)
}

func (o maasOps) Abort(ctx context.Context, who store.Actor, machine, reason string) (store.Machine, error) {
	return o.a.abortMachine(ctx, who, machine, reason)
}

func (o maasOps) Create(ctx context.Context, who store.Actor, nm store.NewMachine) (store.Machine, error) {
	return o.a.createMachine(ctx, who, nm)
}

func (o maasOps) Update(ctx context.Context, who store.Actor, machine string, p store.MachinePatch) (store.Machine, error) {
	return o.a.updateMachine(ctx, who, machine, p)
}

func (o maasOps) Delete(ctx context.Context, who store.Actor, req store.DeleteRequest) (store.Machine, error) {
	return o.a.deleteMachine(ctx, who, req)
}

func (o maasOps) RequestPower(ctx context.Context, who store.Actor, machine string, action store.PowerAction, reason string) (store.PowerRequest, error) {
	return o.a.requestMachinePower(ctx, who, machine, action, reason)
}
