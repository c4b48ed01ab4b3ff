// Package webui is rackd's web UI: server-rendered pages (html/template),
// embedded assets, server-side sessions opened with an API token, and live
// updates over Server-Sent Events.
//
// The UI holds no rule of its own. Every state-changing request (a form
// POST) becomes the API request it stands for and is served in process by
// the agent's API handler with the session's token as its bearer token, so
// the API's authorisation, validation, transitions and error wording hold
// as they are; the page shows the API's error message. Reads go through the
// API's JSON too, except where a page needs more than one answer can say
// quickly (the machine list of a large rack, the dashboard's counters):
// those go through Data, which the agent implements with the functions its
// own handlers call.
package webui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"rackd/api"
	"rackd/internal/reqbody"
	"rackd/power/queue"
	"rackd/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Data is what the pages read besides the API's JSON. The agent implements
// it with the very functions its API handlers call (same visibility).
type Data interface {
	// Machines is store.ListMachines.
	Machines(f store.Filter) ([]store.Machine, error)
	// Machine is store.Machine (by id or hostname).
	Machine(idOrName string) (store.Machine, error)
	// MachineViews are the machines as GET /api/v1/machines shows them to
	// who, for the rows of one page only.
	MachineViews(ms []store.Machine, who store.Actor) []api.Machine
	// CountByState is store.CountByState.
	CountByState() (map[store.State]int, error)
	// RecentEvents is store.RecentEvents.
	RecentEvents(limit int) ([]store.Event, error)
	// PowerHistory is store.PowerHistory: a machine's newest power
	// requests, newest first.
	PowerHistory(machine string, limit int) ([]api.PowerRequest, error)
	// PowerHealth is the power queue's health.
	PowerHealth() (queue.Health, error)
}

// Options configure a UI.
type Options struct {
	// Name is the appliance's name, in every page's title.
	Name string
	// API is the agent's API handler; the UI's requests to it never leave
	// the process.
	API http.Handler
	// Authenticate is store.Authenticate: a session's token is checked
	// with it on every request.
	Authenticate func(token string) (store.Actor, bool, error)
	// Hold holds the right of a long-lived stream (the live updates)
	// opened by who: the context it returns is cancelled, with the reason
	// as its cause, once who's token is revoked or expires or their user
	// is removed; cancel is called when the stream ends.
	Hold func(ctx context.Context, who store.Actor) (context.Context, context.CancelFunc)
	// Allowed says whether who may call an API route (method and path), by
	// the route table's access level: the UI shows an action only to
	// those who may take it.
	Allowed func(who store.Actor, method, path string) bool
	Data    Data
	Log     *slog.Logger
	// Now replaces the clock (tests).
	Now func() time.Time
	// Bodies is the budget of request bodies read at once, which the UI's
	// forms share with the rest of the process (default: a gate of the
	// UI's own).
	Bodies *reqbody.Gate
	// PowerDrivers are the power drivers this rackd has, offered by the
	// machine page's power settings (default: ipmi, redfish, manual).
	PowerDrivers []string
	// SessionLifetime caps a session (default 12 hours; a token that
	// expires sooner ends it sooner).
	SessionLifetime time.Duration
}

// UI is the web UI's handler.
type UI struct {
	opts     Options
	log      *slog.Logger
	pages    map[string]*template.Template
	static   http.Handler
	sessions *sessions
	hub      *Hub
	mux      *http.ServeMux
	now      func() time.Time
	bodies   *reqbody.Gate

	bufs sync.Pool
}

// New builds the UI. Its hub (Hub) is fed by the caller with the store's
// events.
func New(opts Options) (*UI, error) {
	if opts.API == nil || opts.Authenticate == nil || opts.Hold == nil || opts.Data == nil {
		return nil, errors.New("webui: API, Authenticate, Hold and Data are required")
	}
	if opts.Allowed == nil {
		opts.Allowed = func(store.Actor, string, string) bool { return true }
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Bodies == nil {
		opts.Bodies = reqbody.NewGate(0, 0)
	}
	if opts.SessionLifetime <= 0 {
		opts.SessionLifetime = 12 * time.Hour
	}
	if len(opts.PowerDrivers) == 0 {
		opts.PowerDrivers = []string{"ipmi", "redfish", "manual"}
	}
	if opts.Name == "" {
		opts.Name = "rack"
	}
	u := &UI{opts: opts, log: opts.Log, now: opts.Now, sessions: newSessions(), hub: NewHub(64), bodies: opts.Bodies}
	u.bufs.New = func() any { return new(bytes.Buffer) }
	if err := u.parseTemplates(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("webui: static assets: %w", err)
	}
	u.static = http.StripPrefix("/static/", http.FileServerFS(sub))
	u.routes()
	return u, nil
}

// Hub is the fan-out of live updates; the agent publishes the store's
// events to it.
func (u *UI) Hub() *Hub { return u.hub }

// ServeHTTP serves the UI. Every answer carries the security headers.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	u.mux.ServeHTTP(w, r)
}

// csp is the Content-Security-Policy of every page: scripts, styles and
// connections from rackd only, no inline script or style, no framing.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

func (u *UI) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /static/", u.serveStatic)
	m.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/static/favicon.svg"
		u.serveStatic(w, r2)
	})
	m.HandleFunc("GET /login", u.loginPage)
	m.HandleFunc("POST /login", u.login)
	m.Handle("POST /logout", u.authed(u.logout))
	m.Handle("GET /{$}", u.authed(u.dashboard))
	m.Handle("GET /machines", u.authed(u.machinesPage))
	m.Handle("POST /machines/bulk", u.authed(u.bulk))
	m.Handle("GET /machines/{id}", u.authed(u.machinePage))
	m.Handle("POST /machines/{id}/action", u.authedForm(actionFormBytes, u.machineAction))
	m.Handle("POST /machines/{id}/power", u.authed(u.machinePower))
	m.Handle("POST /machines/{id}/power-settings", u.authed(u.machinePowerSettings))
	m.Handle("POST /machines/{id}/allocate", u.authed(u.machineAllocate))
	m.Handle("POST /machines/{id}/ips", u.authed(u.machineAssignIP))
	m.Handle("POST /machines/{id}/ips/remove", u.authed(u.machineRemoveIP))
	m.Handle("GET /subnets", u.authed(u.subnetsPage))
	m.Handle("POST /subnets", u.authed(u.createSubnet))
	m.Handle("POST /subnets/reservations", u.authed(u.reserve))
	m.Handle("POST /subnets/reservations/remove", u.authed(u.unreserve))
	m.Handle("GET /images", u.authed(u.imagesPage))
	m.Handle("GET /images/imports", u.authed(u.importsJSON))
	m.Handle("POST /images/import", u.authed(u.importImage))
	m.Handle("POST /images/imports/{id}/cancel", u.authed(u.cancelImport))
	m.Handle("POST /images/delete", u.authed(u.deleteImage))
	m.Handle("GET /users", u.authed(u.usersPage))
	m.Handle("POST /users", u.authed(u.createUser))
	m.Handle("POST /tokens", u.authed(u.createToken))
	m.Handle("POST /tokens/{id}/revoke", u.authed(u.revokeToken))
	m.Handle("POST /ssh-keys", u.authed(u.addSSHKey))
	m.Handle("POST /ssh-keys/{id}/delete", u.authed(u.deleteSSHKey))
	m.Handle("GET /events", u.authed(u.serveEvents))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u.renderStatus(w, r, nil, http.StatusNotFound, "Not found", fmt.Sprintf("There is no page %s here.", r.URL.Path))
	})
	u.mux = m
}

// serveStatic serves the embedded assets. The embedded file system has no
// "..": a path climbing out of /static/ is refused before it is looked up.
func (u *UI) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/static/")
	if name == "" || strings.HasSuffix(name, "/") || !fs.ValidPath(name) || strings.Contains(r.URL.RawPath, "%2") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	u.static.ServeHTTP(w, r)
}

// view is what every page's template gets.
type view struct {
	Title   string
	Name    string
	Nav     string
	Who     store.Actor
	CSRF    string
	Flashes []flash
	Page    any
	// CanUsers: the users page lists users (the route table lets who
	// list them).
	CanUsers bool
	// Since is the hub's mark before the page read what it shows: its
	// live updates start after it.
	Since uint64
}

type flash struct {
	Error bool
	Text  string
	// Secret is a token shown once, apart from the text.
	Secret string
	// MAASKey is the same token as a MAAS API key, shown with it.
	MAASKey string
}

func (u *UI) parseTemplates() error {
	layout, err := templateFS.ReadFile("templates/layout.html")
	if err != nil {
		return fmt.Errorf("webui: layout: %w", err)
	}
	entries, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	u.pages = map[string]*template.Template{}
	for _, e := range entries {
		name := strings.TrimSuffix(strings.TrimPrefix(e, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		body, err := templateFS.ReadFile(e)
		if err != nil {
			return err
		}
		t, err := template.New("layout").Funcs(funcs).Parse(string(layout))
		if err != nil {
			return fmt.Errorf("webui: layout: %w", err)
		}
		if _, err := t.Parse(string(body)); err != nil {
			return fmt.Errorf("webui: template %s: %w", name, err)
		}
		u.pages[name] = t
	}
	return nil
}

// render executes page into a buffer first: a template error becomes a
// clean 500, never half a page.
func (u *UI) render(w http.ResponseWriter, r *http.Request, s *reqSession, status int, page, title, nav string, data any) {
	t := u.pages[page]
	if t == nil {
		u.log.Error("webui: no such template", "page", page)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	v := view{Title: title, Name: u.opts.Name, Nav: nav, Page: data}
	if s != nil {
		v.Since = s.since
		v.Who, v.CSRF, v.Flashes = s.actor, s.csrf, u.sessions.takeFlashes(s.session)
		v.CanUsers = u.opts.Allowed(s.actor, http.MethodGet, "/api/v1/users")
	}
	buf := u.bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer u.bufs.Put(buf)
	if err := t.Execute(buf, v); err != nil {
		u.log.Error("webui: render", "page", page, "err", err)
		http.Error(w, "internal error: the page could not be rendered; the rackd log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// renderStatus is a page that only says something (not found, refused).
func (u *UI) renderStatus(w http.ResponseWriter, r *http.Request, s *reqSession, status int, title, msg string) {
	u.render(w, r, s, status, "status", title, "", struct {
		Status  int
		Message string
	}{status, msg})
}
