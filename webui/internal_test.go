package webui

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/reqbody"
	"rackd/power/queue"
	"rackd/store"
)

func TestSafeNext(t *testing.T) {
	tests := map[string]string{
		"":                         "/",
		"/machines?state=READY":    "/machines?state=READY",
		"//evil.example/":          "/",
		"https://evil.example/":    "/",
		"/\\evil.example":          "/",
		"/machines\r\nSet-Cookie:": "/machinesSet-Cookie:", // no header split: the CR LF go
		"machines":                 "/",
		// A browser removes tabs and newlines anywhere and strips C0
		// controls and spaces at both ends before it parses.
		"/\t/evil.example/x":   "/",
		"/\n/evil.example/x":   "/",
		"/\r\n/evil.example":   "/",
		"\t//evil.example":     "/",
		" //evil.example":      "/",
		"\x00//evil.example":   "/",
		"/\t\\evil.example":    "/",
		"/a/../\\evil.example": "/",
		"http:/\\evil.example": "/",
		"/\x01/evil.example":   "/",
		"/machines\x7f":        "/",
		// ... and what it then follows is a path here: kept, normalised.
		" /machines\t":      "/machines",
		"/mach\tines?q=a b": "/machines?q=a b",
		"/%09/evil.example": "/%09/evil.example",
	}
	for in, want := range tests {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    bool
	}{
		{"no headers (curl, old browsers)", nil, true},
		{"same-origin fetch", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://rack:5240"}, true},
		{"typed by the user", map[string]string{"Sec-Fetch-Site": "none"}, true},
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
		{"same-site, other origin", map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		{"other origin", map[string]string{"Origin": "http://evil.example"}, false},
		{"other port", map[string]string{"Origin": "http://rack:5241"}, false},
		{"null origin", map[string]string{"Origin": "null"}, false},
	}
	for _, tc := range tests {
		r := &http.Request{Host: "rack:5240", Header: http.Header{}, URL: &url.URL{Path: "/"}}
		for k, v := range tc.headers {
			r.Header.Set(k, v)
		}
		if got := sameOrigin(r); got != tc.want {
			t.Errorf("%s: sameOrigin = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPhaseTimings(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	evs := []api.Event{
		{Time: at(0), Action: "create", To: "NEW"},
		{Time: at(1), Action: "commission", From: "NEW", To: "COMMISSIONING"},
		{Time: at(2), Action: "ip-assign"},
		{Time: at(6), Action: "commissioning-done", From: "COMMISSIONING", To: "READY"},
		{Time: at(10), Action: "allocate", From: "READY", To: "ALLOCATED"},
		{Time: at(11), Action: "deploy", From: "ALLOCATED", To: "DEPLOYING"},
	}
	got := phaseTimings(evs, at(20))
	want := []phaseTiming{
		{Phase: "DEPLOYING", Started: at(11), Duration: 9 * time.Minute},
		{Phase: "COMMISSIONING", Started: at(1), Ended: at(6), Duration: 5 * time.Minute, Outcome: "READY"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("phase %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A client that does not read is dropped; the others get every message and
// publishing never waits.
func TestHubDropsSlowClient(t *testing.T) {
	h := NewHub(4)
	slow, _ := h.subscribe(0, false)
	fast, _ := h.subscribe(0, false)
	for i := range 10 {
		h.Event(store.Event{Seq: uint64(i), Machine: "m-1"})
		select {
		case <-fast.ch:
		default:
			t.Fatalf("message %d did not reach the reading client", i)
		}
	}
	select {
	case <-slow.gone:
	default:
		t.Fatal("the client that never read was not dropped")
	}
	if h.Clients() != 1 || h.Dropped() != 1 {
		t.Errorf("clients %d, dropped %d; want 1 and 1", h.Clients(), h.Dropped())
	}
	h.unsubscribe(slow) // already gone: a no-op
	h.unsubscribe(fast)
	if h.Clients() != 0 {
		t.Errorf("clients %d after unsubscribing", h.Clients())
	}
}

func TestMachineQueryURL(t *testing.T) {
	q := readMachineQuery(url.Values{"state": {"ready"}, "tag": {"a b"}, "sort": {"cpu"}, "dir": {"desc"}, "page": {"3"}})
	if q.State != "READY" || q.Sort != "cpu" || !q.Desc || q.Page != 3 {
		t.Fatalf("read %+v", q)
	}
	if got, want := q.URL("page", ""), "/machines?dir=desc&sort=cpu&state=READY&tag=a+b"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	if got := q.SortURL("cpu"); got != "/machines?sort=cpu&state=READY&tag=a+b" {
		t.Errorf("SortURL(cpu) on a descending cpu sort = %q: want ascending", got)
	}
	bad := readMachineQuery(url.Values{"state": {"<x>"}, "sort": {"password"}, "page": {"-4"}})
	if bad.State != "" || bad.Sort != "hostname" || bad.Page != 1 {
		t.Errorf("bad query read as %+v", bad)
	}
}

// A post-login destination stays on this site whatever is asked. The
// oracle is the browser: the Location that http.Redirect sends for
// safeNext's answer is resolved as the WHATWG URL parser resolves it
// against the login page (browserOrigin, written apart from safeNext), and
// must keep the page's origin.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"", "/", "/machines?x=1", "//evil", "https://evil", "/\\evil", "/a\r\nb", "javascript:alert(1)",
		"/\t/evil.example/x", "\x00 //evil", "/a/../\\evil", "http:/\\evil", "/%09/evil", "/\x1f/evil", "/x#/../..//evil", "HTTP://evil"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := safeNext(s)
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("safeNext(%q) = %q: not a path", s, got)
		}
		if o := browserOrigin(got); o != "http://rack.example" {
			t.Fatalf("safeNext(%q) = %q, which a browser resolves to %s", s, got, o)
		}
		req := httptest.NewRequest(http.MethodPost, "http://rack.example/login", nil)
		rec := httptest.NewRecorder()
		http.Redirect(rec, req, got, http.StatusSeeOther)
		loc := rec.Header().Get("Location")
		if o := browserOrigin(loc); o != "http://rack.example" {
			t.Fatalf("safeNext(%q) = %q, sent as Location %q, which a browser follows to %s", s, got, loc, o)
		}
		// What is plainly a path of this site is kept as it is.
		if regexp.MustCompile(`^/[A-Za-z0-9_-][A-Za-z0-9/?=&_.-]*$`).MatchString(s) && got != s {
			t.Fatalf("safeNext(%q) = %q, want it kept", s, got)
		}
	})
}

// browserOrigin is the origin (scheme://host) of ref resolved against
// http://rack.example/login the way the WHATWG URL standard's basic URL
// parser does it, as far as the origin goes: the input is stripped of
// leading and trailing C0 controls and spaces and of every tab and
// newline; a scheme other than the base's is another origin; for the
// base's (special) scheme, "\\" counts as "/", and two slashes after the
// scheme or at the start of a relative reference begin an authority, whose
// host (after any userinfo, before any port) is the origin's.
func browserOrigin(ref string) string {
	const base = "http://rack.example"
	start, end := 0, len(ref)
	for start < end && ref[start] <= 0x20 {
		start++
	}
	for end > start && ref[end-1] <= 0x20 {
		end--
	}
	var in []byte
	for i := start; i < end; i++ {
		if c := ref[i]; c != '\t' && c != '\n' && c != '\r' {
			in = append(in, c)
		}
	}
	isAlpha := func(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
	slash := func(i int) bool { return i < len(in) && (in[i] == '/' || in[i] == '\\') }
	// Scheme state: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":".
	rest := 0
	if len(in) > 0 && isAlpha(in[0]) {
		i := 1
		for i < len(in) && (isAlpha(in[i]) || in[i] >= '0' && in[i] <= '9' || in[i] == '+' || in[i] == '-' || in[i] == '.') {
			i++
		}
		if i < len(in) && in[i] == ':' {
			scheme := strings.ToLower(string(in[:i]))
			if scheme != "http" {
				return scheme + "://(another origin)"
			}
			// Special relative or authority state: "//" is an
			// authority; anything else is relative to the base.
			rest = i + 1
			if rest+1 < len(in) && in[rest] == '/' && in[rest+1] == '/' {
				return "http://" + authorityHost(in[rest:])
			}
		}
	}
	// Relative state: "/" or "\\" then another is an authority (special
	// authority ignore slashes state); anything else keeps the base's.
	if slash(rest) && slash(rest+1) {
		return "http://" + authorityHost(in[rest:])
	}
	return base
}

// authorityHost is the host of an authority that follows any number of
// slashes and backslashes: up to "/", "\\", "?" or "#", after the last
// "@", before a port, lower-cased.
func authorityHost(in []byte) string {
	i := 0
	for i < len(in) && (in[i] == '/' || in[i] == '\\') {
		i++
	}
	j := i
	for j < len(in) && in[j] != '/' && in[j] != '\\' && in[j] != '?' && in[j] != '#' {
		j++
	}
	auth := string(in[i:j])
	if k := strings.LastIndexByte(auth, '@'); k >= 0 {
		auth = auth[k+1:]
	}
	if k := strings.LastIndexByte(auth, ':'); k >= 0 && !strings.Contains(auth[k:], "]") {
		auth = auth[:k]
	}
	return strings.ToLower(auth)
}

// The oracle itself tells this site from another.
func TestBrowserOrigin(t *testing.T) {
	for ref, want := range map[string]string{
		"/machines":                "http://rack.example",
		"machines":                 "http://rack.example",
		"?next=1":                  "http://rack.example",
		"":                         "http://rack.example",
		"/%09/evil.example":        "http://rack.example",
		"http:machines":            "http://rack.example",
		"/\t/evil.example/x":       "http://evil.example",
		"\x00 //Evil.Example:81/x": "http://evil.example",
		"/\\evil.example":          "http://evil.example",
		"\\/evil.example":          "http://evil.example",
		"http:\\\\evil.example":    "http://evil.example",
		"http://u:p@evil.example/": "http://evil.example",
		"https://rack.example/":    "https://(another origin)",
		"javascript:alert(1)":      "javascript://(another origin)",
	} {
		if got := browserOrigin(ref); got != want {
			t.Errorf("browserOrigin(%q) = %q, want %q", ref, got, want)
		}
	}
}

// Any query reads as a valid machine query, and the URL it builds reads
// back as the same query.
func FuzzMachineQuery(f *testing.F) {
	f.Add("state=ready&tag=a&q=x&sort=cpu&dir=desc&page=2")
	f.Add("page=-1&sort=%00&state=%3Cx%3E")
	f.Add("q=%E2%82%AC&owner=a+b")
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q := readMachineQuery(v)
		if !slices.Contains(sortKeys, q.Sort) || q.Page < 1 || (q.State != "" && !store.State(q.State).Valid()) {
			t.Fatalf("read %q as %+v", raw, q)
		}
		u, err := url.Parse(q.URL())
		if err != nil || u.Path != "/machines" {
			t.Fatalf("URL %q: %v", q.URL(), err)
		}
		back := readMachineQuery(u.Query())
		if back != q {
			t.Fatalf("%+v -> %q -> %+v", q, q.URL(), back)
		}
	})
}

// A stream that starts from a page's mark gets what was published between
// the page's render and its connection, then the rest; one whose mark is
// older than the kept messages is told it is stale.
func TestHubResume(t *testing.T) {
	h := NewHub(4)
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	h.Event(store.Event{Seq: 1, Machine: "m-1"}) // nobody watches: not kept
	c0, stale := h.subscribe(0, true)
	if !stale {
		t.Error("a mark from before an unkept message is not stale")
	}
	h.unsubscribe(c0)
	mark := h.Mark()
	h.Event(store.Event{Seq: 2, Machine: "m-1"}) // after the render, before the stream
	c, stale := h.subscribe(mark, true)
	if stale {
		t.Fatal("a fresh mark is stale")
	}
	h.Event(store.Event{Seq: 3, Machine: "m-1"})
	for _, want := range []string{`"seq":2`, `"seq":3`} {
		select {
		case msg := <-c.ch:
			if !strings.Contains(string(msg.msg), want) || !strings.HasPrefix(string(msg.msg), "id: ") || msg.machine != "m-1" {
				t.Errorf("got %q about %q, want the event %s with its id, about m-1", msg.msg, msg.machine, want)
			}
		default:
			t.Fatalf("the stream lacks the event %s", want)
		}
	}
	h.unsubscribe(c)
	if c, stale := h.subscribe(mark+2, true); stale {
		t.Error("a mark with nothing published since is stale")
	} else {
		h.unsubscribe(c)
	}
	// Nothing kept for a page rendered long ago with nobody connected:
	// its stream is stale.
	now = now.Add(2 * markFor)
	h.Event(store.Event{Seq: 4, Machine: "m-1"})
	if c, stale := h.subscribe(mark+2, true); !stale {
		t.Error("a stream resuming past an unkept message is not stale")
	} else {
		h.unsubscribe(c)
	}
	// A mark older than the backlog.
	mark = h.Mark()
	for i := range backlogSize + 1 {
		h.Event(store.Event{Seq: uint64(10 + i), Machine: "m-1"})
	}
	if _, stale := h.subscribe(mark, true); !stale {
		t.Error("a mark older than the kept messages is not stale")
	}
	if _, stale := h.subscribe(0, false); stale {
		t.Error("a stream without a mark is stale")
	}
}

func TestHubClose(t *testing.T) {
	h := NewHub(4)
	before, _ := h.subscribe(0, false)
	h.Close()
	after, _ := h.subscribe(0, false)
	for name, c := range map[string]*client{"open before": before, "opened after": after} {
		select {
		case <-c.gone:
		default:
			t.Errorf("the stream %s Close is not ended", name)
		}
	}
	h.Event(store.Event{Machine: "m-1"}) // nobody left: no panic, no block
	if h.Clients() != 0 {
		t.Errorf("clients %d after Close", h.Clients())
	}
}

// The text colours of the stylesheet against the backgrounds they are
// shown on keep WCAG AA's contrast for normal text (4.5:1).
func TestContrast(t *testing.T) {
	css, err := staticFS.ReadFile("static/app.css")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`--([a-z-]+):\s*(#[0-9a-f]{6})`).FindAllStringSubmatch(string(css), -1) {
		vars[m[1]] = m[2]
	}
	color := func(s string) string {
		if v, ok := vars[strings.TrimPrefix(s, "--")]; ok {
			return v
		}
		return s
	}
	pairs := []struct{ fg, bg string }{
		{"--fg", "--bg"}, {"--fg", "--card"}, {"--muted", "--card"}, {"--muted", "--bg"}, {"--accent", "--card"},
		{"--accent-fg", "--accent"}, {"--danger", "--card"}, {"--ok", "--card"}, {"--warn", "--card"},
		{"--danger", "#fde8e8"}, {"--ok", "#e6f4ea"}, {"#ffffff", "#14213d"}, {"#ffffff", "#2d4a7c"},
		{"--accent-fg", "--danger"}, {"--fg", "#eef1f5"}, {"--accent", "#f3f6fa"}, {"--muted", "#f3f6fa"},
	}
	// The formula itself: black on white is 21:1, #777 on white just
	// under 4.5:1.
	if r := contrast("#000000", "#ffffff"); math.Abs(r-21) > 0.01 {
		t.Fatalf("contrast(black, white) = %.2f", r)
	}
	if r := contrast("#777777", "#ffffff"); r >= 4.5 || r < 4.4 {
		t.Fatalf("contrast(#777, white) = %.2f", r)
	}
	for _, p := range pairs {
		fg, bg := color(p.fg), color(p.bg)
		if !strings.HasPrefix(fg, "#") || !strings.HasPrefix(bg, "#") {
			t.Fatalf("%s on %s: no such colour in app.css", p.fg, p.bg)
		}
		if r := contrast(fg, bg); r < 4.5 {
			t.Errorf("%s (%s) on %s (%s): contrast %.2f, want at least 4.5", p.fg, fg, p.bg, bg, r)
		}
	}
}

// contrast is the WCAG 2 contrast ratio of two #rrggbb colours.
func contrast(a, b string) float64 {
	lum := func(hex string) float64 {
		var rgb [3]float64
		for i := range rgb {
			v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
			c := float64(v) / 255
			if c <= 0.03928 {
				c /= 12.92
			} else {
				c = math.Pow((c+0.055)/1.055, 2.4)
			}
			rgb[i] = c
		}
		return 0.2126*rgb[0] + 0.7152*rgb[1] + 0.0722*rgb[2]
	}
	la, lb := lum(a), lum(b)
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

// fakeData counts what the pages read.
type fakeData struct {
	machines  []store.Machine
	lists     int
	viewed    []int // machines per MachineViews call
	singleGet int
}

func (f *fakeData) Machines(store.Filter) ([]store.Machine, error) {
	f.lists++
	return append([]store.Machine(nil), f.machines...), nil
}
func (f *fakeData) Machine(id string) (store.Machine, error) {
	f.singleGet++
	return f.machines[0], nil
}
func (f *fakeData) MachineViews(ms []store.Machine, _ store.Actor) []api.Machine {
	f.viewed = append(f.viewed, len(ms))
	out := make([]api.Machine, len(ms))
	for i, m := range ms {
		out[i] = api.Machine{ID: m.ID, Hostname: m.Hostname, State: string(m.State)}
	}
	return out
}
func (f *fakeData) CountByState() (map[store.State]int, error) {
	return map[store.State]int{store.StateReady: len(f.machines)}, nil
}
func (f *fakeData) RecentEvents(int) ([]store.Event, error)              { return nil, nil }
func (f *fakeData) PowerHistory(string, int) ([]api.PowerRequest, error) { return nil, nil }
func (f *fakeData) PowerHealth() (queue.Health, error)                   { return queue.Health{}, nil }

// The machine list reads the rack once and builds the API's (costly) view
// of one page's machines only, whatever the rack's size: the page stays
// cheaper than GET /api/v1/machines.
func TestMachineListReadsOnePage(t *testing.T) {
	f := &fakeData{}
	for i := range 1000 {
		f.machines = append(f.machines, store.Machine{ID: fmt.Sprintf("m-%04d", i), Hostname: fmt.Sprintf("n%04d", i), State: store.StateReady})
	}
	u, err := New(Options{Name: "t", Data: f,
		API: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "{}", http.StatusNotFound) }),
		Authenticate: func(tok string) (store.Actor, bool, error) {
			return store.Actor{Name: "admin", Admin: true}, tok == "good", nil
		},
		Hold: func(ctx context.Context, _ store.Actor) (context.Context, context.CancelFunc) {
			return context.WithCancel(ctx)
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := u.sessions.open("good", time.Now().Add(time.Hour), time.Now())
	for _, path := range []string{"/machines", "/machines?page=7&sort=cpu", "/machines?q=n09"} {
		f.lists, f.viewed = 0, nil
		req := httptest.NewRequest("GET", path, nil)
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: s.id})
		rec := httptest.NewRecorder()
		u.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		total := 0
		for _, n := range f.viewed {
			total += n
		}
		if f.lists != 1 || len(f.viewed) != 1 || total > PageSize {
			t.Errorf("%s: %d list reads, views of %v machines; want 1 read and one page (<= %d)", path, f.lists, f.viewed, PageSize)
		}
	}
}

// A form's body, whatever it holds, is read without a panic, under its
// cap, and only when its first field is the anti-forgery value: then the
// values are what the standard parsers read from it.
func FuzzReadForm(f *testing.F) {
	const want = "tok123"
	const boundary = "b0undary"
	mp := func(fields ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(fields); i += 2 {
			fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q\r\n\r\n%s\r\n", boundary, fields[i], fields[i+1])
		}
		return b.String() + "--" + boundary + "--\r\n"
	}
	for _, seed := range []struct {
		multipart, header bool
		body              string
	}{
		{false, false, "csrf=tok123&action=deploy&reason=x"},
		{false, false, "action=deploy&csrf=tok123"},
		{false, false, "csrf=tok12&x=1"},
		{false, false, "csrf=tok%31%323&a=%zz"},
		{false, true, "a=1&b=2"},
		{true, false, mp("csrf", want, "action", "deploy")},
		{true, false, mp("action", "deploy", "csrf", want)},
		{true, true, mp("a", "1")},
		{true, false, "--b0undary\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\ntok123\r\n--b0undary\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\n\r\ndata\r\n--b0undary--\r\n"},
	} {
		f.Add(seed.multipart, seed.header, seed.body)
	}
	u := &UI{bodies: reqbody.NewGate(0, 0)}
	f.Fuzz(func(t *testing.T, multipart, header bool, body string) {
		const limit = 4096
		r := httptest.NewRequest(http.MethodPost, "/x?q=1", strings.NewReader(body))
		r.ContentLength = -1 // read as a chunked body: to the cap
		ct := "application/x-www-form-urlencoded"
		if multipart {
			ct = "multipart/form-data; boundary=" + boundary
		}
		r.Header.Set("Content-Type", ct)
		if header {
			r.Header.Set("X-CSRF-Token", want)
		}
		files, err := u.readForm(httptest.NewRecorder(), r, limit, want)
		if len(body) > limit && err == nil {
			t.Fatalf("a %d-byte body was accepted under a %d cap", len(body), limit)
		}
		if err != nil {
			return
		}
		if r.FormValue("q") != "1" {
			t.Errorf("the query is lost: %v", r.Form)
		}
		if !header {
			if got := r.PostForm["csrf"]; len(got) == 0 || got[0] != want {
				t.Fatalf("accepted with csrf %q", got)
			}
		}
		if !multipart {
			vs, perr := url.ParseQuery(body)
			if perr != nil {
				t.Fatalf("accepted %q, which url.ParseQuery refuses: %v", body, perr)
			}
			for k, v := range vs {
				if !slices.Equal(r.PostForm[k], v) {
					t.Fatalf("field %q: %q, url.ParseQuery reads %q", k, r.PostForm[k], v)
				}
			}
			if !header && !strings.HasPrefix(body, "csrf=") {
				t.Fatalf("accepted %q: its first field is not csrf", body)
			}
		}
		n := 0
		for _, d := range files {
			n += len(d)
		}
		for _, vs := range r.PostForm {
			for _, v := range vs {
				n += len(v)
			}
		}
		if n > len(body) {
			t.Fatalf("%d bytes of values and files from a %d-byte body", n, len(body))
		}
	})
}
