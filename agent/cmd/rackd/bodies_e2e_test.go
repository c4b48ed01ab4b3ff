package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"rackd/api"
)

// bigBody is the size of each oversized body sent, and attackers the number
// sent at once to one route.
const (
	bigBody   = 10 << 20
	attackers = 16
	// maxRise bounds how much the peak RSS of rackd may grow while it
	// refuses every one of them, all routes together.
	maxRise = 32 << 20
)

// bodyTarget is one route that reads a body, and the body: prefix, then
// n bytes of fill, then suffix.
type bodyTarget struct {
	name         string
	method, path string
	header       http.Header
	prefix       string
	fill         byte
	suffix       string
}

// send writes the request on a connection of its own and reads the answer
// while it writes (rackd may answer before it has read the body, and then
// closes the connection: the write fails, the answer counts). With chunked
// the body has no declared length, as a client streaming it would send it.
func (tg bodyTarget) send(host string, n int, chunked bool) (int, error) {
	conn, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Minute))
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "%s %s HTTP/1.1\r\nHost: %s\r\n", tg.method, tg.path, host)
	for k, vs := range tg.header {
		for _, v := range vs {
			fmt.Fprintf(&hdr, "%s: %s\r\n", k, v)
		}
	}
	if chunked {
		hdr.WriteString("Transfer-Encoding: chunked\r\n")
	} else {
		fmt.Fprintf(&hdr, "Content-Length: %d\r\n", len(tg.prefix)+n+len(tg.suffix))
	}
	hdr.WriteString("Connection: close\r\n\r\n")
	written := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(conn, 64<<10)
		part := func(b []byte) {
			if chunked && len(b) > 0 {
				fmt.Fprintf(w, "%x\r\n", len(b))
			}
			w.Write(b)
			if chunked && len(b) > 0 {
				w.WriteString("\r\n")
			}
		}
		w.Write(hdr.Bytes())
		part([]byte(tg.prefix))
		fill := bytes.Repeat([]byte{tg.fill}, 32<<10)
		for left := n; left > 0; left -= len(fill) {
			part(fill[:min(left, len(fill))])
		}
		part([]byte(tg.suffix))
		if chunked {
			w.WriteString("0\r\n\r\n")
		}
		written <- w.Flush()
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		return 0, fmt.Errorf("no answer: %w (writing: %v)", err, <-written)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	conn.Close()
	<-written
	return resp.StatusCode, nil
}

// vmHWM is the peak resident set of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmHWM in /proc/%d/status", pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// uiSession logs in to the web UI with token and returns the session's
// cookie and CSRF token, and a login form's cookie and CSRF token (double
// submit: the same value).
func uiSession(t *testing.T, base, token string) (session, csrf, login string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	field := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	get := func(path string) string {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	m := field.FindStringSubmatch(get("/login"))
	if m == nil {
		t.Fatal("no CSRF field on the login page")
	}
	resp, err := c.PostForm(base+"/login", url.Values{"csrf": {m[1]}, "next": {"/"}, "token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	dm := regexp.MustCompile(`data-csrf="([^"]+)"`).FindSubmatch(body)
	if resp.StatusCode != http.StatusOK || dm == nil {
		t.Fatalf("login: %d, no session CSRF token in %.300s", resp.StatusCode, body)
	}
	u, _ := url.Parse(base)
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "rackd_session" {
			session = ck.Value
		}
	}
	if session == "" {
		t.Fatal("no session cookie after the login")
	}
	// A login form of its own (a client without the session): its cookie
	// and its field carry the same value.
	resp, err = http.Get(base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lm := field.FindStringSubmatch(string(b))
	if lm == nil {
		t.Fatal("no CSRF field on a fresh login page")
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "rackd_login" && ck.Value != lm[1] {
			t.Fatalf("the login cookie %q is not the form's token %q", ck.Value, lm[1])
		}
	}
	return session, string(dm[1]), lm[1]
}

// TestOversizedBodiesBoundMemory sends, to every kind of route that reads a
// body (web UI forms, multipart and urlencoded; the login; the API's JSON;
// MAAS's API, its forms and a file upload; the public metadata), 16 bodies of 10 MB at once, half with a declared
// length and half chunked, and checks that the real binary refuses each
// (413, or 400 for a form it cannot read) while its peak RSS grows by less
// than 32 MiB over all of them.
func TestOversizedBodiesBoundMemory(t *testing.T) {
	state := t.TempDir()
	conf := filepath.Join(t.TempDir(), "rackd.toml")
	// The metadata's per-address rate limit would answer 429 before the
	// body is read: off, so that the bodies reach the reading.
	if err := os.WriteFile(conf, []byte("[enlist]\nrate_limit = 0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, "--config", conf)
	token := adminToken(t, state)
	client := &http.Client{Timeout: 30 * time.Second}
	var m api.Machine
	if st, raw, err := d.api(client, token, "POST", "/api/v1/machines",
		api.CreateMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, State: "READY"}, &m); err != nil || st != http.StatusCreated {
		t.Fatalf("create: %d %s %v", st, raw, err)
	}
	session, csrf, login := uiSession(t, d.url, token)
	// MAAS's API signs with the key of a rackd token (OAuth PLAINTEXT).
	var tk api.Token
	if st, raw, err := d.api(client, token, "POST", "/api/v1/tokens", api.CreateToken{Name: "maas"}, &tk); err != nil || st != http.StatusCreated {
		t.Fatalf("token: %d %s %v", st, raw, err)
	}
	maas := func(ct string) http.Header {
		return http.Header{"Content-Type": {ct}, "Authorization": {fmt.Sprintf(`OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT", `+
			`oauth_consumer_key="%s", oauth_token="%s", oauth_signature="&%s", oauth_nonce="n", oauth_timestamp="1"`, tk.User, tk.ID, tk.Token)}}
	}
	u, _ := url.Parse(d.url)

	ui := func(ct string) http.Header {
		return http.Header{"Cookie": {"rackd_session=" + session}, "Content-Type": {ct}}
	}
	bearer := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
	const boundary = "rackdtestboundary"
	mpField := func(name, value string) string {
		return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + value + "\r\n"
	}
	mp := "multipart/form-data; boundary=" + boundary
	targets := []bodyTarget{
		{name: "ui action multipart file", method: "POST", path: "/machines/" + m.ID + "/action", header: ui(mp),
			prefix: mpField("csrf", csrf) + mpField("action", "deploy") + "--" + boundary +
				"\r\nContent-Disposition: form-data; name=\"user_data\"; filename=\"u.yaml\"\r\nContent-Type: application/octet-stream\r\n\r\n",
			fill: 'a', suffix: "\r\n--" + boundary + "--\r\n"},
		{name: "ui action multipart field", method: "POST", path: "/machines/" + m.ID + "/action", header: ui(mp),
			prefix: mpField("csrf", csrf) + mpField("action", "mark-broken") + "--" + boundary +
				"\r\nContent-Disposition: form-data; name=\"reason\"\r\n\r\n",
			fill: 'a', suffix: "\r\n--" + boundary + "--\r\n"},
		{name: "ui action urlencoded", method: "POST", path: "/machines/" + m.ID + "/action",
			header: ui("application/x-www-form-urlencoded"), prefix: "csrf=" + csrf + "&action=mark-broken&reason=", fill: 'a'},
		{name: "ui subnets urlencoded", method: "POST", path: "/subnets",
			header: ui("application/x-www-form-urlencoded"), prefix: "csrf=" + csrf + "&cidr=", fill: 'a'},
		{name: "ui login", method: "POST", path: "/login",
			header: http.Header{"Cookie": {"rackd_login=" + login}, "Content-Type": {"application/x-www-form-urlencoded"}},
			prefix: "csrf=" + login + "&next=%2F&token=", fill: 'a'},
		{name: "api deploy", method: "POST", path: "/api/v1/machines/" + m.ID + "/deploy", header: bearer,
			prefix: `{"image":"debian","user_data":"`, fill: 'A', suffix: `"}`},
		{name: "api create machine", method: "POST", path: "/api/v1/machines", header: bearer,
			prefix: `{"hostname":"`, fill: 'a', suffix: `"}`},
		{name: "api patch machine", method: "PATCH", path: "/api/v1/machines/" + m.ID, header: bearer,
			prefix: `{"zone":"`, fill: 'a', suffix: `"}`},
		{name: "api create token", method: "POST", path: "/api/v1/tokens", header: bearer,
			prefix: `{"name":"`, fill: 'a', suffix: `"}`},
		{name: "api ssh key", method: "POST", path: "/api/v1/users/admin/ssh-keys", header: bearer,
			prefix: `{"key":"ssh-ed25519 `, fill: 'A', suffix: `"}`},
		{name: "maas allocate urlencoded", method: "POST", path: "/MAAS/api/2.0/machines/?op=allocate",
			header: maas("application/x-www-form-urlencoded"), prefix: "name=", fill: 'a'},
		{name: "maas allocate multipart", method: "POST", path: "/MAAS/api/2.0/machines/?op=allocate", header: maas(mp),
			prefix: "--" + boundary + "\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\n", fill: 'a', suffix: "\r\n--" + boundary + "--\r\n"},
		{name: "maas file upload", method: "POST", path: "/MAAS/api/2.0/files/?op=add", header: maas(mp),
			prefix: mpField("filename", "big") + "--" + boundary +
				"\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\nContent-Type: application/octet-stream\r\n\r\n",
			fill: 'a', suffix: "\r\n--" + boundary + "--\r\n"},
		{name: "metadata enlist", method: "POST", path: "/metadata/v1/enlist",
			header: http.Header{"Content-Type": {"application/json"}}, prefix: `{"arch":"`, fill: 'a', suffix: `"}`},
	}

	burst := func(tg bodyTarget, n int) (statuses []int, errs []error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := range attackers {
			wg.Go(func() {
				st, err := tg.send(u.Host, n, i%2 == 1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				statuses = append(statuses, st)
			})
		}
		wg.Wait()
		return statuses, errs
	}
	// Warm up: every route answers small bodies once (16 at a time), so
	// that what follows measures the big bodies, not the first use of a
	// route.
	for _, tg := range targets {
		if _, errs := burst(tg, 1000); len(errs) > 0 {
			t.Fatalf("%s, small bodies: %v", tg.name, errors.Join(errs...))
		}
	}
	// The warm-up's small forms may have changed the machine (marked it
	// broken); the big bodies must change nothing.
	var warm api.Machine
	if st, raw, err := d.api(client, token, "GET", "/api/v1/machines/"+m.ID, nil, &warm); err != nil || st != http.StatusOK {
		t.Fatalf("after the warm-up: %d %s %v", st, raw, err)
	}
	pid := d.cmd.Process.Pid
	before := vmHWM(t, pid)
	last := before
	for _, tg := range targets {
		statuses, errs := burst(tg, bigBody)
		for _, err := range errs {
			t.Errorf("%s: %v", tg.name, err)
		}
		counts := map[int]int{}
		for _, st := range statuses {
			counts[st]++
			if st != http.StatusRequestEntityTooLarge && st != http.StatusBadRequest {
				t.Errorf("%s: a 10 MB body answered %d, want 413 (or 400)", tg.name, st)
			}
		}
		now := vmHWM(t, pid)
		t.Logf("%-28s peak RSS %6.1f MiB (+%.1f), answers %v", tg.name, float64(now)/(1<<20), float64(now-last)/(1<<20), counts)
		last = now
	}
	rise := last - before
	t.Logf("peak RSS before %.1f MiB, after %.1f MiB: +%.1f MiB for %d routes x %d bodies of %d MB",
		float64(before)/(1<<20), float64(last)/(1<<20), float64(rise)/(1<<20), len(targets), attackers, bigBody>>20)
	if rise >= maxRise {
		t.Errorf("peak RSS rose by %.1f MiB, want < %d MiB", float64(rise)/(1<<20), maxRise>>20)
	}
	// Nothing was changed, and rackd still serves.
	var got api.Machine
	if st, raw, err := d.api(client, token, "GET", "/api/v1/machines/"+m.ID, nil, &got); err != nil || st != http.StatusOK {
		t.Fatalf("after the bodies: %d %s %v", st, raw, err)
	}
	if got.State != warm.State || got.Zone != warm.Zone {
		t.Errorf("a refused body changed the machine: %+v", got)
	}
}
