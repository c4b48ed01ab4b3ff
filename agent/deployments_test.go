package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"rackd/api"
	"rackd/enlist"
	"rackd/power/powertest"
	"rackd/store"
	"rackd/store/storetest"
)

// lockedBuffer is a log destination that tests read while the agent may
// still write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// post sends a body of any content type, with an optional bearer token.
func (ta *testAgent) post(t *testing.T, token, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", ta.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// phoneHome posts what cloud-init's phone_home posts.
func (ta *testAgent) phoneHome(t *testing.T, osToken, instanceID string) (int, []byte) {
	t.Helper()
	form := url.Values{"instance_id": {instanceID}, "hostname": {"web1"}, "fqdn": {"web1.rack.example"}}
	return ta.post(t, "", enlist.PathOSPrefix+osToken+"/phone-home", "application/x-www-form-urlencoded", []byte(form.Encode()))
}

// osEvent posts one event as cloud-init's webhook reporter does.
func (ta *testAgent) osEvent(t *testing.T, osToken, name, result string) (int, []byte) {
	t.Helper()
	ev, _ := json.Marshal(map[string]any{"name": name, "description": "running " + name, "event_type": "finish",
		"origin": "cloudinit", "timestamp": 1764600000.5, "result": result, "files": []any{}})
	return ta.post(t, "", enlist.PathOSPrefix+osToken+"/events", "application/json", ev)
}

// deployFixture is a machine allocated to alice, with bob another user.
type deployFixture struct {
	*testAgent
	log        *lockedBuffer
	alice, bob string
	aliceKey   string
}

func newDeployFixture(t *testing.T) *deployFixture {
	log := &lockedBuffer{}
	ta := startAgentLog(t, log, noLimit)
	f := &deployFixture{testAgent: ta, log: log, alice: ta.addUser(t, "alice", false), bob: ta.addUser(t, "bob", false)}
	storetest.DeployImages(t, ta.Store(), "amd64", "debian")
	f.aliceKey = storetest.SSHKey(t, "ed25519", 0, "alice@laptop")
	if status, raw := ta.call(t, f.alice, "POST", "/api/v1/users/alice/ssh-keys", api.AddSSHKey{Key: f.aliceKey}, nil); status != 201 {
		t.Fatalf("add key: %d %s", status, raw)
	}
	return f
}

// machine adds a READY machine and allocates it to token's user.
func (f *deployFixture) machine(t *testing.T, host, mac, token string) api.Machine {
	t.Helper()
	f.addMachine(t, api.CreateMachine{Hostname: host, MACs: []string{mac}, State: "READY"})
	var al api.Allocation
	if status, raw := f.call(t, token, "POST", "/api/v1/allocations", api.AllocateRequest{Name: host, AgentName: "juju"}, &al); status != 201 {
		t.Fatalf("allocate %s: %d %s", host, status, raw)
	}
	return al.Machine
}

// seed fetches, as the deploy environment does, the seed of a DEPLOYING
// machine and returns its OS token.
func (f *deployFixture) seedToken(t *testing.T, id string) string {
	t.Helper()
	m, err := f.Store().Machine(id)
	if err != nil {
		t.Fatal(err)
	}
	src, err := f.Store().Seed(t.Context(), f.Store().PhaseToken(m))
	if err != nil {
		t.Fatalf("seed of %s: %v", id, err)
	}
	return src.OSToken
}

// secretUserData is user-data that must never show outside its owner's
// answers.
const secretUserData = "#cloud-config\nruncmd:\n  - echo USERDATA-SECRET-5f1c9a > /root/marker\n"

// TestDeployIdentityAPI: the deploy request's identity, who sees it, and
// the refusals of bad input.
func TestDeployIdentityAPI(t *testing.T) {
	f := newDeployFixture(t)
	m := f.machine(t, "web1", "52:54:00:00:0e:01", f.alice)
	extra := storetest.SSHKey(t, "ecdsa", 384, "robot")
	deployPath := "/api/v1/machines/" + m.ID + "/deploy"

	for name, tc := range map[string]struct {
		req    api.ActionRequest
		status int
		code   string
		says   string
	}{
		"not base64": {api.ActionRequest{Image: "debian", UserData: "#cloud-config!"}, 400, api.CodeBadRequest, "user_data is not base64"},
		"over 1 MiB": {api.ActionRequest{Image: "debian", UserData: base64.StdEncoding.EncodeToString(make([]byte, api.MaxUserData+1))},
			413, api.CodeBodyTooLarge, "user_data is 1048577 bytes decoded: at most 1048576"},
		"far over 1 MiB":  {api.ActionRequest{Image: "debian", UserData: strings.Repeat("A", 2<<20)}, 413, api.CodeBodyTooLarge, ""},
		"bad key":         {api.ActionRequest{Image: "debian", SSHKeys: []string{extra, "ssh-rsa AAAAB3NzaC1yc2E= x"}}, 400, api.CodeBadRequest, "ssh_keys[1]: "},
		"keys on release": {api.ActionRequest{SSHKeys: []string{extra}}, 400, api.CodeBadRequest, "only meaningful for deploy"},
	} {
		t.Run(name, func(t *testing.T) {
			path := deployPath
			if name == "keys on release" {
				path = "/api/v1/machines/" + m.ID + "/release"
			}
			status, raw := f.call(t, f.alice, "POST", path, tc.req, nil)
			e := wantError(t, status, raw, tc.status, tc.code)
			if !strings.Contains(e.Error, tc.says) {
				t.Fatalf("error %q does not say %q", e.Error, tc.says)
			}
		})
	}
	// Another user may not deploy alice's machine.
	status, raw := f.call(t, f.bob, "POST", deployPath, api.ActionRequest{Image: "debian"}, nil)
	wantError(t, status, raw, 403, api.CodeForbidden)

	// Exactly 1 MiB is accepted, whatever api.max_body_bytes says.
	var got api.Machine
	req := api.ActionRequest{Image: "debian", UserData: base64.StdEncoding.EncodeToString([]byte(secretUserData)), SSHKeys: []string{extra}}
	if status, raw := f.call(t, f.alice, "POST", deployPath, req, &got); status != 200 {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	d := got.Deployment
	if got.State != "DEPLOYING" || d == nil || !strings.HasPrefix(d.InstanceID, "i-") || d.UserDataBytes != len(secretUserData) ||
		d.SSHKeys != 2 || d.Image != "debian" || d.ImageWritten != nil || d.OSErrors == nil {
		t.Fatalf("deploy answer %+v deployment %+v", got, d)
	}

	// Who sees the deployment and the user-data.
	for _, who := range []struct {
		name, token string
		sees        bool
	}{{"alice", f.alice, true}, {"admin", f.admin, true}, {"bob", f.bob, false}} {
		// Another user's held machine does not exist for bob.
		var v api.Machine
		status, raw := f.call(t, who.token, "GET", "/api/v1/machines/"+m.ID, nil, &v)
		if who.sees && (status != 200 || v.Deployment == nil) || !who.sees && status != 404 {
			t.Errorf("%s reads the machine: %d %s", who.name, status, raw)
		}
		var list []api.Machine
		f.call(t, who.token, "GET", "/api/v1/machines", nil, &list)
		if who.sees && (len(list) != 1 || list[0].Deployment == nil) || !who.sees && len(list) != 0 {
			t.Errorf("%s's list shows %+v", who.name, list)
		}
		var ud api.UserData
		status, raw = f.call(t, who.token, "GET", "/api/v1/machines/"+m.ID+"/user-data", nil, &ud)
		if who.sees {
			if b, _ := base64.StdEncoding.DecodeString(ud.UserData); status != 200 || string(b) != secretUserData || ud.Bytes != len(secretUserData) {
				t.Errorf("%s reads user-data: %d %s", who.name, status, raw)
			}
		} else {
			wantError(t, status, raw, 403, api.CodeForbidden)
			if strings.Contains(string(raw), "USERDATA-SECRET") {
				t.Errorf("the refusal shows the user-data: %s", raw)
			}
		}
	}
	status, raw = f.call(t, "", "GET", "/api/v1/machines/"+m.ID+"/user-data", nil, nil)
	wantError(t, status, raw, 401, api.CodeUnauthorized)
	m2 := f.machine(t, "web2", "52:54:00:00:0e:02", f.bob)
	status, raw = f.call(t, f.bob, "GET", "/api/v1/machines/"+m2.ID+"/user-data", nil, nil)
	wantError(t, status, raw, 404, api.CodeNotFound)
}

// TestDeployOSReports walks a deployment through its reports over HTTP:
// the deploy environment's (image written, DEPLOYING, boots its disk), the
// OS's errors and its phone-home (DEPLOYED), and checks that no credential
// but the deployment's own moves it, that a replay is refused, and that the
// user-data and the OS credential stay out of the log, the events and
// /metrics.
func TestDeployOSReports(t *testing.T) {
	f := newDeployFixture(t)
	dir := writeImageDir(t, "debian", "deploy", []byte("kernel-bytes"), []byte("initrd-bytes"), false)
	if status, raw := f.call(t, f.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, nil); status != 201 {
		t.Fatalf("import: %d %s", status, raw)
	}
	const mac = "52:54:00:00:0f:01"
	m := f.machine(t, "web1", mac, f.alice)
	req := api.ActionRequest{Image: "debian", UserData: base64.StdEncoding.EncodeToString([]byte(secretUserData))}
	if status, raw := f.call(t, f.alice, "POST", "/api/v1/machines/"+m.ID+"/deploy", req, nil); status != 200 {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	// Another machine, bob's, deploying too.
	other := f.machine(t, "web2", "52:54:00:00:0f:02", f.bob)
	if status, raw := f.call(t, f.bob, "POST", "/api/v1/machines/"+other.ID+"/deploy", api.ActionRequest{Image: "debian"}, nil); status != 200 {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	osTok := f.seedToken(t, m.ID)
	otherTok := f.seedToken(t, other.ID)
	bootConfig := func() string {
		resp, err := http.Get(f.url + "/boot/ipxe/" + mac + ".ipxe")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := bootConfig(); !strings.Contains(got, "rackd.mode=deploy") {
		t.Fatalf("DEPLOYING config does not boot the deploy environment:\n%s", got)
	}

	// The deploy environment reports the image written.
	mm, _ := f.Store().Machine(m.ID)
	body, _ := json.Marshal(enlist.Report{Machine: m.ID, Disk: "vda", Bytes: 3_000_000_000, SHA256: strings.Repeat("a", 64), WriteSeconds: 0.38})
	status, raw := f.post(t, f.Store().PhaseToken(mm), "/metadata/v1/deployed", "application/json", body)
	var ans enlist.ReportAnswer
	if json.Unmarshal(raw, &ans); status != 200 || ans.State != "DEPLOYING" || ans.Action != enlist.ActionReboot {
		t.Fatalf("deployed report: %d %s", status, raw)
	}
	if got := bootConfig(); strings.Contains(got, "rackd.mode=deploy") || !strings.Contains(got, "exit") {
		t.Fatalf("a DEPLOYING machine whose image is written does not boot its disk:\n%s", got)
	}
	var w enlist.WhoAmI
	f.call(t, "", "GET", whoamiPath(mac), nil, &w)
	if w.State != "DEPLOYING" || w.Action != enlist.ActionPowerOff {
		t.Fatalf("whoami of a machine booting its disk: %+v", w)
	}

	// Nobody but the deployment's own OS moves it.
	forged := m.ID + "." + strings.Split(otherTok, ".")[1]
	for name, tok := range map[string]string{
		"another machine's credential under X's id": forged,
		"alice's API token":                         f.alice,
		"the phase token":                           f.Store().PhaseToken(mm),
		"garbage":                                   "x",
		"empty id":                                  "." + strings.Split(osTok, ".")[1],
	} {
		status, raw := f.phoneHome(t, tok, "")
		wantError(t, status, raw, 403, api.CodeForbidden)
		status, raw = f.osEvent(t, tok, "modules-final", "FAIL")
		wantError(t, status, raw, 403, api.CodeForbidden)
		if got, _ := f.Store().Machine(m.ID); got.State != store.StateDeploying {
			t.Fatalf("%s moved the machine to %s", name, got.State)
		}
	}
	// With a user's API token as the Authorization too: still nothing.
	form := url.Values{"instance_id": {"i-0"}}
	status, raw = f.post(t, f.admin, enlist.PathOSPrefix+forged+"/phone-home", "application/x-www-form-urlencoded", []byte(form.Encode()))
	wantError(t, status, raw, 403, api.CodeForbidden)

	// cloud-init's events: a success is dropped, a failure kept.
	var kept map[string]bool
	status, raw = f.osEvent(t, osTok, "init-local", "SUCCESS")
	if json.Unmarshal(raw, &kept); status != 200 || kept["kept"] {
		t.Fatalf("success event: %d %s", status, raw)
	}
	status, raw = f.osEvent(t, osTok, "modules-final/config-scripts-user", "FAIL")
	if json.Unmarshal(raw, &kept); status != 200 || !kept["kept"] {
		t.Fatalf("failure event: %d %s", status, raw)
	}
	status, raw = f.post(t, "", enlist.PathOSPrefix+osTok+"/events", "application/json", []byte("{not json"))
	wantError(t, status, raw, 400, api.CodeBadRequest)

	// The OS phones home: DEPLOYED.
	d, _ := f.Store().DeploymentOf(store.System, m.ID)
	status, raw = f.phoneHome(t, osTok, d.InstanceID)
	if json.Unmarshal(raw, &ans); status != 200 || ans.State != "DEPLOYED" {
		t.Fatalf("phone-home: %d %s", status, raw)
	}
	// A replay is refused and shows in the events.
	status, raw = f.phoneHome(t, osTok, d.InstanceID)
	wantError(t, status, raw, 409, api.CodeConflict)
	var evs []api.Event
	f.call(t, f.alice, "GET", "/api/v1/machines/"+m.ID+"/events", nil, &evs)
	want := []string{"image written (3000 MB in 0.38 s; power-on and boot before it: ", "rebooting to disk", "cloud-init FAIL: modules-final/config-scripts-user",
		"OS booted, cloud-init finished (", "phone-home from 127.0.0.1 refused: the OS already reported"}
	for _, w := range want {
		found := false
		for _, e := range evs {
			found = found || strings.HasPrefix(e.Reason, w)
		}
		if !found {
			t.Errorf("no event %q in %+v", w, evs)
		}
	}
	var v api.Machine
	f.call(t, f.alice, "GET", "/api/v1/machines/"+m.ID, nil, &v)
	if v.State != "DEPLOYED" || v.Deployment == nil || v.Deployment.OSBooted == nil || v.Deployment.ImageWritten == nil ||
		len(v.Deployment.OSErrors) != 1 || v.Deployment.OSErrors[0].Result != "FAIL" {
		t.Fatalf("machine after phone-home %+v %+v", v, v.Deployment)
	}
	// bob's machine is untouched.
	if got, _ := f.Store().Machine(other.ID); got.State != store.StateDeploying {
		t.Fatalf("bob's machine is %s", got.State)
	}

	// Released: the OS credential and the user-data are gone.
	if status, raw := f.call(t, f.alice, "POST", "/api/v1/machines/"+m.ID+"/release", nil, nil); status != 200 {
		t.Fatalf("release: %d %s", status, raw)
	}
	status, raw = f.phoneHome(t, osTok, d.InstanceID)
	wantError(t, status, raw, 403, api.CodeForbidden)
	status, raw = f.osEvent(t, osTok, "late", "WARN")
	wantError(t, status, raw, 403, api.CodeForbidden)
	status, raw = f.call(t, f.admin, "GET", "/api/v1/machines/"+m.ID+"/user-data", nil, nil)
	wantError(t, status, raw, 404, api.CodeNotFound)

	// The secrets never left the owner's answers.
	_, metrics := f.call(t, "", "GET", "/metrics", nil, nil)
	f.call(t, f.admin, "GET", "/api/v1/machines/"+m.ID+"/events", nil, &evs)
	evText, _ := json.Marshal(evs)
	logText := f.log.String()
	for what, text := range map[string]string{"log": logText, "events": string(evText), "/metrics": string(metrics)} {
		for _, secret := range []string{"USERDATA-SECRET", base64.StdEncoding.EncodeToString([]byte(secretUserData)),
			strings.Split(osTok, ".")[1], strings.Split(otherTok, ".")[1]} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s holds a secret (%.20s...)", what, secret)
			}
		}
	}
	if !strings.Contains(logText, "deployed OS reported") || !strings.Contains(logText, "OS report refused") {
		t.Errorf("the log does not say what the OS reported:\n%s", logText)
	}
	for _, series := range []string{`rackd_metadata_os_reports_total{endpoint="phone_home",outcome="deployed"} 1`,
		`rackd_metadata_os_reports_total{endpoint="phone_home",outcome="refused"} 1`,
		`rackd_metadata_os_reports_total{endpoint="events",outcome="kept"} 1`,
		`rackd_metadata_reports_total{outcome="image_written",phase="deploy"} 1`,
		`rackd_deploy_os_boot_seconds_count 1`} {
		if !strings.Contains(string(metrics), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

func TestRedactPath(t *testing.T) {
	for in, want := range map[string]string{
		"/metadata/v1/os/m-abc.SECRET/phone-home": "/metadata/v1/os/<credential>/phone-home",
		"/metadata/v1/os/m-abc.SECRET/events":     "/metadata/v1/os/<credential>/events",
		"/metadata/v1/os/m-abc.SECRET":            "/metadata/v1/os/<credential>",
		"/metadata/v1/os/":                        "/metadata/v1/os/<credential>",
		"/api/v1/machines":                        "/api/v1/machines",
	} {
		if got := redactPath(in); got != want {
			t.Errorf("redactPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDecodeUserData(t *testing.T) {
	wrapped := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("#cloud-config\n"), 20))
	wrapped = wrapped[:76] + "\n" + wrapped[76:152] + "\r\n" + wrapped[152:]
	for name, tc := range map[string]struct {
		in     string
		status int
		n      int
	}{
		"empty":         {"", 0, 0},
		"wrapped":       {wrapped, 0, 280},
		"unpadded":      {"YWJj", 0, 3},
		"not base64":    {"a b c", 400, 0},
		"url alphabet":  {"-_-_", 400, 0},
		"exactly 1 MiB": {base64.StdEncoding.EncodeToString(make([]byte, api.MaxUserData)), 0, api.MaxUserData},
		"1 MiB + 1":     {base64.StdEncoding.EncodeToString(make([]byte, api.MaxUserData+1)), 413, 0},
		"huge":          {strings.Repeat("AAAA", 1<<20), 413, 0},
	} {
		t.Run(name, func(t *testing.T) {
			b, status, err := decodeUserData(tc.in)
			if status != tc.status || (err == nil) != (tc.status == 0) || len(b) != tc.n {
				t.Fatalf("decodeUserData = %d bytes, %d, %v; want %d bytes, %d", len(b), status, err, tc.n, tc.status)
			}
		})
	}
}

func FuzzDecodeUserData(f *testing.F) {
	f.Add("I2Nsb3VkLWNvbmZpZwo=")
	f.Add("YWJj\nZGVm")
	f.Add("====")
	f.Fuzz(func(t *testing.T, s string) {
		b, status, err := decodeUserData(s)
		switch {
		case err == nil && status != 0, err != nil && status == 0:
			t.Fatalf("status %d with error %v", status, err)
		case len(b) > api.MaxUserData:
			t.Fatalf("%d bytes accepted", len(b))
		case err == nil && s != "" && base64.StdEncoding.EncodeToString(b) != strings.NewReplacer("\n", "", "\r", "").Replace(s):
			t.Fatalf("%q decoded to %q, which does not encode back", s, b)
		}
	})
}

// TestRedeployKillsOSCredential: a retry from FAILED_DEPLOYMENT is a new
// deployment, whose OS credential is new; the first one's phone-home is
// refused and leaves the machine as it is.
func TestRedeployKillsOSCredential(t *testing.T) {
	f := newDeployFixture(t)
	m := f.machine(t, "web1", "52:54:00:00:2e:01", f.alice)
	deploy := func() api.Deployment {
		var v api.Machine
		if status, raw := f.call(t, f.alice, "POST", "/api/v1/machines/"+m.ID+"/deploy", api.ActionRequest{Image: "debian"}, &v); status != 200 || v.Deployment == nil {
			t.Fatalf("deploy: %d %s", status, raw)
		}
		return *v.Deployment
	}
	first := deploy()
	oldTok := f.seedToken(t, m.ID)
	mm, _ := f.Store().Machine(m.ID)
	body, _ := json.Marshal(enlist.Report{Machine: m.ID, Error: "no disk large enough"})
	if status, raw := f.post(t, f.Store().PhaseToken(mm), "/metadata/v1/deployed", "application/json", body); status != 200 {
		t.Fatalf("failure report: %d %s", status, raw)
	}
	second := deploy()
	newTok := f.seedToken(t, m.ID)
	if second.InstanceID == first.InstanceID || newTok == oldTok {
		t.Fatalf("the redeploy kept the first deployment's identity: %s %s", first.InstanceID, second.InstanceID)
	}
	status, raw := f.phoneHome(t, oldTok, first.InstanceID)
	wantError(t, status, raw, 403, api.CodeForbidden)
	if got, _ := f.Store().Machine(m.ID); got.State != store.StateDeploying {
		t.Fatalf("the first deployment's phone-home moved the machine to %s", got.State)
	}
	if status, raw := f.phoneHome(t, newTok, second.InstanceID); status != 200 {
		t.Fatalf("the second deployment's phone-home: %d %s", status, raw)
	}
}

// FuzzOSEndpoints: whatever a caller posts to the deployed OS's endpoints,
// with the deployment's own credential or another, rackd answers without
// a server error and the store keeps its invariants.
func FuzzOSEndpoints(f *testing.F) {
	for _, seed := range []string{
		"instance_id=i-0&hostname=web1&fqdn=web1.example", "pub_key_rsa=ssh-rsa+AAAA&instance_id=%ZZ", "",
		`{"name":"modules-final","description":"d","event_type":"finish","origin":"cloudinit","timestamp":1.5,"result":"FAIL"}`,
		`{"name":1}`, `{"result":"WARN","files":[{"path":"/x","content":"eA==","encoding":"base64"}]}`, "\x00\xff", `[]`,
	} {
		for ep := range 2 {
			f.Add(uint8(ep), true, []byte(seed))
			f.Add(uint8(ep), false, []byte(seed))
		}
	}
	cfg := DefaultConfig()
	cfg.StateDir = f.TempDir()
	cfg.Enlist.RateLimit = 0
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithFakePowerDriver(powertest.Driver))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := a.Store().Check(); err != nil {
			f.Errorf("invariants after fuzzing:\n%v", err)
		}
		a.Close()
	})
	ctx := f.Context()
	m, err := a.store.CreateMachine(ctx, store.System, store.NewMachine{Hostname: "web1", MACs: []string{"52:54:00:00:3e:01"}, State: store.StateReady})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := a.store.Allocate(ctx, store.System, store.AllocateRequest{Name: "web1", AgentName: "a"}); err != nil {
		f.Fatal(err)
	}
	storetest.DeployImages(f, a.store, "amd64", "debian")
	if m, err = a.store.Deploy(ctx, store.System, store.DeployRequest{Machine: m.ID, Image: "debian"}); err != nil {
		f.Fatal(err)
	}
	src, err := a.store.Seed(ctx, a.store.PhaseToken(m))
	if err != nil {
		f.Fatal(err)
	}
	h := a.Handler()
	f.Fuzz(func(t *testing.T, ep uint8, valid bool, body []byte) {
		tok := src.OSToken
		if !valid {
			tok = m.ID + ".x"
		}
		path, ct := enlist.PathOSPrefix+tok+"/phone-home", "application/x-www-form-urlencoded"
		if ep%2 == 1 {
			path, ct = enlist.PathOSPrefix+tok+"/events", "application/json"
		}
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		if !valid && rec.Code != 403 && rec.Code != 400 {
			t.Fatalf("a forged credential got %d %s", rec.Code, rec.Body)
		}
	})
}

// TestDeployImageShownWhileHeld: a machine shows the image it deploys while
// its allocation holds it, and none once it is released (the store keeps
// the name, for a retry, but a READY machine runs no image of ours).
func TestDeployImageShownWhileHeld(t *testing.T) {
	f := newDeployFixture(t)
	m := f.machine(t, "img1", "52:54:00:00:0e:01", f.alice)
	var got api.Machine
	if status, raw := f.call(t, f.alice, "POST", "/api/v1/machines/"+m.ID+"/deploy", api.ActionRequest{Image: "debian"}, &got); status != http.StatusOK {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	if got.State != "DEPLOYING" || got.DeployImage != "debian" {
		t.Fatalf("deploying: %s with image %q", got.State, got.DeployImage)
	}
	if status, raw := f.call(t, f.alice, "POST", "/api/v1/machines/"+m.ID+"/release", nil, nil); status != http.StatusOK {
		t.Fatalf("release: %d %s", status, raw)
	}
	waitState(t, f.testAgent, m.ID, "READY")
	var released api.Machine
	_, raw := f.call(t, f.admin, "GET", "/api/v1/machines/"+m.ID, nil, &released)
	if released.DeployImage != "" || bytes.Contains(raw, []byte("deploy_image")) {
		t.Errorf("the released machine still shows an image: %s", raw)
	}
}
