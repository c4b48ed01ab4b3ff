// Package client is a small typed client of rackd's HTTP API v1 (see
// docs/API.md). The rackd CLI is built on it; other Go tools may use it too.
//
// Every method takes a context first. A non-2xx answer is returned as an
// *APIError carrying the API's status, code and message; a failure to talk to
// the server at all is returned as an error that names the URL and wraps the
// transport error.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"rackd/api"
)

// DefaultTimeout bounds every call except Backup, from dial to the last byte
// of the answer, when the caller did not choose a timeout. API calls are small
// and the server answers them from its store, so a minute of silence means
// something is wrong; the caller's context can cut it shorter.
const DefaultTimeout = 60 * time.Second

// maxBody caps how much of a JSON answer is read. A machine list of a full
// rack is well under a megabyte; the cap only keeps a misdirected URL (a
// download server, say) from filling memory.
const maxBody = 64 << 20

// maxErrorBody caps how much of an error answer is read: it is one sentence.
const maxErrorBody = 64 << 10

// MachineActions are the actions MachineAction accepts, in lifecycle order.
var MachineActions = []string{"commission", "deploy", "release", "mark-broken", "mark-fixed", "retire"}

// Client talks to one rackd server. It is safe for concurrent use.
type Client struct {
	base  string // scheme://host[:port][/prefix], without a trailing slash
	token string
	ua    string

	// api serves ordinary calls and has a timeout; stream shares its
	// transport but has none, because a backup of a large database on a slow
	// link may take longer than any timeout we could pick. Backup is bounded
	// by its context instead.
	api    *http.Client
	stream *http.Client
}

// Option configures a Client built by New.
type Option func(*options)

type options struct {
	hc         *http.Client
	timeout    time.Duration
	timeoutSet bool
	ua         string
}

// WithHTTPClient makes the Client send its requests through hc (its transport,
// redirect policy and cookie jar). hc itself is not modified.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) { o.hc = hc }
}

// WithTimeout sets the timeout of every call except Backup; zero means none.
// Without it the Client uses the timeout of the client given WithHTTPClient,
// or DefaultTimeout if that has none.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout, o.timeoutSet = d, true }
}

// WithUserAgent sets the User-Agent header, so that the server's logs can tell
// the CLI from other tools.
func WithUserAgent(ua string) Option {
	return func(o *options) { o.ua = ua }
}

// New returns a Client for the server at baseURL (for example
// "http://127.0.0.1:5240"; a path prefix is kept, a trailing slash dropped)
// that authenticates with token. An empty token sends no Authorization header,
// which is enough for Health.
func New(baseURL, token string, opts ...Option) *Client {
	o := options{ua: "rackd-client"}
	for _, opt := range opts {
		opt(&o)
	}
	base := http.Client{}
	if o.hc != nil {
		base = *o.hc
	}
	apiHC, streamHC := base, base
	switch {
	case o.timeoutSet:
		apiHC.Timeout = o.timeout
	case apiHC.Timeout == 0:
		apiHC.Timeout = DefaultTimeout
	}
	streamHC.Timeout = 0
	return &Client{
		base:   strings.TrimRight(baseURL, "/"),
		token:  token,
		ua:     o.ua,
		api:    &apiHC,
		stream: &streamHC,
	}
}

// BaseURL returns the server URL the Client was built with, without a
// trailing slash.
func (c *Client) BaseURL() string { return c.base }

// APIError is a non-2xx answer of the API.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the API's snake_case error code (api.CodeNotFound, ...). It is
	// empty when the answer was not an API error body, e.g. from a proxy.
	Code string
	// Message is the API's human sentence.
	Message string
}

// Error reads like `machine "x" not found (not_found, HTTP 404)`.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = strings.ToLower(http.StatusText(e.Status))
	}
	if msg == "" {
		msg = "unexpected answer"
	}
	if e.Code == "" {
		return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", msg, e.Code, e.Status)
}

// IsCode reports whether err is, or wraps, an *APIError with the given code.
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

type rawKey struct{}

// CaptureRaw returns a context under which the next successful JSON answer is
// also copied verbatim into *dst. The CLI's --json prints that copy, so that
// scripts see every field the server sent, even fields newer than this client
// and its api types. Like httptrace.WithClientTrace, it is a per-call hook:
// use the returned context for one call.
func CaptureRaw(ctx context.Context, dst *json.RawMessage) context.Context {
	return context.WithValue(ctx, rawKey{}, dst)
}

// MachineFilter narrows ListMachines; empty fields do not filter.
type MachineFilter struct {
	State     string
	Owner     string
	AgentName string
}

// ListMachines returns the machines that match f (GET /api/v1/machines).
func (c *Client) ListMachines(ctx context.Context, f MachineFilter) ([]api.Machine, error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Owner != "" {
		q.Set("owner", f.Owner)
	}
	if f.AgentName != "" {
		q.Set("agent_name", f.AgentName)
	}
	var ms []api.Machine
	_, err := c.call(ctx, http.MethodGet, "/api/v1/machines", q, nil, &ms)
	return ms, err
}

// GetMachine returns one machine by id or hostname.
func (c *Client) GetMachine(ctx context.Context, idOrName string) (api.Machine, error) {
	var m api.Machine
	p, err := idPath("/api/v1/machines/", idOrName, "")
	if err != nil {
		return m, err
	}
	_, err = c.call(ctx, http.MethodGet, p, nil, nil, &m)
	return m, err
}

// CreateMachine enlists a machine by hand (admin) and returns it as created.
func (c *Client) CreateMachine(ctx context.Context, req api.CreateMachine) (api.Machine, error) {
	var m api.Machine
	_, err := c.call(ctx, http.MethodPost, "/api/v1/machines", nil, req, &m)
	return m, err
}

// MachineAction moves a machine through its lifecycle: action is one of
// MachineActions. It returns the machine after the transition.
func (c *Client) MachineAction(ctx context.Context, idOrName, action string, req api.ActionRequest) (api.Machine, error) {
	if !slices.Contains(MachineActions, action) {
		// Checked here rather than left to a 404 so that a typo cannot
		// reach another endpoint under /machines/{id}/.
		return api.Machine{}, fmt.Errorf("unknown machine action %q (want one of %s)", action, strings.Join(MachineActions, ", "))
	}
	var m api.Machine
	p, err := idPath("/api/v1/machines/", idOrName, "/"+action)
	if err != nil {
		return m, err
	}
	_, err = c.call(ctx, http.MethodPost, p, nil, req, &m)
	return m, err
}

// Abort stops the phase a machine is in (POST .../abort): it returns the
// machine as the abort left it. reason goes into its event.
func (c *Client) Abort(ctx context.Context, idOrName, reason string) (api.Machine, error) {
	var m api.Machine
	p, err := idPath("/api/v1/machines/", idOrName, "/abort")
	if err != nil {
		return m, err
	}
	_, err = c.call(ctx, http.MethodPost, p, nil, api.AbortRequest{Reason: reason}, &m)
	return m, err
}

// UpdateMachine changes a machine's record (admin, PATCH): only the fields
// set in req change.
func (c *Client) UpdateMachine(ctx context.Context, idOrName string, req api.MachinePatch) (api.Machine, error) {
	var m api.Machine
	p, err := idPath("/api/v1/machines/", idOrName, "")
	if err != nil {
		return m, err
	}
	_, err = c.call(ctx, http.MethodPatch, p, nil, req, &m)
	return m, err
}

// DeleteMachine deletes a machine (admin) and returns it as it was. A
// machine that is allocated, deployed or in a phase needs req.Force.
func (c *Client) DeleteMachine(ctx context.Context, idOrName string, req api.DeleteMachine) (api.Machine, error) {
	var m api.Machine
	p, err := idPath("/api/v1/machines/", idOrName, "")
	if err != nil {
		return m, err
	}
	_, err = c.call(ctx, http.MethodDelete, p, nil, req, &m)
	return m, err
}

// MachineEvents returns a machine's history, oldest first.
func (c *Client) MachineEvents(ctx context.Context, idOrName string) ([]api.Event, error) {
	var evs []api.Event
	p, err := idPath("/api/v1/machines/", idOrName, "/events")
	if err != nil {
		return nil, err
	}
	_, err = c.call(ctx, http.MethodGet, p, nil, nil, &evs)
	return evs, err
}

// Allocate allocates a machine, or confirms or adopts one by name. status
// tells which: http.StatusCreated for a new allocation, http.StatusOK when
// the allocation was already the caller's (Token empty) or was adopted with
// its token (Token is the new one).
func (c *Client) Allocate(ctx context.Context, req api.AllocateRequest) (api.Allocation, int, error) {
	var a api.Allocation
	status, err := c.call(ctx, http.MethodPost, "/api/v1/allocations", nil, req, &a)
	return a, status, err
}

// Release ends a machine's allocation; the machine is returned RELEASING.
func (c *Client) Release(ctx context.Context, idOrName string) (api.Machine, error) {
	var m api.Machine
	p, err := idPath("/api/v1/allocations/", idOrName, "")
	if err != nil {
		return m, err
	}
	_, err = c.call(ctx, http.MethodDelete, p, nil, nil, &m)
	return m, err
}

// CreateUser creates a user (admin). The answer's Token is shown only here.
func (c *Client) CreateUser(ctx context.Context, req api.CreateUser) (api.User, error) {
	var u api.User
	_, err := c.call(ctx, http.MethodPost, "/api/v1/users", nil, req, &u)
	return u, err
}

// RemoveUser removes a user, with their tokens and SSH keys, and returns it
// as it was.
func (c *Client) RemoveUser(ctx context.Context, name string) (api.User, error) {
	var u api.User
	p, err := segmentPath("/api/v1/users/", "user name", name, "")
	if err != nil {
		return u, err
	}
	_, err = c.call(ctx, http.MethodDelete, p, nil, nil, &u)
	return u, err
}

// ListUsers returns every user, without tokens.
func (c *Client) ListUsers(ctx context.Context) ([]api.User, error) {
	var us []api.User
	_, err := c.call(ctx, http.MethodGet, "/api/v1/users", nil, nil, &us)
	return us, err
}

// ListSubnets returns the managed subnets with the usage of their dynamic
// ranges (GET /api/v1/subnets).
func (c *Client) ListSubnets(ctx context.Context) ([]api.Subnet, error) {
	var sns []api.Subnet
	_, err := c.call(ctx, http.MethodGet, "/api/v1/subnets", nil, nil, &sns)
	return sns, err
}

// CreateSubnet adds a managed subnet (admin) and returns it as created.
func (c *Client) CreateSubnet(ctx context.Context, sn api.Subnet) (api.Subnet, error) {
	var out api.Subnet
	_, err := c.call(ctx, http.MethodPost, "/api/v1/subnets", nil, sn, &out)
	return out, err
}

// ListAddresses returns every address in use, or only those of kind
// (dynamic, sticky, reserved or discovered) if it is not empty
// (GET /api/v1/ips).
func (c *Client) ListAddresses(ctx context.Context, kind string) ([]api.Address, error) {
	q := url.Values{}
	if kind != "" {
		q.Set("kind", kind)
	}
	var as []api.Address
	_, err := c.call(ctx, http.MethodGet, "/api/v1/ips", q, nil, &as)
	return as, err
}

// Reserve reserves an address: req.IP, or the first free static address of
// req.Subnet. The caller owns the reservation.
func (c *Client) Reserve(ctx context.Context, req api.ReserveRequest) (api.Address, error) {
	var a api.Address
	_, err := c.call(ctx, http.MethodPost, "/api/v1/ips/reservations", nil, req, &a)
	return a, err
}

// Unreserve removes the reservation of ip and returns it as it was.
func (c *Client) Unreserve(ctx context.Context, ip string) (api.Address, error) {
	var a api.Address
	p, err := segmentPath("/api/v1/ips/reservations/", "IP address", ip, "")
	if err != nil {
		return a, err
	}
	_, err = c.call(ctx, http.MethodDelete, p, nil, nil, &a)
	return a, err
}

// AssignIP gives one of a machine's interfaces a sticky address, replacing
// its sticky address in that subnet unless req.Alias is set.
func (c *Client) AssignIP(ctx context.Context, idOrName string, req api.AssignIP) (api.Address, error) {
	var a api.Address
	p, err := idPath("/api/v1/machines/", idOrName, "/ips")
	if err != nil {
		return a, err
	}
	_, err = c.call(ctx, http.MethodPost, p, nil, req, &a)
	return a, err
}

// RemoveIP takes ip away from a machine and returns it, now back in the pool.
func (c *Client) RemoveIP(ctx context.Context, idOrName, ip string) (api.Address, error) {
	var a api.Address
	p, err := idPath("/api/v1/machines/", idOrName, "/ips/")
	if err == nil {
		p, err = segmentPath(p, "IP address", ip, "")
	}
	if err != nil {
		return a, err
	}
	_, err = c.call(ctx, http.MethodDelete, p, nil, nil, &a)
	return a, err
}

// ListLeases returns the live dynamic leases (GET /api/v1/leases).
func (c *Client) ListLeases(ctx context.Context) ([]api.Lease, error) {
	var ls []api.Lease
	_, err := c.call(ctx, http.MethodGet, "/api/v1/leases", nil, nil, &ls)
	return ls, err
}

// Version returns the server's version and store schema.
func (c *Client) Version(ctx context.Context) (api.Version, error) {
	var v api.Version
	_, err := c.call(ctx, http.MethodGet, "/api/v1/version", nil, nil, &v)
	return v, err
}

// Health returns GET /healthz, which needs no token.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	_, err := c.call(ctx, http.MethodGet, "/healthz", nil, nil, &h)
	return h, err
}

// Backup streams a consistent copy of the server's database (admin) into w
// and returns the number of bytes written. It has no timeout of its own: bound
// it with ctx. An error may come after some bytes were written, so w must be
// something the caller can throw away (see the CLI's backup verb).
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, c.stream, http.MethodGet, "/api/v1/backup", nil, nil, "application/octet-stream")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		// A proxy's or a wrong server's HTML page with 200 must not be
		// taken for a database.
		if mt, _, _ := mime.ParseMediaType(ct); mt != "application/octet-stream" {
			return 0, fmt.Errorf("backup from %s: unexpected content type %q (is this rackd?)", c.base, ct)
		}
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return n, fmt.Errorf("backup interrupted after %d bytes: %w", n, ctx.Err())
		}
		return n, fmt.Errorf("backup from %s broke off after %d bytes: %w", c.base, n, err)
	}
	// net/http already fails a body shorter than its Content-Length; an
	// empty body is never a database, whatever the headers say.
	if n == 0 {
		return 0, fmt.Errorf("backup from %s: the server sent an empty body", c.base)
	}
	return n, nil
}

// call sends one JSON request and decodes a 2xx JSON answer into out.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) (int, error) {
	resp, err := c.send(ctx, c.api, method, path, q, in, "application/json")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return resp.StatusCode, c.transportErr(ctx, err)
	}
	if len(body) > maxBody {
		return resp.StatusCode, fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxBody)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: unexpected answer from %s (is this rackd?): %w", method, path, c.base, err)
	}
	if dst, ok := ctx.Value(rawKey{}).(*json.RawMessage); ok && dst != nil {
		*dst = append((*dst)[:0], body...)
	}
	return resp.StatusCode, nil
}

// send sends a request and returns the answer if it is 2xx; any other answer
// becomes an *APIError.
func (c *Client) send(ctx context.Context, hc *http.Client, method, path string, q url.Values, in any, accept string) (*http.Response, error) {
	if in == nil {
		return c.sendBody(ctx, hc, method, path, q, nil, -1, "", accept)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("%s %s: encoding request: %w", method, path, err)
	}
	return c.sendBody(ctx, hc, method, path, q, bytes.NewReader(b), int64(len(b)), "application/json", accept)
}

// sendBody is send with a body of its own: size bytes (-1: unknown) of
// content type ctype.
func (c *Client) sendBody(ctx context.Context, hc *http.Client, method, path string, q url.Values, body io.Reader, size int64, ctype, accept string) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("bad rackd URL %q: %w", c.base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
		if size >= 0 {
			req.ContentLength = size
		}
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.ua)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, c.transportErr(ctx, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// transportErr explains a failure to talk to the server. Cancellation by the
// caller is reported as such, not as an unreachable server.
func (c *Client) transportErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("request to %s: %w", c.base, ctx.Err())
	}
	// *url.Error repeats the method and full URL; the base URL is what the
	// user configured, so name that and keep the underlying cause.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("cannot reach rackd at %s: %w (check RACKD_URL or --url, and that rackd is running)", c.base, err)
}

// readAPIError turns a non-2xx answer into an *APIError. Bodies that are not
// the API's error JSON (a proxy's page, say) still give the status, and a
// short plain-text body is kept as the message.
func readAPIError(resp *http.Response) *APIError {
	ae := &APIError{Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e struct {
		api.Error
		// Status is api.Health's: a 503 from /healthz says why in it.
		Status string `json:"status"`
	}
	if json.Unmarshal(b, &e) == nil && (e.Error.Error != "" || e.Code != "" || e.Status != "") {
		ae.Code, ae.Message = e.Code, e.Error.Error
		if ae.Message == "" {
			ae.Message = e.Status
		}
		return ae
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/plain" {
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		ae.Message = line
	}
	return ae
}

// idPath returns prefix + the escaped id. Ids and hostnames never hold a slash
// or a '?', but a typo must not reach another endpoint, and "." or ".." would
// be cleaned away by the server's router into a different path.
func idPath(prefix, idOrName, suffix string) (string, error) {
	return segmentPath(prefix, "machine id or hostname", idOrName, suffix)
}

// segmentPath returns prefix + value escaped as one path segment + suffix;
// what names the value in the error for one that cannot be a segment.
func segmentPath(prefix, what, value, suffix string) (string, error) {
	switch value {
	case "", ".", "..":
		return "", fmt.Errorf("invalid %s %q", what, value)
	}
	return prefix + url.PathEscape(value) + suffix, nil
}

// ListImages returns the imported boot images (GET /api/v1/images).
func (c *Client) ListImages(ctx context.Context) ([]api.Image, error) {
	var ims []api.Image
	_, err := c.call(ctx, http.MethodGet, "/api/v1/images", nil, nil, &ims)
	return ims, err
}

// ImportImage imports the image directory dir, an absolute path on the
// rackd host: the server reads it (POST /api/v1/images/import), and the
// call returns when the import is done.
func (c *Client) ImportImage(ctx context.Context, dir string) (api.Image, error) {
	var im api.Image
	_, err := c.call(ctx, http.MethodPost, "/api/v1/images/import", nil, api.ImportImage{Dir: dir}, &im)
	return im, err
}

// StartImport starts an import in the background (POST
// /api/v1/images/import with background set) and returns its job; follow
// it with ImportJob. req names a directory on the rackd host or a URL that
// rackd fetches.
func (c *Client) StartImport(ctx context.Context, req api.ImportImage) (api.ImportJob, error) {
	var j api.ImportJob
	req.Background = true
	_, err := c.call(ctx, http.MethodPost, "/api/v1/images/import", nil, req, &j)
	return j, err
}

// ImportJob returns an import job: its state and progress
// (GET /api/v1/images/imports/{id}).
func (c *Client) ImportJob(ctx context.Context, id string) (api.ImportJob, error) {
	var j api.ImportJob
	p, err := segmentPath("/api/v1/images/imports/", "import id", id, "")
	if err != nil {
		return j, err
	}
	_, err = c.call(ctx, http.MethodGet, p, nil, nil, &j)
	return j, err
}

// ImportJobs lists the running and recently finished imports
// (GET /api/v1/images/imports).
func (c *Client) ImportJobs(ctx context.Context) ([]api.ImportJob, error) {
	var js []api.ImportJob
	_, err := c.call(ctx, http.MethodGet, "/api/v1/images/imports", nil, nil, &js)
	return js, err
}

// CancelImport cancels an import and returns its job once it has stopped
// (POST /api/v1/images/imports/{id}/cancel).
func (c *Client) CancelImport(ctx context.Context, id string) (api.ImportJob, error) {
	var j api.ImportJob
	p, err := segmentPath("/api/v1/images/imports/", "import id", id, "/cancel")
	if err != nil {
		return j, err
	}
	_, err = c.call(ctx, http.MethodPost, p, nil, nil, &j)
	return j, err
}

// DeleteImage deletes an image and the blobs no other image uses
// (DELETE /api/v1/images/{name}/{arch}); it returns the image as it was.
func (c *Client) DeleteImage(ctx context.Context, name, arch string) (api.Image, error) {
	var im api.Image
	p, err := segmentPath("/api/v1/images/", "image name", name, "/")
	if err != nil {
		return im, err
	}
	p2, err := segmentPath(p, "image arch", arch, "")
	if err != nil {
		return im, err
	}
	_, err = c.call(ctx, http.MethodDelete, p2, nil, nil, &im)
	return im, err
}
