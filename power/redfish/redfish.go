// Package redfish is the power driver for BMCs that speak DMTF Redfish over
// HTTPS: power through the ComputerSystem.Reset action (the reset type
// chosen among the BMC's ResetType@Redfish.AllowableValues), status from
// PowerState, the next boot through the Boot override (once, in the
// machine's boot mode, echoed where a BMC demands it).
//
// It is plain net/http with typed structs, not gofish: a gofish client fixes
// its context when it connects (a reused session could not be bounded per
// call), reads answers whole with no size limit, sends If-Match on action
// POSTs in the versions after v0.22 (iDRAC refuses those), and knows the
// @Redfish.Settings object for BIOS attributes only, not for Boot.
//
//   - Sessions (X-Auth-Token) are opened once per BMC and user and reused;
//     an expired one is replaced once per call; Close deletes them. A BMC
//     without a SessionService gets basic auth.
//   - PATCH carries If-Match with the ETag just read, and goes to the
//     @Redfish.Settings object when the system names one. Action POSTs
//     never carry If-Match.
//   - TLS: the BMC's certificate is pinned by its SHA-256 (trusted on first
//     use and reported through Target.Pin, then enforced; a changed one is
//     refused naming both fingerprints), or not checked at all when the
//     operator said so for that machine (Target.InsecureTLS). Never a silent
//     skip-verify.
//   - Answers are bounded (Options.MaxBody), redirects are not followed,
//     and every link the BMC gives must be a path on the same BMC.
//   - A 503 (the BMC is busy, nothing was done) is retried twice within the
//     call's budget; other errors are the queue's to retry.
//
// The password never reaches a log or an error's text.
package redfish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"rackd/power"
)

// Defaults for Options.
const (
	DefaultTimeout = 8 * time.Second
	DefaultMaxBody = 1 << 20
)

// Options tunes the driver. The zero value is usable.
type Options struct {
	// Timeout bounds one driver call: waiting for the BMC's turn, logging
	// in, and its requests (default 8 s: Redfish BMCs take seconds where
	// IPMI ones take milliseconds).
	Timeout time.Duration
	// AuthRetryAfter: after the BMC refused a user and password, calls with
	// the same ones fail at once with ErrAuth for this long (default 10 s):
	// BMCs lock accounts out after a few refused logins.
	AuthRetryAfter time.Duration
	// MaxBody bounds a BMC's answer (default 1 MiB; a system resource is a
	// few kB).
	MaxBody int64
	// GracefulOff makes PowerOff ask for GracefulShutdown (an ACPI
	// shutdown) where the BMC offers it; by default it is ForceOff, as
	// with IPMI.
	GracefulOff bool
	// Logger gets the driver's log; nil discards.
	Logger *slog.Logger
}

// Stats counts sessions, for tests and debugging.
type Stats struct {
	Logins        int // sessions created
	Logouts       int // sessions deleted
	BasicFallback int // BMCs found without sessions
}

// Driver is the Redfish power driver. Close it on shutdown to end its
// sessions.
type Driver struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	bmcs    map[bmcKey]*bmc
	pins    map[string]string // host:port -> fingerprint, for targets without Pin
	refused map[refusal]time.Time
	closed  bool
	stats   Stats
}

type bmcKey struct{ host, user string }

type refusal struct {
	key bmcKey
	pw  [32]byte
}

// bmc is one BMC as one user: its HTTP client, session and what its
// service root said.
type bmc struct {
	host string // host:port
	user string
	turn chan struct{}

	// Guarded by turn:
	client     *http.Client
	transport  *http.Transport
	tlsMode    string // "insecure", "pin:<fp>" or "tofu": the transport's
	token      string
	sessionURI string
	password   [32]byte // sha256 of the password the session was opened with
	noSessions bool
	sessions   string // the Sessions collection
	systems    string // the Systems collection

	// Guarded by mu: what the TLS check compares with, and what it saw.
	mu       sync.Mutex
	want     string // fingerprint to enforce ("" with insecure or tofu)
	insecure bool
	seen     string // fingerprint of the last certificate presented
}

var _ power.Driver = (*Driver)(nil)

// New returns a driver.
func New(opts Options) *Driver {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.AuthRetryAfter <= 0 {
		opts.AuthRetryAfter = 10 * time.Second
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Driver{opts: opts, log: opts.Logger.With("driver", "redfish"),
		bmcs: map[bmcKey]*bmc{}, pins: map[string]string{}, refused: map[refusal]time.Time{}}
}

// Stats returns the session counters.
func (d *Driver) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *Driver) count(f func(*Stats)) {
	d.mu.Lock()
	f(&d.stats)
	d.mu.Unlock()
}

// Close deletes every session (bounded by the timeout per BMC). Commands
// after Close fail; a second Close is a no-op.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	all := make([]*bmc, 0, len(d.bmcs))
	for _, b := range d.bmcs {
		all = append(all, b)
	}
	d.bmcs = map[bmcKey]*bmc{}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), d.opts.Timeout)
			defer cancel()
			select {
			case b.turn <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-b.turn }()
			d.logout(ctx, b)
			if b.transport != nil {
				b.transport.CloseIdleConnections()
			}
		}()
	}
	wg.Wait()
	return nil
}

// ---- addresses ----

// endpoint is a parsed Target.Address: the BMC's base URL and, when the
// address names one, the system's path.
type endpoint struct {
	base   *url.URL // scheme and host only
	system string
}

// parseAddress accepts HOST, HOST:PORT, https://HOST[:PORT] and
// https://HOST[:PORT]/redfish/v1/Systems/ID (a BMC with several systems).
func parseAddress(addr string) (endpoint, error) {
	if addr == "" {
		return endpoint{}, errors.New("no BMC address")
	}
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("BMC address %q: %w", addr, err)
	}
	if u.Scheme != "https" {
		return endpoint{}, fmt.Errorf("BMC address %q: %w: only https (the credentials would cross in clear)", addr, power.ErrUnsupported)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return endpoint{}, fmt.Errorf("BMC address %q: want https://HOST[:PORT][/redfish/v1/Systems/ID]", addr)
	}
	if _, _, err := power.SplitHostPort(u.Host, 443); err != nil {
		return endpoint{}, fmt.Errorf("redfish %w", err)
	}
	ep := endpoint{base: &url.URL{Scheme: "https", Host: u.Host}}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		if !strings.HasPrefix(p, "/redfish/v1/Systems/") || strings.Count(p, "/") != 4 {
			return endpoint{}, fmt.Errorf("BMC address %q: the path may only name a system, /redfish/v1/Systems/ID", addr)
		}
		ep.system = p
	}
	return ep, nil
}

// CheckAddress says whether addr is a BMC address the driver takes:
// HOST, HOST:PORT, https://HOST[:PORT] or https://HOST[:PORT]/redfish/v1/Systems/ID.
func (d *Driver) CheckAddress(addr string) error {
	_, err := parseAddress(addr)
	return err
}

var _ power.AddressChecker = (*Driver)(nil)

// hostPort is the base's host with the port made explicit.
func (ep endpoint) hostPort() string {
	if ep.base.Port() != "" {
		return ep.base.Host
	}
	return net.JoinHostPort(ep.base.Hostname(), "443")
}

// ---- the BMC entry and its TLS ----

func (d *Driver) get(ep endpoint, user string) (*bmc, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("redfish driver closed")
	}
	k := bmcKey{ep.hostPort(), user}
	b := d.bmcs[k]
	if b == nil {
		b = &bmc{host: k.host, user: user, turn: make(chan struct{}, 1)}
		d.bmcs[k] = b
	}
	return b, nil
}

// certError is a certificate that does not match the pinned one.
type certError struct{ host, want, got string }

func (e *certError) Error() string {
	return fmt.Sprintf("the BMC's TLS certificate changed: pinned sha256 %s, presented sha256 %s; refused (if the BMC's certificate was replaced on purpose, set the new fingerprint in the machine's power parameters, or clear it to trust the next one)", e.want, e.got)
}

func (e *certError) Unwrap() error { return power.ErrAuth }

// prepare sets b's TLS expectations for t: called with b's turn held. A
// change of mode gets a new transport (connections verified under the old
// expectations must not be reused).
func (d *Driver) prepare(b *bmc, t power.Target) error {
	want := ""
	mode := "tofu"
	switch {
	case t.InsecureTLS:
		mode = "insecure"
	case t.TLSFingerprint != "":
		fp, err := power.NormalizeFingerprint(t.TLSFingerprint)
		if err != nil {
			return err
		}
		want, mode = fp, "pin:"+fp
	case t.Pin == nil:
		d.mu.Lock()
		fp := d.pins[b.host]
		d.mu.Unlock()
		if fp != "" {
			want, mode = fp, "pin:"+fp
		}
	}
	b.mu.Lock()
	b.want, b.insecure = want, t.InsecureTLS
	b.mu.Unlock()
	if b.client != nil && b.tlsMode == mode {
		return nil
	}
	if b.transport != nil {
		b.transport.CloseIdleConnections()
	}
	tr := &http.Transport{
		Proxy:       nil, // a BMC is on the management network, never behind a proxy
		DialContext: (&net.Dialer{Timeout: d.opts.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The certificate is checked by its fingerprint below, not
			// by a CA: BMCs carry self-signed certificates.
			InsecureSkipVerify: true,
			VerifyConnection:   b.verify,
		},
		TLSHandshakeTimeout:   d.opts.Timeout,
		ResponseHeaderTimeout: d.opts.Timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       60 * time.Second,
	}
	b.transport, b.tlsMode = tr, mode
	b.client = &http.Client{Transport: tr, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		return fmt.Errorf("the BMC redirected to %s: redirects are not followed", r.URL.Redacted())
	}}
	return nil
}

// verify is the TLS check: the leaf certificate's fingerprint against the
// pin, or recorded for trust on first use.
func (b *bmc) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the BMC presented no certificate")
	}
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	got := hex.EncodeToString(sum[:])
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = got
	if b.insecure || b.want == "" || b.want == got {
		return nil
	}
	return &certError{host: b.host, want: b.want, got: got}
}

// trust records the certificate seen on first use: through t.Pin, or in
// the driver. Called with b's turn held, after a first answer.
func (d *Driver) trust(ctx context.Context, b *bmc, t power.Target) error {
	if t.InsecureTLS || t.TLSFingerprint != "" {
		return nil
	}
	b.mu.Lock()
	want, seen := b.want, b.seen
	b.mu.Unlock()
	if want != "" || seen == "" {
		return nil
	}
	if t.Pin != nil {
		if err := t.Pin(ctx, seen); err != nil {
			return fmt.Errorf("record the BMC's TLS certificate (sha256 %s, trusted on first use): %w", seen, err)
		}
	} else {
		d.mu.Lock()
		d.pins[b.host] = seen
		d.mu.Unlock()
	}
	d.log.Info("redfish: BMC certificate trusted on first use", "bmc", b.host, "sha256", seen)
	b.mu.Lock()
	b.want = seen
	b.mu.Unlock()
	b.tlsMode = "pin:" + seen
	return nil
}

// ---- requests ----

// answer is one HTTP answer, its body read (bounded).
type answer struct {
	code int
	hdr  http.Header
	body []byte
}

// call is one driver call against one BMC: its turn held.
type call struct {
	d   *Driver
	b   *bmc
	t   power.Target
	ep  endpoint
	ctx context.Context
}

// do runs fn with t's BMC's turn held, within the driver's timeout, and
// wraps its error in a power error kind with the BMC and user named.
func (d *Driver) do(parent context.Context, t power.Target, what string, fn func(c *call) error) error {
	err := d.do1(parent, t, fn)
	if err == nil {
		return nil
	}
	if parent.Err() != nil && !errors.Is(err, power.ErrAuth) {
		return fmt.Errorf("redfish %s (user %s): %s: %w", t.Address, t.Username, what, parent.Err())
	}
	return fmt.Errorf("redfish %s (user %s): %s: %w", t.Address, t.Username, what, classify(redact(err, t.Password)))
}

func (d *Driver) do1(parent context.Context, t power.Target, fn func(c *call) error) error {
	ep, err := parseAddress(t.Address)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(parent, d.opts.Timeout)
	defer cancel()
	b, err := d.get(ep, t.Username)
	if err != nil {
		return err
	}
	select {
	case b.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.turn }()
	ref := refusal{bmcKey{b.host, t.Username}, sha256.Sum256([]byte(t.Password))}
	d.mu.Lock()
	at, refused := d.refused[ref]
	d.mu.Unlock()
	if refused && time.Since(at) < d.opts.AuthRetryAfter {
		return &power.KindError{Kind: power.ErrAuth, Msg: fmt.Sprintf("%s: the BMC refused this user name and password %v ago; not asking again for %v (BMCs lock accounts out after a few refused logins)",
			power.AuthFailed, time.Since(at).Round(time.Millisecond), d.opts.AuthRetryAfter)}
	}
	if err := d.prepare(b, t); err != nil {
		return err
	}
	c := &call{d: d, b: b, t: t, ep: ep, ctx: ctx}
	err = c.discover()
	if err == nil {
		err = fn(c)
	}
	if errors.Is(err, errRefusedLogin) && parent.Err() == nil {
		d.mu.Lock()
		d.refused[ref] = time.Now()
		d.mu.Unlock()
	}
	return err
}

// errRefusedLogin marks a 401 or 403 to a login (or to basic auth).
var errRefusedLogin = errors.New("login refused")

// raw sends one request and reads its answer, retrying a 503 twice.
func (c *call) raw(method, path string, body any, hdr http.Header, auth bool) (answer, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return answer{}, err
		}
	}
	u := *c.ep.base
	u.Path = path
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(c.ctx, method, u.String(), bytes.NewReader(payload))
		if err != nil {
			return answer{}, err
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("OData-Version", "4.0")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		if auth {
			if c.b.token != "" {
				req.Header.Set("X-Auth-Token", c.b.token)
			} else {
				req.SetBasicAuth(c.t.Username, c.t.Password)
			}
		}
		res, err := c.b.client.Do(req)
		if err != nil {
			var ce *certError
			if errors.As(err, &ce) {
				return answer{}, ce
			}
			return answer{}, err
		}
		a := answer{code: res.StatusCode, hdr: res.Header}
		a.body, err = io.ReadAll(io.LimitReader(res.Body, c.d.opts.MaxBody+1))
		res.Body.Close()
		if err != nil {
			return answer{}, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
		}
		if int64(len(a.body)) > c.d.opts.MaxBody {
			return answer{}, fmt.Errorf("%w: %s %s: the answer is larger than %d bytes", power.ErrBMC, method, path, c.d.opts.MaxBody)
		}
		if err := c.d.trust(c.ctx, c.b, c.t); err != nil {
			return answer{}, err
		}
		if a.code == http.StatusServiceUnavailable && try < 2 {
			// Busy: nothing was done. Wait a little, within the budget.
			select {
			case <-time.After(time.Duration(try+1) * 200 * time.Millisecond):
				continue
			case <-c.ctx.Done():
				return answer{}, c.ctx.Err()
			}
		}
		return a, nil
	}
}

// req is raw with authentication: it logs in first when a session is
// needed, and once more when the BMC forgot the session.
func (c *call) req(method, path string, body any, hdr http.Header) (answer, error) {
	if err := c.login(); err != nil {
		return answer{}, err
	}
	a, err := c.raw(method, path, body, hdr, true)
	if err != nil {
		return a, err
	}
	if a.code == http.StatusUnauthorized && c.b.token != "" {
		// An expired session (or a BMC restart): log in again, once.
		c.b.token, c.b.sessionURI = "", ""
		if err := c.login(); err != nil {
			return answer{}, err
		}
		a, err = c.raw(method, path, body, hdr, true)
		if err != nil {
			return a, err
		}
	}
	if a.code == http.StatusUnauthorized || a.code == http.StatusForbidden && c.b.token == "" {
		return a, fmt.Errorf("%w: %s %s: %s", errRefusedLogin, method, path, describe(a))
	}
	return a, nil
}

// discover reads the service root (no authentication) once per BMC entry.
func (c *call) discover() error {
	if c.b.systems != "" {
		return nil
	}
	a, err := c.raw(http.MethodGet, "/redfish/v1/", nil, nil, false)
	if err != nil {
		return err
	}
	if a.code != http.StatusOK {
		return fmt.Errorf("%w: GET /redfish/v1/: %s", power.ErrBMC, describe(a))
	}
	root, err := decodeServiceRoot(a.body)
	if err != nil {
		return fmt.Errorf("%w: service root: %w", power.ErrBMC, err)
	}
	c.b.systems = root.Systems.ID
	c.b.sessions = root.Links.Sessions.ID
	if c.b.sessions == "" {
		c.b.sessions = "/redfish/v1/SessionService/Sessions"
	}
	return nil
}

// login opens a session when there is none (or the password changed).
func (c *call) login() error {
	if err := c.discover(); err != nil {
		return err
	}
	pw := sha256.Sum256([]byte(c.t.Password))
	if c.b.token != "" && c.b.password == pw {
		return nil
	}
	if c.b.token != "" {
		c.d.logout(c.ctx, c.b)
	}
	if c.b.noSessions {
		return nil
	}
	a, err := c.raw(http.MethodPost, c.b.sessions, map[string]string{"UserName": c.t.Username, "Password": c.t.Password}, nil, false)
	if err != nil {
		return err
	}
	switch {
	case a.code == http.StatusCreated || a.code == http.StatusOK:
	case a.code == http.StatusUnauthorized || a.code == http.StatusForbidden:
		return fmt.Errorf("%w: %s", errRefusedLogin, describe(a))
	case a.code == http.StatusNotFound || a.code == http.StatusMethodNotAllowed || a.code == http.StatusNotImplemented:
		// No SessionService: basic auth on every request.
		c.b.noSessions = true
		c.d.count(func(s *Stats) { s.BasicFallback++ })
		c.d.log.Info("redfish: BMC offers no sessions, using basic auth", "bmc", c.b.host, "status", a.code)
		return nil
	default:
		return fmt.Errorf("%w: creating a session: %s", power.ErrBMC, describe(a))
	}
	tok := a.hdr.Get("X-Auth-Token")
	if tok == "" {
		return fmt.Errorf("%w: the BMC created a session but sent no X-Auth-Token", power.ErrBMC)
	}
	loc := a.hdr.Get("Location")
	if u, err := url.Parse(loc); err == nil && u.Path != "" && (u.Host == "" || u.Host == c.ep.base.Host) {
		loc = u.Path
	} else {
		loc = ""
	}
	c.b.token, c.b.sessionURI, c.b.password = tok, loc, pw
	c.d.count(func(s *Stats) { s.Logins++ })
	return nil
}

// logout deletes b's session on the BMC (best effort). Caller holds b.turn.
func (d *Driver) logout(ctx context.Context, b *bmc) {
	tok, uri := b.token, b.sessionURI
	b.token, b.sessionURI = "", ""
	if tok == "" || uri == "" || b.client == nil {
		return
	}
	u := url.URL{Scheme: "https", Host: b.host, Path: uri}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u.String(), nil)
	if err != nil {
		return
	}
	req.Header.Set("X-Auth-Token", tok)
	res, err := b.client.Do(req)
	if err != nil {
		d.log.Debug("redfish: delete session", "bmc", b.host, "err", err)
		return
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, d.opts.MaxBody))
	res.Body.Close()
	d.count(func(s *Stats) { s.Logouts++ })
}

// systemPath is the system the target names, or the only (first) member of
// the Systems collection.
func (c *call) systemPath() (string, error) {
	if c.ep.system != "" {
		return c.ep.system, nil
	}
	a, err := c.req(http.MethodGet, c.b.systems, nil, nil)
	if err != nil {
		return "", err
	}
	if a.code != http.StatusOK {
		return "", fmt.Errorf("%w: GET %s: %s", power.ErrBMC, c.b.systems, describe(a))
	}
	coll, err := decodeCollection(a.body)
	if err != nil {
		return "", fmt.Errorf("%w: systems: %w", power.ErrBMC, err)
	}
	if len(coll.Members) == 0 {
		return "", fmt.Errorf("%w: the BMC lists no systems", power.ErrBMC)
	}
	if len(coll.Members) > 1 {
		c.d.log.Debug("redfish: several systems, using the first (name one in the address)", "bmc", c.b.host, "system", coll.Members[0].ID)
	}
	return coll.Members[0].ID, nil
}

// system reads the target's system.
func (c *call) system() (system, error) {
	p, err := c.systemPath()
	if err != nil {
		return system{}, err
	}
	a, err := c.req(http.MethodGet, p, nil, nil)
	if err != nil {
		return system{}, err
	}
	if a.code != http.StatusOK {
		return system{}, fmt.Errorf("%w: GET %s: %s", power.ErrBMC, p, describe(a))
	}
	s, err := decodeSystem(a.body)
	if err != nil {
		return system{}, fmt.Errorf("%w: system %s: %w", power.ErrBMC, p, err)
	}
	if s.path == "" {
		s.path = p
	}
	if e := a.hdr.Get("ETag"); e != "" {
		s.ETag = e
	}
	return s, nil
}

// reset posts ComputerSystem.Reset with one of the types in order that the
// BMC allows.
func (c *call) reset(s system, order ...string) error {
	rt := chooseReset(s.Actions.Reset.Allowed, order...)
	if rt == "" {
		return fmt.Errorf("%w: the BMC allows reset types %s, none of %s", power.ErrUnsupported,
			strings.Join(s.Actions.Reset.Allowed, ", "), strings.Join(order, ", "))
	}
	target := s.Actions.Reset.Target
	if target == "" {
		target = s.path + "/Actions/ComputerSystem.Reset"
	}
	a, err := c.req(http.MethodPost, target, map[string]string{"ResetType": rt}, nil)
	if err != nil {
		return err
	}
	if a.code/100 != 2 {
		return fmt.Errorf("%w: reset %s: %s", power.ErrBMC, rt, describe(a))
	}
	return nil
}

// chooseReset is the first of order that allowed has; with no
// AllowableValues the BMC is taken to allow the DMTF types.
func chooseReset(allowed []string, order ...string) string {
	for _, o := range order {
		if len(allowed) == 0 || slices.Contains(allowed, o) {
			return o
		}
	}
	return ""
}

// ---- the driver's methods ----

// Status reads PowerState: PoweringOn reads off (not on yet), PoweringOff
// and Paused read on.
func (d *Driver) Status(ctx context.Context, t power.Target) (power.State, error) {
	st := power.StateUnknown
	err := d.do(ctx, t, "status", func(c *call) error {
		s, err := c.system()
		if err != nil {
			return err
		}
		st, err = stateOf(s.PowerState)
		return err
	})
	if err != nil {
		return power.StateUnknown, err
	}
	return st, nil
}

func stateOf(ps string) (power.State, error) {
	switch ps {
	case "On", "PoweringOff", "Paused":
		return power.StateOn, nil
	case "Off", "PoweringOn":
		return power.StateOff, nil
	}
	return power.StateUnknown, fmt.Errorf("%w: PowerState %q is not a power state", power.ErrBMC, trunc(ps, 40))
}

// PowerOn resets with On (or ForceOn) unless the system is on already.
func (d *Driver) PowerOn(ctx context.Context, t power.Target) error {
	return d.do(ctx, t, "power on", func(c *call) error {
		s, err := c.system()
		if err != nil {
			return err
		}
		if s.PowerState == "On" || s.PowerState == "PoweringOn" {
			return nil
		}
		return c.reset(s, "On", "ForceOn", "PushPowerButton")
	})
}

// PowerOff resets with ForceOff (GracefulShutdown first with
// Options.GracefulOff, or where the BMC offers nothing harder) unless the
// system is off already.
func (d *Driver) PowerOff(ctx context.Context, t power.Target) error {
	return d.do(ctx, t, "power off", func(c *call) error {
		s, err := c.system()
		if err != nil {
			return err
		}
		if s.PowerState == "Off" || s.PowerState == "PoweringOff" {
			return nil
		}
		return c.reset(s, d.offOrder()...)
	})
}

func (d *Driver) offOrder() []string {
	if d.opts.GracefulOff {
		return []string{"GracefulShutdown", "ForceOff"}
	}
	return []string{"ForceOff", "GracefulShutdown"}
}

// PowerCycle ends with the machine on: PowerCycle when it is on and the BMC
// offers it, else off, wait for off, on; from off, on.
func (d *Driver) PowerCycle(ctx context.Context, t power.Target) error {
	return d.do(ctx, t, "power cycle", func(c *call) error {
		s, err := c.system()
		if err != nil {
			return err
		}
		if s.PowerState == "Off" || s.PowerState == "PoweringOff" && chooseReset(s.Actions.Reset.Allowed, "PowerCycle") == "" {
			if s.PowerState == "PoweringOff" {
				if s, err = c.waitOff(); err != nil {
					return err
				}
			}
			return c.reset(s, "On", "ForceOn", "PushPowerButton")
		}
		if s.PowerState == "PoweringOn" {
			// Already going on: that is the cycle's end.
			return nil
		}
		if chooseReset(s.Actions.Reset.Allowed, "PowerCycle") != "" {
			return c.reset(s, "PowerCycle")
		}
		if err := c.reset(s, d.offOrder()...); err != nil {
			return err
		}
		if s, err = c.waitOff(); err != nil {
			return err
		}
		return c.reset(s, "On", "ForceOn", "PushPowerButton")
	})
}

// waitOff polls until the system reads Off, within the call's budget.
func (c *call) waitOff() (system, error) {
	for {
		s, err := c.system()
		if err != nil {
			return system{}, err
		}
		if s.PowerState == "Off" {
			return s, nil
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-c.ctx.Done():
			return system{}, fmt.Errorf("waiting for the system to power off (it reads %s): %w", s.PowerState, c.ctx.Err())
		}
	}
}

// SetNextBoot sets a one-time boot override: Pxe or Hdd, in the target's
// boot mode (or the mode the BMC has, echoed back: some BMCs refuse a boot
// PATCH without it), to the @Redfish.Settings object when the system names
// one, with If-Match when the BMC sent an ETag.
func (d *Driver) SetNextBoot(ctx context.Context, t power.Target, dev power.BootDevice) error {
	var want string
	switch dev {
	case power.BootPXE:
		want = "Pxe"
	case power.BootDisk:
		want = "Hdd"
	default:
		return fmt.Errorf("redfish: next boot %v: %w", dev, power.ErrUnsupported)
	}
	var mode string
	switch strings.ToLower(t.BootMode) {
	case "":
	case "uefi":
		mode = "UEFI"
	case "legacy":
		mode = "Legacy"
	default:
		return fmt.Errorf("redfish: boot mode %q: want uefi or legacy: %w", t.BootMode, power.ErrUnsupported)
	}
	return d.do(ctx, t, "set next boot "+dev.String(), func(c *call) error {
		for try := 0; ; try++ {
			s, err := c.system()
			if err != nil {
				return err
			}
			if al := s.Boot.AllowedTargets; len(al) > 0 && !slices.Contains(al, want) {
				return fmt.Errorf("%w: the BMC offers boot targets %s, not %s", power.ErrUnsupported, strings.Join(al, ", "), want)
			}
			m := mode
			if m == "" {
				m = s.Boot.BootSourceOverrideMode
			}
			boot := map[string]string{"BootSourceOverrideTarget": want, "BootSourceOverrideEnabled": "Once"}
			if m != "" {
				boot["BootSourceOverrideMode"] = m
			}
			path, etag := s.path, s.ETag
			if so := s.Settings.SettingsObject.ID; so != "" {
				path, etag = so, ""
				a, err := c.req(http.MethodGet, so, nil, nil)
				if err != nil {
					return err
				}
				if a.code == http.StatusOK {
					etag = a.hdr.Get("ETag")
					if etag == "" {
						if o, err := decodeSystem(a.body); err == nil {
							etag = o.ETag
						}
					}
				}
			}
			var hdr http.Header
			if etag != "" {
				hdr = http.Header{"If-Match": {etag}}
			}
			a, err := c.req(http.MethodPatch, path, map[string]any{"Boot": boot}, hdr)
			if err != nil {
				return err
			}
			if a.code == http.StatusPreconditionFailed && try == 0 {
				continue // the resource changed between our read and write: read again
			}
			if a.code/100 != 2 {
				return fmt.Errorf("%w: PATCH %s Boot %s/Once: %s", power.ErrBMC, path, want, describe(a))
			}
			return nil
		}
	})
}

// ---- errors ----

// classify wraps err in the power error kind the queue and metrics use.
func classify(err error) error {
	var ce *certError
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, errRefusedLogin):
		return &power.KindError{Kind: power.ErrAuth, Msg: power.AuthFailed + ": " + strings.TrimPrefix(err.Error(), errRefusedLogin.Error()+": ")}
	case errors.Is(err, power.ErrAuth), errors.Is(err, power.ErrBMC), errors.Is(err, power.ErrUnsupported),
		errors.Is(err, power.ErrTimeout), errors.Is(err, power.ErrUnreachable):
		return err
	case isUnreachable(err):
		return fmt.Errorf("%w: %w", power.ErrUnreachable, err)
	case isTimeout(err):
		return fmt.Errorf("%w: no answer: %w", power.ErrTimeout, err)
	}
	var rerr tls.RecordHeaderError
	if errors.As(err, &rerr) || strings.Contains(err.Error(), "HTTP response to HTTPS client") {
		return fmt.Errorf("%w: not a TLS server (is the address the BMC's https port?): %w", power.ErrUnreachable, err)
	}
	return err
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isUnreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTDOWN) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// redact removes the password from err's text, should it ever be echoed.
func redact(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(err.Error(), password, "<redacted>"), err: err}
}

// redacted keeps err's kind (errors.Is) with the password out of its text.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// describe is an answer as an operator reads it: the status and the
// BMC's message, one line, bounded.
func describe(a answer) string {
	msg := redfishMessage(a.body)
	s := fmt.Sprintf("HTTP %d", a.code)
	if msg != "" {
		s += ": " + msg
	}
	return s
}

func trunc(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
