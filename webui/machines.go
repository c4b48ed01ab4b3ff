package webui

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"rackd/api"
	"rackd/store"
)

// PageSize is how many machines one page of the machine list shows.
const PageSize = 100

// machineQuery is the machine list's filter, sort and page, as GET query
// parameters (so that a page can be bookmarked and reloaded).
type machineQuery struct {
	State, Owner, Tag, Q string
	Sort                 string
	Desc                 bool
	Page                 int
}

var sortKeys = []string{"hostname", "state", "owner", "arch", "cpu", "memory", "created"}

func readMachineQuery(v url.Values) machineQuery {
	q := machineQuery{State: strings.ToUpper(strings.TrimSpace(v.Get("state"))), Owner: strings.TrimSpace(v.Get("owner")),
		Tag: strings.TrimSpace(v.Get("tag")), Q: strings.TrimSpace(v.Get("q")), Sort: v.Get("sort"), Desc: v.Get("dir") == "desc"}
	if !slices.Contains(sortKeys, q.Sort) {
		q.Sort = "hostname"
	}
	if !store.State(q.State).Valid() {
		q.State = ""
	}
	q.Page, _ = strconv.Atoi(v.Get("page"))
	q.Page = max(q.Page, 1)
	return q
}

// URL is the list with q's parameters, changed by the (key, value) pairs.
func (q machineQuery) URL(kv ...string) string {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("state", q.State)
	set("owner", q.Owner)
	set("tag", q.Tag)
	set("q", q.Q)
	if q.Sort != "hostname" {
		v.Set("sort", q.Sort)
	}
	if q.Desc {
		v.Set("dir", "desc")
	}
	if q.Page > 1 {
		v.Set("page", strconv.Itoa(q.Page))
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			v.Del(kv[i])
		} else {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return "/machines"
	}
	return "/machines?" + v.Encode()
}

// SortURL is the list sorted by key: ascending, or descending when it is
// already sorted by key ascending.
func (q machineQuery) SortURL(key string) string {
	dir := ""
	if q.Sort == key && !q.Desc {
		dir = "desc"
	}
	s := key
	if key == "hostname" {
		s = ""
	}
	return q.URL("sort", s, "dir", dir, "page", "")
}

// SortMark is the arrow of the sorted column (aria-sort's value too).
func (q machineQuery) SortMark(key string) string {
	if q.Sort != key {
		return "none"
	}
	if q.Desc {
		return "descending"
	}
	return "ascending"
}

// match is the list's text and tag filter (the store filters by state and
// owner).
func (q machineQuery) match(m *store.Machine) bool {
	if q.Tag != "" && !slices.Contains(m.Tags, q.Tag) {
		return false
	}
	if q.Q == "" {
		return true
	}
	needle := strings.ToLower(q.Q)
	if strings.Contains(strings.ToLower(m.Hostname), needle) || strings.HasPrefix(m.ID, q.Q) ||
		strings.Contains(strings.ToLower(m.AgentName), needle) {
		return true
	}
	for _, mac := range m.MACs {
		if strings.Contains(mac, needle) {
			return true
		}
	}
	return slices.ContainsFunc(m.Tags, func(t string) bool { return strings.Contains(strings.ToLower(t), needle) })
}

func (q machineQuery) less(a, b *store.Machine) int {
	var c int
	switch q.Sort {
	case "state":
		c = cmp.Compare(stateOrder(a.State), stateOrder(b.State))
	case "owner":
		c = cmp.Compare(a.Owner, b.Owner)
	case "arch":
		c = cmp.Compare(a.Arch, b.Arch)
	case "cpu":
		c = cmp.Compare(a.CPUCount, b.CPUCount)
	case "memory":
		c = cmp.Compare(a.MemoryMB, b.MemoryMB)
	case "created":
		c = a.Created.Compare(b.Created)
	}
	if q.Desc {
		c = -c
	}
	return c // ties keep the store's hostname order (stable sort)
}

func stateOrder(s store.State) int { return slices.Index(store.States, s) }

type machinesData struct {
	Q       machineQuery
	States  []store.State
	Rows    []api.Machine
	Total   int // machines matching the filter
	Page    int
	Pages   int
	First   int // 1-based index of the first row shown
	Last    int
	Prev    string
	Next    string
	Columns []column
	Bulk    []bulkAction
}

type column struct {
	Key, Label string
}

var machineColumns = []column{{"hostname", "Hostname"}, {"state", "State"}, {"owner", "Owner"},
	{"arch", "Arch"}, {"cpu", "CPUs"}, {"memory", "Memory"}, {"created", "Created"}}

// bulkAction is one of the actions the machine list applies to the
// machines ticked: each becomes one API request per machine.
type bulkAction struct {
	Value, Label string
	method       string
	path         func(id string) string
	body         any
}

var bulkActions = []bulkAction{
	{"commission", "Commission", http.MethodPost, func(id string) string { return "/api/v1/machines/" + seg(id) + "/commission" }, nil},
	{"power-off", "Power off", http.MethodPost, func(id string) string { return "/api/v1/machines/" + seg(id) + "/power" }, api.PowerAction{Action: "off", Reason: "bulk action in the web UI"}},
	{"release", "Release", http.MethodPost, func(id string) string { return "/api/v1/machines/" + seg(id) + "/release" }, nil},
}

// machinesPage is the machine list. It reads the machines once (as GET
// /api/v1/machines does), filters and sorts them in memory, and builds the
// API's view (addresses, power) for the rows of one page only: a rack of
// 10,000 machines renders a page faster than the API lists them all.
func (u *UI) machinesPage(w http.ResponseWriter, r *http.Request, s *reqSession) {
	q := readMachineQuery(r.URL.Query())
	all, err := u.opts.Data.Machines(store.Filter{State: store.State(q.State), Owner: q.Owner})
	if err != nil {
		u.internal(w, r, s, err)
		return
	}
	ms := all
	if q.Tag != "" || q.Q != "" || !s.actor.Admin {
		// Another user's held machine is not listed (store.MayView, as
		// GET /api/v1/machines).
		ms = make([]store.Machine, 0, len(all))
		for i := range all {
			if q.match(&all[i]) && store.MayView(s.actor, all[i], all[i].ID) == nil {
				ms = append(ms, all[i])
			}
		}
	}
	if q.Sort != "hostname" || q.Desc {
		slices.SortStableFunc(ms, func(a, b store.Machine) int {
			if c := q.less(&a, &b); c != 0 {
				return c
			}
			if q.Sort == "hostname" {
				return -cmp.Compare(a.Hostname, b.Hostname)
			}
			return 0
		})
	}
	d := machinesData{Q: q, States: store.States, Total: len(ms), Columns: machineColumns, Bulk: bulkActions}
	d.Pages = max(1, (len(ms)+PageSize-1)/PageSize)
	d.Page = min(q.Page, d.Pages)
	start := (d.Page - 1) * PageSize
	end := min(start+PageSize, len(ms))
	d.Rows = u.opts.Data.MachineViews(ms[start:end], s.actor)
	d.First, d.Last = start+1, end
	if d.Page > 1 {
		d.Prev = q.URL("page", strconv.Itoa(d.Page-1))
	}
	if d.Page < d.Pages {
		d.Next = q.URL("page", strconv.Itoa(d.Page+1))
	}
	u.render(w, r, s, http.StatusOK, "machines", "Machines", "machines", d)
}

func (u *UI) internal(w http.ResponseWriter, r *http.Request, s *reqSession, err error) {
	u.log.Error("webui: page", "path", r.URL.Path, "err", err)
	u.renderStatus(w, r, s, http.StatusInternalServerError, "Error", "rackd could not read what this page shows; the rackd log has the details.")
}

type bulkData struct {
	Action   bulkAction
	Machines []api.Machine
	Missing  []string
	Results  []bulkResult
	Back     string
}

type bulkResult struct {
	Machine api.Machine
	OK      bool
	Message string
	// PowerSettings: the message ends with a link to the machine's power
	// settings.
	PowerSettings bool
}

// bulk applies one action to the machines ticked: first a confirmation
// page listing them, then (confirm=yes) one API request per machine, each
// refused or done on its own.
func (u *UI) bulk(w http.ResponseWriter, r *http.Request, s *reqSession) {
	ai := slices.IndexFunc(bulkActions, func(b bulkAction) bool { return b.Value == r.PostFormValue("action") })
	back := safeNext(r.PostFormValue("back"))
	if !strings.HasPrefix(back, "/machines") {
		back = "/machines"
	}
	if ai < 0 {
		u.sessions.addFlash(s.session, flash{Error: true, Text: "Choose an action for the machines ticked."})
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	ids := slices.Compact(slices.Sorted(slices.Values(r.PostForm["id"])))
	if len(ids) == 0 {
		u.sessions.addFlash(s.session, flash{Error: true, Text: "Tick the machines to " + strings.ToLower(bulkActions[ai].Label) + " first."})
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	if len(ids) > PageSize*10 {
		u.renderStatus(w, r, s, http.StatusBadRequest, "Too many", fmt.Sprintf("At most %d machines at a time.", PageSize*10))
		return
	}
	d := bulkData{Action: bulkActions[ai], Back: back}
	for _, id := range ids {
		var m api.Machine
		if err := u.get(r, s, "/api/v1/machines/"+seg(id), &m); err != nil {
			d.Missing = append(d.Missing, id)
			continue
		}
		d.Machines = append(d.Machines, m)
	}
	if r.PostFormValue("confirm") != "yes" {
		u.render(w, r, s, http.StatusOK, "bulk", "Confirm: "+d.Action.Label, "machines", d)
		return
	}
	for _, m := range d.Machines {
		res := u.call(r, s, d.Action.method, d.Action.path(m.ID), d.Action.body)
		br := bulkResult{Machine: m, OK: res.OK(), Message: "done"}
		if !res.OK() {
			br.Message = res.Message()
			if d.Action.Value == "commission" && res.Status == http.StatusConflict && m.Power.Driver == "" {
				// The API's words name the CLI; the machine's page
				// has the form.
				br.Message, br.PowerSettings = "no power driver, so nothing would boot it:", true
			}
		}
		d.Results = append(d.Results, br)
	}
	u.render(w, r, s, http.StatusOK, "bulk", d.Action.Label+": results", "machines", d)
}

// actionView is one lifecycle action offered on a machine's page.
type actionView struct {
	Action string
	Label  string
	// Reason, Erase, Deploy: the fields its form has.
	Reason, Erase, Deploy bool
	// Now says whether the machine's state allows it (the others are
	// offered under "other actions"; the API says why it refuses).
	Now bool
	// OnlyNow: offered only when the state allows it (abort: there is no
	// phase to stop otherwise).
	OnlyNow bool
	// Confirm asks before sending, with this question (after the
	// machine's name and state).
	Confirm string
}

var lifecycleActions = []actionView{
	{Action: "commission", Label: "Commission"},
	{Action: "deploy", Label: "Deploy", Deploy: true},
	{Action: "release", Label: "Release", Erase: true, Reason: true},
	{Action: "mark-broken", Label: "Mark broken", Reason: true},
	{Action: "mark-fixed", Label: "Mark fixed", Reason: true},
	{Action: "retire", Label: "Retire", Reason: true},
	{Action: "abort", Label: "Abort", Reason: true, OnlyNow: true,
		Confirm: "Abort: stop the phase and power the machine off?"},
}

type machineData struct {
	M        api.Machine
	Events   []api.Event
	Power    *api.MachinePower
	PowerErr string
	History  []api.PowerRequest
	Phases   []phaseTiming
	// MoreEvents, MorePower, MorePhases link to the page showing more of
	// each ("" when everything is shown).
	MoreEvents, MorePower, MorePhases string
	// PowerFailure is the newest finished power request when it failed.
	PowerFailure *api.PowerRequest
	// PowerSettings: who may change the machine's power settings
	// (PATCH /api/v1/machines/{id}), with the drivers this rackd has.
	PowerSettings bool
	Drivers       []string
	Actions       []actionView
	Other         []actionView
	CanPower      bool
	CanIPs        bool
	Allocate      bool
	Images        []api.Image
	Subnets       []api.Subnet
}

func isTransient(state string) bool {
	switch store.State(state) {
	case store.StateCommissioning, store.StateDeploying, store.StateReleasing:
		return true
	}
	return false
}

// phaseTiming is one commissioning, deployment or release, from the
// machine's events.
type phaseTiming struct {
	Phase    string
	Started  time.Time
	Ended    time.Time
	Duration time.Duration
	Outcome  string // the state it ended in; "" while running
}

// phaseTimings reads the phases out of a machine's events (oldest first):
// a phase starts with the transition into a transient state and ends with
// the next transition out of it.
func phaseTimings(evs []api.Event, now time.Time) []phaseTiming {
	var out []phaseTiming
	open := -1
	for _, e := range evs {
		if e.To == "" {
			continue
		}
		if open >= 0 && e.From == out[open].Phase {
			out[open].Ended, out[open].Outcome = e.Time, e.To
			out[open].Duration = e.Time.Sub(out[open].Started)
			open = -1
		}
		if isTransient(e.To) && e.From != e.To {
			out = append(out, phaseTiming{Phase: e.To, Started: e.Time})
			open = len(out) - 1
		}
	}
	if open >= 0 {
		out[open].Duration = now.Sub(out[open].Started)
	}
	slices.Reverse(out)
	return out
}

// The machine page shows the newest few of a machine's events, power
// requests and phases; its "more" links ask for more (query parameters
// events, power and phases), up to maxShown.
const (
	shownEvents, moreEvents = 10, 50
	shownPower, morePower   = 5, 20
	shownPhases, morePhases = 5, 20
	// phaseEvents is how many of the newest events the phase timings are
	// read from, at least.
	phaseEvents = 200
	maxShown    = 5000
)

// shown reads how many of a list the page shows: the query's key, at least
// def, at most maxShown.
func shown(q url.Values, key string, def int) int {
	n, err := strconv.Atoi(q.Get(key))
	if err != nil || n < def {
		return def
	}
	return min(n, maxShown)
}

// moreURL is the machine page showing n of the list key, the rest as it is,
// scrolled to anchor.
func moreURL(id string, q url.Values, key string, n int, anchor string) string {
	v := url.Values{}
	for _, k := range []string{"events", "power", "phases"} {
		if q.Get(k) != "" {
			v.Set(k, q.Get(k))
		}
	}
	v.Set(key, strconv.Itoa(n))
	return machineBack(id) + "?" + v.Encode() + "#" + anchor
}

func (u *UI) machinePage(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	q := r.URL.Query()
	nEvents, nPower, nPhases := shown(q, "events", shownEvents), shown(q, "power", shownPower), shown(q, "phases", shownPhases)
	var d machineData
	res := u.call(r, s, http.MethodGet, "/api/v1/machines/"+seg(id), nil)
	if res.Status == http.StatusNotFound {
		u.renderStatus(w, r, s, http.StatusNotFound, "Not found", res.Message())
		return
	}
	if err := res.Decode(&d.M); err != nil {
		u.renderStatus(w, r, s, res.Status, "Error", err.Error())
		return
	}
	if err := u.get(r, s, "/api/v1/machines/"+seg(d.M.ID)+"/events?limit="+strconv.Itoa(max(phaseEvents, nEvents+1)), &d.Events); err != nil {
		u.sessions.addFlash(s.session, flash{Error: true, Text: "events: " + err.Error()})
	}
	var p api.MachinePower
	if err := u.get(r, s, "/api/v1/machines/"+seg(d.M.ID)+"/power", &p); err != nil {
		d.PowerErr = err.Error()
	} else {
		d.Power = &p
	}
	hist, err := u.opts.Data.PowerHistory(d.M.ID, nPower+1)
	if err != nil {
		u.log.Warn("webui: power history", "machine", d.M.ID, "err", err)
	}
	for i := range hist {
		if st := hist[i].State; st == string(store.PowerDone) || st == string(store.PowerFailed) {
			if st == string(store.PowerFailed) {
				d.PowerFailure = &hist[i]
			}
			break
		}
	}
	if len(hist) > nPower {
		hist, d.MorePower = hist[:nPower], moreURL(d.M.ID, q, "power", nPower+morePower, "h-power-requests")
	}
	d.History = hist
	d.Phases = phaseTimings(d.Events, u.now())
	if len(d.Phases) > nPhases {
		d.Phases, d.MorePhases = d.Phases[:nPhases], moreURL(d.M.ID, q, "phases", nPhases+morePhases, "h-phases")
	}
	// The timeline shows the newest first (the live updates add on top).
	slices.Reverse(d.Events)
	if len(d.Events) > nEvents {
		d.Events, d.MoreEvents = d.Events[:nEvents], moreURL(d.M.ID, q, "events", nEvents+moreEvents, "h-events")
	}
	sm := store.Machine{ID: d.M.ID, Hostname: d.M.Hostname, Owner: d.M.Owner, State: store.State(d.M.State)}
	for _, a := range lifecycleActions {
		if store.MayAct(s.actor, sm, store.Action(a.Action)) != nil {
			continue
		}
		_, err := store.Next(sm.State, store.Action(a.Action), false)
		a.Now = err == nil
		if a.Now {
			d.Actions = append(d.Actions, a)
		} else if !a.OnlyNow {
			d.Other = append(d.Other, a)
		}
	}
	d.CanPower = store.MayDrivePower(s.actor, sm) == nil && d.M.Power.Driver != ""
	d.CanIPs = store.MayChangeAddresses(s.actor, sm) == nil
	if d.PowerSettings = u.opts.Allowed(s.actor, http.MethodPatch, "/api/v1/machines/"+seg(d.M.ID)); d.PowerSettings {
		d.Drivers = u.opts.PowerDrivers
		if d.M.Power.Driver != "" && !slices.Contains(d.Drivers, d.M.Power.Driver) {
			d.Drivers = append(slices.Clone(d.Drivers), d.M.Power.Driver)
		}
	}
	_, aerr := store.Next(sm.State, store.ActionAllocate, false)
	d.Allocate = aerr == nil && u.opts.Allowed(s.actor, http.MethodPost, "/api/v1/allocations")
	if slices.ContainsFunc(d.Actions, func(a actionView) bool { return a.Deploy }) ||
		slices.ContainsFunc(d.Other, func(a actionView) bool { return a.Deploy }) {
		var ims []api.Image
		if u.get(r, s, "/api/v1/images", &ims) == nil {
			for _, im := range ims {
				if im.Purpose == "deploy" && (d.M.Arch == "" || im.Arch == d.M.Arch) {
					d.Images = append(d.Images, im)
				}
			}
		}
	}
	if d.CanIPs {
		u.get(r, s, "/api/v1/subnets", &d.Subnets)
	}
	u.render(w, r, s, http.StatusOK, "machine", d.M.Hostname, "machines", d)
}

func machineBack(id string) string { return "/machines/" + url.PathEscape(id) }

// machineAction is a lifecycle action: POST /api/v1/machines/{id}/{action}.
func (u *UI) machineAction(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	action := r.PostFormValue("action")
	req := api.ActionRequest{Reason: strings.TrimSpace(r.PostFormValue("reason")), Erase: r.PostFormValue("erase") == "on"}
	if action == "deploy" {
		req.Image = r.PostFormValue("image")
		if data := s.files["user_data"]; len(data) > 0 {
			// Over api.MaxUserData, the API refuses it and says so.
			req.UserData = base64.StdEncoding.EncodeToString(data)
		}
		for _, line := range strings.Split(r.PostFormValue("ssh_keys"), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				req.SSHKeys = append(req.SSHKeys, line)
			}
		}
	}
	var body any
	if req.Reason != "" || req.Erase || req.Image != "" || req.UserData != "" || len(req.SSHKeys) > 0 {
		body = req
	}
	res := u.call(r, s, http.MethodPost, "/api/v1/machines/"+seg(id)+"/"+seg(action), body)
	if res.Status == http.StatusConflict && (action == "commission" || action == "release" && req.Erase) &&
		u.opts.Allowed(s.actor, http.MethodPatch, "/api/v1/machines/"+seg(id)) {
		// The API's words name the CLI; on this page the form is at hand.
		var m api.Machine
		if u.get(r, s, "/api/v1/machines/"+seg(id), &m) == nil && m.Power.Driver == "" {
			text := fmt.Sprintf("%s has no power driver, so nothing would boot it: set one in the power settings below "+
				"(the manual driver if you power it by hand), then commission it again.", m.Hostname)
			if action == "release" {
				text = fmt.Sprintf("%s has no power driver, so nothing would boot the erase environment: release it without erase, "+
					"or set a power driver in the power settings below first (the manual driver if you power it by hand).", m.Hostname)
			}
			u.sessions.addFlash(s.session, flash{Error: true, Text: text})
			http.Redirect(w, r, machineBack(id)+"#power-settings", http.StatusSeeOther)
			return
		}
	}
	notice := ""
	if res.OK() {
		var m api.Machine
		if res.Decode(&m) == nil {
			notice = fmt.Sprintf("%s: %s, now %s.", m.Hostname, action, m.State)
			if m.Notice != "" {
				notice += " " + m.Notice
			}
		}
	}
	u.done(w, r, s, res, machineBack(id), notice)
}

// machinePower queues a power action: POST /api/v1/machines/{id}/power.
func (u *UI) machinePower(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	res := u.call(r, s, http.MethodPost, "/api/v1/machines/"+seg(id)+"/power",
		api.PowerAction{Action: r.PostFormValue("action"), Reason: strings.TrimSpace(r.PostFormValue("reason"))})
	notice := ""
	var pr api.PowerRequest
	if res.OK() && res.Decode(&pr) == nil {
		notice = fmt.Sprintf("Power %s queued (request %s).", pr.Action, pr.ID)
	}
	u.done(w, r, s, res, machineBack(id), notice)
}

// machinePowerSettings changes the machine's power driver, address,
// credentials and the driver's own settings: PATCH /api/v1/machines/{id}
// with the members the form changes (the credentials only when typed: they
// are write-only and never shown back), then, when asked, a power query
// that tries them on the BMC.
func (u *UI) machinePowerSettings(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	var m api.Machine
	if err := u.get(r, s, "/api/v1/machines/"+seg(id), &m); err != nil {
		u.done(w, r, s, apiResult{Status: http.StatusNotFound, Body: errorBody(err.Error())}, "/machines", "")
		return
	}
	back := machineBack(m.ID)
	f := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	driver := strings.ToLower(f("driver"))
	patch := api.MachinePatch{Reason: f("reason")}
	if driver == "" {
		// No driver: every power parameter goes.
		patch.Power = api.Field[*api.PowerPatch]{Set: true}
	} else {
		pp := &api.PowerPatch{Driver: api.Some(driver)}
		if a := f("address"); a != m.Power.Address {
			pp.Address = api.Some(a)
		}
		if r.PostFormValue("clear_credentials") == "on" {
			pp.Username, pp.Password = api.Some(""), api.Some("")
		} else {
			if v := f("username"); v != "" {
				pp.Username = api.Some(v)
			}
			if v := r.PostFormValue("password"); v != "" {
				pp.Password = api.Some(v) // as typed: a password may have spaces
			}
		}
		if driver == "redfish" {
			if fp := f("tls_fingerprint"); fp != "" {
				pp.TLSFingerprint = api.Some(fp)
			} else if r.PostFormValue("forget_certificate") == "on" {
				pp.TLSFingerprint = api.Some("")
			}
			if insecure := r.PostFormValue("insecure_tls") == "on"; insecure != m.Power.InsecureTLS {
				pp.InsecureTLS = api.Some(insecure)
			}
			if bm := f("boot_mode"); bm != m.Power.BootMode {
				pp.BootMode = api.Some(bm)
			}
		} else {
			// Another driver takes none of redfish's settings.
			if m.Power.TLSFingerprint != "" {
				pp.TLSFingerprint = api.Some("")
			}
			if m.Power.InsecureTLS {
				pp.InsecureTLS = api.Some(false)
			}
			if m.Power.BootMode != "" {
				pp.BootMode = api.Some("")
			}
		}
		switch cs := f("cipher_suite"); {
		case driver != "ipmi":
			pp.CipherSuite = api.Some(0)
		case cs != "":
			n, err := strconv.Atoi(cs)
			if err != nil {
				u.done(w, r, s, apiResult{Status: http.StatusBadRequest, Body: errorBody(fmt.Sprintf("IPMI cipher suite %q: want a number from 0 to 17", cs))}, back, "")
				return
			}
			pp.CipherSuite = api.Some(n)
		}
		patch.Power = api.Some(pp)
	}
	res := u.call(r, s, http.MethodPatch, "/api/v1/machines/"+seg(m.ID), patch)
	if !res.OK() {
		u.done(w, r, s, res, back+"#power-settings", "")
		return
	}
	var nm api.Machine
	if err := res.Decode(&nm); err != nil {
		u.done(w, r, s, apiResult{Status: http.StatusInternalServerError, Body: errorBody(err.Error())}, back, "")
		return
	}
	notice := fmt.Sprintf("%s: power settings saved (driver %s).", nm.Hostname, cmp.Or(nm.Power.Driver, "none"))
	if nm.Power.Driver != "" && nm.Power.Driver != "manual" && r.PostFormValue("query") == "on" {
		q := u.call(r, s, http.MethodPost, "/api/v1/machines/"+seg(m.ID)+"/power", api.PowerAction{Action: "query", Reason: "check the new power settings"})
		var pr api.PowerRequest
		if q.OK() && q.Decode(&pr) == nil {
			notice += fmt.Sprintf(" Querying the BMC with them (request %s): its answer shows below.", pr.ID)
		} else {
			notice += " The BMC could not be queried: " + q.Message()
		}
	}
	u.sessions.addFlash(s.session, flash{Text: notice})
	http.Redirect(w, r, back+"#h-power", http.StatusSeeOther)
}

// machineAllocate allocates the machine by name: POST /api/v1/allocations.
func (u *UI) machineAllocate(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	var m api.Machine
	if err := u.get(r, s, "/api/v1/machines/"+seg(id), &m); err != nil {
		u.done(w, r, s, apiResult{Status: http.StatusNotFound, Body: errorBody(err.Error())}, "/machines", "")
		return
	}
	res := u.call(r, s, http.MethodPost, "/api/v1/allocations",
		api.AllocateRequest{Name: m.Hostname, AgentName: strings.TrimSpace(r.PostFormValue("agent_name"))})
	var al api.Allocation
	if res.OK() && res.Decode(&al) == nil && al.Token != "" {
		u.sessions.addFlash(s.session, flash{Text: fmt.Sprintf("%s allocated. Its allocation token (shown once; another agent needs it to take the machine over):", al.Machine.Hostname), Secret: al.Token})
		http.Redirect(w, r, machineBack(id), http.StatusSeeOther)
		return
	}
	u.done(w, r, s, res, machineBack(id), "Allocated.")
}

// machineAssignIP is POST /api/v1/machines/{id}/ips.
func (u *UI) machineAssignIP(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	res := u.call(r, s, http.MethodPost, "/api/v1/machines/"+seg(id)+"/ips", api.AssignIP{
		MAC: strings.TrimSpace(r.PostFormValue("mac")), IP: strings.TrimSpace(r.PostFormValue("ip")),
		Subnet: strings.TrimSpace(r.PostFormValue("subnet")), Alias: r.PostFormValue("alias") == "on",
		Reason: strings.TrimSpace(r.PostFormValue("reason"))})
	var a api.Address
	notice := ""
	if res.OK() && res.Decode(&a) == nil {
		notice = fmt.Sprintf("%s assigned to %s.", a.IP, a.MAC)
	}
	u.done(w, r, s, res, machineBack(id), notice)
}

// machineRemoveIP is DELETE /api/v1/machines/{id}/ips/{ip}.
func (u *UI) machineRemoveIP(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id, ip := r.PathValue("id"), strings.TrimSpace(r.PostFormValue("ip"))
	res := u.call(r, s, http.MethodDelete, "/api/v1/machines/"+seg(id)+"/ips/"+seg(ip), nil)
	u.done(w, r, s, res, machineBack(id), ip+" removed.")
}
