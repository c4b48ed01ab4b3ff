package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/juju/gomaasapi/v2"

	"rackd/api"
)

// Machines through Juju's own client (gomaasapi v2.4.0) against the real
// rackd binary: every machine it decodes passes its schema checks, so a
// missing or mistyped field fails here. The scenario is the one Juju's
// users asked MAAS for: an installer reserves a node by name under an agent name through /api/v1,
// Juju (same key, same agent name) takes it with AllocateMachine as a
// no-op, another agent name gets gomaasapi's no-match error, and the
// allocation token hands the node to Juju's own agent name.

// importDeployImage imports a deploy image (a kernel and an initrd) of
// that name, with os and series when given.
func (l *maasLab) importDeployImage(t *testing.T, name, osName, series string) {
	t.Helper()
	dir := t.TempDir()
	kernel, initrd := []byte("KERNEL-"+name), []byte("INITRD-"+name)
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	m, _ := json.Marshal(map[string]any{"name": name, "arch": "amd64", "purpose": "deploy", "files": []map[string]any{
		{"path": "vmlinuz", "role": "kernel", "sha256": sum(kernel), "size": len(kernel)},
		{"path": "initrd.img", "role": "initrd", "sha256": sum(initrd), "size": len(initrd)}}})
	for n, b := range map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd, "rackd-image.json": m} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l.call(t, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir, OS: osName, Series: series}, http.StatusCreated, nil)
}

// bearer is the rackd token of a MAAS key: its secret.
func bearer(key string) string { return key[strings.LastIndexByte(key, ':')+1:] }

// maasRaw sends a request to MAAS's API with the given Authorization
// header, urlencoded form for a POST.
func (l *maasLab) maasRaw(t *testing.T, auth, method, path string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, l.d.url+"/MAAS/api/2.0/"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// signed is the Authorization header gomaasapi sends for key, with the
// parameters in another order (RFC 5849 allows any) and python's
// percent-encoding.
func signed(key string) string {
	p := strings.SplitN(key, ":", 3)
	return fmt.Sprintf(`OAuth oauth_nonce="n1", oauth_timestamp="1700000000", oauth_version="1.0", oauth_signature_method="PLAINTEXT", oauth_consumer_key="%s", oauth_token="%s", oauth_signature="%%26%s"`,
		url.PathEscape(p[0]), url.PathEscape(p[1]), url.PathEscape(p[2]))
}

// serverStatus is the HTTP status of the server's answer a gomaasapi error
// carries (gomaasapi wraps it as an unexpected error), 0 for none.
func serverStatus(err error) int {
	var se gomaasapi.ServerError
	if errors.As(err, &se) {
		return se.StatusCode
	}
	if se, ok := gomaasapi.GetServerError(err); ok {
		return se.StatusCode
	}
	var code int
	if err != nil {
		if _, after, ok := strings.Cut(err.Error(), "ServerError: "); ok {
			fmt.Sscanf(after, "%d", &code)
		}
	}
	return code
}

func machineIDs(ms []gomaasapi.Machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.SystemID())
	}
	slices.Sort(out)
	return out
}

// TestMAASJujuMachines is the reserved-node handover, then the machine
// calls Juju makes,
// through gomaasapi against the real binary.
func TestMAASJujuMachines(t *testing.T) {
	l := newMAASLab(t)
	var elkhart, spare api.Machine
	l.call(t, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "elkhart", Arch: "amd64", MACs: []string{"52:54:00:77:00:02"},
		CPUCount: 2, MemoryMB: 4096, State: "READY"}, http.StatusCreated, &elkhart)
	l.call(t, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "spare", Arch: "amd64", MACs: []string{"52:54:00:77:00:03"},
		CPUCount: 2, MemoryMB: 4096, State: "READY"}, http.StatusCreated, &spare)
	l.importDeployImage(t, "jammy-server-cloudimg-amd64", "", "")
	l.importDeployImage(t, "golden", "ubuntu", "noble")

	// NewController checks the API version and the key (users/?op=whoami).
	juju := l.juju(t, l.alice)
	for _, c := range []string{gomaasapi.NetworksManagement, gomaasapi.StaticIPAddresses, gomaasapi.NetworkDeploymentUbuntu,
		gomaasapi.StorageDeploymentUbuntu, gomaasapi.DevicesManagement, gomaasapi.IPv6DeploymentUbuntu} {
		if !juju.Capabilities().Contains(c) {
			t.Errorf("capability %s missing: %v", c, juju.Capabilities().SortedValues())
		}
	}

	// The installer reserves elkhart by name under agent name U
	// through /api/v1 (the same user, with its bearer token).
	const agentU = "autopilot-5f1b"
	var alloc api.Allocation
	if status, raw, err := l.d.api(http.DefaultClient, bearer(l.alice), "POST", "/api/v1/allocations",
		api.AllocateRequest{Name: "elkhart", AgentName: agentU}, &alloc); err != nil || status != http.StatusCreated || alloc.Token == "" {
		t.Fatalf("reserve through /api/v1: %d %s %v", status, raw, err)
	}
	// Juju with agent name U takes it again: a no-op answering elkhart,
	// by hostname or FQDN.
	for _, name := range []string{"elkhart", "elkhart.rack.test"} {
		m, _, err := juju.AllocateMachine(gomaasapi.AllocateMachineArgs{Hostname: name, AgentName: agentU})
		if err != nil {
			t.Fatalf("AllocateMachine %s with agent name U: %v", name, err)
		}
		if m.SystemID() != elkhart.ID || m.StatusName() != "Allocated" || m.Hostname() != "elkhart" || m.FQDN() != "elkhart.rack.test" {
			t.Fatalf("AllocateMachine %s: %s %s %s %s", name, m.SystemID(), m.StatusName(), m.Hostname(), m.FQDN())
		}
	}
	// Any other agent name: gomaasapi's no-match error (a 409).
	for _, agent := range []string{"another-model", ""} {
		_, _, err := juju.AllocateMachine(gomaasapi.AllocateMachineArgs{Hostname: "elkhart", AgentName: agent})
		if !gomaasapi.IsNoMatchError(err) {
			t.Fatalf("AllocateMachine with agent name %q: %v, want a no-match error", agent, err)
		}
	}
	// The allocation token hands elkhart to Juju's own agent name, passed
	// in the comment.
	const agentJuju = "juju-model-0a3c"
	m, _, err := juju.AllocateMachine(gomaasapi.AllocateMachineArgs{Hostname: "elkhart", AgentName: agentJuju,
		Comment: "rackd-token=" + alloc.Token})
	if err != nil || m.SystemID() != elkhart.ID {
		t.Fatalf("AllocateMachine with the allocation token: %v", err)
	}
	var after api.Machine
	l.call(t, "GET", "/api/v1/machines/"+elkhart.ID, nil, http.StatusOK, &after)
	if after.AgentName != agentJuju || after.Owner != "alice" {
		t.Fatalf("after the handover: owner %s agent %q", after.Owner, after.AgentName)
	}
	if _, _, err := juju.AllocateMachine(gomaasapi.AllocateMachineArgs{Hostname: "elkhart", AgentName: agentU}); !gomaasapi.IsNoMatchError(err) {
		t.Fatalf("the old agent name after the handover: %v, want no match", err)
	}

	// Allocate by constraints: n1 is the one with 4 CPUs, 8 GiB, gpu, in rack2.
	n1, _, err := juju.AllocateMachine(gomaasapi.AllocateMachineArgs{MinCPUCount: 4, MinMemory: 8000, Tags: []string{"gpu"},
		Zone: "rack2", NotInZone: []string{"default"}, NotSpace: []string{"db"}, AgentName: agentJuju})
	if err != nil {
		t.Fatalf("AllocateMachine by constraints: %v", err)
	}
	if n1.Hostname() != "n1" || n1.CPUCount() != 4 || n1.Memory() != 8192 || n1.Zone().Name() != "rack2" ||
		!slices.Contains(n1.Tags(), "gpu") || n1.Architecture() != "amd64/generic" || n1.PowerState() != "unknown" {
		t.Fatalf("allocated %s cpu %d mem %d zone %s tags %v arch %s power %s", n1.Hostname(), n1.CPUCount(), n1.Memory(),
			n1.Zone().Name(), n1.Tags(), n1.Architecture(), n1.PowerState())
	}
	if _, _, err := juju.AllocateMachine(gomaasapi.AllocateMachineArgs{MinCPUCount: 64, AgentName: agentJuju}); !gomaasapi.IsNoMatchError(err) {
		t.Fatalf("an impossible constraint: %v, want no match", err)
	}
	_, _, err = juju.AllocateMachine(gomaasapi.AllocateMachineArgs{AgentName: agentJuju,
		Interfaces: []gomaasapi.InterfaceSpec{{Label: "0", Space: "db"}}})
	if serverStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "interfaces") {
		t.Fatalf("an interfaces constraint: %v, want a 400 naming it", err)
	}

	// Machines, by system id and by agent name.
	ms, err := juju.Machines(gomaasapi.MachinesArgs{SystemIDs: []string{elkhart.ID, n1.SystemID()}})
	if err != nil || !slices.Equal(machineIDs(ms), machineIDs([]gomaasapi.Machine{m, n1})) {
		t.Fatalf("Machines by system id: %v %v", machineIDs(ms), err)
	}
	ms, err = juju.Machines(gomaasapi.MachinesArgs{AgentName: agentJuju})
	if err != nil || len(ms) != 2 {
		t.Fatalf("Machines by agent name: %v %v", machineIDs(ms), err)
	}
	for _, x := range ms {
		if len(x.InterfaceSet()) != 1 || x.BootInterface() == nil || x.BootInterface().MACAddress() == "" || x.Zone() == nil {
			t.Errorf("machine %s: interfaces %d boot %v", x.Hostname(), len(x.InterfaceSet()), x.BootInterface())
		}
	}
	// elkhart has its sticky address in the lab's subnet: a link with the
	// subnet Juju reads its space from.
	var ek gomaasapi.Machine
	for _, x := range ms {
		if x.SystemID() == elkhart.ID {
			ek = x
		}
	}
	links := ek.BootInterface().Links()
	if len(links) != 1 || links[0].Mode() != "auto" || links[0].Subnet() == nil || links[0].Subnet().CIDR() != "10.77.0.0/24" ||
		links[0].Subnet().Space() != "undefined" || len(ek.IPAddresses()) != 1 {
		t.Errorf("elkhart's links %+v addresses %v", links, ek.IPAddresses())
	}

	// Start with user-data and a distro series.
	userData := base64.StdEncoding.EncodeToString([]byte("#cloud-config\nruncmd: [touch /marker]\n"))
	if err := ek.Start(gomaasapi.StartArgs{UserData: userData, DistroSeries: "jammy", Comment: "juju bootstrap"}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if ek.StatusName() != "Deploying" || ek.OperatingSystem() != "ubuntu" || ek.DistroSeries() != "jammy" {
		t.Fatalf("after Start: %s %s/%s", ek.StatusName(), ek.OperatingSystem(), ek.DistroSeries())
	}
	var ud api.UserData
	if status, raw, err := l.d.api(http.DefaultClient, bearer(l.alice), "GET", "/api/v1/machines/"+elkhart.ID+"/user-data", nil, &ud); err != nil || status != 200 || ud.UserData != userData {
		t.Fatalf("user-data as deployed: %d %s %v", status, raw, err)
	}
	if err := n1.Start(gomaasapi.StartArgs{DistroSeries: "ubuntu/noble"}); err != nil || n1.DistroSeries() != "noble" {
		t.Fatalf("Start ubuntu/noble (the golden image): %v %s", err, n1.DistroSeries())
	}
	var n1v api.Machine
	l.call(t, "GET", "/api/v1/machines/"+n1.SystemID(), nil, http.StatusOK, &n1v)
	if n1v.DeployImage != "golden" {
		t.Fatalf("n1 deploys %q, want golden", n1v.DeployImage)
	}

	// Owner data.
	if err := ek.SetOwnerData(map[string]string{"juju-model-uuid": "0a3c", "juju-is-controller": "true"}); err != nil {
		t.Fatalf("SetOwnerData: %v", err)
	}
	ms, err = juju.Machines(gomaasapi.MachinesArgs{AgentName: agentJuju, OwnerData: map[string]string{"juju-is-controller": "true"}})
	if err != nil || len(ms) != 1 || ms[0].SystemID() != elkhart.ID || ms[0].OwnerData()["juju-model-uuid"] != "0a3c" {
		t.Fatalf("Machines by owner data: %v %v", machineIDs(ms), err)
	}

	// Another user's key: none of it exists for bob.
	bob := l.juju(t, l.bob)
	ms, err = bob.Machines(gomaasapi.MachinesArgs{SystemIDs: []string{elkhart.ID, n1.SystemID()}})
	if err != nil || len(ms) != 0 {
		t.Fatalf("bob's Machines: %v %v", machineIDs(ms), err)
	}
	if ms, err = bob.Machines(gomaasapi.MachinesArgs{}); err != nil || !slices.Equal(machineIDs(ms), []string{spare.ID}) {
		t.Fatalf("bob sees %v %v, want only the spare", machineIDs(ms), err)
	}
	if _, _, err := bob.AllocateMachine(gomaasapi.AllocateMachineArgs{Hostname: "elkhart", AgentName: agentJuju}); !gomaasapi.IsNoMatchError(err) {
		t.Fatalf("bob allocates elkhart: %v", err)
	}
	if err := bob.ReleaseMachines(gomaasapi.ReleaseMachinesArgs{SystemIDs: []string{elkhart.ID}}); !gomaasapi.IsBadRequestError(err) {
		t.Fatalf("bob releases elkhart: %v, want gomaasapi's bad request (unknown machine)", err)
	}
	for _, op := range []string{"deploy", "release", "set_owner_data", "power_off"} {
		status, body := l.maasRaw(t, signed(l.bob), "POST", "machines/"+elkhart.ID+"/?op="+op, url.Values{"k": {"v"}})
		if status != http.StatusNotFound || strings.Contains(body, "alice") || strings.Contains(body, "0a3c") {
			t.Errorf("bob's op=%s on elkhart: %d %s", op, status, body)
		}
	}
	if status, body := l.maasRaw(t, signed(l.bob), "GET", "machines/"+elkhart.ID+"/", nil); status != http.StatusNotFound || strings.Contains(body, "0a3c") {
		t.Errorf("bob reads elkhart: %d %s", status, body)
	}

	// ReleaseMachines, while one is still Deploying; then again (Juju
	// does): never a 401 or 403.
	for i := 0; i < 2; i++ {
		if err := juju.ReleaseMachines(gomaasapi.ReleaseMachinesArgs{SystemIDs: []string{elkhart.ID, n1.SystemID()}, Comment: "juju destroy"}); err != nil {
			t.Fatalf("ReleaseMachines #%d: %v", i+1, err)
		}
	}
	l.call(t, "GET", "/api/v1/machines/"+elkhart.ID, nil, http.StatusOK, &after)
	if after.Owner != "" || (after.State != "RELEASING" && after.State != "READY") {
		t.Fatalf("elkhart after the release: %s owned by %q", after.State, after.Owner)
	}
	if ms, err = juju.Machines(gomaasapi.MachinesArgs{AgentName: agentJuju}); err != nil || len(ms) != 0 {
		t.Fatalf("Juju's machines after the release: %v %v", machineIDs(ms), err)
	}
}

// TestMAASAuthAndBadInput: what gets a clear 4xx from the real binary: a
// revoked token's key at once, bad signatures, a missing consumer key, a
// malformed header, unknown ops and absurd values.
func TestMAASAuthAndBadInput(t *testing.T) {
	l := newMAASLab(t)
	var tk api.Token
	l.call(t, "POST", "/api/v1/tokens", api.CreateToken{Name: "juju-temp", User: "alice"}, http.StatusCreated, &tk)
	juju := l.juju(t, tk.MAASKey)
	if _, err := juju.Machines(gomaasapi.MachinesArgs{}); err != nil {
		t.Fatalf("Machines: %v", err)
	}
	l.call(t, "DELETE", "/api/v1/tokens/"+tk.ID, nil, http.StatusOK, nil)
	_, err := juju.Machines(gomaasapi.MachinesArgs{})
	if serverStatus(err) != http.StatusUnauthorized {
		t.Fatalf("Machines with a revoked token's key: %v, want 401", err)
	}
	if _, err := gomaasapi.NewController(gomaasapi.ControllerArgs{BaseURL: l.d.url + "/MAAS/", APIKey: tk.MAASKey}); !gomaasapi.IsPermissionError(err) {
		t.Fatalf("NewController with a revoked token's key: %v, want gomaasapi's permission error", err)
	}

	p := strings.SplitN(l.alice, ":", 3)
	for _, c := range []struct {
		name, auth, method, path string
		form                     url.Values
		status                   int
		says                     string
	}{
		{"good", signed(l.alice), "GET", "users/?op=whoami", nil, 200, `"username":"alice"`},
		{"bad signature", signed(p[0] + ":" + p[1] + ":wrong"), "GET", "machines/", nil, 401, "invalid API key"},
		{"missing consumer key", strings.Replace(signed(l.alice), `oauth_consumer_key="alice", `, "", 1), "GET", "machines/", nil, 401, "oauth_consumer_key is missing"},
		{"malformed header", `OAuth oauth_token="x`, "GET", "machines/", nil, 401, "malformed Authorization header"},
		{"another scheme", "Bearer " + p[2], "GET", "machines/", nil, 401, "OAuth"},
		{"no header", "", "GET", "machines/", nil, 401, "Authorization required"},
		{"anonymous version", "", "GET", "version/", nil, 200, "capabilities"},
		{"unknown op", signed(l.alice), "POST", "machines/?op=acquire_everything", url.Values{}, 501, "op=acquire_everything"},
		{"unknown GET op", signed(l.alice), "GET", "machines/?op=list_all", nil, 501, "op=list_all"},
		{"absurd cpu_count", signed(l.alice), "POST", "machines/?op=allocate", url.Values{"cpu_count": {"1e99"}}, 400, "cpu_count"},
		{"absurd mem", signed(l.alice), "POST", "machines/?op=allocate", url.Values{"mem": {"-1"}}, 400, "mem"},
		{"absurd storage", signed(l.alice), "POST", "machines/?op=allocate", url.Values{"storage": {"root:((("}}, 400, "storage"},
		{"absurd status", signed(l.alice), "GET", "machines/?status=asleep", nil, 400, "status"},
		{"release nothing", signed(l.alice), "POST", "machines/?op=release", url.Values{}, 400, "machines"},
		{"JSON body", signed(l.alice), "POST", "machines/?op=allocate", nil, 400, "form parameters"},
		{"unknown machine", signed(l.alice), "GET", "machines/nope/", nil, 404, "No Machine matches"},
		{"unknown path", signed(l.alice), "GET", "nodes-everywhere/", nil, 404, "Unknown API endpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var status int
			var body string
			if c.name == "JSON body" {
				req, _ := http.NewRequest("POST", l.d.url+"/MAAS/api/2.0/"+c.path, strings.NewReader(`{"cpu_count": 2}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", c.auth)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status, body = resp.StatusCode, string(b)
			} else {
				status, body = l.maasRaw(t, c.auth, c.method, c.path, c.form)
			}
			if status != c.status || !strings.Contains(body, c.says) {
				t.Fatalf("%d %s, want %d with %q", status, body, c.status, c.says)
			}
		})
	}
}
