package agent

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"rackd/api"
	"rackd/power"
	"rackd/power/queue"
	"rackd/store"
)

// newPower builds the power drivers and the queue. Drivers are chosen by the
// name in each machine's power parameters.
func (a *Agent) newPower(cfg Config) error {
	a.powerDrivers = map[string]power.Driver{}
	if err := a.addDrivers(); err != nil {
		return err
	}
	if f := cfg.Power.Fake; f.Enabled {
		if a.opts.fakePower == nil {
			return fmt.Errorf("power.fake.enabled: this rackd has no fake power driver (it is test code: " +
				"only test binaries and a rackd built with -tags rackd_fakepower have it)")
		}
		fake, closeFake, err := a.opts.fakePower(time.Duration(f.Latency), f.Log, f.HangAfter)
		if err != nil {
			return fmt.Errorf("power.fake: %w", err)
		}
		a.fakePower = fake
		a.powerClose = append(a.powerClose, closeFake)
		a.powerDrivers["fake"] = fake
		a.log.Warn("power: the fake driver is enabled: machines with driver \"fake\" have simulated BMCs")
	}
	a.power = queue.New(a.store, a.powerDrivers, cfg.Power.queueConfig(), a.log.With("service", "power"),
		queue.NewMetrics(a.metrics.reg))
	if a.cluster != nil {
		// Several agents: this one drives the BMCs of the shards it leads.
		a.power.SetOwner(powerOwner{a.cluster})
	}
	a.power.OnFinish(func(r store.PowerRequest) {
		if a.recorder != nil {
			a.recorder.powered(r)
		}
		if a.ui != nil {
			a.ui.Hub().Power(r)
		}
		if r.Action == store.PowerOff {
			select {
			case a.releases <- r.Machine:
			default: // full: the watchdog's sweep picks it up
			}
		}
	})
	return nil
}

// FakePower is the fake driver (nil unless [power.fake] enables it), for
// tests.
func (a *Agent) FakePower() power.Driver { return a.fakePower }

// fillPower puts the machine's desired and observed power into its view.
func (a *Agent) fillPower(v *api.Machine, m store.Machine) {
	ps, err := a.store.MachinePower(m)
	if err != nil {
		a.log.Warn("read machine power", "machine", m.ID, "err", err)
		return
	}
	v.Power.Desired, v.Power.Observed = ps.Desired.String(), ps.Observed.String()
}

func powerRequestView(r store.PowerRequest) api.PowerRequest {
	return api.PowerRequest{ID: r.ID, Machine: r.Machine, Action: string(r.Action), State: string(r.State),
		SupersededBy: r.SupersededBy, Error: r.Error, Who: r.Who, Reason: r.Why, NextBoot: r.NextBoot,
		Attempts: r.Attempts, Created: r.Created, Started: r.Started, Finished: r.Finished}
}

// requestPower queues a power action: 202 once the request is durable.
func (a *Agent) requestPower(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.PowerAction
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	action := store.PowerAction(strings.ToLower(req.Action))
	if !action.Valid() {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("unknown power action %q: want on, off, cycle or query", req.Action))
		return
	}
	pr, err := a.requestMachinePower(r.Context(), who, r.PathValue("id"), action, req.Reason)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, powerRequestView(pr))
}

func (a *Agent) powerRequest(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	pr, err := a.store.PowerRequest(r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, powerRequestView(pr))
}

func (a *Agent) machinePower(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	m, err := a.store.Machine(r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	ps, err := a.store.MachinePower(m)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	open, err := a.store.OpenPowerRequests(m.ID)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	v := api.MachinePower{Machine: m.ID, Driver: m.Power.Driver, Desired: ps.Desired.String(),
		Observed: ps.Observed.String(), ObservedAt: ps.ObservedAt, Policy: string(ps.Mode), Drift: ps.Drift,
		Pending: []api.PowerRequest{}}
	for _, o := range open {
		v.Pending = append(v.Pending, powerRequestView(o))
	}
	writeJSON(w, http.StatusOK, v)
}

// powerTransition counts a transition a failed power request forced
// (store.FinishPower): a phase that could not power its machine on, a
// release that could not power it off.
func (a *Agent) powerTransition(e store.Event) {
	a.metrics.transitions.WithLabelValues(e.Action).Inc()
	phase := map[store.State]string{store.StateCommissioning: store.PhaseCommission, store.StateDeploying: store.PhaseDeploy}[e.From]
	if phase != "" && a.phases != nil {
		a.phases.failures.WithLabelValues(phase, "power").Inc()
	}
	a.log.Warn("a failed power request ended the machine's state", "machine", e.Machine, "action", e.Action,
		"from", e.From, "to", e.To, "reason", e.Reason)
}
