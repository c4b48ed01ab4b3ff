package maasapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"rackd/internal/reqbody"
	"rackd/store"
	"rackd/store/httpstatus"
)

// Prefix is where MAAS's API 2.0 lives on rackd's API listener (MAAS's own
// port is 5240, rackd's default).
const Prefix = "/MAAS/api/2.0/"

// Ops are the domain operations that change machines and have follow-ups
// in the agent (the releaser, power driver checks, sticky addresses,
// metrics, the log), as /api/v1 calls them: the agent implements them. The
// MAAS layer changes machines through these, or through store operations
// that have no follow-up (owner data, tags), so one place decides what an
// allocation, a release, a deploy or a power request may do.
type Ops interface {
	Create(ctx context.Context, who store.Actor, nm store.NewMachine) (store.Machine, error)
	Update(ctx context.Context, who store.Actor, machine string, p store.MachinePatch) (store.Machine, error)
	Delete(ctx context.Context, who store.Actor, req store.DeleteRequest) (store.Machine, error)
	Allocate(ctx context.Context, who store.Actor, req store.AllocateRequest) (store.AllocateResult, error)
	Release(ctx context.Context, who store.Actor, machine, reason string, erase bool) (store.Machine, error)
	Deploy(ctx context.Context, who store.Actor, req store.DeployRequest) (store.Machine, error)
	Transition(ctx context.Context, who store.Actor, req store.TransitionRequest) (store.Machine, error)
	RequestPower(ctx context.Context, who store.Actor, machine string, action store.PowerAction, reason string) (store.PowerRequest, error)
	Abort(ctx context.Context, who store.Actor, machine, reason string) (store.Machine, error)
}

// Options configure a Server.
type Options struct {
	// Log receives errors and notable events; nil discards.
	Log *slog.Logger
	// MaxBodyBytes bounds a request body whose route sets no bound of its
	// own (default 1 MiB).
	MaxBodyBytes int64
	// Version is rackd's version, shown in version/'s subversion.
	Version string
	// Unavailable reports whether an error is the store's engine failing
	// to answer in time (answered 503, not 500); nil: store.ErrUnavailable
	// only.
	Unavailable func(error) bool
	// Bodies is the budget of request bodies read at once, shared with
	// the rest of the process (nil: a gate of the server's own).
	Bodies *reqbody.Gate
}

// Server serves MAAS's API 2.0. It is an http.Handler for Prefix and
// everything under it.
type Server struct {
	store  *store.Store
	ops    Ops
	log    *slog.Logger
	opts   Options
	routes []Route
	mux    *http.ServeMux
}

// New builds a Server over st, changing machines through ops. It checks
// the route table: a duplicate entry or an anonymous write is a bug.
func New(st *store.Store, ops Ops, o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.Bodies == nil {
		o.Bodies = reqbody.NewGate(0, 0)
	}
	s := &Server{store: st, ops: ops, log: o.Log, opts: o, routes: routes(), mux: http.NewServeMux()}
	groups := map[string]*group{}
	var order []string
	for i := range s.routes {
		rt := &s.routes[i]
		if err := rt.check(); err != nil {
			return nil, err
		}
		key := rt.Method + " " + rt.Path
		g := groups[key]
		if g == nil {
			g = &group{method: rt.Method, path: rt.Path, ops: map[string]*Route{}}
			groups[key] = g
			order = append(order, key)
		}
		if g.ops[rt.Op] != nil {
			return nil, fmt.Errorf("maasapi: route %s %s op=%q is in the table twice", rt.Method, rt.Path, rt.Op)
		}
		g.ops[rt.Op] = rt
		g.maxBody = max(g.maxBody, s.bodyLimit(rt))
	}
	for _, key := range order {
		g := groups[key]
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, g) })
		// Clients send the trailing slash (MAAS's URIs have it); a path
		// without it is the same resource.
		s.mux.Handle(g.method+" "+Prefix+g.path+"{$}", h)
		s.mux.Handle(g.method+" "+Prefix+strings.TrimSuffix(g.path, "/"), h)
	}
	s.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusNotFound, fmt.Sprintf("Unknown API endpoint: %s %s (docs/MAAS-API.md lists what rackd serves)", r.Method, truncate(r.URL.Path, 200)))
	})
	return s, nil
}

// ServeHTTP serves Prefix and everything under it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Routes returns the route table (for describe/ and the docs' test).
func (s *Server) Routes() []Route { return slices.Clone(s.routes) }

// group is the routes of one method and path, by op.
type group struct {
	method, path string
	ops          map[string]*Route
	maxBody      int64
}

func (s *Server) bodyLimit(rt *Route) int64 {
	if rt.BodyLimit > 0 {
		return rt.BodyLimit
	}
	return s.opts.MaxBodyBytes
}

// serve authenticates, decodes the parameters, finds the op's route and
// calls it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, g *group) {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeText(w, http.StatusBadRequest, "malformed query string: "+err.Error())
		return
	}
	op := query.Get("op")
	rt := g.ops[op]
	if rt == nil && g.method == http.MethodGet {
		s.writeError(w, r, s.unknownOp(g, op))
		return
	}
	var who store.Actor
	if rt == nil || !rt.Anonymous {
		who, err = s.authenticate(r.Header.Get("Authorization"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		r = r.WithContext(store.WithActor(r.Context(), who))
	}
	limit := g.maxBody
	if rt != nil {
		limit = s.bodyLimit(rt)
	}
	// The body is read whole first, under the route's bound and within
	// the budget of bodies read at once, into pooled chunks: a body over
	// the bound is refused before it is parsed, and makes no garbage. The
	// budget is given back once the form is decoded (its values and files
	// are copies).
	done := func() {}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodDelete {
		var body *reqbody.Body
		if body, done, err = s.opts.Bodies.Read(w, r, limit); err == nil {
			r.Body = io.NopCloser(body.Reader())
		}
	}
	if err != nil {
		done()
		if n, ok := reqbody.TooLarge(err); ok {
			writeText(w, http.StatusRequestEntityTooLarge, errBodyTooLarge{n}.Error())
			return
		}
		if errors.Is(err, reqbody.ErrBusy) {
			w.Header().Set("Retry-After", "1")
			writeText(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeText(w, http.StatusBadRequest, "the request body could not be read: "+err.Error())
		return
	}
	f, err := readForm(r, limit)
	done()
	defer f.cleanup()
	if err != nil {
		var tl errBodyTooLarge
		if errors.As(err, &tl) {
			writeText(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	if rt == nil {
		// A POST or PUT may carry its op in the body.
		op = f.values.Get("op")
		if rt = g.ops[op]; rt == nil {
			s.writeError(w, r, s.unknownOp(g, op))
			return
		}
	}
	f.values.Del("op")
	c := &call{w: w, r: r, who: who, route: rt, form: f.values, files: f.files}
	v, err := rt.Handle(s, c)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	switch v := v.(type) {
	case raw:
		w.Header().Set("Content-Type", v.contentType)
		w.WriteHeader(http.StatusOK)
		w.Write(v.body)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// unknownOp is MAAS's answer to an op it does not have, with what rackd
// serves there: a 501, as an op rackd does not implement is no client error.
func (s *Server) unknownOp(g *group, op string) error {
	var have []string
	for o := range g.ops {
		if o == "" {
			o = "(none)"
		}
		have = append(have, o)
	}
	slices.Sort(have)
	name := "op=" + truncate(op, 64)
	if op == "" {
		name = "no op"
	}
	return &apiError{status: http.StatusNotImplemented,
		msg: fmt.Sprintf("Unrecognised signature: method=%s %s: rackd does not implement %s on %s%s (it serves op: %s)",
			g.method, name, name, Prefix, g.path, strings.Join(have, ", "))}
}

// raw is a handler's answer that is not JSON (a file's content).
type raw struct {
	contentType string
	body        []byte
}

// apiError is an answer in MAAS's error style: a text body, or, for a 400
// on parameters, a JSON object of field -> messages.
type apiError struct {
	status int
	msg    string
	fields map[string][]string
}

func (e *apiError) Error() string {
	if e.fields != nil {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(e.fields)) {
			parts = append(parts, k+": "+strings.Join(e.fields[k], " "))
		}
		return strings.Join(parts, "; ")
	}
	return e.msg
}

// errorf is an answer of the given status with a text body.
func errorf(status int, format string, args ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// writeError answers err: an apiError as it says, an authentication
// failure 401, a domain refusal with its status and its words, anything
// else a logged 500 (503 for a store that did not answer in time).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		if ae.fields != nil {
			writeJSON(w, ae.status, ae.fields)
			return
		}
		if ae.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `OAuth realm="OAuth"`)
		}
		writeText(w, ae.status, ae.msg)
		return
	}
	if status := httpstatus.Of(store.CodeOf(err)); status != 0 {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `OAuth realm="OAuth"`)
		}
		writeText(w, status, err.Error())
		return
	}
	if errors.Is(err, store.ErrClosed) || errors.Is(err, r.Context().Err()) {
		writeText(w, http.StatusServiceUnavailable, "rackd is shutting down; retry")
		return
	}
	if errors.Is(err, store.ErrUnavailable) || (s.opts.Unavailable != nil && s.opts.Unavailable(err)) {
		s.log.Warn("the store did not answer in time", "method", r.Method, "path", r.URL.Path, "err", err)
		writeText(w, http.StatusServiceUnavailable, "the store did not answer in time; retry once it is back")
		return
	}
	s.log.Error("MAAS API request failed", "method", r.Method, "path", r.URL.Path, "op", r.URL.Query().Get("op"), "err", err)
	writeText(w, http.StatusInternalServerError, "internal error; the rackd log has the details")
}

// streamAbove is the length from which a list answer is written element
// by element (writeJSON).
const streamAbove = 64

// writeJSON answers v as JSON. A long list (machines/ of a rack) is
// written element by element through a buffered writer, each element
// encoded as it goes: encoded whole, a thousand machines are megabytes
// grown, copied and cleared in one buffer on every request (a quarter of
// the list's time, and the garbage of it). An element that cannot be
// encoded then aborts the answer (the client sees a cut connection, not
// a truncated list).
func writeJSON(w http.ResponseWriter, status int, v any) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.Len() > streamAbove {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		bw := bufio.NewWriterSize(w, 64<<10)
		enc := json.NewEncoder(bw)
		bw.WriteByte('[')
		for i := range rv.Len() {
			if i > 0 {
				bw.WriteByte(',')
			}
			if err := enc.Encode(rv.Index(i).Addr().Interface()); err != nil {
				panic(http.ErrAbortHandler)
			}
		}
		bw.WriteByte(']')
		bw.Flush()
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		writeText(w, http.StatusInternalServerError, "internal error: cannot encode the answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprint(w, msg)
}

// call is one request as a handler sees it.
type call struct {
	w     http.ResponseWriter
	r     *http.Request
	who   store.Actor
	route *Route
	// form is the parameters: the query's (op left out) and the body's.
	form  url.Values
	files map[string][]*multipart.FileHeader
	// errs are the parameters refused so far, field -> messages: check
	// answers them as MAAS does, a 400 with a JSON object.
	errs map[string][]string
}

func (c *call) ctx() context.Context { return c.r.Context() }

// path is a path parameter of the route ({system_id}).
func (c *call) path(name string) string { return c.r.PathValue(name) }

// has reports whether the parameter was sent.
func (c *call) has(name string) bool { _, ok := c.form[name]; return ok }

// str is a parameter's value ("" when absent); sent more than once, it is
// refused.
func (c *call) str(name string) string {
	vs := c.form[name]
	if len(vs) > 1 {
		c.fail(name, "This field takes one value.")
	}
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// list is a parameter's values; MAAS also reads one value of comma
// separated words (tags=a,b) as several.
func (c *call) list(name string) []string {
	var out []string
	for _, v := range c.form[name] {
		for _, w := range strings.Split(v, ",") {
			if w = strings.TrimSpace(w); w != "" {
				out = append(out, w)
			}
		}
	}
	return out
}

// integer is a whole number parameter within [lo, hi]; absent: def.
func (c *call) integer(name string, lo, hi, def int) int {
	s := strings.TrimSpace(c.str(name))
	if s == "" {
		return def
	}
	// MAAS's forms take "4.0" for a count too.
	s = strings.TrimSuffix(s, ".0")
	n, err := strconv.Atoi(s)
	if err != nil {
		c.fail(name, "Enter a whole number.")
		return def
	}
	if n < lo || n > hi {
		c.fail(name, fmt.Sprintf("Ensure this value is between %d and %d.", lo, hi))
		return def
	}
	return n
}

// boolean is a true/false parameter (Django's words); absent: def.
func (c *call) boolean(name string, def bool) bool {
	switch strings.ToLower(strings.TrimSpace(c.str(name))) {
	case "":
		return def
	case "true", "1", "on", "yes":
		return true
	case "false", "0", "off", "no":
		return false
	}
	c.fail(name, "Enter true or false.")
	return def
}

// fail refuses a parameter.
func (c *call) fail(name, msg string) {
	if c.errs == nil {
		c.errs = map[string][]string{}
	}
	if !slices.Contains(c.errs[name], msg) {
		c.errs[name] = append(c.errs[name], msg)
	}
}

// check answers the parameters refused so far: nil, or MAAS's 400 with a
// JSON object of field -> messages.
func (c *call) check() error {
	if len(c.errs) == 0 {
		return nil
	}
	return &apiError{status: http.StatusBadRequest, fields: c.errs}
}
