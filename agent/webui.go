package agent

import (
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"rackd/api"
	"rackd/power/queue"
	"rackd/store"
	"rackd/webui"
)

// newUI builds the web UI over the agent's own API handler: every action a
// page takes is an API request served in process with the session's token.
// The store's events and the power queue's finished requests feed its live
// updates.
func (a *Agent) newUI() error {
	name := a.cfg.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	ui, err := webui.New(webui.Options{
		Name:         name,
		API:          http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.api.ServeHTTP(w, r) }),
		Authenticate: a.store.Authenticate,
		Hold:         a.holdUser,
		Allowed:      a.allowed,
		Data:         uiData{a},
		Log:          a.log.With("service", "webui"),
		Bodies:       a.bodies,
		PowerDrivers: slices.Sorted(maps.Keys(a.powerDrivers)),
	})
	if err != nil {
		return err
	}
	a.ui = ui
	a.store.OnEvent(a.onStoreEvent)
	return nil
}

// UI is the agent's web UI (tests, benchmarks).
func (a *Agent) UI() *webui.UI { return a.ui }

// routeAccess is the route table's access levels, by pattern, and a mux
// that finds a request's pattern.
type routeAccess struct {
	mux    *http.ServeMux
	access map[string]access
}

func newRouteAccess() *routeAccess {
	ra := &routeAccess{mux: http.NewServeMux(), access: map[string]access{}}
	for _, rt := range routes() {
		ra.mux.Handle(rt.pattern, http.NotFoundHandler())
		ra.access[rt.pattern] = rt.access
	}
	return ra
}

// allowed says whether who may call the API route that method and path
// name, by the route's access level in the table: the UI shows an action
// only to those the API would let through its guard.
func (a *Agent) allowed(who store.Actor, method, path string) bool {
	_, pattern := a.routeAccess.mux.Handler(&http.Request{Method: method, URL: &url.URL{Path: path}, Host: "rackd"})
	acc, ok := a.routeAccess.access[pattern]
	switch {
	case !ok:
		return false
	case acc == admin:
		return who.Admin
	case acc == user:
		return who.Name != ""
	}
	return true
}

// isAPIPath is a path of the API, the metadata, the boot files, /healthz or
// /metrics: an unknown one is a JSON 404, never a page.
func isAPIPath(p string) bool {
	for _, prefix := range []string{"/api/", "/metadata/", "/boot/", "/MAAS/api/"} {
		if strings.HasPrefix(p, prefix) || p == strings.TrimSuffix(prefix, "/") {
			return true
		}
	}
	return p == "/healthz" || p == "/metrics"
}

// uiData is what the UI reads besides the API's JSON, through the
// functions the API handlers call.
type uiData struct{ a *Agent }

func (d uiData) Machines(f store.Filter) ([]store.Machine, error) { return d.a.store.ListMachines(f) }

func (d uiData) MachineViews(ms []store.Machine, who store.Actor) []api.Machine {
	out := make([]api.Machine, len(ms))
	for i, m := range ms {
		out[i] = d.a.machineViewFor(m, who)
	}
	return out
}

func (d uiData) Machine(idOrName string) (store.Machine, error) { return d.a.store.Machine(idOrName) }

func (d uiData) CountByState() (map[store.State]int, error) { return d.a.store.CountByState() }

func (d uiData) RecentEvents(limit int) ([]store.Event, error) { return d.a.store.RecentEvents(limit) }

func (d uiData) PowerHistory(machine string, limit int) ([]api.PowerRequest, error) {
	rs, err := d.a.store.PowerHistory(machine, limit)
	out := make([]api.PowerRequest, len(rs))
	for i, r := range rs {
		out[i] = powerRequestView(r)
	}
	return out, err
}

func (d uiData) PowerHealth() (queue.Health, error) { return d.a.power.Health() }
