package webui_test

// Tests in a real browser: Debian's chromium, headless, driven over the
// DevTools protocol by chromedp, against a rackd serving on loopback with the
// fake power driver. They run the page's JavaScript (live updates over SSE,
// the machine page's timeline and power history) and watch the console: a
// Content-Security-Policy violation, an uncaught exception or an error
// logged on any page fails the test.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"rackd/api"
)

// screenshotsEnv names a folder (relative to the repository's root) that
// gets the screenshots besides build/screenshots: docs/ui regenerates the
// ones docs/WEBUI.md shows.
const screenshotsEnv = "RACKD_UI_SCREENSHOTS"

// waitFor bounds every wait of a browser step; the machine running the
// tests may be loaded.
const waitFor = 60 * time.Second

// chromiumPath finds Debian's chromium. Without it the tests skip, except as
// root (CI), where make test installs it and its absence is a failure.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Geteuid() == 0 {
		t.Fatal("chromium is not installed (make test installs it: scripts/test-deps.sh)")
	}
	t.Skip("chromium is not installed and we are not root: apt-get install chromium to run the browser tests")
	return ""
}

// newChrome starts one headless chromium for a test, with the flags it
// needs on a machine without a network beyond loopback and a new, empty
// profile; extra adds flags of a test's own.
func newChrome(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first run starts the browser, and the browser lives as long as
	// that run's context: no timeout on it.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// tab is one user's window: its own browser context (cookies), and what its
// console said.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string

	mu       sync.Mutex
	problems []string
	dialogs  []string
	// dismiss: confirmation dialogs are answered "cancel" (else "OK").
	dismiss atomic.Bool
	// dialog has a value when a dialog opened.
	dialog chan struct{}
	// reported has a value when the console has said something new.
	reported chan struct{}
}

func (rg *rig) tab(t *testing.T, chrome context.Context) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(chrome, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx, base: rg.url, reported: make(chan struct{}, 1), dialog: make(chan struct{}, 1)}
	// Listen opens the tab; the func runs on the tab's reading goroutine
	// and must not block.
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tb.problem(fmt.Sprintf("uncaught exception: %s at %s:%d", msg, d.URL, d.LineNumber+1))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				tb.problem("console." + string(ev.Type) + ": " + strings.Join(args, " "))
			}
		case *cdplog.EventEntryAdded:
			if e := ev.Entry; e.Level == cdplog.EntryLevelError || e.Level == cdplog.EntryLevelWarning {
				tb.problem(fmt.Sprintf("log %s (%s): %s %s", e.Level, e.Source, e.Text, e.URL))
			}
		case *cdppage.EventJavascriptDialogOpening:
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, string(ev.Type)+": "+ev.Message)
			tb.mu.Unlock()
			// Dismiss it, or the page stays blocked; the test decides
			// whether a dialog was wanted.
			select {
			case tb.dialog <- struct{}{}:
			default:
			}
			accept := ev.Type == cdppage.DialogTypeConfirm && !tb.dismiss.Load()
			go chromedp.Call(ctx, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: accept})
		}
	})
	if err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	// A laptop's screen, the size of the screenshots.
	tb.do(t, "set the viewport", chromedp.EmulateViewport(1280, 800))
	return tb
}

func (tb *tab) problem(s string) {
	tb.mu.Lock()
	tb.problems = append(tb.problems, s)
	tb.mu.Unlock()
	select {
	case tb.reported <- struct{}{}:
	default:
	}
}

// takeProblems returns (and forgets) what the console said.
func (tb *tab) takeProblems() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	p := tb.problems
	tb.problems = nil
	return p
}

func (tb *tab) takeDialogs() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	d := tb.dialogs
	tb.dialogs = nil
	return d
}

// clean fails t when the console reported anything since the last check or
// a dialog opened.
func (tb *tab) clean(t *testing.T, where string) {
	t.Helper()
	for _, p := range tb.takeProblems() {
		t.Errorf("%s: the browser reported %s", where, p)
	}
	for _, d := range tb.takeDialogs() {
		t.Errorf("%s: a dialog opened: %s", where, d)
	}
}

// bounded is the tab's context under the bounded wait.
func (tb *tab) bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(tb.ctx, waitFor)
}

func (tb *tab) fail(t *testing.T, what string, err error) {
	t.Helper()
	lctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	loc, _ := chromedp.Run(lctx, chromedp.Location())
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: not done within %s (page %s)", what, waitFor, loc)
	}
	t.Fatalf("%s: %v (page %s)", what, err, loc)
}

// do runs steps under the bounded wait.
func (tb *tab) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := tb.bounded()
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.fail(t, what, err)
	}
}

// value runs one action that answers, under the bounded wait.
func value[T any](t *testing.T, tb *tab, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := tb.bounded()
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.fail(t, what, err)
	}
	return v
}

// eval evaluates a script expression, promises awaited.
func eval[T any](t *testing.T, tb *tab, js string) T {
	t.Helper()
	return value(t, tb, "evaluate "+js, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

func (tb *tab) text(t *testing.T, sel string) string {
	t.Helper()
	return strings.TrimSpace(value(t, tb, "text of "+sel, chromedp.Text(chromedp.CSS(sel))))
}

// waitJS waits until a script expression is true.
func (tb *tab) waitJS(t *testing.T, what, js string) {
	t.Helper()
	value(t, tb, what, chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond)))
}

// open navigates to path and waits for its body.
func (tb *tab) open(t *testing.T, path string) {
	t.Helper()
	tb.do(t, "open "+path, chromedp.Navigate(tb.base+path), chromedp.WaitReady(chromedp.CSS("body")))
}

// openLive opens a page and waits until its EventSource is connected: the
// server subscribes a stream before it answers.
func (tb *tab) openLive(t *testing.T, path string) {
	t.Helper()
	tb.open(t, path)
	tb.do(t, "live updates on "+path, chromedp.WaitReady(chromedp.CSS(`body[data-live="on"]`)))
}

func (tb *tab) login(t *testing.T, token string) {
	t.Helper()
	tb.open(t, "/login")
	tb.do(t, "log in",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-csrf] form.logout`)))
}

// sessionCookie is the tab's rackd_session cookie ("" when it has none).
func (tb *tab) sessionCookie(t *testing.T) string {
	t.Helper()
	ctx, cancel := tb.bounded()
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{tb.base}})
	if err != nil {
		tb.fail(t, "read cookies", err)
	}
	for _, c := range res.Cookies {
		if c.Name == "rackd_session" {
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("the session cookie is not HttpOnly and SameSite=Strict: %+v", c)
			}
			return c.Value
		}
	}
	return ""
}

// screenshot saves the whole page (1280 pixels wide, as long as it is) as
// NAME.png in build/screenshots and, for the documentation's set (docs)
// when RACKD_UI_SCREENSHOTS names a folder, there too.
func (tb *tab) screenshot(t *testing.T, name string, docs bool) {
	t.Helper()
	// The viewport is made as tall as the page, so that what is fixed to
	// its bottom (the live indicator) is at the page's bottom.
	h := eval[int](t, tb, `document.documentElement.scrollHeight`)
	tb.do(t, "a viewport as tall as the page", chromedp.EmulateViewport(1280, int64(max(h, 800))))
	png := value(t, tb, "screenshot "+name, chromedp.CaptureScreenshot())
	tb.do(t, "the laptop's viewport again", chromedp.EmulateViewport(1280, 800))
	dirs := []string{filepath.Join("..", "build", "screenshots")}
	if d := os.Getenv(screenshotsEnv); d != "" && docs {
		if !filepath.IsAbs(d) {
			d = filepath.Join("..", d)
		}
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// replay sends a GET with a session cookie from outside the browser and
// reports whether rackd still takes it (anything but the redirect to the
// login).
func replay(t *testing.T, base, cookie string) (status int, location string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/machines", nil)
	req.AddCookie(&http.Cookie{Name: "rackd_session", Value: cookie})
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == '<' || r == '>':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func TestBrowser(t *testing.T) {
	chrome := newChrome(t)
	rg := start(t)
	fake := func(i int) *api.PowerParams {
		return &api.PowerParams{Driver: "fake", Address: fmt.Sprintf("bmc%d", i)}
	}
	// A small rack: the machine the test commissions (NEW), ones it acts on
	// (READY), and some more for the list and the screenshots.
	fresh := rg.addMachine(t, api.CreateMachine{Hostname: "node-01", Arch: "amd64", MACs: []string{"52:54:00:10:00:01"},
		CPUCount: 16, MemoryMB: 65536, Tags: []string{"rack1", "gpu"}, Power: fake(1)})
	ready := rg.addMachine(t, api.CreateMachine{Hostname: "node-02", Arch: "amd64", MACs: []string{"52:54:00:10:00:02"},
		CPUCount: 32, MemoryMB: 131072, Tags: []string{"rack1"}, State: "READY", Power: fake(2)})
	breakMe := rg.addMachine(t, api.CreateMachine{Hostname: "node-03", Arch: "amd64", MACs: []string{"52:54:00:10:00:03"},
		CPUCount: 32, MemoryMB: 131072, Tags: []string{"rack1"}, State: "READY", Power: fake(3)})
	for i := 4; i <= 12; i++ {
		st := "READY"
		if i%4 == 0 {
			st = "NEW"
		}
		rg.addMachine(t, api.CreateMachine{Hostname: fmt.Sprintf("node-%02d", i), Arch: "amd64", MACs: []string{fmt.Sprintf("52:54:00:10:00:%02x", i)},
			CPUCount: 8 * (1 + i%3), MemoryMB: 32768 * (1 + i%2), Tags: []string{fmt.Sprintf("rack%d", 1+i/7)}, State: st, Power: fake(i)})
	}
	if st := rg.api(t, rg.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.77.0.0/24", Gateway: "10.77.0.1",
		DynamicRanges: []api.Range{{Start: "10.77.0.100", End: "10.77.0.199"}}}, nil); st != http.StatusCreated {
		t.Fatalf("create subnet: %d", st)
	}
	bobToken := rg.addUser(t, "bob", false)

	admin := rg.tab(t, chrome)

	t.Run("the console check sees a CSP violation", func(t *testing.T) {
		// The check every other step makes must be able to fail: an inline
		// script the page adds itself is refused by the CSP and reported.
		admin.open(t, "/login")
		admin.takeProblems()
		if ran := eval[bool](t, admin, `(function(){var s=document.createElement("script");s.textContent="window.__inline=1";document.body.appendChild(s);return !!window.__inline})()`); ran {
			t.Fatal("an inline script ran: the CSP does not hold")
		}
		var seen []string
		deadline := time.After(waitFor)
		for !strings.Contains(strings.Join(seen, "\n"), "Content Security Policy") {
			select {
			case <-admin.reported:
				seen = append(seen, admin.takeProblems()...)
			case <-deadline:
				t.Fatalf("the browser reported no CSP violation for an inline script (but %q): the console check is blind", seen)
			}
		}
		admin.clean(t, "/login")
	})

	t.Run("login with a bad token is refused", func(t *testing.T) {
		admin.open(t, "/login")
		admin.do(t, "log in with a bad token",
			chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), "not-a-token"),
			chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`div[role="alert"].error`)))
		if msg := admin.text(t, `div[role="alert"].error`); !strings.Contains(msg, "not valid") {
			t.Errorf("refusal says %q", msg)
		}
		if c := admin.sessionCookie(t); c != "" {
			t.Errorf("a bad token got a session cookie")
		}
		// The refusal is a 401 page, which the console notes as a failed
		// load of the document: that is the answer, not a fault.
		for _, p := range admin.takeProblems() {
			if !strings.Contains(p, "401") {
				t.Errorf("/login: the browser reported %s", p)
			}
		}
		admin.clean(t, "/login")
	})

	t.Run("login", func(t *testing.T) {
		admin.login(t, rg.admin)
		title := value(t, admin, "title", chromedp.Title())
		if want := "— rackd " + rackName; !strings.HasSuffix(title, want) {
			t.Errorf("title %q, want … %s", title, want)
		}
		if admin.sessionCookie(t) == "" {
			t.Error("no session cookie after the login")
		}
		admin.clean(t, "/")
	})

	t.Run("the machine list shows the rack", func(t *testing.T) {
		admin.open(t, "/machines")
		if n := eval[int](t, admin, `document.querySelectorAll('#machines tbody tr[id^="machine-"]').length`); n != 12 {
			t.Errorf("%d machine rows, want 12", n)
		}
		state := admin.text(t, `#machine-`+ready.ID+` td.state`)
		host := admin.text(t, `#machine-`+ready.ID+` a`)
		if state != "READY" || host != "node-02" {
			t.Errorf("row of node-02: %q %q", host, state)
		}
		// The script's select-all ticks every row of the page.
		admin.do(t, "select all", chromedp.Click(chromedp.ID("select-all")))
		if n := eval[int](t, admin, `document.querySelectorAll('#machines tbody input[type="checkbox"]:checked').length`); n != 12 {
			t.Errorf("select-all ticked %d rows, want 12", n)
		}
		admin.clean(t, "/machines")
	})

	t.Run("commissioning shows in the list without a reload", func(t *testing.T) {
		admin.openLive(t, "/machines")
		eval[bool](t, admin, `window.__sameDocument = true`)
		if st := rg.api(t, rg.admin, "POST", "/api/v1/machines/"+fresh.ID+"/commission", nil, nil); st != http.StatusOK {
			t.Fatalf("commission: %d", st)
		}
		admin.do(t, "the row turns COMMISSIONING",
			chromedp.WaitVisible(chromedp.CSS(`tr#machine-`+fresh.ID+`[data-state="COMMISSIONING"]`)))
		if !eval[bool](t, admin, `window.__sameDocument === true`) {
			t.Error("the page was reloaded")
		}
		cell := admin.text(t, `#machine-`+fresh.ID+` td.state`)
		class := eval[string](t, admin, `document.querySelector('#machine-`+fresh.ID+` td.state').className`)
		if cell != "COMMISSIONING" || !strings.Contains(class, "transient") || !strings.Contains(class, "st-commissioning") {
			t.Errorf("state cell %q class %q", cell, class)
		}
		admin.clean(t, "/machines")
	})

	const payload = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	hasPayload := `Array.from(document.querySelectorAll('.reason')).some(function(r){return r.textContent===` + jsString(payload) + `})`
	const injected = `document.querySelectorAll('main img, main script, #events img').length`
	t.Run("the machine page's events appear live, a payload as text", func(t *testing.T) {
		admin.openLive(t, "/machines/"+breakMe.ID)
		eval[bool](t, admin, `window.__sameDocument = true`)
		before := eval[int](t, admin, `document.querySelectorAll('#events li[data-seq]').length`)
		if st := rg.api(t, rg.admin, "POST", "/api/v1/machines/"+breakMe.ID+"/mark-broken", api.ActionRequest{Reason: payload}, nil); st != http.StatusOK {
			t.Fatalf("mark-broken: %d", st)
		}
		admin.waitJS(t, "the event is in the timeline", hasPayload)
		after := eval[int](t, admin, `document.querySelectorAll('#events li[data-seq]').length`)
		if after != before+1 || !eval[bool](t, admin, `window.__sameDocument === true`) {
			t.Errorf("events %d → %d, or the page was reloaded", before, after)
		}
		if state := admin.text(t, "#state"); state != "BROKEN" {
			t.Errorf("the page's state says %q, want BROKEN", state)
		}
		if n := eval[int](t, admin, injected); n != 0 {
			t.Errorf("the payload made %d elements", n)
		}
		admin.clean(t, "/machines/"+breakMe.ID)
		// Rendered by the server too, after a reload, and on the
		// dashboard's recent events.
		for _, path := range []string{"/machines/" + breakMe.ID, "/"} {
			admin.open(t, path)
			if !eval[bool](t, admin, hasPayload) {
				t.Errorf("%s: the payload is not shown as text", path)
			}
			if n := eval[int](t, admin, injected); n != 0 {
				t.Errorf("%s: the payload made %d elements", path, n)
			}
			admin.clean(t, path)
		}
	})

	t.Run("a power request shows its fate", func(t *testing.T) {
		admin.openLive(t, "/machines/"+ready.ID)
		admin.do(t, "power on",
			chromedp.Click(chromedp.CSS(`form[action="/machines/`+ready.ID+`/power"]:has(input[value="on"]) button`)),
			chromedp.WaitVisible(chromedp.CSS(`div[role="status"].notice`)))
		notice := admin.text(t, `div[role="status"].notice`)
		_, after, ok := strings.Cut(notice, "(request ")
		id, _, _ := strings.Cut(after, ")")
		if !ok || id == "" {
			t.Fatalf("the notice names no request: %q", notice)
		}
		admin.do(t, "the request ends done",
			chromedp.WaitVisible(chromedp.CSS(`tr#power-`+id+`[data-state="done"]`)))
		admin.waitJS(t, "observed power is on", `document.getElementById("power-observed").textContent.indexOf("on")===0`)
		admin.clean(t, "/machines/"+ready.ID)
	})

	t.Run("an illegal transition shows the API's error", func(t *testing.T) {
		admin.open(t, "/machines/"+ready.ID)
		admin.do(t, "mark fixed a READY machine",
			chromedp.Click(chromedp.CSS(`details.other summary`)),
			chromedp.Click(chromedp.CSS(`details.other form:has(input[name="action"][value="mark-fixed"]) button`)),
			chromedp.WaitVisible(chromedp.CSS(`div[role="alert"].error`)))
		if msg, want := admin.text(t, `div[role="alert"].error`), "cannot mark-fixed a machine that is READY"; !strings.Contains(msg, want) {
			t.Errorf("alert %q, want the API's %q", msg, want)
		}
		admin.clean(t, "/machines/"+ready.ID)
	})

	// A refused fetch is logged by the console as a failed load: expected
	// here, and only with the refusal's status.
	only := func(t *testing.T, tb *tab, status string) {
		t.Helper()
		for _, p := range tb.takeProblems() {
			if !strings.Contains(p, status) {
				t.Errorf("the browser reported %s", p)
			}
		}
	}

	t.Run("a request without the CSRF token is refused", func(t *testing.T) {
		admin.open(t, "/machines/"+ready.ID)
		status := eval[int](t, admin, `fetch("/machines/`+ready.ID+`/action", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "action=mark-broken&reason=forged"}).then(function(r){return r.status})`)
		if status != http.StatusForbidden {
			t.Errorf("without the token: %d, want 403", status)
		}
		var m api.Machine
		rg.api(t, rg.admin, "GET", "/api/v1/machines/"+ready.ID, nil, &m)
		if m.State != "READY" {
			t.Errorf("the machine is %s after the refused request", m.State)
		}
		only(t, admin, "403")
		admin.clean(t, "fetch without CSRF")
	})

	t.Run("a non-admin sees no admin action and a forged one is refused", func(t *testing.T) {
		bob := rg.tab(t, chrome)
		bob.login(t, bobToken)
		bob.open(t, "/machines/"+ready.ID)
		if n := eval[int](t, bob, `document.querySelectorAll('form[action$="/action"], form[action$="/power"], form[action$="/ips"]').length`); n != 0 {
			t.Errorf("bob is offered %d actions on a machine he does not hold", n)
		}
		bob.clean(t, "machine page as bob")
		bob.open(t, "/users")
		if n, nav := eval[int](t, bob, `document.querySelectorAll('form[action="/users"]').length`), bob.text(t, "nav"); n != 0 || strings.Contains(nav, "Users and tokens") {
			t.Errorf("bob is offered the users' admin (%d forms, nav %q)", n, nav)
		}
		bob.open(t, "/images")
		if n := eval[int](t, bob, `document.querySelectorAll('form[action="/images/import"]').length`); n != 0 {
			t.Error("bob is offered to import images")
		}
		bob.clean(t, "/users, /images as bob")
		res := eval[struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
		}](t, bob, `fetch("/users", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded", "X-CSRF-Token": document.body.dataset.csrf},
			body: "name=mallory&admin=on"}).then(function(r){return r.text().then(function(b){return {status: r.status, body: b}})})`)
		if res.Status != http.StatusForbidden || !strings.Contains(res.Body, "admin") {
			t.Errorf("bob's forged admin request: %d %s, want 403 with the API's words", res.Status, res.Body)
		}
		var users []api.User
		rg.api(t, rg.admin, "GET", "/api/v1/users", nil, &users)
		for _, u := range users {
			if u.Name == "mallory" {
				t.Error("the forged request made a user")
			}
		}
		only(t, bob, "403")
		bob.clean(t, "forged request")
	})

	t.Run("a confirmation dialog guards a revocation", func(t *testing.T) {
		var tk api.Token
		if st := rg.api(t, rg.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "doomed"}, &tk); st != http.StatusCreated {
			t.Fatalf("create token: %d", st)
		}
		revoke := `form[action="/tokens/` + tk.ID + `/revoke"] button`
		waitDialog := func(t *testing.T) {
			t.Helper()
			select {
			case <-admin.dialog:
			case <-time.After(waitFor):
				t.Fatal("no confirmation dialog")
			}
			if d := admin.takeDialogs(); len(d) != 1 || !strings.Contains(d[0], "Revoke token doomed of admin?") {
				t.Errorf("dialogs %q", d)
			}
		}
		admin.open(t, "/users")
		admin.dismiss.Store(true)
		defer admin.dismiss.Store(false)
		eval[bool](t, admin, `window.__sameDocument = true`)
		admin.do(t, "revoke, then cancel", chromedp.Click(chromedp.CSS(revoke)))
		waitDialog(t)
		// Cancelled: the same page, the token alive.
		if !eval[bool](t, admin, `window.__sameDocument === true`) {
			t.Error("the form was sent although the dialog was cancelled")
		}
		if st := rg.api(t, tk.Token, "GET", "/api/v1/version", nil, nil); st != http.StatusOK {
			t.Errorf("the token is refused (%d) after a cancelled revocation", st)
		}
		admin.dismiss.Store(false)
		admin.do(t, "revoke, then OK", chromedp.Click(chromedp.CSS(revoke)))
		waitDialog(t)
		admin.do(t, "the revocation's notice", chromedp.WaitVisible(chromedp.CSS(`div[role="status"].notice`)))
		if st := rg.api(t, tk.Token, "GET", "/api/v1/version", nil, nil); st != http.StatusUnauthorized {
			t.Errorf("the revoked token: %d, want 401", st)
		}
		admin.clean(t, "/users")
	})

	t.Run("an image import's progress follows without a reload", func(t *testing.T) {
		// A disk image served from loopback, its second half held back
		// until the page shows the import running.
		data := bytes.Repeat([]byte("rackd browser test disk image. "), 40000)
		sum := sha256.Sum256(data)
		release := make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Write(data[:len(data)/2])
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			w.Write(data[len(data)/2:])
		}))
		defer srv.Close()
		defer free()
		admin.open(t, "/images")
		admin.do(t, "import",
			chromedp.SendKeys(chromedp.ID("im-url"), srv.URL+"/tiny.img"),
			chromedp.SendKeys(chromedp.ID("im-sha"), hex.EncodeToString(sum[:])),
			chromedp.Click(chromedp.CSS(`form[action="/images/import"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`#imports tr[data-state="running"]`)))
		eval[bool](t, admin, `window.__sameDocument = true`)
		free()
		admin.do(t, "the import ends done on the page",
			chromedp.WaitReady(chromedp.CSS(`#imports tr[data-state="done"]`)))
		admin.waitJS(t, "the page says the imports finished", `document.getElementById("live").textContent.indexOf("Imports finished")===0`)
		if !eval[bool](t, admin, `window.__sameDocument === true`) {
			t.Error("the page was reloaded")
		}
		if full := eval[bool](t, admin, `(function(){var p=document.querySelector('#imports tr[data-state="done"] progress');return !!p && p.max>1 && p.value===p.max})()`); !full {
			t.Error("the progress bar is not full once the import is done")
		}
		if st := admin.text(t, `#imports tr[data-state="done"] .istate`); st != "done" {
			t.Errorf("the import's state cell says %q", st)
		}
		admin.clean(t, "/images")
	})

	t.Run("screenshots", func(t *testing.T) {
		for _, p := range []struct{ name, path string }{
			{"dashboard", "/"}, {"machines", "/machines"}, {"machine", "/machines/" + fresh.ID},
			{"subnets", "/subnets"}, {"images", "/images"}, {"users", "/users"},
		} {
			admin.openLive(t, p.path)
			admin.screenshot(t, "test-"+p.name, false)
			admin.clean(t, p.path)
		}
	})

	t.Run("logout kills the session", func(t *testing.T) {
		admin.open(t, "/")
		cookie := admin.sessionCookie(t)
		if cookie == "" {
			t.Fatal("no session cookie")
		}
		admin.do(t, "log out",
			chromedp.Click(chromedp.CSS(`form.logout button`)),
			chromedp.WaitVisible(chromedp.ID("token")))
		if st, loc := replay(t, rg.url, cookie); st != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
			t.Errorf("the logged-out cookie: %d %q, want a redirect to the login", st, loc)
		}
		admin.open(t, "/machines")
		admin.do(t, "back at the login", chromedp.WaitVisible(chromedp.ID("token")))
		admin.clean(t, "after logout")
	})

	t.Run("an expired session is refused", func(t *testing.T) {
		var tk api.Token
		if st := rg.api(t, rg.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "brief", Expires: "10s"}, &tk); st != http.StatusCreated {
			t.Fatalf("create token: %d", st)
		}
		short := rg.tab(t, chrome)
		short.login(t, tk.Token)
		cookie := short.sessionCookie(t)
		if cookie == "" {
			t.Fatal("no session cookie")
		}
		// The open page goes back to the login by itself when the token
		// expires: its live updates end, saying why.
		short.openLive(t, "/machines")
		short.do(t, "back at the login when the token expires", chromedp.WaitVisible(chromedp.ID("token")))
		if st, loc := replay(t, rg.url, cookie); st != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
			t.Errorf("the expired session's cookie: %d %q, want a redirect to the login", st, loc)
		}
		short.open(t, "/machines")
		short.do(t, "back at the login", chromedp.WaitVisible(chromedp.ID("token")))
		only(t, short, "401")
		short.clean(t, "expired session")
	})

	t.Run("a revoked token sends the open page to the login", func(t *testing.T) {
		var tk api.Token
		if st := rg.api(t, rg.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "revoked-live"}, &tk); st != http.StatusCreated {
			t.Fatalf("create token: %d", st)
		}
		tb := rg.tab(t, chrome)
		tb.login(t, tk.Token)
		tb.openLive(t, "/machines")
		if st := rg.api(t, rg.admin, "DELETE", "/api/v1/tokens/"+tk.ID, nil, nil); st != http.StatusOK {
			t.Fatalf("revoke: %d", st)
		}
		tb.do(t, "back at the login once the token is revoked", chromedp.WaitVisible(chromedp.ID("token")))
		only(t, tb, "401")
		tb.clean(t, "revoked token")
	})
}

// TestBrowserLoginStaysOnSite: a post-login destination that a browser reads
// as another site's URL leaves the browser on rackd, however it is asked
// for. "/\t/evil.example/x" is the case: the URL parser removes the tab
// before it parses, and "//evil.example/x" is another host. evil.example is
// a loopback server of the test (chromium's host resolver maps the name to
// it), which counts the pages asked of it: the browser must ask for none.
func TestBrowserLoginStaysOnSite(t *testing.T) {
	var hits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/favicon.ico" { // the browser asks for it on its own
			hits.Add(1)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><title>evil</title><body data-evil="1"><p>another site</p></body>`)
	}))
	defer evil.Close()
	chrome := newChrome(t, chromedp.Flag("host-resolver-rules", "MAP evil.example "+evil.Listener.Addr().String()))
	rg := start(t)
	const next = "/\t/evil.example/x"

	// landed waits until the browser shows a page of rackd's (logged in)
	// or the other site's, and says where it is.
	landed := func(t *testing.T, tb *tab, what string) string {
		t.Helper()
		tb.do(t, what, chromedp.WaitVisible(chromedp.CSS(`body[data-csrf] form.logout, body[data-evil]`)))
		return value(t, tb, "location", chromedp.Location())
	}
	onSite := func(t *testing.T, loc, wantPath string) {
		t.Helper()
		if n := hits.Load(); n != 0 || !strings.HasPrefix(loc, rg.url+"/") {
			t.Fatalf("the browser left rackd (%s): it is at %s, and evil.example got %d requests", rg.url, loc, n)
		}
		if got := strings.TrimPrefix(loc, rg.url); got != wantPath {
			t.Errorf("the browser is at %s, want %s", got, wantPath)
		}
	}

	t.Run("the check can see the other site", func(t *testing.T) {
		tb := rg.tab(t, chrome)
		tb.do(t, "open evil.example", chromedp.Navigate("http://evil.example/x"))
		if loc := landed(t, tb, "the other site"); loc != "http://evil.example/x" || hits.Load() != 1 {
			t.Fatalf("the mapped name is not the test's server: at %s, %d requests", loc, hits.Load())
		}
		hits.Store(0)
	})
	t.Run("a next on this site is followed", func(t *testing.T) {
		tb := rg.tab(t, chrome)
		tb.open(t, "/login?next="+url.QueryEscape("/machines?state=READY"))
		tb.do(t, "log in", chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), rg.admin),
			chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)))
		onSite(t, landed(t, tb, "after the login"), "/machines?state=READY")
	})
	t.Run("logged in, /login's next", func(t *testing.T) {
		// A page navigation (no form: the CSP's form-action does not
		// apply), straight to the redirect.
		tb := rg.tab(t, chrome)
		tb.login(t, rg.admin)
		tb.do(t, "open /login with the next", chromedp.Navigate(rg.url+"/login?next="+url.QueryEscape(next)))
		onSite(t, landed(t, tb, "after /login"), "/")
	})
	// The login form's answer is held by safeNext; the CSP's form-action
	// 'self' also keeps chromium from following a form's redirect to
	// another site. The login must work and land on this site.
	t.Run("the login form's next field", func(t *testing.T) {
		tb := rg.tab(t, chrome)
		tb.open(t, "/login")
		// As a forged form would send it, whatever the page put there.
		eval[bool](t, tb, `(function(){document.querySelector('input[name="next"]').value=`+jsString(next)+`;return true})()`)
		tb.do(t, "log in", chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), rg.admin),
			chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)))
		onSite(t, landed(t, tb, "after the login"), "/")
		tb.clean(t, "the login")
	})
	t.Run("the login page's next", func(t *testing.T) {
		tb := rg.tab(t, chrome)
		tb.open(t, "/login?next="+url.QueryEscape(next))
		tb.do(t, "log in", chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), rg.admin),
			chromedp.Click(chromedp.CSS(`form.login button[type="submit"]`)))
		onSite(t, landed(t, tb, "after the login"), "/")
		tb.clean(t, "the login")
	})
}
