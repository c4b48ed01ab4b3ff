package agent

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"rackd/agent/api"
	"rackd/power"
	"rackd/power/powertest"
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
		fake := powertest.NewFake()
		if f.Log != "" {
			var err error
			if fake, err = powertest.OpenFake(f.Log); err != nil {
				return err
			}
		}
		fake.SetLatency(time.Duration(f.Latency))
		a.fakePower = fake
		a.powerClose = append(a.powerClose, fake.Close)
		a.powerDrivers["fake"] = fake
		a.log.Warn("power: the fake driver is enabled: machines with driver \"fake\" have simulated BMCs")
	}
	a.power = queue.New(a.store, a.powerDrivers, cfg.Power.queueConfig(), a.log.With("service", "power"),
		queue.NewMetrics(a.metrics.reg))
	a.power.OnFinish(func(r store.PowerRequest) {
		if r.Action == store.PowerOff {
			select {
			case a.releases <- r.Machine:
			default: // full: the watchdog's sweep picks it up
			}
		}
	})
	return nil
}

// FakePower is the fake driver's simulated BMCs (nil unless [power.fake]
// enables them), for tests.
func (a *Agent) FakePower() *powertest.Fake { return a.fakePower }

// fillPower puts the machine's desired and observed power into its view.
func (a *Agent) fillPower(v *api.Machine, m store.Machine) {
	ps, err := a.store.MachinePower(m)
	if err != nil {
		a.log.Warn("read machine power", "machine", m.ID, "err", err)
		return
	}
	v.Power.Desired, v.Power.Observed = orUnknown(ps.Desired), orUnknown(ps.Observed)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
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
	m, err := a.store.Machine(r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	if m.Power.Driver != "" && a.powerDrivers[m.Power.Driver] == nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest,
			fmt.Sprintf("machine %s has power driver %q, which this rackd does not have", m.Hostname, m.Power.Driver))
		return
	}
	pr, err := a.store.RequestPower(r.Context(), who, m.ID, action, req.Reason)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("power request", "request", pr.ID, "machine", m.ID, "hostname", m.Hostname, "action", action, "by", who.Name)
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
	v := api.MachinePower{Machine: m.ID, Driver: m.Power.Driver, Desired: orUnknown(ps.Desired),
		Observed: orUnknown(ps.Observed), ObservedAt: ps.ObservedAt, Policy: string(ps.Mode), Drift: ps.Drift,
		Pending: []api.PowerRequest{}}
	for _, o := range open {
		v.Pending = append(v.Pending, powerRequestView(o))
	}
	writeJSON(w, http.StatusOK, v)
}
