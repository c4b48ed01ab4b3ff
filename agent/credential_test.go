package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/store"
)

// The credential claim over HTTP. The test agent listens on loopback, and
// a client can send from any 127.0.0.0/8 address: a subnet of loopback
// addresses stands in for the rack network, a DHCP lease in it for the
// machine's binding, and the source address of the claim is whichever
// loopback address the client binds.

const credMAC = "52:54:00:00:0c:01"

// claimFrom posts a claim from the source address src and returns the
// status and the body.
func (ta *testAgent) claimFrom(t *testing.T, src string, req enlist.CredentialRequest) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}}
	defer c.CloseIdleConnections()
	data, _ := json.Marshal(req)
	resp, err := c.Post(ta.url+enlist.PathCredential, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatalf("claim from %s: %v", src, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// credentialLab is an agent with the loopback subnet, an enlistment image
// (which commissions too), a COMMISSIONING machine on credMAC and that
// MAC's lease at 127.0.0.100.
func credentialLab(t *testing.T, tweak ...func(*Config)) (*testAgent, api.Machine) {
	t.Helper()
	ta := startAgent(t, tweak...)
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "127.0.0.0/24",
		DynamicRanges: []api.Range{{Start: "127.0.0.100", End: "127.0.0.199"}}}, nil); status != http.StatusCreated {
		t.Fatalf("subnet: %d %s", status, raw)
	}
	dir := writeImageDir(t, "enlist", "enlist", []byte("kernel"), []byte("initrd"), false)
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, nil); status != http.StatusCreated {
		t.Fatalf("import: %d %s", status, raw)
	}
	m := ta.addMachine(t, api.CreateMachine{Hostname: "cred1", MACs: []string{credMAC}, Power: &api.PowerParams{Driver: "manual"}})
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/cred1/commission", api.ActionRequest{}, nil); status != http.StatusOK {
		t.Fatalf("commission: %d %s", status, raw)
	}
	if _, err := ta.Store().DHCPAck(context.Background(), store.LeaseRequest{MAC: credMAC,
		Link: netip.MustParseAddr("127.0.0.1"), IP: netip.MustParseAddr("127.0.0.100")}); err != nil {
		t.Fatal(err)
	}
	return ta, m
}

func (ta *testAgent) lastEvents(t *testing.T, machine string, n int) []api.Event {
	t.Helper()
	var evs []api.Event
	if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/machines/"+machine+"/events", nil, &evs); status != http.StatusOK {
		t.Fatalf("events: %d %s", status, raw)
	}
	return evs[max(0, len(evs)-n):]
}

// TestCredentialClaim: a host that knows the MAC but does not hold its
// lease is refused (403, an event); the lease's holder gets the token the
// report accepts, once; a second claim is 409 and an event naming both
// addresses; the metrics count each outcome.
func TestCredentialClaim(t *testing.T) {
	ta, m := credentialLab(t)
	req := enlist.CredentialRequest{Machine: m.ID, MAC: credMAC}

	status, raw := ta.claimFrom(t, "127.0.0.150", req)
	e := wantError(t, status, raw, http.StatusForbidden, api.CodeForbidden)
	if strings.Contains(e.Error, "127.0.0.100") || strings.Contains(e.Error, "COMMISSIONING") {
		t.Fatalf("the refusal tells a stranger about the machine: %q", e.Error)
	}
	if ev := ta.lastEvents(t, "cred1", 1)[0]; ev.Action != "credential-refused" ||
		!strings.Contains(ev.Reason, "from 127.0.0.150") || !strings.Contains(ev.Reason, "dynamic 127.0.0.100") {
		t.Fatalf("event %+v", ev)
	}
	// The same text for a machine that does not exist: nothing to learn.
	status, raw = ta.claimFrom(t, "127.0.0.150", enlist.CredentialRequest{Machine: "m-nosuch", MAC: credMAC})
	if e2 := wantError(t, status, raw, http.StatusForbidden, api.CodeForbidden); e2.Error != e.Error {
		t.Fatalf("unknown machine refused with %q, a known one with %q", e2.Error, e.Error)
	}

	status, raw = ta.claimFrom(t, "127.0.0.100", req)
	var cred enlist.Credential
	if status != http.StatusOK || json.Unmarshal(raw, &cred) != nil || cred.Phase != store.PhaseCommission || cred.Token == "" {
		t.Fatalf("claim from the lease: %d %s", status, raw)
	}
	status, raw = ta.claimFrom(t, "127.0.0.100", req)
	wantError(t, status, raw, http.StatusConflict, api.CodeConflict)
	if ev := ta.lastEvents(t, "cred1", 1)[0]; ev.Action != "credential-refused" ||
		!strings.HasPrefix(ev.Reason, "commission credential already claimed by 127.0.0.100 at ") ||
		!strings.HasSuffix(ev.Reason, "; refused 127.0.0.100") {
		t.Fatalf("second claim event %+v", ev)
	}
	// No boot config carries the token: the claim is the only way to it.
	for _, path := range []string{"/boot/ipxe?mac=" + credMAC, "/boot/grub/grub.cfg-" + credMAC, "/boot/pxelinux.cfg/01-52-54-00-00-0c-01"} {
		status, body := ta.call(t, "", "GET", path, nil, nil)
		if status != http.StatusOK || !strings.Contains(string(body), "rackd.machine="+m.ID) || strings.Contains(string(body), cred.Token) ||
			strings.Contains(string(body), "rackd.token") {
			t.Fatalf("%s: %d\n%s", path, status, body)
		}
	}

	// The claimed token is the phase's credential.
	rep := enlist.Report{Machine: m.ID, Inventory: &enlist.Inventory{MACs: []string{credMAC}, Arch: "amd64"}}
	data, _ := json.Marshal(rep)
	hreq, _ := http.NewRequest(http.MethodPost, ta.url+enlist.PathCommissioned, bytes.NewReader(data))
	hreq.Header.Set("Authorization", "Bearer "+cred.Token)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("report with the claimed token: %s", resp.Status)
	}
	// The phase is over: no credential to claim.
	status, raw = ta.claimFrom(t, "127.0.0.100", req)
	wantError(t, status, raw, http.StatusForbidden, api.CodeForbidden)

	_, metrics := ta.call(t, "", "GET", "/metrics", nil, nil)
	for _, want := range []string{
		`rackd_metadata_requests_total{endpoint="credential",outcome="granted"} 1`,
		`rackd_metadata_requests_total{endpoint="credential",outcome="refused"} 3`,
		`rackd_metadata_requests_total{endpoint="credential",outcome="conflict"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestCredentialClaimBindingNone: with metadata.credential_binding =
// "none" any source claims, still once.
func TestCredentialClaimBindingNone(t *testing.T) {
	ta, m := credentialLab(t, func(c *Config) { c.Metadata.CredentialBinding = BindingNone })
	req := enlist.CredentialRequest{Machine: m.ID, MAC: credMAC}
	if status, raw := ta.claimFrom(t, "127.0.0.150", req); status != http.StatusOK {
		t.Fatalf("claim: %d %s", status, raw)
	}
	status, raw := ta.claimFrom(t, "127.0.0.100", req)
	wantError(t, status, raw, http.StatusConflict, api.CodeConflict)
	if ev := ta.lastEvents(t, "cred1", 1)[0]; !strings.Contains(ev.Reason, "claimed by 127.0.0.150") ||
		!strings.Contains(ev.Reason, "refused 127.0.0.100") {
		t.Fatalf("event %+v", ev)
	}
}

// TestCredentialClaimBadRequests: malformed claims are 400 and change
// nothing; a stranger's refusals are bounded by the metadata rate limit.
func TestCredentialClaimBadRequests(t *testing.T) {
	ta, m := credentialLab(t, func(c *Config) { c.Enlist.RateLimit, c.Enlist.RateBurst = 0.01, 4 })
	for _, body := range []string{`{"machine": "` + m.ID + `"}`, `{"machine": "M 1", "mac": "` + credMAC + `"}`,
		`{"machine": "` + m.ID + `", "mac": "` + credMAC + `", "token": "x"}`, `not json`} {
		status, raw := ta.call(t, "", "POST", enlist.PathCredential, body, nil)
		wantError(t, status, raw, http.StatusBadRequest, api.CodeBadRequest)
	}
	// The four above took the burst of 127.0.0.1.
	status, raw := ta.call(t, "", "POST", enlist.PathCredential, enlist.CredentialRequest{Machine: m.ID, MAC: credMAC}, nil)
	wantError(t, status, raw, http.StatusTooManyRequests, api.CodeRateLimited)
	if evs := ta.lastEvents(t, "cred1", 1); evs[0].Action == "credential-refused" {
		t.Fatalf("a rate-limited or malformed claim wrote %+v", evs[0])
	}
}

func TestConfigCredentialBinding(t *testing.T) {
	for _, tc := range []struct {
		binding string
		ok      bool
	}{{BindingDHCP, true}, {BindingNone, true}, {"", false}, {"lease", false}} {
		c := DefaultConfig()
		c.StateDir = "/x"
		c.Metadata.CredentialBinding = tc.binding
		err := c.Validate()
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "metadata.credential_binding") {
			t.Errorf("%q: %v", tc.binding, err)
		}
	}
	if b := DefaultConfig().Metadata.CredentialBinding; b != BindingDHCP {
		t.Errorf("default binding %q", b)
	}
}

// TestReplayedCredentialRefused: anyone who knows a machine's id (every boot
// config prints it) can send a phase report. A report carrying the phase
// credential of the machine's earlier deployment, or any other string, is
// refused with 401, counted and recorded as an event on the machine, and
// changes nothing: the machine stays DEPLOYING with its credential, and
// its own environment's report still ends the phase. (Such a report used
// to fail the deployment: FAILED_DEPLOYMENT, "rejected credential".)
func TestReplayedCredentialRefused(t *testing.T) {
	f := newDeployFixture(t)
	m := f.machine(t, "web1", "52:54:00:00:0c:21", f.alice)
	deploy := func() store.Machine {
		t.Helper()
		if status, raw := f.call(t, f.alice, "POST", "/api/v1/machines/web1/deploy", api.ActionRequest{Image: "debian"}, nil); status != http.StatusOK {
			t.Fatalf("deploy: %d %s", status, raw)
		}
		sm, err := f.Store().Machine(m.ID)
		if err != nil || sm.State != store.StateDeploying {
			t.Fatalf("after deploy: %+v, %v", sm, err)
		}
		return sm
	}
	report := func(token string, rep enlist.Report) (int, []byte) {
		t.Helper()
		body, _ := json.Marshal(rep)
		return f.post(t, token, enlist.PathDeployed, "application/json", body)
	}
	// The first deployment fails, as its environment reports with its
	// credential.
	first := f.Store().PhaseToken(deploy())
	if status, raw := report(first, enlist.Report{Machine: m.ID, Error: "disk vanished"}); status != http.StatusOK {
		t.Fatalf("the first deployment's failure report: %d %s", status, raw)
	}
	// The owner tries again: a new credential.
	second := deploy()
	token := f.Store().PhaseToken(second)
	if token == first {
		t.Fatal("the retry kept the first deployment's credential")
	}
	for name, tok := range map[string]string{"the first deployment's credential": first, "any string": "not-a-token"} {
		for _, rep := range []enlist.Report{{Machine: m.ID, Error: "forged failure"}, {Machine: m.ID, Disk: "vda", Bytes: 1, SHA256: strings.Repeat("b", 64)}} {
			status, raw := report(tok, rep)
			e := wantError(t, status, raw, http.StatusUnauthorized, api.CodeUnauthorized)
			if strings.Contains(e.Error, "DEPLOYING") || strings.Contains(e.Error, "web1") {
				t.Errorf("%s: the refusal tells the caller about the machine: %q", name, e.Error)
			}
			now, err := f.Store().Machine(m.ID)
			if err != nil || now.State != store.StateDeploying || f.Store().PhaseToken(now) != token || !now.DiskWritten.IsZero() {
				t.Fatalf("%s (error %q) moved the machine: %s, credential kept %v", name, rep.Error, now.State, f.Store().PhaseToken(now) == token)
			}
			if ev := f.lastEvents(t, "web1", 1)[0]; ev.Action != "report-refused" || ev.To != "" ||
				!strings.Contains(ev.Reason, "deploy report from 127.0.0.1:") || !strings.Contains(ev.Reason, "rejected credential") {
				t.Fatalf("%s: event %+v", name, ev)
			}
		}
	}
	// The machine's own environment finishes the phase.
	status, raw := report(token, enlist.Report{Machine: m.ID, Disk: "vda", Bytes: 1 << 20, SHA256: strings.Repeat("a", 64)})
	if status != http.StatusOK {
		t.Fatalf("the real report: %d %s", status, raw)
	}
	if now, _ := f.Store().Machine(m.ID); now.State != store.StateDeployed {
		t.Fatalf("after the real report: %s", now.State)
	}
	_, metrics := f.call(t, "", "GET", "/metrics", nil, nil)
	for _, want := range []string{
		`rackd_metadata_reports_total{outcome="rejected",phase="deploy"} 4`,
		`rackd_phase_failures_total{phase="deploy",reason="reported"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(metrics), `reason="credential"`) {
		t.Error("metrics still count phases failed by a credential")
	}
}
