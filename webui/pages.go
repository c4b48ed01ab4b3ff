package webui

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"rackd/api"
	"rackd/power/queue"
	"rackd/store"
)

type stateCount struct {
	State string
	Count int
}

type dashEvent struct {
	api.Event
	Hostname string
}

type dashboardData struct {
	Total     int
	States    []stateCount
	Power     queue.Health
	PowerErr  string
	Subnets   []api.Subnet
	Events    []dashEvent
	Attention []api.Machine
}

// shownRecent is how many recent events the dashboard shows.
const shownRecent = 20

// attentionStates are the states a human has to look at.
var attentionStates = map[store.State]bool{store.StateFailedCommissioning: true, store.StateFailedDeployment: true, store.StateBroken: true}

func (u *UI) dashboard(w http.ResponseWriter, r *http.Request, s *reqSession) {
	var d dashboardData
	counts, err := u.opts.Data.CountByState()
	if err != nil {
		u.internal(w, r, s, err)
		return
	}
	for _, st := range store.States {
		d.States = append(d.States, stateCount{string(st), counts[st]})
		d.Total += counts[st]
	}
	if d.Power, err = u.opts.Data.PowerHealth(); err != nil {
		d.PowerErr = err.Error()
	}
	if err := u.get(r, s, "/api/v1/subnets", &d.Subnets); err != nil {
		u.sessions.addFlash(s.session, flash{Error: true, Text: "subnets: " + err.Error()})
	}
	// The newest events of the machines who may see (another user's held
	// machine's are not shown, as through the API), at most shownRecent.
	evs, err := u.opts.Data.RecentEvents(shownRecent * 5)
	if err != nil {
		u.log.Warn("webui: recent events", "err", err)
	}
	// The machines needing attention are looked for only when the counts
	// say there are some: a scan of a large rack costs what listing it does.
	var bad []store.Machine
	if counts[store.StateFailedCommissioning]+counts[store.StateFailedDeployment]+counts[store.StateBroken] > 0 {
		all, err := u.opts.Data.Machines(store.Filter{})
		if err != nil {
			u.internal(w, r, s, err)
			return
		}
		for i := range all {
			if attentionStates[all[i].State] && len(bad) < 50 && store.MayView(s.actor, all[i], all[i].ID) == nil {
				bad = append(bad, all[i])
			}
		}
	}
	type seen struct {
		name    string
		visible bool
	}
	names := map[string]seen{}
	for _, e := range evs {
		n, ok := names[e.Machine]
		if !ok {
			// A deleted machine's events stay visible, as through the
			// API.
			n.visible = true
			if m, err := u.opts.Data.Machine(e.Machine); err == nil {
				n = seen{m.Hostname, store.MayView(s.actor, m, m.ID) == nil}
			}
			names[e.Machine] = n
		}
		if n.visible && len(d.Events) < shownRecent {
			d.Events = append(d.Events, dashEvent{Event: eventView(e), Hostname: n.name})
		}
	}
	d.Attention = u.opts.Data.MachineViews(bad, s.actor)
	u.render(w, r, s, http.StatusOK, "dashboard", "Dashboard", "dashboard", d)
}

func eventView(e store.Event) api.Event {
	return api.Event{Seq: e.Seq, Time: e.Time, Machine: e.Machine, Actor: e.Actor, Action: e.Action,
		From: string(e.From), To: string(e.To), Reason: e.Reason}
}

type subnetsData struct {
	Subnets   []api.Subnet
	Addresses []api.Address
	Leases    []api.Lease
	CanCreate bool
}

func (u *UI) subnetsPage(w http.ResponseWriter, r *http.Request, s *reqSession) {
	var d subnetsData
	for _, g := range []struct {
		path string
		v    any
	}{{"/api/v1/subnets", &d.Subnets}, {"/api/v1/ips", &d.Addresses}, {"/api/v1/leases", &d.Leases}} {
		if err := u.get(r, s, g.path, g.v); err != nil {
			u.sessions.addFlash(s.session, flash{Error: true, Text: g.path + ": " + err.Error()})
		}
	}
	// Leases are listed on their own.
	d.Addresses = slices.DeleteFunc(d.Addresses, func(a api.Address) bool { return a.Kind == "dynamic" })
	// A machine's own addresses name it by its hostname (one read of the
	// machines, only when some are listed).
	if slices.ContainsFunc(d.Addresses, func(a api.Address) bool { return a.Machine != "" && a.Hostname == "" }) {
		if ms, err := u.opts.Data.Machines(store.Filter{}); err == nil {
			names := make(map[string]string, len(ms))
			for _, m := range ms {
				if store.MayView(s.actor, m, m.ID) == nil {
					names[m.ID] = m.Hostname
				}
			}
			for i, a := range d.Addresses {
				if a.Machine != "" && a.Hostname == "" {
					d.Addresses[i].Hostname = names[a.Machine]
				}
			}
		}
	}
	d.CanCreate = u.opts.Allowed(s.actor, http.MethodPost, "/api/v1/subnets")
	u.render(w, r, s, http.StatusOK, "subnets", "Subnets and IPs", "subnets", d)
}

// ranges reads "a-b, c-d".
func ranges(s string) []api.Range {
	var out []api.Range
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, ok := strings.Cut(part, "-")
		if !ok {
			b = a
		}
		out = append(out, api.Range{Start: strings.TrimSpace(a), End: strings.TrimSpace(b)})
	}
	return out
}

func list(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, f)
	}
	return out
}

func (u *UI) createSubnet(w http.ResponseWriter, r *http.Request, s *reqSession) {
	sn := api.Subnet{CIDR: strings.TrimSpace(r.PostFormValue("cidr")), Gateway: strings.TrimSpace(r.PostFormValue("gateway")),
		DNSServers: list(r.PostFormValue("dns")), Domain: strings.TrimSpace(r.PostFormValue("domain")),
		DynamicRanges: ranges(r.PostFormValue("dynamic")), ReservedRanges: ranges(r.PostFormValue("reserved"))}
	res := u.call(r, s, http.MethodPost, "/api/v1/subnets", sn)
	u.done(w, r, s, res, "/subnets", "Subnet "+sn.CIDR+" added.")
}

func (u *UI) reserve(w http.ResponseWriter, r *http.Request, s *reqSession) {
	req := api.ReserveRequest{IP: strings.TrimSpace(r.PostFormValue("ip")), Subnet: strings.TrimSpace(r.PostFormValue("subnet")),
		MAC: strings.TrimSpace(r.PostFormValue("mac")), Hostname: strings.TrimSpace(r.PostFormValue("hostname")),
		Purpose: strings.TrimSpace(r.PostFormValue("purpose"))}
	res := u.call(r, s, http.MethodPost, "/api/v1/ips/reservations", req)
	var a api.Address
	notice := ""
	if res.OK() && res.Decode(&a) == nil {
		notice = a.IP + " reserved."
	}
	u.done(w, r, s, res, "/subnets", notice)
}

func (u *UI) unreserve(w http.ResponseWriter, r *http.Request, s *reqSession) {
	ip := strings.TrimSpace(r.PostFormValue("ip"))
	res := u.call(r, s, http.MethodDelete, "/api/v1/ips/reservations/"+seg(ip), nil)
	u.done(w, r, s, res, "/subnets", "Reservation "+ip+" removed.")
}

type imagesData struct {
	Images    []api.Image
	Imports   []api.ImportJob
	CanImport bool
	CanDelete bool
}

func (u *UI) imagesPage(w http.ResponseWriter, r *http.Request, s *reqSession) {
	var d imagesData
	if err := u.get(r, s, "/api/v1/images", &d.Images); err != nil {
		u.sessions.addFlash(s.session, flash{Error: true, Text: err.Error()})
	}
	d.CanImport = u.opts.Allowed(s.actor, http.MethodPost, "/api/v1/images/import")
	d.CanDelete = u.opts.Allowed(s.actor, http.MethodDelete, "/api/v1/images/x/y")
	if u.opts.Allowed(s.actor, http.MethodGet, "/api/v1/images/imports") {
		u.get(r, s, "/api/v1/images/imports", &d.Imports)
	}
	u.render(w, r, s, http.StatusOK, "images", "Images", "images", d)
}

// importsJSON is the import jobs as the API lists them, for the page's
// script to follow their progress (it has the session, not the token).
func (u *UI) importsJSON(w http.ResponseWriter, r *http.Request, s *reqSession) {
	res := u.call(r, s, http.MethodGet, "/api/v1/images/imports", nil)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(res.Status)
	w.Write(res.Body)
}

func (u *UI) importImage(w http.ResponseWriter, r *http.Request, s *reqSession) {
	req := api.ImportImage{URL: strings.TrimSpace(r.PostFormValue("url")), SHA256: strings.TrimSpace(r.PostFormValue("sha256")),
		Checksums: strings.TrimSpace(r.PostFormValue("checksums")), Name: strings.TrimSpace(r.PostFormValue("name")),
		Arch: strings.TrimSpace(r.PostFormValue("arch")), Background: true}
	res := u.call(r, s, http.MethodPost, "/api/v1/images/import", req)
	var job api.ImportJob
	notice := ""
	if res.OK() && res.Decode(&job) == nil {
		notice = fmt.Sprintf("Import %s of %s started.", job.ID, job.Source)
	}
	u.done(w, r, s, res, "/images", notice)
}

func (u *UI) cancelImport(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	res := u.call(r, s, http.MethodPost, "/api/v1/images/imports/"+seg(id)+"/cancel", nil)
	u.done(w, r, s, res, "/images", "Import "+id+" cancelled.")
}

func (u *UI) deleteImage(w http.ResponseWriter, r *http.Request, s *reqSession) {
	name, arch := r.PostFormValue("name"), r.PostFormValue("arch")
	res := u.call(r, s, http.MethodDelete, "/api/v1/images/"+seg(name)+"/"+seg(arch), nil)
	u.done(w, r, s, res, "/images", fmt.Sprintf("Image %s (%s) deleted.", name, arch))
}

type usersData struct {
	Users    []api.User
	Tokens   []api.Token
	Keys     []api.SSHKey
	CanUsers bool
}

func (u *UI) usersPage(w http.ResponseWriter, r *http.Request, s *reqSession) {
	var d usersData
	d.CanUsers = u.opts.Allowed(s.actor, http.MethodGet, "/api/v1/users")
	if d.CanUsers {
		if err := u.get(r, s, "/api/v1/users", &d.Users); err != nil {
			u.sessions.addFlash(s.session, flash{Error: true, Text: err.Error()})
		}
	}
	// An admin sees every user's tokens (and may revoke any), others
	// their own.
	tokens := "/api/v1/tokens"
	if s.actor.Admin {
		tokens += "?all=true"
	}
	if err := u.get(r, s, tokens, &d.Tokens); err != nil {
		u.sessions.addFlash(s.session, flash{Error: true, Text: err.Error()})
	}
	if err := u.get(r, s, "/api/v1/users/"+seg(s.actor.Name)+"/ssh-keys", &d.Keys); err != nil {
		u.sessions.addFlash(s.session, flash{Error: true, Text: err.Error()})
	}
	title := "Your tokens and SSH keys"
	if d.CanUsers {
		title = "Users and tokens"
	}
	u.render(w, r, s, http.StatusOK, "users", title, "users", d)
}

func (u *UI) createUser(w http.ResponseWriter, r *http.Request, s *reqSession) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	res := u.call(r, s, http.MethodPost, "/api/v1/users", api.CreateUser{Name: name, Admin: r.PostFormValue("admin") == "on"})
	var nu api.User
	if res.OK() && res.Decode(&nu) == nil {
		u.sessions.addFlash(s.session, flash{Text: fmt.Sprintf("User %s added. Their token (shown once):", nu.Name), Secret: nu.Token})
		http.Redirect(w, r, "/users", http.StatusSeeOther)
		return
	}
	u.done(w, r, s, res, "/users", "")
}

func (u *UI) createToken(w http.ResponseWriter, r *http.Request, s *reqSession) {
	req := api.CreateToken{Name: strings.TrimSpace(r.PostFormValue("name")), Expires: strings.TrimSpace(r.PostFormValue("expires")),
		User: strings.TrimSpace(r.PostFormValue("user"))}
	res := u.call(r, s, http.MethodPost, "/api/v1/tokens", req)
	var tk api.Token
	if res.OK() && res.Decode(&tk) == nil {
		u.sessions.addFlash(s.session, flash{Text: fmt.Sprintf("Token %s (%s) created for %s. Its secret (shown once):", tk.Name, tk.ID, tk.User), Secret: tk.Token, MAASKey: tk.MAASKey})
		http.Redirect(w, r, "/users", http.StatusSeeOther)
		return
	}
	u.done(w, r, s, res, "/users", "")
}

func (u *UI) revokeToken(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	res := u.call(r, s, http.MethodDelete, "/api/v1/tokens/"+seg(id), nil)
	u.done(w, r, s, res, "/users", "Token "+id+" revoked.")
}

func (u *UI) addSSHKey(w http.ResponseWriter, r *http.Request, s *reqSession) {
	user := strings.TrimSpace(r.PostFormValue("user"))
	if user == "" {
		user = s.actor.Name
	}
	res := u.call(r, s, http.MethodPost, "/api/v1/users/"+seg(user)+"/ssh-keys", api.AddSSHKey{Key: strings.TrimSpace(r.PostFormValue("key"))})
	var k api.SSHKey
	notice := ""
	if res.OK() && res.Decode(&k) == nil {
		notice = fmt.Sprintf("Key %s added.", k.Fingerprint)
	}
	u.done(w, r, s, res, "/users", notice)
}

func (u *UI) deleteSSHKey(w http.ResponseWriter, r *http.Request, s *reqSession) {
	id := r.PathValue("id")
	user := strings.TrimSpace(r.PostFormValue("user"))
	if user == "" {
		user = s.actor.Name
	}
	res := u.call(r, s, http.MethodDelete, "/api/v1/users/"+seg(user)+"/ssh-keys/"+seg(id), nil)
	u.done(w, r, s, res, "/users", "Key removed.")
}
