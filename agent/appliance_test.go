package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/appliance"
	"rackd/power/powertest"
	"rackd/store"
)

// applianceRig is what the appliance's init leaves for rackd: a descriptor
// naming two slot files (booted from a, build 100), a grubenv, the public
// key, a status file.
type applianceRig struct {
	descPath string
	desc     appliance.Descriptor
	priv     ed25519.PrivateKey
	slotB    []byte
}

const rigSlot = 2 << 20

func newApplianceRig(t *testing.T) *applianceRig {
	t.Helper()
	dir := t.TempDir()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, _ := appliance.MarshalPublicKey(pub)
	os.WriteFile(filepath.Join(dir, "bundle.pub"), pubPEM, 0o644)
	r := &applianceRig{priv: priv, slotB: bytes.Repeat([]byte{0x5a}, rigSlot), descPath: filepath.Join(dir, "appliance.json")}
	os.WriteFile(filepath.Join(dir, "slot-a"), bytes.Repeat([]byte{0x11}, rigSlot), 0o644)
	os.WriteFile(filepath.Join(dir, "slot-b"), r.slotB, 0o644)
	if err := appliance.CreateEnvFile(filepath.Join(dir, "grubenv"), appliance.EnvOf(map[string]string{
		appliance.EnvGood: "a", appliance.EnvTry: "", appliance.EnvTries: "0", appliance.EnvReset: ""})); err != nil {
		t.Fatal(err)
	}
	r.desc = appliance.Descriptor{Booted: appliance.SlotA, Version: "v1.0", Build: 100, Arch: "amd64",
		Slots:   map[appliance.Slot]string{appliance.SlotA: filepath.Join(dir, "slot-a"), appliance.SlotB: filepath.Join(dir, "slot-b")},
		GrubEnv: filepath.Join(dir, "grubenv"), PublicKey: filepath.Join(dir, "bundle.pub"), StatusFile: filepath.Join(dir, "status.json")}
	if err := appliance.SaveDescriptor(r.descPath, r.desc); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *applianceRig) config(c *Config) { c.Appliance.Descriptor = r.descPath }

func (r *applianceRig) bundle(t *testing.T, key ed25519.PrivateKey, version string, build int64, payload []byte) []byte {
	t.Helper()
	n, sum, _ := appliance.DigestPayload(bytes.NewReader(payload))
	var b bytes.Buffer
	if err := appliance.WriteBundle(&b, key, appliance.Manifest{Version: version, Build: build, Arch: "amd64", PayloadSize: n, PayloadSHA256: sum}, bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func (r *applianceRig) slot(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(r.desc.Slots[appliance.SlotB])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (r *applianceRig) env(t *testing.T) *appliance.Env {
	t.Helper()
	e, err := appliance.ReadEnvFile(r.desc.GrubEnv)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// post sends a raw body with a content type.
func post(t *testing.T, url, token, ctype string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func testPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + i>>9)
	}
	return b
}

func TestApplianceNotConfigured(t *testing.T) {
	ta := startAgent(t)
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/appliance/status"}, {"POST", "/api/v1/appliance/update"}, {"POST", "/api/v1/appliance/reset"},
	} {
		status, raw := ta.call(t, ta.admin, c.method, c.path, nil, nil)
		e := wantError(t, status, raw, http.StatusNotFound, api.CodeNotAnAppliance)
		if !strings.Contains(e.Error, "descriptor") {
			t.Errorf("%s %s: %q does not say what is missing", c.method, c.path, e.Error)
		}
	}
}

func TestApplianceAdminOnly(t *testing.T) {
	r := newApplianceRig(t)
	ta := startAgent(t, r.config)
	bob := ta.addUser(t, "bob", false)
	good := r.bundle(t, r.priv, "v2", 200, testPayload(1000))
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/appliance/status"}, {"POST", "/api/v1/appliance/update?reboot=0"}, {"POST", "/api/v1/appliance/reset?reboot=0"},
	} {
		var body []byte
		ctype := ""
		if c.method == "POST" {
			body, ctype = good, "application/octet-stream"
			if strings.Contains(c.path, "reset") {
				body, ctype = []byte(`{"confirm":true}`), "application/json"
			}
		}
		status, raw := post(t, ta.url+c.path, bob, ctype, body)
		if c.method == "GET" {
			status, raw = ta.call(t, bob, "GET", c.path, nil, nil)
		}
		wantError(t, status, raw, http.StatusForbidden, api.CodeForbidden)
		status, raw = ta.call(t, "", c.method, c.path, nil, nil)
		wantError(t, status, raw, http.StatusUnauthorized, api.CodeUnauthorized)
	}
	if !bytes.Equal(r.slot(t), r.slotB) || r.env(t).Get(appliance.EnvTry) != "" || appliance.ResetRequested(r.env(t)) {
		t.Fatal("a non-admin changed the appliance")
	}
}

func TestApplianceUpdateRefused(t *testing.T) {
	r := newApplianceRig(t)
	ta := startAgent(t, r.config)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	payload := testPayload(1 << 20)
	good := r.bundle(t, r.priv, "v2", 200, payload)
	unsigned := append([]byte(nil), good...)
	copy(unsigned[len(unsigned)-len(payload)-64:], make([]byte, 64))
	envBefore, _ := os.ReadFile(r.desc.GrubEnv)
	cases := []struct {
		name   string
		ctype  string
		body   []byte
		query  string
		status int
		code   string
		says   string
	}{
		{"unsigned", "application/octet-stream", unsigned, "", http.StatusForbidden, api.CodeBundleSignature, "signature"},
		{"other key", "application/octet-stream", r.bundle(t, other, "v2", 200, payload), "", http.StatusForbidden, api.CodeBundleSignature, "another key"},
		{"truncated header", "application/octet-stream", good[:40], "", http.StatusBadRequest, api.CodeBundleInvalid, "truncated"},
		// The upload's Content-Length tells a cut payload before a byte is written.
		{"truncated payload", "application/octet-stream", good[:len(good)-1000], "", http.StatusBadRequest, api.CodeBundleInvalid, "truncated"},
		{"trailing bytes", "application/octet-stream", append(append([]byte(nil), good...), "junk"...), "", http.StatusBadRequest, api.CodeBundleInvalid, "after its payload"},
		{"downgrade", "application/octet-stream", r.bundle(t, r.priv, "v0.9", 99, payload), "", http.StatusConflict, api.CodeDowngrade, "allow-downgrade"},
		{"not a bundle", "application/octet-stream", payload, "", http.StatusBadRequest, api.CodeBundleInvalid, "not a rackd bundle"},
		{"too large for the slot", "application/octet-stream", r.bundle(t, r.priv, "v2", 200, testPayload(rigSlot+1)), "", http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, "slot"},
		{"wrong content type", "text/plain", good, "", http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia, "octet-stream"},
		{"bad query", "application/octet-stream", good, "?allow_downgrade=maybe", http.StatusBadRequest, api.CodeBadRequest, "allow_downgrade"},
		{"url not http", "application/json", []byte(`{"url":"file:///etc/passwd"}`), "", http.StatusBadRequest, api.CodeBadRequest, "http"},
		{"json unknown field", "application/json", []byte(`{"uri":"http://x/"}`), "", http.StatusBadRequest, api.CodeBadRequest, "uri"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, raw := post(t, ta.url+"/api/v1/appliance/update?reboot=0"+strings.Replace(c.query, "?", "&", 1), ta.admin, c.ctype, c.body)
			e := wantError(t, status, raw, c.status, c.code)
			if !strings.Contains(e.Error, c.says) {
				t.Errorf("message %q does not say %q", e.Error, c.says)
			}
			if !bytes.Equal(r.slot(t), r.slotB) {
				t.Fatal("the inactive slot was written")
			}
			if envAfter, _ := os.ReadFile(r.desc.GrubEnv); !bytes.Equal(envBefore, envAfter) {
				t.Fatal("grubenv changed")
			}
		})
	}
	// The refusal is the last update in the status.
	var st api.ApplianceStatus
	if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/appliance/status", nil, &st); status != 200 {
		t.Fatalf("status: %d %s", status, raw)
	}
	if st.LastUpdate == nil || st.LastUpdate.Result != appliance.ResultRefused || st.Slots["b"].State != "unknown" || st.Slots["a"].Version != "v1.0" {
		t.Fatalf("status after refusals: %+v %+v", st, st.LastUpdate)
	}
	if ta.exitReq.Load() != nil {
		t.Fatal("a refused update asked for a reboot")
	}
}

// A payload that turns out wrong: answered 400, the slot's first MiB zeroed
// (not the old content: it has been overwritten), nothing armed.
func TestApplianceUpdateBadPayload(t *testing.T) {
	r := newApplianceRig(t)
	ta := startAgent(t, r.config)
	payload := testPayload(1<<20 + 100)
	bad := r.bundle(t, r.priv, "v2", 200, payload)
	bad[len(bad)-1] ^= 1
	status, raw := post(t, ta.url+"/api/v1/appliance/update?reboot=0", ta.admin, "application/octet-stream", bad)
	wantError(t, status, raw, http.StatusBadRequest, api.CodeBundleInvalid)
	if got := r.slot(t); !bytes.Equal(got[:appliance.WipeSize], make([]byte, appliance.WipeSize)) {
		t.Fatal("slot not wiped")
	}
	if r.env(t).Get(appliance.EnvTry) != "" {
		t.Fatal("armed")
	}
}

func TestApplianceUpdateArms(t *testing.T) {
	r := newApplianceRig(t)
	ta := startAgent(t, r.config)
	payload := testPayload(1<<20 + 333)
	status, raw := post(t, ta.url+"/api/v1/appliance/update?reboot=0", ta.admin, "application/octet-stream", r.bundle(t, r.priv, "v2.0", 200, payload))
	if status != 200 {
		t.Fatalf("update: %d %s", status, raw)
	}
	var st api.ApplianceStatus
	json.Unmarshal(raw, &st)
	if st.Rebooting || st.NextBoot != "b" || !st.NextBootTrial || st.GoodSlot != "a" || st.Slots["b"].State != "trying" || st.Slots["b"].Version != "v2.0" ||
		st.LastUpdate == nil || st.LastUpdate.Result != "armed" || st.Version != "v1.0" || st.Booted != "a" {
		t.Fatalf("answer %s", raw)
	}
	env := r.env(t)
	if env.Get(appliance.EnvTry) != "b" || env.Get(appliance.EnvTries) != "1" {
		t.Fatalf("grubenv %v", env.Map())
	}
	if got := r.slot(t); !bytes.Equal(got[:len(payload)], payload) {
		t.Fatal("slot b does not hold the payload")
	}
	if ta.exitReq.Load() != nil {
		t.Fatal("reboot=0 asked for a reboot")
	}
	// A downgrade, allowed.
	status, raw = post(t, ta.url+"/api/v1/appliance/update?reboot=0&allow_downgrade=1", ta.admin, "application/octet-stream", r.bundle(t, r.priv, "v0.9", 99, payload))
	if status != 200 {
		t.Fatalf("allowed downgrade: %d %s", status, raw)
	}
}

// {"url": ...}: rackd fetches the bundle itself.
func TestApplianceUpdateFromURL(t *testing.T) {
	r := newApplianceRig(t)
	ta := startAgent(t, r.config)
	payload := testPayload(300000)
	bundle := r.bundle(t, r.priv, "v2", 200, payload)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/good.bundle" {
			http.NotFound(w, req)
			return
		}
		w.Write(bundle)
	}))
	defer srv.Close()
	status, raw := post(t, ta.url+"/api/v1/appliance/update?reboot=0", ta.admin, "application/json", []byte(`{"url":"`+srv.URL+`/missing"}`))
	e := wantError(t, status, raw, http.StatusBadGateway, api.CodeFetchFailed)
	if !strings.Contains(e.Error, "404") {
		t.Fatalf("message %q", e.Error)
	}
	status, raw = post(t, ta.url+"/api/v1/appliance/update?reboot=0", ta.admin, "application/json", []byte(`{"url":"`+srv.URL+`/good.bundle"}`))
	if status != 200 {
		t.Fatalf("update from url: %d %s", status, raw)
	}
	if r.env(t).Get(appliance.EnvTry) != "b" || !bytes.Equal(r.slot(t)[:len(payload)], payload) {
		t.Fatal("not written and armed")
	}
}

func TestApplianceReset(t *testing.T) {
	r := newApplianceRig(t)
	ta := startAgent(t, r.config)
	for _, body := range []string{``, `{}`, `{"confirm":false}`} {
		status, raw := post(t, ta.url+"/api/v1/appliance/reset?reboot=0", ta.admin, "application/json", []byte(body))
		e := wantError(t, status, raw, http.StatusBadRequest, api.CodeBadRequest)
		if !strings.Contains(e.Error, "confirm") {
			t.Fatalf("message %q", e.Error)
		}
	}
	if appliance.ResetRequested(r.env(t)) {
		t.Fatal("reset requested without confirm")
	}
	status, raw := post(t, ta.url+"/api/v1/appliance/reset?reboot=0", ta.admin, "application/json", []byte(`{"confirm":true}`))
	if status != 200 {
		t.Fatalf("reset: %d %s", status, raw)
	}
	var st api.ApplianceStatus
	json.Unmarshal(raw, &st)
	if !st.ResetRequested || !appliance.ResetRequested(r.env(t)) {
		t.Fatalf("reset not requested: %s", raw)
	}
}

// After arming, rackd answers, shuts down cleanly (the store closed) and
// Serve returns an error whose ExitCode is appliance.ExitReboot.
func TestApplianceUpdateRebootExit(t *testing.T) {
	r := newApplianceRig(t)
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	r.config(&cfg)
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(context.Background(), ln) }()
	token, _ := os.ReadFile(filepath.Join(cfg.StateDir, AdminTokenFile))
	status, raw := post(t, "http://"+ln.Addr().String()+"/api/v1/appliance/update", strings.TrimSpace(string(token)),
		"application/octet-stream", r.bundle(t, r.priv, "v2", 200, testPayload(5000)))
	if status != 200 {
		t.Fatalf("update: %d %s", status, raw)
	}
	var st api.ApplianceStatus
	json.Unmarshal(raw, &st)
	if !st.Rebooting {
		t.Fatalf("answer does not say it reboots: %s", raw)
	}
	var serveErr error
	select {
	case serveErr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("rackd did not stop after the update was armed")
	}
	var ec interface{ ExitCode() int }
	if !errors.As(serveErr, &ec) || ec.ExitCode() != appliance.ExitReboot {
		t.Fatalf("Serve returned %v, want exit code %d", serveErr, appliance.ExitReboot)
	}
	// The store is closed: another process could open it now.
	s, err := store.Open(filepath.Join(cfg.StateDir, store.FileName), store.Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("store not closed: %v", err)
	}
	s.Close()
	if r.env(t).Get(appliance.EnvTries) != "1" {
		t.Fatal("not armed")
	}
}

// /healthz is 503 until every configured DHCP interface is served, and
// says which is not.
func TestHealthzNamesUnboundDHCP(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.DHCP.Interfaces = []string{"rackd-nonesuch0"}
	cfg.DHCP.ProbeTimeout = 0
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h api.Health
	json.NewDecoder(resp.Body).Decode(&h)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(h.Status, "DHCP interface rackd-nonesuch0 not bound") ||
		h.Store != "ok" || len(h.NotReady) != 1 || h.Version == "" {
		t.Fatalf("%d %+v", resp.StatusCode, h)
	}
	// Once the store is closed it says so too.
	a.Close()
	resp2, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	json.NewDecoder(resp2.Body).Decode(&h)
	if resp2.StatusCode != http.StatusServiceUnavailable || !strings.Contains(h.Status, "database") || len(h.NotReady) != 2 {
		t.Fatalf("%d %+v", resp2.StatusCode, h)
	}
}

// One update or reset at a time: a second one while the first runs is a
// 409 that says so, and touches nothing.
func TestApplianceOneAtATime(t *testing.T) {
	r := newApplianceRig(t)
	ta := startAgent(t, r.config)
	ta.applianceMu.Lock() // an update in progress
	status, raw := post(t, ta.url+"/api/v1/appliance/update?reboot=0", ta.admin, "application/octet-stream", r.bundle(t, r.priv, "v2", 200, testPayload(1000)))
	e := wantError(t, status, raw, http.StatusConflict, api.CodeConflict)
	status, raw = post(t, ta.url+"/api/v1/appliance/reset?reboot=0", ta.admin, "application/json", []byte(`{"confirm":true}`))
	wantError(t, status, raw, http.StatusConflict, api.CodeConflict)
	ta.applianceMu.Unlock()
	if !strings.Contains(e.Error, "another appliance update") || !bytes.Equal(r.slot(t), r.slotB) || appliance.ResetRequested(r.env(t)) {
		t.Fatalf("busy update: %q", e.Error)
	}
	if status, raw := post(t, ta.url+"/api/v1/appliance/update?reboot=0", ta.admin, "application/octet-stream", r.bundle(t, r.priv, "v2", 200, testPayload(1000))); status != 200 {
		t.Fatalf("after the first: %d %s", status, raw)
	}
}
