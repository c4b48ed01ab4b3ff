package redfishsim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// client is a test's HTTP client of one simulator. The simulator's
// certificate is checked against its fingerprint, not skipped.
type client struct {
	t     *testing.T
	s     *Sim
	http  *http.Client
	token string
	basic bool
	user  string
	pass  string
}

func newClient(t *testing.T, s *Sim) *client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if got := hex.EncodeToString(sum[:]); got != s.Fingerprint() {
				t.Errorf("served certificate %s, Fingerprint says %s", got, s.Fingerprint())
			}
			return nil
		}}}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, s: s, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}, basic: true, user: s.User, pass: s.Password}
}

type answer struct {
	code int
	hdr  http.Header
	body map[string]any
}

func (c *client) do(method, path string, body any, hdr ...string) answer {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.s.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("X-Auth-Token", c.token)
	} else if c.basic {
		req.SetBasicAuth(c.user, c.pass)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	a := answer{code: res.StatusCode, hdr: res.Header}
	b, _ := io.ReadAll(res.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &a.body); err != nil {
			c.t.Fatalf("%s %s: answer is not JSON: %v: %q", method, path, err, b)
		}
	}
	return a
}

func (c *client) want(a answer, code int) answer {
	c.t.Helper()
	if a.code != code {
		c.t.Fatalf("got %d, want %d: %v", a.code, code, a.body)
	}
	return a
}

func bootOf(a answer) map[string]any { return a.body["Boot"].(map[string]any) }

func TestAuthentication(t *testing.T) {
	s := Start(t, Options{})
	c := newClient(t, s)
	// The service root is open to all.
	c.basic = false
	c.want(c.do("GET", "/redfish/v1/", nil), 200)
	a := c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 401)
	if a.hdr.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	// Wrong basic credentials.
	bad := newClient(t, s)
	bad.pass = "wrong"
	bad.want(bad.do("GET", "/redfish/v1/Systems/1", nil), 401)
	bad.want(bad.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": s.User, "Password": "wrong"}), 401)
	// Basic auth.
	c.basic = true
	c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200)
	// A session.
	c.basic = false
	a = c.want(c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": s.User, "Password": s.Password}), 201)
	tok, loc := a.hdr.Get("X-Auth-Token"), a.hdr.Get("Location")
	if tok == "" || !strings.HasPrefix(loc, "/redfish/v1/SessionService/Sessions/") {
		t.Fatalf("session answer: token %q, location %q", tok, loc)
	}
	c.token = tok
	c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200)
	if n := s.Sessions(); n != 1 {
		t.Fatalf("Sessions = %d, want 1", n)
	}
	c.want(c.do("DELETE", loc, nil), 204)
	c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 401)
	st := s.Stats()
	if st.SessionsCreated != 1 || st.SessionsDeleted != 1 || st.TokenAuth != 2 || st.BasicAuth != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Sessions disabled: basic auth only.
	s.SetQuirks(Quirks{NoSessions: true})
	c.token = ""
	c.want(c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": s.User, "Password": s.Password}), 405)
}

func TestReset(t *testing.T) {
	for _, tc := range []struct {
		from  bool
		reset string
		code  int
		want  string
	}{
		{false, "On", 204, "On"}, {true, "On", 204, "On"},
		{true, "ForceOff", 204, "Off"}, {false, "ForceOff", 204, "Off"},
		{true, "GracefulShutdown", 204, "Off"},
		{false, "PowerCycle", 204, "On"}, {true, "PowerCycle", 204, "On"},
		{true, "PushPowerButton", 204, "Off"}, {false, "PushPowerButton", 204, "On"},
		{true, "ForceRestart", 204, "On"}, {false, "ForceRestart", 409, "Off"},
		{false, "Bogus", 400, "Off"},
	} {
		t.Run(tc.reset, func(t *testing.T) {
			s := Start(t, Options{PowerOn: tc.from})
			c := newClient(t, s)
			_, boots := s.LastBoot()
			c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": tc.reset}), tc.code)
			if got := s.Power(); got != tc.want {
				t.Fatalf("power %s after %s from on=%v, want %s", got, tc.reset, tc.from, tc.want)
			}
			if a := c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200); a.body["PowerState"] != tc.want {
				t.Fatalf("PowerState %v, want %s", a.body["PowerState"], tc.want)
			}
			_, after := s.LastBoot()
			wantBoot := tc.code == 204 && tc.want == "On" && (!tc.from || tc.reset == "PowerCycle" || tc.reset == "ForceRestart")
			if (after > boots) != wantBoot {
				t.Fatalf("boots %d -> %d after %s from on=%v", boots, after, tc.reset, tc.from)
			}
		})
	}
}

func TestRestrictedResetTypes(t *testing.T) {
	s := Start(t, Options{PowerOn: true, Quirks: Quirks{ResetTypes: []string{"On", "GracefulShutdown", "ForceRestart"}}})
	c := newClient(t, s)
	a := c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200)
	got := a.body["Actions"].(map[string]any)["#ComputerSystem.Reset"].(map[string]any)["ResetType@Redfish.AllowableValues"]
	if b, _ := json.Marshal(got); string(b) != `["On","GracefulShutdown","ForceRestart"]` {
		t.Fatalf("AllowableValues %s", b)
	}
	for _, rt := range []string{"PowerCycle", "ForceOff"} {
		c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": rt}), 400)
	}
	if s.Power() != "On" {
		t.Fatal("a refused reset changed the power")
	}
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "GracefulShutdown"}), 204)
	if s.Power() != "Off" {
		t.Fatal("GracefulShutdown left the power on")
	}
	if st := s.Stats(); !slices.Equal(st.Resets, []string{"GracefulShutdown"}) {
		t.Fatalf("resets %v", st.Resets)
	}
}

func TestBootOverrideOnce(t *testing.T) {
	s := Start(t, Options{})
	c := newClient(t, s)
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Floppy"}}), 400)
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", map[string]any{"Boot": map[string]string{"BootSourceOverrideEnabled": "Sometimes"}}), 400)
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", map[string]any{"PowerState": "On"}), 400)
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", map[string]any{"Boot": map[string]string{
		"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "Legacy"}}), 204)
	b := bootOf(c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200))
	if b["BootSourceOverrideTarget"] != "Pxe" || b["BootSourceOverrideEnabled"] != "Once" || b["BootSourceOverrideMode"] != "Legacy" {
		t.Fatalf("Boot %v", b)
	}
	if !slices.Contains(b["BootSourceOverrideTarget@Redfish.AllowableValues"].([]any), any("Pxe")) {
		t.Fatalf("allowable boot targets %v", b["BootSourceOverrideTarget@Redfish.AllowableValues"])
	}
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "On"}), 204)
	if last, n := s.LastBoot(); last != "Pxe" || n != 1 {
		t.Fatalf("first boot from %q (%d boots), want Pxe", last, n)
	}
	if b := s.Boot(); b.Enabled != "Disabled" || b.Target != "None" || b.Mode != "Legacy" {
		t.Fatalf("a one-time override was not used up: %+v", b)
	}
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceRestart"}), 204)
	if last, n := s.LastBoot(); last != "" || n != 2 {
		t.Fatalf("second boot from %q (%d boots), want the firmware's order", last, n)
	}
}

func TestIfMatch(t *testing.T) {
	s := Start(t, Options{Quirks: Quirks{RequireIfMatch: true}})
	c := newClient(t, s)
	patch := map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}}
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", patch), 428)
	a := c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200)
	etag := a.hdr.Get("ETag")
	if etag == "" || a.body["@odata.etag"] != etag {
		t.Fatalf("ETag header %q, @odata.etag %v", etag, a.body["@odata.etag"])
	}
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", patch, "If-Match", `W/"999"`), 412)
	a = c.want(c.do("PATCH", "/redfish/v1/Systems/1", patch, "If-Match", etag), 204)
	// The ETag moved: the old one is stale now.
	if a.hdr.Get("ETag") == etag {
		t.Fatal("ETag did not change with the resource")
	}
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", patch, "If-Match", etag), 412)
	if b := s.Boot(); b.Target != "Pxe" {
		t.Fatalf("boot %+v", b)
	}
}

func TestSettingsObject(t *testing.T) {
	s := Start(t, Options{Quirks: Quirks{SettingsObject: true, RequireBootMode: true}})
	c := newClient(t, s)
	a := c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200)
	so := a.body["@Redfish.Settings"].(map[string]any)["SettingsObject"].(map[string]any)["@odata.id"].(string)
	patch := map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}}
	c.want(c.do("PATCH", "/redfish/v1/Systems/1", patch), 405)
	// The mode must be echoed.
	c.want(c.do("PATCH", so, patch), 400)
	patch["Boot"].(map[string]string)["BootSourceOverrideMode"] = "UEFI"
	c.want(c.do("PATCH", so, patch), 204)
	if b := s.Boot(); b.Target != "None" {
		t.Fatalf("settings applied before a reset: %+v", b)
	}
	if p := s.PendingBoot(); p == nil || p.Target != "Pxe" {
		t.Fatalf("pending %+v", p)
	}
	if b := bootOf(c.want(c.do("GET", so, nil), 200)); b["BootSourceOverrideTarget"] != "Pxe" {
		t.Fatalf("settings object shows %v", b)
	}
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "On"}), 204)
	if last, _ := s.LastBoot(); last != "Pxe" || s.PendingBoot() != nil {
		t.Fatalf("boot from %q, pending %v", last, s.PendingBoot())
	}
}

func TestSlowPowerAndFlakes(t *testing.T) {
	s := Start(t, Options{Quirks: Quirks{PowerDelay: 300 * time.Millisecond}})
	c := newClient(t, s)
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "On"}), 204)
	if a := c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200); a.body["PowerState"] != "PoweringOn" {
		t.Fatalf("PowerState right after On: %v, want PoweringOn", a.body["PowerState"])
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Power() != "On" {
		if time.Now().After(deadline) {
			t.Fatal("never On")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.FailNext(2)
	c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 503)
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}), 503)
	if p := s.Power(); p != "On" {
		t.Fatalf("a flaked reset acted: %s", p)
	}
	c.want(c.do("GET", "/redfish/v1/Systems/1", nil), 200)
	s.SetQuirks(Quirks{FlakeEvery: 2})
	codes := map[int]int{}
	for range 6 {
		codes[c.do("GET", "/redfish/v1/Systems/1", nil).code]++
	}
	if codes[503] != 3 || codes[200] != 3 {
		t.Fatalf("FlakeEvery 2 over 6 requests: %v", codes)
	}
}

func TestHang(t *testing.T) {
	s := Start(t, Options{})
	c := newClient(t, s)
	s.Hang()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/redfish/v1/", nil)
	if res, err := c.http.Do(req); err == nil {
		res.Body.Close()
		t.Fatal("a hung BMC answered")
	}
	s.Resume()
	c.want(c.do("GET", "/redfish/v1/", nil), 200)
}

func TestCertificateRotation(t *testing.T) {
	s := Start(t, Options{})
	c := newClient(t, s) // checks the served certificate against Fingerprint
	before := s.Fingerprint()
	c.want(c.do("GET", "/redfish/v1/", nil), 200)
	if err := s.RotateCertificate(); err != nil {
		t.Fatal(err)
	}
	if s.Fingerprint() == before {
		t.Fatal("fingerprint unchanged")
	}
	c.want(c.do("GET", "/redfish/v1/", nil), 200)
}

func TestMachineProcess(t *testing.T) {
	s := Start(t, Options{Machine: []string{"sleep", "600"}})
	c := newClient(t, s)
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "On"}), 204)
	pid := s.MachinePID()
	if pid == 0 {
		t.Fatal("power on started no machine")
	}
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}), 204)
	if s.MachinePID() != 0 || syscall.Kill(pid, 0) == nil {
		t.Fatalf("machine %d still runs after ForceOff", pid)
	}
	// A machine that goes away by itself powers the system off.
	c.want(c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "On"}), 204)
	pid = s.MachinePID()
	syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for s.Power() != "Off" {
		if time.Now().After(deadline) {
			t.Fatal("power stayed on after the machine exited")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
