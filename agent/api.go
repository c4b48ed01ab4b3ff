package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"rackd/api"
	"rackd/internal/reqbody"
	"rackd/maasapi"
	"rackd/store"
	"rackd/store/httpstatus"
)

// access says who may call a route.
type access int

const (
	public access = iota // no token
	user                 // any valid token
	admin                // an admin's token
)

// route is one entry of the API. The table is the single source for the mux,
// the metrics' route labels and the test that keeps docs/API.md true.
type route struct {
	pattern string // "METHOD /path" as http.ServeMux reads it
	access  access
	handle  func(a *Agent, w http.ResponseWriter, r *http.Request, who store.Actor)
}

// machineActions are the lifecycle actions a user can ask for by URL.
var machineActions = map[string]store.Action{
	"commission":  store.ActionCommission,
	"deploy":      store.ActionDeploy,
	"release":     store.ActionRelease,
	"mark-broken": store.ActionMarkBroken,
	"mark-fixed":  store.ActionMarkFixed,
	"retire":      store.ActionRetire,
}

func routes() []route {
	return []route{
		{"GET /healthz", public, (*Agent).health},
		{"GET /metrics", public, (*Agent).serveMetrics},
		{"GET /api/v1/version", user, (*Agent).version},
		{"GET /api/v1/machines", user, (*Agent).listMachines},
		{"POST /api/v1/machines", admin, (*Agent).createMachineHandler},
		{"GET /api/v1/machines/{id}", user, (*Agent).getMachine},
		{"PATCH /api/v1/machines/{id}", admin, (*Agent).patchMachineHandler},
		{"DELETE /api/v1/machines/{id}", admin, (*Agent).deleteMachineHandler},
		{"GET /api/v1/machines/{id}/events", user, (*Agent).machineEvents},
		{"GET /api/v1/machines/{id}/user-data", user, (*Agent).userData},
		{"GET /api/v1/machines/{id}/console", user, (*Agent).machineConsole},
		{"GET /api/v1/machines/{id}/console-log", user, (*Agent).machineConsoleLog},
		{"GET /api/v1/machines/{id}/console-log/{boot}", user, (*Agent).machineConsoleBoot},
		{"POST /api/v1/machines/{id}/{action}", user, (*Agent).machineAction},
		{"POST /api/v1/machines/{id}/abort", user, (*Agent).abort},
		{"POST /api/v1/machines/{id}/power", user, (*Agent).requestPower},
		{"GET /api/v1/machines/{id}/power", user, (*Agent).machinePower},
		{"GET /api/v1/power/requests/{id}", user, (*Agent).powerRequest},
		{"POST /api/v1/allocations", user, (*Agent).allocate},
		{"DELETE /api/v1/allocations/{id}", user, (*Agent).release},
		{"GET /api/v1/users", admin, (*Agent).listUsers},
		{"POST /api/v1/users", admin, (*Agent).createUser},
		{"DELETE /api/v1/users/{name}", admin, (*Agent).removeUser},
		{"GET /api/v1/tokens", user, (*Agent).listTokens},
		{"POST /api/v1/tokens", user, (*Agent).createToken},
		{"DELETE /api/v1/tokens/{id}", user, (*Agent).revokeToken},
		{"POST /api/v1/admin-token/rotate", admin, (*Agent).rotateAdminToken},
		{"POST /api/v1/keys/rotate", admin, (*Agent).rotateKeys},
		{"GET /api/v1/users/{name}/ssh-keys", user, (*Agent).listSSHKeys},
		{"POST /api/v1/users/{name}/ssh-keys", user, (*Agent).addSSHKey},
		{"DELETE /api/v1/users/{name}/ssh-keys/{id}", user, (*Agent).deleteSSHKey},
		{"GET /api/v1/backup", admin, (*Agent).backup},
		{"POST /api/v1/appliance/update", admin, (*Agent).applianceUpdate},
		{"GET /api/v1/appliance/status", admin, (*Agent).applianceStatus},
		{"POST /api/v1/appliance/reset", admin, (*Agent).applianceReset},
		{"GET /api/v1/subnets", user, (*Agent).listSubnets},
		{"POST /api/v1/subnets", admin, (*Agent).createSubnet},
		{"GET /api/v1/ips", user, (*Agent).listAddresses},
		{"POST /api/v1/ips/reservations", user, (*Agent).reserve},
		{"DELETE /api/v1/ips/reservations/{ip}", user, (*Agent).unreserve},
		{"POST /api/v1/machines/{id}/ips", user, (*Agent).assignIP},
		{"DELETE /api/v1/machines/{id}/ips/{ip}", user, (*Agent).removeIP},
		{"GET /api/v1/leases", user, (*Agent).listLeases},
		{"GET /api/v1/images", user, (*Agent).listImages},
		{"POST /api/v1/images/import", admin, (*Agent).importImage},
		{"GET /api/v1/images/imports", admin, (*Agent).listImports},
		{"GET /api/v1/images/imports/{id}", admin, (*Agent).getImport},
		{"POST /api/v1/images/imports/{id}/cancel", admin, (*Agent).cancelImport},
		{"DELETE /api/v1/images/{name}/{arch}", admin, (*Agent).deleteImage},
		{"GET /api/v1/cluster", admin, (*Agent).clusterStatus},
		{"POST /api/v1/cluster/members", admin, (*Agent).joinCluster},
		{"DELETE /api/v1/cluster/members/{name}", admin, (*Agent).removeMember},
		{"GET /api/v1/cluster/blobs/{sha256}", public, (*Agent).peerBlob},
		{"GET /boot/", public, (*Agent).serveBoot},
		{"GET /metadata/v1/whoami", public, (*Agent).whoami},
		{"POST /metadata/v1/enlist", public, (*Agent).enlistMachine},
		{"POST /metadata/v1/credential", public, (*Agent).claimCredential},
		{"POST /metadata/v1/commissioned", public, (*Agent).reportCommissioned},
		{"POST /metadata/v1/deployed", public, (*Agent).reportDeployed},
		{"POST /metadata/v1/erased", public, (*Agent).reportErased},
		{"GET /metadata/v1/seed", public, (*Agent).serveSeed},
		{"POST /metadata/v1/os/{token}/phone-home", public, (*Agent).osPhoneHome},
		{"POST /metadata/v1/os/{token}/events", public, (*Agent).osEvents},
	}
}

// Handler is the whole HTTP surface: API, /metrics, /healthz, boot files,
// and the web UI at / (pages, /static/, /events).
func (a *Agent) Handler() http.Handler { return a.api }

// newHandler builds Handler's answer, once.
func (a *Agent) newHandler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes() {
		mux.Handle(rt.pattern, a.guard(rt))
	}
	// MAAS's API 2.0, for the tools written for MAAS: its own package,
	// over the same operations.
	mux.Handle(maasapi.Prefix, a.maas)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// An unknown API path gets a JSON 404 rather than a page.
		if isAPIPath(r.URL.Path) || a.ui == nil {
			writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
			return
		}
		a.ui.ServeHTTP(w, r)
	})
	return a.instrument(mux)
}

// guard authenticates and authorises, then calls the route's handler.
func (a *Agent) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var who store.Actor
		if rt.access != public {
			token, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok {
				writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, "missing token: send Authorization: Bearer <token>")
				return
			}
			actor, found, err := a.store.Authenticate(token)
			if err != nil {
				a.internalError(w, r, err)
				return
			}
			if !found {
				writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, "invalid token")
				return
			}
			if rt.access == admin && !actor.Admin {
				writeError(w, http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("user %s is not an admin", actor.Name))
				return
			}
			who = actor
			// The store authorises the token again when it runs a write
			// made on its behalf: one revoked while this request waits
			// for the committer is refused then.
			r = r.WithContext(store.WithActor(r.Context(), who))
		}
		if !a.capBody(w, r, rt.pattern) {
			return
		}
		rt.handle(a, w, r, who)
	})
}

// bearerToken reads the token of an Authorization header of the Bearer
// scheme (RFC 6750 section 2.1), whose name is case-insensitive (RFC 7235
// section 2.1): "Bearer x", "bearer x". The token is one word (token68):
// anything else is no token.
func bearerToken(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimLeft(h, " "), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token := strings.Trim(rest, " ")
	if token == "" || strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", false
	}
	return token, true
}

// statusRecorder remembers the status code for the metrics.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// instrument counts and times every request by its route pattern (never by
// raw path: machine ids would explode the label set).
func (a *Agent) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		a.metrics.httpInFlight.Inc()
		defer a.metrics.httpInFlight.Dec()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		route := r.Pattern // set by the mux on this very request
		switch {
		case route == "/" && !isAPIPath(r.URL.Path):
			route = "webui" // the UI's pages: one label, whatever the path
		case route == "" || route == "/":
			route = "unmatched"
		}
		method := r.Method
		switch method {
		case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead:
		default:
			method = "other"
		}
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		a.metrics.httpRequests.WithLabelValues(method, route, strconv.Itoa(rec.code)).Inc()
		a.metrics.httpDuration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, api.Error{Error: msg, Code: code})
}

// storeError answers a store error: domain refusals with their code and
// status, anything else as a logged 500.
func (a *Agent) storeError(w http.ResponseWriter, r *http.Request, err error) {
	code := store.CodeOf(err)
	status := httpstatus.Of(code)
	if status == 0 {
		a.internalError(w, r, err)
		return
	}
	writeError(w, status, string(code), err.Error())
}

func (a *Agent) internalError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, store.ErrClosed) || errors.Is(err, r.Context().Err()) {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "rackd is shutting down; retry")
		return
	}
	if errors.Is(err, store.ErrUnavailable) || (a.etcd != nil && etcdUnavailable(err)) {
		// etcd without a quorum takes no write and answers no
		// linearizable read: the transaction ran out of time.
		a.log.Warn("the store did not answer in time", "method", r.Method, "path", redactPath(r.URL.Path), "err", err)
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable,
			"the store (etcd) did not answer in time: has its cluster lost its quorum? Retry once enough members are up")
		return
	}
	a.log.Error("request failed", "method", r.Method, "path", redactPath(r.URL.Path), "err", err)
	writeError(w, http.StatusInternalServerError, api.CodeInternal, "internal error; the rackd log has the details")
}

// etcdUnavailable reports whether err is etcd failing for want of a
// quorum: the transaction ran out of time, or etcd itself gave up on the
// proposal (its own timeout, no leader). etcd's errors reach the store as
// gRPC statuses, which it wraps as text.
func etcdUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"etcdserver: request timed out", "etcdserver: no leader", "etcdserver: leader changed",
		"code = Unavailable", "code = DeadlineExceeded"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// errBadBody is a request body refusal, already answered.
var errBadBody = errors.New("bad request body")

// jsonBodyBytes caps the body of every API route but the deploy's: each
// takes a short JSON object (a machine, a subnet, a token's name, an SSH
// key), far below it.
const jsonBodyBytes = 64 << 10

// bodyCap is the cap of a route's request body (by its pattern): the
// largest body the route legitimately takes, and never more than
// api.max_body_bytes but for the deploy's. 0: the route reads no body, or
// caps its own as it streams it (an appliance update's bundle).
func (a *Agent) bodyCap(pattern string) int64 {
	method, path, _ := strings.Cut(pattern, " ")
	switch method {
	case http.MethodGet, http.MethodHead:
		return 0
	}
	switch pattern {
	case "POST /api/v1/machines/{id}/{action}":
		// A deploy carries up to a MiB of user-data, in base64.
		return max(a.cfg.API.MaxBodyBytes, deployBodyLimit)
	case "POST /api/v1/appliance/update":
		return 0
	case "POST /metadata/v1/os/{token}/phone-home":
		return maxPhoneHomeBody
	case "POST /metadata/v1/os/{token}/events":
		return maxOSEventBody
	}
	if strings.HasPrefix(path, "/metadata/") {
		return a.cfg.Enlist.MaxBodyBytes
	}
	return min(jsonBodyBytes, a.cfg.API.MaxBodyBytes)
}

// capBody refuses a body that declares a length over the route's cap,
// before anything is read (413), and caps the body at it. It answers the
// refusal itself and returns false.
func (a *Agent) capBody(w http.ResponseWriter, r *http.Request, pattern string) bool {
	limit := a.bodyCap(pattern)
	if limit <= 0 {
		return true
	}
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge,
			fmt.Sprintf("request body is larger than %d bytes", limit))
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return true
}

// readBody reads a request body whole, at most limit bytes, within the
// budget of bodies read at once (reqbody): call done once finished with
// it. A refusal is answered (413 over limit, 503 when the budget has no
// room within its wait, 400 when the body cannot be read) and ok is false.
func (a *Agent) readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, done func(), ok bool) {
	b, done, err := a.bodies.Read(w, r, limit)
	if err == nil {
		return b.Bytes(), done, true
	}
	defer done()
	if n, tooLarge := reqbody.TooLarge(err); tooLarge {
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, fmt.Sprintf("request body is larger than %d bytes", n))
		return nil, done, false
	}
	if errors.Is(err, reqbody.ErrBusy) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
		return nil, done, false
	}
	writeError(w, http.StatusBadRequest, api.CodeBadRequest, "the request body could not be read: "+err.Error())
	return nil, done, false
}

// decodeBody reads one JSON object into v, strictly: under the route's
// cap, unknown fields refused, nothing after the object. With optional, an
// empty body leaves v as it is. On failure it answers the request and
// returns errBadBody.
func (a *Agent) decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	limit := a.bodyCap(r.Pattern)
	if limit <= 0 {
		// A route that streams its body otherwise (an appliance
		// update) takes a short JSON object too.
		limit = min(jsonBodyBytes, a.cfg.API.MaxBodyBytes)
	}
	return a.decodeBodyLimit(w, r, v, optional, limit)
}

// decodeBodyLimit is decodeBody with a size cap of its own.
func (a *Agent) decodeBodyLimit(w http.ResponseWriter, r *http.Request, v any, optional bool, limit int64) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		// A PATCH body is a JSON merge patch, which has its own type.
		if mt, _, err := mime.ParseMediaType(ct); err != nil || (mt != "application/json" && mt != "application/merge-patch+json") {
			writeError(w, http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia,
				fmt.Sprintf("content type %q is not accepted: send application/json", ct))
			return errBadBody
		}
	}
	body, done, ok := a.readBody(w, r, limit)
	defer done()
	if !ok {
		return errBadBody
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// One object only: trailing data is a client bug worth reporting.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil || (optional && errors.Is(err, io.EOF)) {
		return nil
	}
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "request body is empty: send a JSON object")
	case errors.As(err, &syntaxErr):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, err))
	case errors.Is(err, io.ErrUnexpectedEOF):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "malformed JSON: the body ends early")
	case errors.As(err, &typeErr):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest,
			fmt.Sprintf("field %q must be %s, not JSON %s", typeErr.Field, typeErr.Type, typeErr.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		writeError(w, http.StatusBadRequest, api.CodeBadRequest,
			fmt.Sprintf("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field ")))
	default:
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "invalid request body: "+err.Error())
	}
	return errBadBody
}

// machineView is a machine as the API shows it, with its addresses.
func (a *Agent) machineView(m store.Machine) api.Machine {
	v := machineFields(m)
	a.fillPower(&v, m)
	addrs, err := a.store.MachineAddresses(m)
	if err != nil {
		a.log.Warn("read machine addresses", "machine", m.ID, "err", err)
	}
	for _, x := range addrs {
		v.IPs = append(v.IPs, api.IP{IP: x.IP.String(), MAC: x.MAC, Kind: string(x.Kind)})
	}
	return v
}

// machineFields is a machine's own record as the API shows it: credentials
// left out.
func machineFields(m store.Machine) api.Machine {
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return api.Machine{
		ID: m.ID, Hostname: m.Hostname, State: string(m.State), Arch: m.Arch,
		MACs: nonNil(m.MACs), Owner: m.Owner, AgentName: m.AgentName,
		CPUCount: m.CPUCount, MemoryMB: m.MemoryMB, Tags: nonNil(m.Tags), Zone: m.Zone,
		IPs: []api.IP{},
		// Desired and observed power come with the power queue; until then
		// nothing has been asked or seen.
		Power: api.PowerView{Driver: m.Power.Driver, Address: m.Power.Address, SetBy: m.PowerSetBy,
			TLSFingerprint: m.Power.TLSFingerprint, InsecureTLS: m.Power.InsecureTLS, BootMode: m.Power.BootMode,
			Desired: "unknown", Observed: "unknown"},
		StateSince: m.StateSince, Created: m.Created,
		Inventory: inventoryView(m), DeployImage: m.CurrentImage(),
	}
}

func (a *Agent) health(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	h := a.readiness()
	if len(h.NotReady) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, h)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (a *Agent) serveMetrics(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	a.metrics.handler().ServeHTTP(w, r)
}

func (a *Agent) version(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	writeJSON(w, http.StatusOK, api.Version{Version: Version, Schema: store.SchemaVersion})
}

func (a *Agent) listMachines(w http.ResponseWriter, r *http.Request, who store.Actor) {
	q := r.URL.Query()
	f := store.Filter{State: store.State(strings.ToUpper(q.Get("state"))), Owner: q.Get("owner"), AgentName: q.Get("agent_name")}
	if f.State != "" && !f.State.Valid() {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("unknown state %q", q.Get("state")))
		return
	}
	ms, err := a.store.ListMachines(f)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	out := make([]api.Machine, 0, len(ms))
	for _, m := range ms {
		// Another user's held machine is not listed (store.MayView).
		if store.MayView(who, m, m.ID) == nil {
			out = append(out, a.machineViewFor(m, who))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) createMachineHandler(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.CreateMachine
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	nm := store.NewMachine{Hostname: req.Hostname, Arch: req.Arch, MACs: req.MACs,
		CPUCount: req.CPUCount, MemoryMB: req.MemoryMB, Tags: req.Tags, Zone: req.Zone,
		State: store.State(strings.ToUpper(req.State))}
	if req.Power != nil {
		nm.Power = store.PowerParams(*req.Power)
	}
	m, err := a.createMachine(r.Context(), who, nm)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.machineView(m))
}

func (a *Agent) getMachine(w http.ResponseWriter, r *http.Request, who store.Actor) {
	m, err := a.store.Machine(r.PathValue("id"))
	if err == nil {
		err = store.MayView(who, m, r.PathValue("id"))
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.machineViewFor(m, who))
}

func (a *Agent) machineEvents(w http.ResponseWriter, r *http.Request, who store.Actor) {
	limit := 0
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("limit %q is not a non-negative number", s))
			return
		}
		limit = n
	}
	if m, err := a.store.Machine(r.PathValue("id")); err == nil {
		if err := store.MayView(who, m, r.PathValue("id")); err != nil {
			a.storeError(w, r, err)
			return
		}
	}
	evs, err := a.store.Events(r.PathValue("id"), limit)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	// The console tail of a failure is the console's: those who may see
	// the console see it (admins and the machine's owner).
	_, _, err = a.store.ConsoleRight(who, r.PathValue("id"))
	console := err == nil
	out := make([]api.Event, len(evs))
	for i, e := range evs {
		out[i] = api.Event{Seq: e.Seq, Time: e.Time, Machine: e.Machine, Actor: e.Actor,
			Action: e.Action, From: string(e.From), To: string(e.To), Reason: e.Reason}
		if console {
			out[i].Console = e.Console
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) machineAction(w http.ResponseWriter, r *http.Request, who store.Actor) {
	name := r.PathValue("action")
	action, ok := machineActions[name]
	if !ok {
		writeError(w, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("unknown machine action %q: want commission, deploy, release, mark-broken, mark-fixed or retire", name))
		return
	}
	var req api.ActionRequest
	// The route's cap is the deploy's (bodyCap); the other actions take a
	// reason.
	limit := min(jsonBodyBytes, a.cfg.API.MaxBodyBytes)
	if action == store.ActionDeploy {
		limit = a.bodyCap(r.Pattern)
	}
	if a.decodeBodyLimit(w, r, &req, true, limit) != nil {
		return
	}
	if (req.UserData != "" || len(req.SSHKeys) > 0) && action != store.ActionDeploy {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "user_data and ssh_keys are only meaningful for deploy")
		return
	}
	if action == store.ActionDeploy {
		a.deploy(w, r, who, req)
		return
	}
	if req.Image != "" && action != store.ActionDeploy {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "image is only meaningful for deploy")
		return
	}
	if req.Erase && action != store.ActionRelease {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "erase is only meaningful for release")
		return
	}
	if req.ForceBMCSetup && action != store.ActionCommission {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "force_bmc_setup is only meaningful for commission")
		return
	}
	m, err := a.transitionMachine(r.Context(), who, store.TransitionRequest{
		Machine: r.PathValue("id"), Action: action, Reason: req.Reason, Image: req.Image, Erase: req.Erase,
		ForceBMCSetup: req.ForceBMCSetup})
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	v := a.machineViewFor(m, who)
	v.Notice = manualNotice(m)
	writeJSON(w, http.StatusOK, v)
}

// transitioned does what follows a committed transition: metrics, log, and
// handing releases to the releaser.
func (a *Agent) transitioned(m store.Machine, action store.Action, who store.Actor) {
	a.metrics.transitions.WithLabelValues(string(action)).Inc()
	if action == store.ActionCommissioningDone {
		a.ensureSticky(context.Background(), m)
	}
	a.log.Info("machine transition", "machine", m.ID, "hostname", m.Hostname, "action", action, "state", m.State, "by", who.Name)
	if m.State == store.StateReleasing {
		select {
		case a.releases <- m.ID:
		default: // full: the watchdog's sweep picks it up
		}
	}
}

// abort stops a machine's phase (abortMachine). The body, optional, is
// {"reason"}.
func (a *Agent) abort(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.AbortRequest
	if a.decodeBody(w, r, &req, true) != nil {
		return
	}
	m, err := a.abortMachine(r.Context(), who, r.PathValue("id"), req.Reason)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	v := a.machineViewFor(m, who)
	v.Notice = manualNotice(m)
	writeJSON(w, http.StatusOK, v)
}

func (a *Agent) allocate(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.AllocateRequest
	if a.decodeBody(w, r, &req, true) != nil {
		return
	}
	sreq := store.AllocateRequest{Name: req.Name, AgentName: req.AgentName, Token: req.Token}
	if c := req.Constraints; c != nil {
		if c.MinCPU < 0 || c.MinMemoryMB < 0 {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, "min_cpu and min_memory_mb cannot be negative")
			return
		}
		sreq.Constraints = store.Constraints{Arch: c.Arch, MinCPU: c.MinCPU, MinMemoryMB: c.MinMemoryMB, Tags: c.Tags, Zone: c.Zone}
	}
	if req.Token != "" && req.Name == "" {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "a token adopts one machine: give its name too")
		return
	}
	res, err := a.allocateMachine(r.Context(), who, sreq)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	writeJSON(w, status, api.Allocation{Machine: a.machineView(res.Machine), Token: res.Token})
}

func (a *Agent) release(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.ActionRequest
	if a.decodeBody(w, r, &req, true) != nil {
		return
	}
	if req.Image != "" {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "image is only meaningful for deploy")
		return
	}
	m, err := a.releaseMachine(r.Context(), who, r.PathValue("id"), req.Reason, req.Erase)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.machineView(m))
}

func userView(u store.User, token string) api.User {
	return api.User{Name: u.Name, Admin: u.Admin, Token: token, Created: u.Created}
}

func (a *Agent) listUsers(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	us, err := a.store.Users()
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	out := make([]api.User, len(us))
	for i, u := range us {
		out[i] = userView(u, "")
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) createUser(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.CreateUser
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	u, token, err := a.store.CreateUser(r.Context(), who, req.Name, req.Admin, "")
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("user created", "user", u.Name, "admin", u.Admin, "by", who.Name)
	writeJSON(w, http.StatusCreated, userView(u, token))
}

// removeUser is DELETE /api/v1/users/{name}: the user goes with their
// tokens (refused from this moment, their streams ended) and SSH keys.
func (a *Agent) removeUser(w http.ResponseWriter, r *http.Request, who store.Actor) {
	name := r.PathValue("name")
	if name == adminUser {
		writeError(w, http.StatusConflict, api.CodeConflict, fmt.Sprintf(
			"user %s holds the admin token file's token (rackd serve --rotate-admin-token writes a new one): it cannot be removed; revoke its other tokens instead", adminUser))
		return
	}
	u, err := a.store.RemoveUser(r.Context(), who, name)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("user removed", "user", u.Name, "admin", u.Admin, "by", who.Name)
	writeJSON(w, http.StatusOK, userView(u, ""))
}

// backup streams a consistent copy of the database. Writers keep going while
// it runs: it is one read transaction.
func (a *Agent) backup(w http.ResponseWriter, r *http.Request, who store.Actor) {
	// A large database over a slow link takes a while: the copy is held
	// to the right that asked for it, as a stream is (rights.go).
	held, release := a.rights.hold(r.Context(), store.UserRight(who))
	defer release()
	started := false
	n, err := a.store.WriteBackup(func(size int64) io.Writer {
		started = true
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="rackd.db"`)
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		return heldWriter{held, w}
	})
	if err != nil && !started {
		a.internalError(w, r, err)
		return
	}
	if err != nil {
		// Headers are gone; cutting the stream short makes the client see a
		// length mismatch rather than accept a partial copy.
		if store.RightLost(err) {
			a.log.Info("backup cut off: the right that asked for it is lost", "by", who.Name, "why", err.Error(), "written", n)
		} else {
			a.log.Error("backup failed mid-stream", "err", err, "written", n)
		}
		panic(http.ErrAbortHandler)
	}
	a.log.Info("backup sent", "bytes", n, "by", who.Name)
}

// heldWriter writes to w while ctx (a held right) lasts.
type heldWriter struct {
	ctx context.Context
	w   io.Writer
}

func (h heldWriter) Write(p []byte) (int, error) {
	if h.ctx.Err() != nil {
		return 0, context.Cause(h.ctx)
	}
	return h.w.Write(p)
}
