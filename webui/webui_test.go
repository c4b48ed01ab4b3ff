package webui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"rackd/agent"
	"rackd/api"
	"rackd/power/powertest"
	"rackd/store"
	"rackd/store/storetest"
)

const rackName = "test-rack"

// rig is a rackd serving its API and UI on a loopback port for one test.
type rig struct {
	*agent.Agent
	url   string
	admin string
	// stop shuts the agent down (and waits for it); the cleanup does too.
	stop func()
}

func start(t *testing.T, tweak ...func(*agent.Config)) *rig {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.Name = rackName
	cfg.Power.Fake.Enabled = true
	cfg.Lifecycle.WatchdogInterval = agent.Duration(time.Second)
	for _, f := range tweak {
		f(&cfg)
	}
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a, err := agent.New(cfg, log, agent.WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	tok, err := os.ReadFile(filepath.Join(cfg.StateDir, agent.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &rig{Agent: a, url: "http://" + ln.Addr().String(), admin: strings.TrimSpace(string(tok)), stop: stop}
}

// api calls the JSON API with token and decodes a 2xx answer into out.
func (rg *rig) api(t *testing.T, token, method, path string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, rg.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

func (rg *rig) addMachine(t *testing.T, m api.CreateMachine) api.Machine {
	t.Helper()
	var out api.Machine
	if st := rg.api(t, rg.admin, "POST", "/api/v1/machines", m, &out); st != http.StatusCreated {
		t.Fatalf("create machine %s: %d", m.Hostname, st)
	}
	return out
}

func (rg *rig) addUser(t *testing.T, name string, admin bool) string {
	t.Helper()
	var u api.User
	if st := rg.api(t, rg.admin, "POST", "/api/v1/users", api.CreateUser{Name: name, Admin: admin}, &u); st != http.StatusCreated {
		t.Fatalf("create user %s: %d", name, st)
	}
	return u.Token
}

// browser is a cookie-keeping client that does not follow redirects (the
// tests look at them).
type browser struct {
	t    *testing.T
	c    *http.Client
	base string
	csrf string
}

func (rg *rig) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: rg.url, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	status int
	header http.Header
	body   string
	doc    *html.Node
	loc    string
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	p := page{status: resp.StatusCode, header: resp.Header, body: string(raw), loc: resp.Header.Get("Location")}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		doc, err := html.Parse(bytes.NewReader(raw))
		if err != nil {
			b.t.Fatalf("%s %s: the page does not parse: %v", req.Method, req.URL, err)
		}
		p.doc = doc
		if v := attrOf(find(doc, func(n *html.Node) bool { return n.Data == "body" }), "data-csrf"); v != "" {
			b.csrf = v
		}
	}
	return p
}

func (b *browser) get(path string) page {
	req, _ := http.NewRequest("GET", b.base+path, nil)
	return b.do(req)
}

// post sends a form; the session's CSRF token is added unless the form
// has a csrf field already.
func (b *browser) post(path string, form url.Values) page {
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	req, _ := http.NewRequest("POST", b.base+path, strings.NewReader(formBody(form)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// formBody encodes a form as a browser sends the UI's: the csrf field
// first (every form has it first), the others after.
func formBody(form url.Values) string {
	rest := url.Values{}
	for k, v := range form {
		if k != "csrf" {
			rest[k] = v
		}
	}
	csrf, ok := form["csrf"]
	if !ok {
		return rest.Encode()
	}
	first := url.Values{"csrf": csrf}.Encode()
	if len(rest) == 0 {
		return first
	}
	return first + "&" + rest.Encode()
}

// follow gets where a redirect points.
func (b *browser) follow(p page) page {
	b.t.Helper()
	if p.status != http.StatusSeeOther {
		b.t.Fatalf("got %d, want a 303 redirect: %s", p.status, p.body)
	}
	return b.get(p.loc)
}

func (b *browser) login(token string) page {
	b.t.Helper()
	lp := b.get("/login")
	tok := attrOf(find(lp.doc, func(n *html.Node) bool { return n.Data == "input" && attrOf(n, "name") == "csrf" }), "value")
	if tok == "" {
		b.t.Fatalf("the login page has no csrf field: %s", lp.body)
	}
	return b.post("/login", url.Values{"csrf": {tok}, "token": {token}})
}

func (b *browser) mustLogin(token string) {
	b.t.Helper()
	p := b.login(token)
	if p.status != http.StatusSeeOther || p.loc != "/" {
		b.t.Fatalf("login: %d %q: %s", p.status, p.loc, p.body)
	}
	if d := b.get("/"); d.status != http.StatusOK {
		b.t.Fatalf("dashboard after login: %d", d.status)
	}
}

func find(n *html.Node, pred func(*html.Node) bool) *html.Node {
	if n == nil {
		return nil
	}
	if n.Type == html.ElementNode && pred(n) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, pred); f != nil {
			return f
		}
	}
	return nil
}

func findAll(n *html.Node, pred func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && pred(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	if n != nil {
		walk(n)
	}
	return out
}

func attrOf(n *html.Node, key string) string {
	if n == nil {
		return ""
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func text(n *html.Node) string {
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return sb.String()
}

// alerts are the texts of the page's error messages.
func alerts(p page) []string {
	var out []string
	for _, n := range findAll(p.doc, func(n *html.Node) bool {
		return n.Data == "div" && attrOf(n, "role") == "alert" && strings.Contains(attrOf(n, "class"), "error")
	}) {
		out = append(out, strings.TrimSpace(text(n)))
	}
	return out
}

// checkPage holds every page to the rules: the security headers, a title
// naming the appliance, no inline script or style, every form field
// labelled.
func checkPage(t *testing.T, path string, p page) {
	t.Helper()
	for h, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
	} {
		if got := p.header.Get(h); got != want {
			t.Errorf("%s: %s = %q, want %q", path, h, got, want)
		}
	}
	if p.doc == nil {
		t.Fatalf("%s: not an HTML page (%s)", path, p.header.Get("Content-Type"))
	}
	title := find(p.doc, func(n *html.Node) bool { return n.Data == "title" })
	if title == nil || !strings.HasSuffix(text(title), "— rackd "+rackName) {
		t.Errorf("%s: title %q does not name the appliance", path, text(title))
	}
	for _, s := range findAll(p.doc, func(n *html.Node) bool { return n.Data == "script" }) {
		if attrOf(s, "src") == "" || strings.TrimSpace(text(s)) != "" {
			t.Errorf("%s: inline script %q", path, text(s))
		}
	}
	if st := find(p.doc, func(n *html.Node) bool { return n.Data == "style" }); st != nil {
		t.Errorf("%s: a <style> element", path)
	}
	if n := find(p.doc, func(n *html.Node) bool { return hasAttr(n, "style") }); n != nil {
		t.Errorf("%s: a style attribute on <%s>", path, n.Data)
	}
	if n := find(p.doc, func(n *html.Node) bool {
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") {
				return true
			}
		}
		return false
	}); n != nil {
		t.Errorf("%s: an inline event handler on <%s>", path, n.Data)
	}
	labels := map[string]bool{}
	for _, l := range findAll(p.doc, func(n *html.Node) bool { return n.Data == "label" }) {
		labels[attrOf(l, "for")] = true
	}
	for _, f := range findAll(p.doc, func(n *html.Node) bool {
		return n.Data == "input" || n.Data == "select" || n.Data == "textarea"
	}) {
		switch attrOf(f, "type") {
		case "hidden", "submit", "button":
			continue
		}
		if id := attrOf(f, "id"); (id == "" || !labels[id]) && attrOf(f, "aria-label") == "" {
			t.Errorf("%s: field %q (id %q) has no label", path, attrOf(f, "name"), attrOf(f, "id"))
		}
	}
	for _, b := range findAll(p.doc, func(n *html.Node) bool { return n.Data == "button" }) {
		if strings.TrimSpace(text(b)) == "" {
			t.Errorf("%s: a button without visible text", path)
		}
	}
	// Every form that posts sends csrf first (the server reads the
	// anti-forgery value from the first field, before the rest): the
	// first named control in tree order whose form owner it is.
	byID := map[string]*html.Node{}
	for _, f := range findAll(p.doc, func(n *html.Node) bool { return n.Data == "form" }) {
		if id := attrOf(f, "id"); id != "" {
			byID[id] = f
		}
	}
	first := map[*html.Node]string{}
	for _, c := range findAll(p.doc, func(n *html.Node) bool {
		return (n.Data == "input" || n.Data == "select" || n.Data == "textarea" || n.Data == "button") && attrOf(n, "name") != ""
	}) {
		owner := byID[attrOf(c, "form")]
		for a := c.Parent; owner == nil && a != nil; a = a.Parent {
			if a.Type == html.ElementNode && a.Data == "form" {
				owner = a
			}
		}
		if _, seen := first[owner]; owner != nil && !seen {
			first[owner] = attrOf(c, "name")
		}
	}
	for f, name := range first {
		if strings.EqualFold(attrOf(f, "method"), "post") && name != "csrf" {
			t.Errorf("%s: the form posting to %s sends %q first, not csrf", path, attrOf(f, "action"), name)
		}
	}
}

func TestLoginBadTokenRefused(t *testing.T) {
	rg := start(t)
	for name, token := range map[string]string{"unknown": "not-a-token", "empty": "", "admin's with junk": rg.admin + "x"} {
		t.Run(name, func(t *testing.T) {
			b := rg.browser(t)
			p := b.login(token)
			if p.status != http.StatusUnauthorized {
				t.Fatalf("got %d, want 401", p.status)
			}
			if a := alerts(p); len(a) == 0 || !strings.Contains(a[0], "not valid") {
				t.Errorf("alerts %q, want the refusal", a)
			}
			u, _ := url.Parse(rg.url)
			for _, c := range b.c.Jar.Cookies(u) {
				if c.Name == "rackd_session" {
					t.Errorf("a session cookie was set after a refused login")
				}
			}
			if d := b.get("/"); d.status != http.StatusSeeOther || !strings.HasPrefix(d.loc, "/login") {
				t.Errorf("the dashboard without a session: %d %q", d.status, d.loc)
			}
		})
	}
}

func TestSessionCookieAttributes(t *testing.T) {
	rg := start(t)
	var short api.Token
	if st := rg.api(t, rg.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "short", Expires: "1h"}, &short); st != http.StatusCreated {
		t.Fatalf("create token: %d", st)
	}
	tests := map[string]struct {
		token  string
		maxAge time.Duration // the cookie expires within this of now
		minAge time.Duration
	}{
		"never-expiring token: 12 hours": {rg.admin, 12*time.Hour + time.Minute, 11 * time.Hour},
		"token expiring in an hour":      {short.Token, time.Hour + time.Minute, 50 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := rg.browser(t)
			p := b.login(tc.token)
			if p.status != http.StatusSeeOther {
				t.Fatalf("login: %d %s", p.status, p.body)
			}
			var c *http.Cookie
			for _, sc := range (&http.Response{Header: p.header}).Cookies() {
				if sc.Name == "rackd_session" {
					c = sc
				}
			}
			if c == nil {
				t.Fatalf("no rackd_session cookie in %q", p.header.Values("Set-Cookie"))
			}
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
				t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP", c)
			}
			if len(c.Value) != 43 {
				t.Errorf("session id %q is not 32 random bytes in base64url", c.Value)
			}
			left := time.Until(c.Expires)
			if left > tc.maxAge || left < tc.minAge {
				t.Errorf("cookie expires in %s, want between %s and %s", left, tc.minAge, tc.maxAge)
			}
		})
	}
}

// Over TLS the session cookie is Secure.
func TestSessionCookieSecureOverTLS(t *testing.T) {
	rg := start(t)
	srv := httptest.NewTLSServer(rg.Handler())
	defer srv.Close()
	b := rg.browser(t)
	b.base = srv.URL
	tr := srv.Client().Transport
	b.c.Transport = tr
	p := b.login(rg.admin)
	if p.status != http.StatusSeeOther {
		t.Fatalf("login over TLS: %d %s", p.status, p.body)
	}
	var found bool
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "rackd_session" {
			found = true
			if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("cookie over TLS %+v: want Secure, HttpOnly, SameSite=Strict", c)
			}
		}
	}
	if !found {
		t.Fatal("no session cookie")
	}
	if d := b.get("/"); d.status != http.StatusOK {
		t.Errorf("the dashboard over TLS: %d", d.status)
	}
}

func TestRevokedTokenEndsSession(t *testing.T) {
	rg := start(t)
	tok := rg.addUser(t, "carol", false)
	b := rg.browser(t)
	b.mustLogin(tok)
	var toks []api.Token
	if st := rg.api(t, tok, "GET", "/api/v1/tokens", nil, &toks); st != http.StatusOK || len(toks) != 1 {
		t.Fatalf("tokens: %d %v", st, toks)
	}
	if st := rg.api(t, rg.admin, "DELETE", "/api/v1/tokens/"+toks[0].ID, nil, nil); st != http.StatusOK {
		t.Fatalf("revoke: %d", st)
	}
	p := b.get("/machines")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.loc, "/login") {
		t.Fatalf("after the token's revocation: %d %q, want a redirect to the login", p.status, p.loc)
	}
	// The session is gone, not just refused once.
	if p := b.get("/"); p.status != http.StatusSeeOther {
		t.Errorf("second request: %d", p.status)
	}
}

func TestExpiredTokenEndsSession(t *testing.T) {
	rg := start(t)
	var tk api.Token
	if st := rg.api(t, rg.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "brief", Expires: "5s"}, &tk); st != http.StatusCreated {
		t.Fatalf("create token: %d", st)
	}
	b := rg.browser(t)
	b.mustLogin(tk.Token)
	// Wait (bounded) until the API itself no longer takes the token.
	deadline := time.Now().Add(60 * time.Second)
	for rg.api(t, tk.Token, "GET", "/api/v1/version", nil, nil) != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("the token did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := b.get("/machines")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.loc, "/login") {
		t.Fatalf("with the token expired: %d %q, want a redirect to the login", p.status, p.loc)
	}
	if p := b.post("/logout", nil); p.status == http.StatusSeeOther && p.loc == "/" {
		t.Errorf("an expired session still acts")
	}
}

func TestLogoutEndsSession(t *testing.T) {
	rg := start(t)
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	u, _ := url.Parse(rg.url)
	var id string
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "rackd_session" {
			id = c.Value
		}
	}
	p := b.post("/logout", nil)
	if p.status != http.StatusSeeOther || p.loc != "/login" {
		t.Fatalf("logout: %d %q", p.status, p.loc)
	}
	// The old cookie, replayed, no longer opens anything.
	req, _ := http.NewRequest("GET", rg.url+"/machines", nil)
	req.AddCookie(&http.Cookie{Name: "rackd_session", Value: id})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the logged-out session's cookie: %d, want a redirect to the login", resp.StatusCode)
	}
}

func TestCSRF(t *testing.T) {
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY"})
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	tests := map[string]struct {
		csrf    *string
		header  map[string]string
		want    int
		changed bool
	}{
		"missing":             {csrf: new(string), want: http.StatusForbidden},
		"wrong":               {csrf: ptr("x" + strings.Repeat("A", 42)), want: http.StatusForbidden},
		"right, cross-site":   {header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden},
		"right, other origin": {header: map[string]string{"Origin": "http://evil.example"}, want: http.StatusForbidden},
		"right, not first":    {want: http.StatusForbidden},
		"right":               {want: http.StatusSeeOther, changed: true},
	}
	for _, name := range []string{"missing", "wrong", "right, cross-site", "right, other origin", "right, not first", "right"} {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			form := url.Values{"action": {"mark-broken"}, "reason": {name}}
			if tc.csrf != nil {
				form.Set("csrf", *tc.csrf)
			} else {
				form.Set("csrf", b.csrf)
			}
			body := formBody(form)
			if name == "right, not first" {
				// The value is read from the first field only: after
				// another, it is not looked for.
				body = form.Encode()
			}
			req, _ := http.NewRequest("POST", rg.url+"/machines/"+m.ID+"/action", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			p := b.do(req)
			if p.status != tc.want {
				t.Fatalf("got %d, want %d: %s", p.status, tc.want, p.body)
			}
			var got api.Machine
			rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID, nil, &got)
			if (got.State == "BROKEN") != tc.changed {
				t.Errorf("machine is %s after the request; changed want %v", got.State, tc.changed)
			}
		})
	}
	// The header form of the token (the script's) works as well.
	req, _ := http.NewRequest("POST", rg.url+"/machines/"+m.ID+"/action", strings.NewReader("action=mark-fixed"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", b.csrf)
	if p := b.do(req); p.status != http.StatusSeeOther {
		t.Errorf("X-CSRF-Token: %d", p.status)
	}
}

func ptr[T any](v T) *T { return &v }

func TestEveryPage(t *testing.T) {
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", Arch: "amd64", MACs: []string{"52:54:00:00:00:01"}, CPUCount: 4, MemoryMB: 8192,
		Tags: []string{"rack1"}, State: "READY", Power: &api.PowerParams{Driver: "fake", Address: "bmc1"}})
	rg.api(t, rg.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.77.0.0/24", Gateway: "10.77.0.1",
		DynamicRanges: []api.Range{{Start: "10.77.0.100", End: "10.77.0.199"}}}, nil)
	rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/power", api.PowerAction{Action: "on"}, nil)
	b := rg.browser(t)
	login := b.get("/login")
	checkPage(t, "/login", login)
	b.mustLogin(rg.admin)
	for _, path := range []string{"/", "/machines", "/machines?state=READY&sort=cpu&dir=desc", "/machines/" + m.ID,
		"/subnets", "/images", "/users", "/no-such-page", "/machines/no-such-machine"} {
		t.Run(path, func(t *testing.T) {
			p := b.get(path)
			want := http.StatusOK
			if strings.Contains(path, "no-such") {
				want = http.StatusNotFound
			}
			if p.status != want {
				t.Fatalf("got %d, want %d: %s", p.status, want, p.body)
			}
			checkPage(t, path, p)
		})
	}
	// The static assets carry the headers too.
	for _, path := range []string{"/static/app.js", "/static/app.css", "/static/favicon.svg", "/favicon.ico"} {
		p := b.get(path)
		if p.status != http.StatusOK || p.header.Get("Content-Security-Policy") == "" || p.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d, headers %v", path, p.status, p.header)
		}
	}
	// An unknown API path is still the API's JSON 404.
	p := b.get("/api/v1/nothing")
	if p.status != http.StatusNotFound || !strings.HasPrefix(p.header.Get("Content-Type"), "application/json") {
		t.Errorf("/api/v1/nothing: %d %s", p.status, p.header.Get("Content-Type"))
	}
}

func TestMachineListHooks(t *testing.T) {
	rg := start(t)
	for i := range 130 {
		tags := []string{"odd"}
		if i%2 == 0 {
			tags = []string{"even"}
		}
		rg.addMachine(t, api.CreateMachine{Hostname: fmt.Sprintf("n%03d", i), MACs: []string{fmt.Sprintf("52:54:00:00:01:%02x", i)},
			CPUCount: i + 1, State: "READY", Tags: tags})
	}
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	rows := func(p page) []*html.Node {
		return findAll(p.doc, func(n *html.Node) bool { return n.Data == "tr" && strings.HasPrefix(attrOf(n, "id"), "machine-") })
	}
	tests := []struct {
		path  string
		rows  int
		first string // hostname of the first row
	}{
		{"/machines", 100, "n000"},
		{"/machines?page=2", 30, "n100"},
		{"/machines?page=99", 30, "n100"},
		{"/machines?tag=even", 65, "n000"},
		{"/machines?sort=cpu&dir=desc", 100, "n129"},
		{"/machines?sort=hostname&dir=desc", 100, "n129"},
		{"/machines?q=n12", 10, "n120"},
		{"/machines?state=NEW", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			p := b.get(tc.path)
			rs := rows(p)
			if len(rs) != tc.rows {
				t.Fatalf("%d rows, want %d", len(rs), tc.rows)
			}
			if tc.rows == 0 {
				return
			}
			if got := strings.TrimSpace(text(find(rs[0], func(n *html.Node) bool { return n.Data == "a" }))); got != tc.first {
				t.Errorf("first row %q, want %q", got, tc.first)
			}
			st := find(rs[0], func(n *html.Node) bool { return n.Data == "td" && strings.Contains(attrOf(n, "class"), "state") })
			if attrOf(rs[0], "data-state") != "READY" || st == nil || strings.TrimSpace(text(st)) != "READY" {
				t.Errorf("row %v: data-state or the state cell is wrong", rs[0].Attr)
			}
		})
	}
}

func TestEscaping(t *testing.T) {
	rg := start(t)
	const payload = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY"})
	if st := rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/mark-broken", api.ActionRequest{Reason: payload}, nil); st != http.StatusOK {
		t.Fatalf("mark-broken: %d", st)
	}
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	// The API refuses the payload as a hostname, in words that quote it.
	refused := b.follow(b.post("/subnets/reservations", url.Values{"ip": {"10.9.9.9"}, "hostname": {payload}}))
	for name, p := range map[string]page{
		"event reason on the machine page": b.get("/machines/" + m.ID),
		"event reason on the dashboard":    b.get("/"),
		"tag and text filters":             b.get("/machines?tag=" + url.QueryEscape(payload) + "&q=" + url.QueryEscape(payload)),
		"an API error quoting it":          refused,
	} {
		t.Run(name, func(t *testing.T) {
			if strings.Contains(p.body, "<script>alert") || strings.Contains(p.body, "<img src=x") {
				t.Fatalf("the payload is in the page unescaped")
			}
			if !strings.Contains(p.body, "&lt;script&gt;alert(1)&lt;/script&gt;") && !strings.Contains(p.body, "&#34;&lt;script") {
				t.Errorf("the payload is not shown (escaped) at all")
			}
			if s := findAll(p.doc, func(n *html.Node) bool { return n.Data == "script" && attrOf(n, "src") == "" }); len(s) > 0 {
				t.Errorf("an inline script made it into the DOM")
			}
		})
	}
	if a := alerts(refused); len(a) == 0 {
		t.Errorf("the reservation's refusal is not shown")
	}
}

func TestLargeFormRefused(t *testing.T) {
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY"})
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	big := "action=mark-broken&reason=" + strings.Repeat("a", 10<<20)
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz"} {
		req, _ := http.NewRequest("POST", rg.url+"/machines/"+m.ID+"/action", strings.NewReader(big))
		req.Header.Set("Content-Type", ct)
		p := b.do(req)
		if p.status != http.StatusRequestEntityTooLarge && p.status != http.StatusBadRequest {
			t.Errorf("%s: a 10 MB form: %d, want 413 (or 400 for a broken multipart body)", ct, p.status)
		}
		if p.doc == nil || len(alerts(p)) == 0 {
			t.Errorf("%s: the refusal is not a page saying why: %.200s", ct, p.body)
		}
	}
	var got api.Machine
	rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID, nil, &got)
	if got.State != "READY" {
		t.Errorf("the refused form changed the machine: %s", got.State)
	}
	if p := b.get("/machines"); p.status != http.StatusOK {
		t.Errorf("the UI after the big form: %d", p.status)
	}
}

// The deploy form uploads user-data as a file (multipart, read part by
// part): exactly api.MaxUserData bytes reach the deployment; one byte more
// is the API's refusal, shown on the page; a form with its csrf after
// another field is refused before the file is read.
func TestDeployFormUploadsUserData(t *testing.T) {
	rg := start(t)
	storetest.DeployImages(t, rg.Store(), "amd64", "debian")
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	multipartForm := func(fields [][2]string, file []byte) (string, *bytes.Buffer) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for _, f := range fields {
			mw.WriteField(f[0], f[1])
		}
		fw, _ := mw.CreateFormFile("user_data", "user-data.yaml")
		fw.Write(file)
		mw.Close()
		return mw.FormDataContentType(), &body
	}
	userData := func(n int) []byte {
		d := append([]byte("#cloud-config\n"), bytes.Repeat([]byte("#"), n)...)
		return d[:n]
	}
	for i, tc := range []struct {
		name   string
		csrf   bool // csrf first
		size   int
		status int
		deploy bool
	}{
		{"exactly the largest user-data", true, api.MaxUserData, http.StatusSeeOther, true},
		{"a byte more", true, api.MaxUserData + 1, http.StatusSeeOther, false},
		{"csrf not first", false, 100, http.StatusForbidden, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := fmt.Sprintf("d%d", i)
			m := rg.addMachine(t, api.CreateMachine{Hostname: host, Arch: "amd64", MACs: []string{fmt.Sprintf("52:54:00:00:0d:%02x", i)}, State: "READY"})
			if st := rg.api(t, rg.admin, "POST", "/api/v1/allocations", api.AllocateRequest{Name: host}, nil); st != http.StatusCreated {
				t.Fatalf("allocate: %d", st)
			}
			fields := [][2]string{{"csrf", b.csrf}, {"action", "deploy"}, {"image", "debian"}}
			if !tc.csrf {
				fields[0], fields[1] = fields[1], fields[0]
			}
			data := userData(tc.size)
			ct, body := multipartForm(fields, data)
			req, _ := http.NewRequest("POST", rg.url+"/machines/"+m.ID+"/action", body)
			req.Header.Set("Content-Type", ct)
			p := b.do(req)
			if p.status != tc.status {
				t.Fatalf("got %d, want %d: %.300s", p.status, tc.status, p.body)
			}
			var got api.Machine
			rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID, nil, &got)
			if (got.State == "DEPLOYING") != tc.deploy {
				t.Fatalf("the machine is %s", got.State)
			}
			if tc.deploy {
				var ud api.UserData
				if st := rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID+"/user-data", nil, &ud); st != http.StatusOK {
					t.Fatalf("user-data: %d", st)
				}
				if raw, _ := base64.StdEncoding.DecodeString(ud.UserData); !bytes.Equal(raw, data) {
					t.Errorf("the deployment's user-data is %d bytes, not the %d uploaded", len(raw), len(data))
				}
			}
			if tc.status == http.StatusSeeOther && !tc.deploy {
				if a := alerts(b.follow(p)); len(a) == 0 || !strings.Contains(strings.Join(a, " "), "at most") {
					t.Errorf("the refusal is not shown: %q", a)
				}
			}
		})
	}
}

func TestStaticTraversalRefused(t *testing.T) {
	rg := start(t)
	for _, path := range []string{"/static/../go.mod", "/static/%2e%2e/webui.go", "/static/..%2fwebui.go",
		"/static/%2e%2e%2f%2e%2e%2fgo.mod", "/static/", "/static//etc/passwd", "/static/../../../../etc/passwd",
		"/static/app.js/..%2f..%2fwebui.go"} {
		t.Run(path, func(t *testing.T) {
			req, err := http.NewRequest("GET", rg.url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.RawPath = "" // send it as written
			req.URL.Opaque = path
			resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || bytes.Contains(body, []byte("module rackd")) || bytes.Contains(body, []byte("package webui")) ||
				bytes.Contains(body, []byte("root:")) {
				t.Errorf("%s: %d %.100q", path, resp.StatusCode, body)
			}
		})
	}
}

func TestIllegalTransitionShowsAPIError(t *testing.T) {
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY"})
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	page := b.get("/machines/" + m.ID)
	// mark-fixed is not offered among the actions a READY machine allows.
	main := find(page.doc, func(n *html.Node) bool { return n.Data == "div" && attrOf(n, "class") == "actions" })
	if main != nil && strings.Contains(text(main), "Mark fixed") {
		t.Errorf("mark-fixed is offered as allowed on a READY machine")
	}
	p := b.follow(b.post("/machines/"+m.ID+"/action", url.Values{"action": {"mark-fixed"}}))
	a := alerts(p)
	const want = "cannot mark-fixed a machine that is READY"
	if len(a) != 1 || !strings.Contains(a[0], want) {
		t.Fatalf("alerts %q, want the API's %q", a, want)
	}
	// Shown once.
	if a := alerts(b.get("/machines/" + m.ID)); len(a) != 0 {
		t.Errorf("the message is shown again: %q", a)
	}
}

func TestNonAdmin(t *testing.T) {
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc1"}})
	tok := rg.addUser(t, "bob", false)
	b := rg.browser(t)
	b.mustLogin(tok)
	mp := b.get("/machines/" + m.ID)
	checkPage(t, "machine page as bob", mp)
	for _, f := range findAll(mp.doc, func(n *html.Node) bool { return n.Data == "form" }) {
		action := attrOf(f, "action")
		if strings.HasSuffix(action, "/action") || strings.HasSuffix(action, "/power") || strings.HasSuffix(action, "/ips") {
			t.Errorf("bob, who does not hold the machine, is offered %s: %q", action, text(f))
		}
	}
	if find(mp.doc, func(n *html.Node) bool {
		return n.Data == "form" && attrOf(n, "action") == "/machines/"+m.ID+"/allocate"
	}) == nil {
		t.Errorf("bob is not offered to allocate a READY machine")
	}
	up := b.get("/users")
	if find(up.doc, func(n *html.Node) bool { return n.Data == "form" && attrOf(n, "action") == "/users" }) != nil {
		t.Errorf("bob is offered to add users")
	}
	if strings.Contains(text(find(up.doc, func(n *html.Node) bool { return n.Data == "nav" })), "Users and tokens") {
		t.Errorf("bob's navigation names the users page")
	}
	ip := b.get("/images")
	if find(ip.doc, func(n *html.Node) bool { return n.Data == "form" && attrOf(n, "action") == "/images/import" }) != nil {
		t.Errorf("bob is offered to import images")
	}
	// Forged admin requests get the API's refusal, in its words.
	forged := []struct {
		path string
		form url.Values
		want string
	}{
		{"/users", url.Values{"name": {"mallory"}, "admin": {"on"}}, "user bob is not an admin"},
		{"/machines/" + m.ID + "/action", url.Values{"action": {"commission"}}, "only an admin may commission a machine"},
		{"/machines/" + m.ID + "/power", url.Values{"action": {"on"}}, "machine n1 is not yours"},
		{"/images/import", url.Values{"url": {"http://127.0.0.1:1/x"}}, "user bob is not an admin"},
	}
	for _, f := range forged {
		p := b.follow(b.post(f.path, f.form))
		if a := alerts(p); len(a) == 0 || !strings.Contains(a[0], f.want) {
			t.Errorf("forged POST %s: alerts %q, want %q", f.path, a, f.want)
		}
	}
	// The API itself says 403 to bob for the same.
	if st := rg.api(t, tok, "POST", "/api/v1/users", api.CreateUser{Name: "mallory"}, nil); st != http.StatusForbidden {
		t.Errorf("the API: %d", st)
	}
	var us []api.User
	rg.api(t, rg.admin, "GET", "/api/v1/users", nil, &us)
	for _, u := range us {
		if u.Name == "mallory" {
			t.Errorf("the forged request made a user")
		}
	}
	// A script's forged request (the CSRF token in its header) gets the
	// API's refusal itself: 403 and the API's JSON, not a page.
	req, _ := http.NewRequest("POST", rg.url+"/users", strings.NewReader("name=mallory&admin=on"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", b.csrf)
	if p := b.do(req); p.status != http.StatusForbidden || !strings.HasPrefix(p.header.Get("Content-Type"), "application/json") ||
		!strings.Contains(p.body, "admin") {
		t.Errorf("a script's forged admin request: %d %s %.300s, want the API's 403", p.status, p.header.Get("Content-Type"), p.body)
	}
	// Bulk commission as bob: refused machine by machine.
	p := b.post("/machines/bulk", url.Values{"action": {"commission"}, "id": {m.ID}, "confirm": {"yes"}})
	if p.status != http.StatusOK || !strings.Contains(p.body, "only an admin may commission a machine") {
		t.Errorf("bulk commission as bob: %d %.300s", p.status, p.body)
	}
}

func TestBulkConfirmation(t *testing.T) {
	rg := start(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, rg.addMachine(t, api.CreateMachine{Hostname: fmt.Sprintf("n%d", i), MACs: []string{fmt.Sprintf("52:54:00:00:00:0%d", i)},
			Power: &api.PowerParams{Driver: "fake", Address: fmt.Sprintf("bmc%d", i)}}).ID)
	}
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	confirm := b.post("/machines/bulk", url.Values{"action": {"commission"}, "id": ids[:2]})
	checkPage(t, "bulk confirmation", confirm)
	if !strings.Contains(confirm.body, "Commission 2 machines") {
		t.Fatalf("no confirmation step: %.500s", confirm.body)
	}
	for _, id := range ids {
		var m api.Machine
		rg.api(t, rg.admin, "GET", "/api/v1/machines/"+id, nil, &m)
		if m.State != "NEW" {
			t.Fatalf("%s is %s before the confirmation", m.Hostname, m.State)
		}
	}
	res := b.post("/machines/bulk", url.Values{"action": {"commission"}, "id": ids[:2], "confirm": {"yes"}})
	if res.status != http.StatusOK {
		t.Fatalf("bulk: %d", res.status)
	}
	for i, id := range ids {
		var m api.Machine
		rg.api(t, rg.admin, "GET", "/api/v1/machines/"+id, nil, &m)
		if want := map[bool]string{true: "COMMISSIONING", false: "NEW"}[i < 2]; m.State != want {
			t.Errorf("%s is %s, want %s", m.Hostname, m.State, want)
		}
	}
	// A machine without power is refused, and its outcome points at its
	// power settings, not at the CLI.
	bare := rg.addMachine(t, api.CreateMachine{Hostname: "bare", MACs: []string{"52:54:00:00:00:0b"}})
	res = b.post("/machines/bulk", url.Values{"action": {"commission"}, "id": {bare.ID, ids[2]}, "confirm": {"yes"}})
	row := find(res.doc, func(n *html.Node) bool { return n.Data == "tr" && attrOf(n, "id") == "machine-"+bare.ID })
	link := find(row, func(n *html.Node) bool {
		return n.Data == "a" && attrOf(n, "href") == "/machines/"+bare.ID+"#power-settings"
	})
	if row == nil || link == nil || strings.Contains(text(row), "rackd machines set") {
		t.Errorf("the refused machine's outcome: %q, want a link to its power settings", text(row))
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ kind, data string }

func readSSE(t *testing.T, body io.Reader, out chan<- sseEvent) {
	sc := bufio.NewScanner(body)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.kind != "" {
				out <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
	close(out)
}

func TestSSEDeliversStateChange(t *testing.T) {
	// A short read timeout: the stream must outlive it.
	const readTimeout = time.Second
	rg := start(t, func(c *agent.Config) { c.API.ReadTimeout = agent.Duration(readTimeout) })
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"},
		Power: &api.PowerParams{Driver: "fake", Address: "bmc1"}})
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", rg.url+"/events", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("/events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := make(chan sseEvent, 16)
	go readSSE(t, resp.Body, evs)
	// Subscribed once the stream has answered; then the change is made.
	deadline := time.Now().Add(10 * time.Second)
	for rg.UI().Hub().Clients() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Past the server's read timeout, the same stream still delivers.
	time.Sleep(2 * readTimeout)
	if st := rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/commission", nil, nil); st != http.StatusOK {
		t.Fatalf("commission: %d", st)
	}
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatal("the stream ended before the state change arrived")
			}
			switch ev.kind {
			case "machine":
				var e struct{ Machine, From, To, Action string }
				if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
					t.Fatalf("event data %q: %v", ev.data, err)
				}
				if e.Machine == m.ID && e.To == string(store.StateCommissioning) && e.From == "NEW" && e.Action == "commission" {
					return
				}
			}
		case <-ctx.Done():
			t.Fatal("no state change event within 30 s")
		}
	}
}

func TestSSENeedsSession(t *testing.T) {
	rg := start(t)
	resp, err := http.Get(rg.url + "/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/events without a session: %d, want 401", resp.StatusCode)
	}
}

// A power request made from the machine page is queued through the API and
// its fate shows in the page's request history.
func TestPowerRequestFate(t *testing.T) {
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc1"}})
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	b.get("/machines/" + m.ID)
	p := b.follow(b.post("/machines/"+m.ID+"/power", url.Values{"action": {"on"}}))
	var id string
	for _, n := range findAll(p.doc, func(n *html.Node) bool { return attrOf(n, "role") == "status" }) {
		if _, after, ok := strings.Cut(text(n), "(request "); ok {
			id, _, _ = strings.Cut(after, ")")
		}
	}
	if id == "" {
		t.Fatalf("no notice naming the request: %v", alerts(p))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var pr api.PowerRequest
		rg.api(t, rg.admin, "GET", "/api/v1/power/requests/"+id, nil, &pr)
		if pr.State == "done" || pr.State == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s still %s", id, pr.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	page := b.get("/machines/" + m.ID)
	row := find(page.doc, func(n *html.Node) bool { return n.Data == "tr" && attrOf(n, "id") == "power-"+id })
	if row == nil || attrOf(row, "data-state") != "done" || !strings.Contains(text(row), "done") {
		t.Fatalf("the history does not show %s done: %v", id, row)
	}
	if obs := find(page.doc, func(n *html.Node) bool { return attrOf(n, "id") == "power-observed" }); obs == nil || !strings.HasPrefix(text(obs), "on") {
		t.Errorf("observed power is not on after the request")
	}
}

// A shutdown ends the live streams instead of waiting for them to the end
// of its grace period.
func TestShutdownEndsStreams(t *testing.T) {
	rg := start(t, func(c *agent.Config) { c.API.ShutdownTimeout = agent.Duration(5 * time.Minute) })
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	req, _ := http.NewRequest("GET", rg.url+"/events", nil)
	forever := *b.c
	forever.Timeout = 0 // the stream is not cut by the client
	resp, err := forever.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := make(chan sseEvent, 16)
	go readSSE(t, resp.Body, evs)
	stopped := make(chan struct{})
	go func() { rg.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("rackd did not stop within a minute: the open stream holds the shutdown")
	}
	for range evs { // the stream has ended: the reader closes it
	}
}

// The live updates last as long as the right that opened them: each way
// that right ends closes the stream, promptly, with the event "ended"
// naming why, and the session with it. (The wait is bounded generously:
// the end is driven by the change, not by a timer.)
func TestSSEEndsWithItsRight(t *testing.T) {
	rg := start(t)
	tests := map[string]struct {
		expires string // the token's lifetime, "" for none
		end     func(t *testing.T, b *browser, user string, tk api.Token)
		want    func(user string, tk api.Token) string // in the reason
	}{
		"token revoked": {
			end: func(t *testing.T, _ *browser, _ string, tk api.Token) {
				if st := rg.api(t, rg.admin, "DELETE", "/api/v1/tokens/"+tk.ID, nil, nil); st != http.StatusOK {
					t.Fatalf("revoke: %d", st)
				}
			},
			want: func(_ string, tk api.Token) string { return "token " + tk.ID + " has been revoked" },
		},
		"user removed": {
			end: func(t *testing.T, _ *browser, user string, _ api.Token) {
				if st := rg.api(t, rg.admin, "DELETE", "/api/v1/users/"+user, nil, nil); st != http.StatusOK {
					t.Fatalf("remove the user: %d", st)
				}
			},
			want: func(user string, _ api.Token) string { return "user " + user + " has been removed" },
		},
		"logged out elsewhere": {
			end: func(t *testing.T, b *browser, _ string, _ api.Token) {
				if p := b.post("/logout", nil); p.status != http.StatusSeeOther {
					t.Fatalf("logout: %d", p.status)
				}
			},
			want: func(string, api.Token) string { return "logged out" },
		},
		"token expired": {
			expires: "8s",
			end:     func(*testing.T, *browser, string, api.Token) {},
			want:    func(string, api.Token) string { return "expired" },
		},
	}
	i := 0
	for name, tc := range tests {
		i++
		t.Run(name, func(t *testing.T) {
			user := fmt.Sprintf("sse%d", i)
			userTok := rg.addUser(t, user, false)
			var tk api.Token
			if st := rg.api(t, userTok, "POST", "/api/v1/tokens", api.CreateToken{Name: "ui", Expires: tc.expires}, &tk); st != http.StatusCreated {
				t.Fatalf("create token: %d", st)
			}
			b := rg.browser(t)
			b.mustLogin(tk.Token)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", rg.url+"/events", nil)
			forever := *b.c
			forever.Timeout = 0
			resp, err := forever.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/events: %d", resp.StatusCode)
			}
			evs := make(chan sseEvent, 64)
			go readSSE(t, resp.Body, evs)

			tc.end(t, b, user, tk)
			want := tc.want(user, tk)
			deadline := time.After(30 * time.Second)
			var reason string
		wait:
			for {
				select {
				case ev, ok := <-evs:
					if !ok {
						t.Fatal("the stream closed without an ended event")
					}
					if ev.kind == "ended" {
						var d struct{ Reason string }
						if err := json.Unmarshal([]byte(ev.data), &d); err != nil {
							t.Fatalf("ended %q: %v", ev.data, err)
						}
						reason = d.Reason
						break wait
					}
				case <-deadline:
					t.Fatal("the stream is still open 30 s after its right ended")
				}
			}
			if !strings.Contains(reason, want) {
				t.Errorf("ended because %q, want %q", reason, want)
			}
			// Then the stream closes, and the session is gone.
			for range evs {
			}
			if p := b.get("/machines"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.loc, "/login") {
				t.Errorf("after the end: %d %q, want the login", p.status, p.loc)
			}
		})
	}
}

// TestTokenPageMAASKey: a token made on the tokens page is shown once as a
// MAAS API key too, and that key is the token's (MAAS's API takes it).
func TestTokenPageMAASKey(t *testing.T) {
	rg := start(t)
	tok := rg.addUser(t, "bob", false)
	b := rg.browser(t)
	b.mustLogin(tok)
	p := b.follow(b.post("/tokens", url.Values{"name": {"juju"}}))
	key := find(p.doc, func(n *html.Node) bool { return n.Data == "code" && strings.Contains(attrOf(n, "class"), "maas-key") })
	if key == nil {
		t.Fatalf("no MAAS key on the page after creating a token: %s", text(p.doc))
	}
	parts := strings.SplitN(text(key), ":", 3)
	if len(parts) != 3 || parts[0] != "bob" || !strings.HasPrefix(parts[1], "t-") {
		t.Fatalf("MAAS key %q, want bob:t-...:secret", text(key))
	}
	req, _ := http.NewRequest("GET", rg.url+"/MAAS/api/2.0/users/?op=whoami", nil)
	req.Header.Set("Authorization", `OAuth oauth_signature_method="PLAINTEXT", oauth_consumer_key="`+parts[0]+`", oauth_token="`+parts[1]+`", oauth_signature="&`+parts[2]+`"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the page's MAAS key on MAAS's API: %d", resp.StatusCode)
	}
}

// TestMachinePageHistoryPaged: the machine page shows the newest few of a
// long history (events, power requests), newest first, each with a link to
// more, which shows more of that list only.
func TestMachinePageHistoryPaged(t *testing.T) {
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "old-01", MACs: []string{"52:54:00:40:00:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc-old"}})
	for i := range 15 {
		for _, a := range []string{"mark-broken", "mark-fixed"} {
			if st := rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/"+a, api.ActionRequest{Reason: fmt.Sprintf("round %d", i)}, nil); st != http.StatusOK {
				t.Fatalf("%s: %d", a, st)
			}
		}
	}
	// The transitions' policies queued power requests: they end first
	// (a machine has few open at once).
	idle := func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var mp api.MachinePower
			rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID+"/power", nil, &mp)
			if len(mp.Pending) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d power requests still open after 30 s", len(mp.Pending))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	idle()
	var last api.PowerRequest
	for range 8 {
		req, _ := http.NewRequest("POST", rg.url+"/api/v1/machines/"+m.ID+"/power", strings.NewReader(`{"action":"query"}`))
		req.Header.Set("Authorization", "Bearer "+rg.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &last) != nil {
			t.Fatalf("power query: %d %s", resp.StatusCode, raw)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var pr api.PowerRequest
			rg.api(t, rg.admin, "GET", "/api/v1/power/requests/"+last.ID, nil, &pr)
			if pr.State == "done" || pr.State == "failed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("power request %s is %s after 30 s", last.ID, pr.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	b := rg.browser(t)
	b.mustLogin(rg.admin)
	rows := func(p page, sel func(*html.Node) bool) []*html.Node { return findAll(p.doc, sel) }
	events := func(n *html.Node) bool { return n.Data == "li" && hasAttr(n, "data-seq") }
	power := func(n *html.Node) bool { return n.Data == "tr" && strings.HasPrefix(attrOf(n, "id"), "power-") }
	more := func(p page, label string) string {
		a := find(p.doc, func(n *html.Node) bool { return n.Data == "a" && text(n) == label })
		return attrOf(a, "href")
	}
	p := b.get("/machines/" + m.ID)
	ev, pw := rows(p, events), rows(p, power)
	if len(ev) != 10 || len(pw) != 5 {
		t.Fatalf("the page shows %d events and %d power requests, want the newest 10 and 5", len(ev), len(pw))
	}
	if !strings.Contains(text(ev[0]), "round 14") || !strings.Contains(text(ev[0]), "mark-fixed") {
		t.Errorf("the first event is %q, want the newest", text(ev[0]))
	}
	if attrOf(pw[0], "id") != "power-"+last.ID {
		t.Errorf("the first power request is %s, want the newest, %s", attrOf(pw[0], "id"), last.ID)
	}
	for _, n := range append(ev, pw...) {
		if tm := find(n, func(c *html.Node) bool { return c.Data == "time" }); tm == nil || attrOf(tm, "datetime") == "" {
			t.Errorf("a row's date is not a <time>: %q", text(n))
		}
	}
	older := more(p, "Older events")
	if older == "" || more(p, "Older power requests") == "" {
		t.Fatalf("no link to older events or power requests")
	}
	p2 := b.get(older)
	if ev, pw := rows(p2, events), rows(p2, power); len(ev) <= 10 || len(pw) != 5 {
		t.Errorf("%s shows %d events and %d power requests, want more events only", older, len(ev), len(pw))
	}
	p3 := b.get(more(p, "Older power requests"))
	if pw := rows(p3, power); len(pw) <= 5 || attrOf(pw[0], "id") != "power-"+last.ID {
		t.Errorf("older power requests: %d rows, want more than 5, the newest first", len(pw))
	}
	all := b.get("/machines/" + m.ID + "?power=5000&events=5000")
	if more(all, "Older power requests") != "" || more(all, "Older events") != "" {
		t.Errorf("a page showing every event and power request links to more")
	}
	if n := len(rows(all, events)); n != 1+30 { // create and the transitions
		t.Errorf("every event: %d rows, want 31", n)
	}
}

// TestOtherUsersHeldMachineHidden: a machine another user holds is not in a
// user's machine list, dashboard or live updates (as through the API, where
// it is a 404); a machine nobody holds is in all three.
func TestOtherUsersHeldMachineHidden(t *testing.T) {
	rg := start(t)
	alice := rg.addUser(t, "alice", false)
	bob := rg.addUser(t, "bob", false)
	held := rg.addMachine(t, api.CreateMachine{Hostname: "alices-box", MACs: []string{"52:54:00:50:00:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc-a"}})
	free := rg.addMachine(t, api.CreateMachine{Hostname: "free-box", MACs: []string{"52:54:00:50:00:02"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc-f"}})
	if st := rg.api(t, alice, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "alices-box", AgentName: "secret-project"}, nil); st != http.StatusCreated {
		t.Fatalf("allocate: %d", st)
	}
	b := rg.browser(t)
	b.mustLogin(bob)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", rg.url+"/events", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := make(chan sseEvent, 64)
	go readSSE(t, resp.Body, evs)
	deadline := time.Now().Add(10 * time.Second)
	for rg.UI().Hub().Clients() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Alice's machine changes (a power request, then a transition that
	// leaves it hers), then the free one: once bob's stream has the free
	// one's event, it would have had alice's before it.
	var pr api.PowerRequest
	if st := rg.api(t, alice, "POST", "/api/v1/machines/"+held.ID+"/power", api.PowerAction{Action: "query"}, &pr); st != http.StatusAccepted {
		t.Fatalf("power query: %d", st)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var got api.PowerRequest
		rg.api(t, alice, "GET", "/api/v1/power/requests/"+pr.ID, nil, &got)
		if got.State == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("power request %s: %s", pr.ID, got.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := rg.api(t, rg.admin, "POST", "/api/v1/machines/"+held.ID+"/mark-broken", api.ActionRequest{Reason: "alice's secret"}, nil); st != http.StatusOK {
		t.Fatalf("mark-broken: %d", st)
	}
	if st := rg.api(t, rg.admin, "POST", "/api/v1/machines/"+free.ID+"/mark-broken", api.ActionRequest{Reason: "public"}, nil); st != http.StatusOK {
		t.Fatalf("mark-broken: %d", st)
	}
	for done := false; !done; {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatal("the stream ended")
			}
			if strings.Contains(ev.data, held.ID) {
				t.Errorf("bob's stream has alice's machine's %s: %s", ev.kind, ev.data)
			}
			done = ev.kind == "machine" && strings.Contains(ev.data, free.ID) && strings.Contains(ev.data, "public")
		case <-ctx.Done():
			t.Fatal("no event of the free machine within 30 s")
		}
	}
	for path, want := range map[string]string{"/machines": "free-box", "/": "free-box", "/subnets": ""} {
		p := b.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d", path, p.status)
		}
		if strings.Contains(p.body, "alices-box") || strings.Contains(p.body, held.ID) || strings.Contains(p.body, "secret-project") {
			t.Errorf("%s shows bob alice's machine", path)
		}
		if !strings.Contains(p.body, want) {
			t.Errorf("%s does not show %q", path, want)
		}
	}
	// The admin sees both.
	a := rg.browser(t)
	a.mustLogin(rg.admin)
	if p := a.get("/machines"); !strings.Contains(p.body, "alices-box") || !strings.Contains(p.body, "free-box") {
		t.Error("the admin's list lacks a machine")
	}
}

// TestPowerSettingsRefused: the power settings form is refused without its
// anti-forgery value, and to a user who is not an admin (the API's 403,
// shown); neither changes the machine's power.
func TestPowerSettingsRefused(t *testing.T) {
	rg := start(t)
	bob := rg.addUser(t, "bob", false)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "p1", MACs: []string{"52:54:00:60:00:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "fake", Address: "bmc-p1"}})
	form := url.Values{"driver": {"manual"}, "address": {"rack-9"}}
	unchanged := func(t *testing.T) {
		t.Helper()
		var got api.Machine
		rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID, nil, &got)
		if got.Power.Driver != "fake" || got.Power.Address != "bmc-p1" {
			t.Errorf("the refused form changed the power: %+v", got.Power)
		}
	}
	a := rg.browser(t)
	a.mustLogin(rg.admin)
	bad := url.Values{"csrf": {"x"}}
	for k, v := range form {
		bad[k] = v
	}
	if p := a.post("/machines/"+m.ID+"/power-settings", bad); p.status != http.StatusForbidden {
		t.Errorf("without the anti-forgery value: %d, want 403", p.status)
	}
	unchanged(t)
	b := rg.browser(t)
	b.mustLogin(bob)
	if p := b.get("/machines/" + m.ID); strings.Contains(p.body, "power-settings") {
		t.Error("bob is offered the power settings")
	}
	p := b.follow(b.post("/machines/"+m.ID+"/power-settings", form))
	if a := alerts(p); len(a) == 0 || !strings.Contains(strings.Join(a, " "), "admin") {
		t.Errorf("bob's refusal shows %q, want the API's words", a)
	}
	unchanged(t)
}
