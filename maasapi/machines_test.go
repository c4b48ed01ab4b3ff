package maasapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"

	"rackd/store"
)

// readyMachine enlists a machine with an inventory (two disks) and
// commissions it to READY.
func (ts *testServer) readyMachine(t *testing.T, host string, mac string, tags ...string) store.Machine {
	t.Helper()
	ctx := context.Background()
	res, err := ts.st.Enlist(ctx, store.EnlistRequest{Hostname: host, Arch: "amd64", MACs: []string{mac}, CPUCount: 4, MemoryMB: 8192,
		Inventory: store.Inventory{Vendor: "QEMU", Product: "Standard PC", Disks: []store.Disk{
			{Name: "sda", SizeBytes: 40e9, Model: "QEMU HARDDISK", Serial: "s1"}, {Name: "sdb", SizeBytes: 200e9}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Machine.ID
	if _, err := ts.st.Transition(ctx, store.System, store.TransitionRequest{Machine: id, Action: store.ActionCommission, Running: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.st.Transition(ctx, store.System, store.TransitionRequest{Machine: id, Action: store.ActionCommissioningDone}); err != nil {
		t.Fatal(err)
	}
	if len(tags) > 0 {
		if _, err := ts.st.UpdateMachine(ctx, store.System, id, store.MachinePatch{Tags: &tags}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ts.st.Machine(id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// maas sends a request signed with key: GET with params in the query,
// POST and PUT urlencoded.
func (ts *testServer) maas(t *testing.T, key, method, path string, params url.Values) (int, string) {
	t.Helper()
	if method == "GET" || method == "DELETE" {
		if len(params) > 0 {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			path += sep + params.Encode()
		}
		status, body, _ := ts.do(t, oauthHeader(key), method, path, nil, "")
		return status, body
	}
	if params == nil {
		params = url.Values{}
	}
	status, body, _ := ts.do(t, oauthHeader(key), method, path, params, "")
	return status, body
}

func decodeMachine(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return m
}

// TestStatusTable: every rackd state has a MAAS status, and no two rows
// share a code or a word.
func TestStatusTable(t *testing.T) {
	codes, names := map[int]bool{}, map[string]bool{}
	for _, st := range store.States {
		if _, ok := statuses[statusKey{st, false}]; !ok {
			t.Errorf("state %s has no MAAS status", st)
		}
	}
	for k, st := range statuses {
		if codes[st.code] || names[st.name] {
			t.Errorf("%v: status %d %q given twice", k, st.code, st.name)
		}
		codes[st.code], names[st.name] = true, true
	}
}

// TestMachineRepresentation: what clients decode strictly is there, with
// MAAS's types.
func TestMachineRepresentation(t *testing.T) {
	ts := newTestServer(t)
	key, _ := ts.key(t, "alice", false)
	m := ts.readyMachine(t, "node1", "52:54:00:00:00:01", "fast")
	status, body := ts.maas(t, key, "GET", "machines/"+m.ID+"/", nil)
	if status != 200 {
		t.Fatalf("GET machine: %d %s", status, body)
	}
	v := decodeMachine(t, body)
	want := map[string]any{"system_id": m.ID, "hostname": "node1", "fqdn": "node1.maas", "status": 4.0, "status_name": "Ready",
		"architecture": "amd64/generic", "cpu_count": 4.0, "memory": 8192.0, "power_type": "manual", "power_state": "unknown",
		"osystem": "", "distro_series": "", "owner": nil, "resource_uri": Prefix + "machines/" + m.ID + "/", "node_type": 0.0}
	for k, w := range want {
		if got, ok := v[k]; !ok || got != w {
			t.Errorf("%s = %#v (present %v), want %#v", k, got, ok, w)
		}
	}
	for _, k := range []string{"owner_data", "zone", "pool", "domain", "hardware_info", "default_gateways"} {
		if _, ok := v[k].(map[string]any); !ok {
			t.Errorf("%s is %#v, want an object", k, v[k])
		}
	}
	for _, k := range []string{"tag_names", "ip_addresses", "interface_set", "physicalblockdevice_set", "blockdevice_set"} {
		if _, ok := v[k].([]any); !ok {
			t.Errorf("%s is %#v, want a list", k, v[k])
		}
	}
	if z := v["zone"].(map[string]any); z["name"] != "default" || z["resource_uri"] == nil {
		t.Errorf("zone %v", z)
	}
	if tags := v["tag_names"].([]any); len(tags) != 1 || tags[0] != "fast" {
		t.Errorf("tag_names %v", tags)
	}
	ifs := v["interface_set"].([]any)
	if len(ifs) != 1 {
		t.Fatalf("interface_set %v", ifs)
	}
	iface := ifs[0].(map[string]any)
	if iface["mac_address"] != "52:54:00:00:00:01" || iface["name"] != "eth0" || iface["type"] != "physical" || iface["enabled"] != true {
		t.Errorf("interface %v", iface)
	}
	if links := iface["links"].([]any); len(links) != 1 || links[0].(map[string]any)["mode"] != "link_up" {
		t.Errorf("links %v", links)
	}
	if bi, ok := v["boot_interface"].(map[string]any); !ok || bi["id"] != iface["id"] {
		t.Errorf("boot_interface %v", v["boot_interface"])
	}
	bds := v["physicalblockdevice_set"].([]any)
	if len(bds) != 2 {
		t.Fatalf("physicalblockdevice_set %v", bds)
	}
	sda := bds[0].(map[string]any)
	if sda["name"] != "sda" || sda["size"] != 40e9 || sda["model"] != "QEMU HARDDISK" || sda["path"] != "/dev/disk/by-dname/sda" {
		t.Errorf("sda %v", sda)
	}
	if hw := v["hardware_info"].(map[string]any); hw["system_vendor"] != "QEMU" {
		t.Errorf("hardware_info %v", hw)
	}
	// The list shows the same machine.
	status, body = ts.maas(t, key, "GET", "machines/", nil)
	var list []map[string]any
	if err := json.Unmarshal([]byte(body), &list); status != 200 || err != nil || len(list) != 1 || list[0]["system_id"] != m.ID {
		t.Fatalf("machines/: %d %s %v", status, body, err)
	}
}

func TestMachinesFilters(t *testing.T) {
	ts := newTestServer(t)
	key, _ := ts.key(t, "alice", false)
	a := ts.readyMachine(t, "node-a", "52:54:00:00:00:0a", "gpu")
	b := ts.readyMachine(t, "node-b", "52:54:00:00:00:0b")
	if st, body := ts.maas(t, key, "POST", "machines/?op=allocate", url.Values{"name": {"node-b"}, "agent_name": {"u1"}}); st != 200 {
		t.Fatalf("allocate: %d %s", st, body)
	}
	ids := func(params url.Values) []string {
		t.Helper()
		st, body := ts.maas(t, key, "GET", "machines/", params)
		if st != 200 {
			t.Fatalf("machines/ %v: %d %s", params, st, body)
		}
		var list []map[string]any
		json.Unmarshal([]byte(body), &list)
		var out []string
		for _, m := range list {
			out = append(out, m["system_id"].(string))
		}
		return out
	}
	for _, c := range []struct {
		params url.Values
		want   []string
	}{
		{nil, []string{a.ID, b.ID}},
		{url.Values{"id": {b.ID}}, []string{b.ID}},
		{url.Values{"hostname": {"node-a"}}, []string{a.ID}},
		{url.Values{"hostname": {"node-a.maas"}}, []string{a.ID}},
		{url.Values{"mac_address": {"52:54:00:00:00:0B"}}, []string{b.ID}},
		{url.Values{"agent_name": {"u1"}}, []string{b.ID}},
		{url.Values{"status": {"ready"}}, []string{a.ID}},
		{url.Values{"status": {"allocated"}}, []string{b.ID}},
		{url.Values{"tags": {"gpu"}}, []string{a.ID}},
		{url.Values{"zone": {"default"}}, []string{a.ID, b.ID}},
		{url.Values{"zone": {"elsewhere"}}, nil},
		{url.Values{"pool": {"default"}}, []string{a.ID, b.ID}},
	} {
		if got := ids(c.params); !slices.Equal(got, c.want) {
			t.Errorf("machines/?%s: %v, want %v", c.params.Encode(), got, c.want)
		}
	}
	for _, bad := range []url.Values{{"status": {"sleeping"}}, {"cpu_count": {"4"}}} {
		if st, body := ts.maas(t, key, "GET", "machines/", bad); st != 400 || !strings.HasPrefix(body, "{") {
			t.Errorf("machines/?%s: %d %s, want a 400 of field errors", bad.Encode(), st, body)
		}
	}
}

// TestAllocateReservedByName: a machine reserved by name under an agent name is
// that agent's to take again (a no-op), nobody else's; its allocation
// token hands it to another agent.
func TestAllocateReservedByName(t *testing.T) {
	ts := newTestServer(t)
	alice, _ := ts.key(t, "alice", false)
	bob, _ := ts.key(t, "bob", false)
	m := ts.readyMachine(t, "elkhart", "52:54:00:00:00:01")
	st, body := ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"elkhart"}, "agent_name": {"autopilot"}})
	if st != 200 {
		t.Fatalf("allocate: %d %s", st, body)
	}
	v := decodeMachine(t, body)
	token, _ := v["rackd_allocation_token"].(string)
	if v["system_id"] != m.ID || v["status_name"] != "Allocated" || v["owner"] != "alice" || token == "" {
		t.Fatalf("allocate answered %v", v)
	}
	if _, ok := v["constraints_by_type"].(map[string]any); !ok {
		t.Errorf("constraints_by_type missing: %v", v["constraints_by_type"])
	}
	// The same agent again: a no-op that answers the machine.
	st, body = ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"elkhart"}, "agent_name": {"autopilot"}})
	if st != 200 || decodeMachine(t, body)["system_id"] != m.ID {
		t.Fatalf("allocate again: %d %s", st, body)
	}
	// Another agent, another user: no match (409), naming nobody.
	for _, c := range []struct{ key, agent string }{{alice, "juju"}, {alice, ""}, {bob, "autopilot"}} {
		st, body = ts.maas(t, c.key, "POST", "machines/?op=allocate", url.Values{"name": {"elkhart"}, "agent_name": {c.agent}})
		if st != 409 || !strings.HasPrefix(body, "No available machine matches constraints: name=elkhart") {
			t.Errorf("agent %q: %d %s, want 409 no match", c.agent, st, body)
		}
		if c.key == bob && strings.Contains(body, "alice") {
			t.Errorf("bob learns the holder: %s", body)
		}
	}
	// The token, in the comment, hands it to Juju.
	st, body = ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"elkhart"}, "agent_name": {"juju"},
		"comment": {"bootstrap rackd-token=" + token}})
	if st != 200 {
		t.Fatalf("adopt with the token: %d %s", st, body)
	}
	if got, _ := ts.st.Machine(m.ID); got.AgentName != "juju" {
		t.Fatalf("agent name %q after adoption, want juju", got.AgentName)
	}
	// The old token is spent.
	st, body = ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"elkhart"}, "agent_name": {"x"}, "rackd_token": {token}})
	if st != 409 {
		t.Errorf("a spent token: %d %s", st, body)
	}
}

func TestAllocateConstraints(t *testing.T) {
	ts := newTestServer(t)
	key, _ := ts.key(t, "alice", false)
	ts.readyMachine(t, "small", "52:54:00:00:00:01")
	big := ts.readyMachine(t, "tagged", "52:54:00:00:00:02", "gpu")
	cases := []struct {
		name   string
		params url.Values
		status int
		want   string
	}{
		{"tags", url.Values{"tags": {"gpu"}}, 200, big.ID},
		{"not_tags", url.Values{"not_tags": {"gpu"}, "dry_run": {"false"}}, 200, "small"},
		{"no match", url.Values{"cpu_count": {"64"}}, 409, "No available machine matches constraints: cpu_count=64"},
		{"storage too big", url.Values{"storage": {"root:500"}}, 409, "No available machine"},
		{"storage tags", url.Values{"storage": {"root:10(ssd)"}}, 400, "carry no tags"},
		{"storage malformed", url.Values{"storage": {"root:big"}}, 400, "size must be a number"},
		{"interfaces", url.Values{"interfaces": {"eth0:space=db"}}, 400, "no spaces"},
		{"subnets", url.Values{"subnets": {"10.0.0.0/24"}}, 400, "cannot be honoured"},
		{"not_subnets cidr", url.Values{"not_subnets": {"10.0.0.0/24"}}, 400, "space:NAME only"},
		{"pool", url.Values{"pool": {"gold"}}, 400, "No such pool"},
		{"absurd cpu", url.Values{"cpu_count": {"-3"}}, 400, "between"},
		{"absurd mem", url.Values{"mem": {"lots"}}, 400, "whole number"},
		{"dry_run", url.Values{"dry_run": {"true"}}, 400, "dry runs"},
		{"token without name", url.Values{"rackd_token": {"x"}}, 400, "give its name"},
		{"not_in_pool default", url.Values{"not_in_pool": {"default"}}, 409, "pool"},
		{"unknown name", url.Values{"name": {"nonesuch"}}, 409, "name=nonesuch"},
		{"arch mismatch", url.Values{"arch": {"arm64/generic"}}, 409, "arch=arm64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, body := ts.maas(t, key, "POST", "machines/?op=allocate", c.params)
			if st != c.status || !strings.Contains(body, c.want) {
				t.Fatalf("%d %s, want %d with %q", st, body, c.status, c.want)
			}
			if st == 200 {
				id := decodeMachine(t, body)["system_id"].(string)
				if st, body := ts.maas(t, key, "POST", "machines/?op=release", url.Values{"machines": {id}}); st != 200 {
					t.Fatalf("release: %d %s", st, body)
				}
				if _, err := ts.st.CompleteRelease(context.Background(), id); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// storage met: constraints_by_type names the disk given.
	st, body := ts.maas(t, key, "POST", "machines/?op=allocate", url.Values{"name": {"small"}, "storage": {"root:30,data:100"}})
	if st != 200 {
		t.Fatalf("storage: %d %s", st, body)
	}
	v := decodeMachine(t, body)
	cbt := v["constraints_by_type"].(map[string]any)["storage"].(map[string]any)
	disks := v["physicalblockdevice_set"].([]any)
	if cbt["root"].([]any)[0] != disks[0].(map[string]any)["id"] || cbt["data"].([]any)[0] != disks[1].(map[string]any)["id"] {
		t.Errorf("constraints_by_type %v for disks %v", cbt, disks)
	}
}

// TestVisibility: another user's held machine does not exist for a user;
// unowned ones are seen by all.
func TestVisibility(t *testing.T) {
	ts := newTestServer(t)
	alice, _ := ts.key(t, "alice", false)
	bob, _ := ts.key(t, "bob", false)
	admin, _ := ts.key(t, "root", true)
	held := ts.readyMachine(t, "held", "52:54:00:00:00:01")
	free := ts.readyMachine(t, "free", "52:54:00:00:00:02")
	if st, body := ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"held"}, "agent_name": {"u"}}); st != 200 {
		t.Fatalf("allocate: %d %s", st, body)
	}
	count := func(key string) int {
		_, body := ts.maas(t, key, "GET", "machines/", nil)
		var list []any
		json.Unmarshal([]byte(body), &list)
		return len(list)
	}
	if count(alice) != 2 || count(bob) != 1 || count(admin) != 2 {
		t.Errorf("alice sees %d, bob %d, admin %d; want 2, 1, 2", count(alice), count(bob), count(admin))
	}
	for _, c := range []struct {
		method, path string
		params       url.Values
		status       int
	}{
		{"GET", "machines/" + held.ID + "/", nil, 404},
		{"GET", "machines/" + free.ID + "/", nil, 200},
		{"POST", "machines/" + held.ID + "/?op=deploy", url.Values{}, 404},
		{"POST", "machines/" + held.ID + "/?op=release", url.Values{}, 404},
		{"POST", "machines/" + held.ID + "/?op=set_owner_data", url.Values{"k": {"v"}}, 404},
		{"POST", "machines/" + held.ID + "/?op=power_off", url.Values{}, 404},
		{"POST", "machines/?op=release", url.Values{"machines": {held.ID}}, 400},
		{"GET", "machines/", url.Values{"id": {held.ID}}, 200},
	} {
		st, body := ts.maas(t, bob, c.method, c.path, c.params)
		if st != c.status || strings.Contains(body, "alice") || (c.method == "GET" && st == 200 && strings.Contains(body, held.ID)) {
			t.Errorf("bob %s %s: %d %s, want %d and nothing of alice's", c.method, c.path, st, body, c.status)
		}
	}
}

// TestReleaseRepeated: Juju releases what it just released; the answer is
// never a 401 or 403.
func TestReleaseRepeated(t *testing.T) {
	ts := newTestServer(t)
	alice, _ := ts.key(t, "alice", false)
	m := ts.readyMachine(t, "node1", "52:54:00:00:00:01")
	if st, body := ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"node1"}}); st != 200 {
		t.Fatalf("allocate: %d %s", st, body)
	}
	for i := 0; i < 2; i++ {
		if st, body := ts.maas(t, alice, "POST", "machines/?op=release", url.Values{"machines": {m.ID}, "comment": {"done"}}); st != 200 {
			t.Fatalf("bulk release %d: %d %s", i, st, body)
		}
		st, body := ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=release", url.Values{})
		if st != 200 {
			t.Fatalf("release %d: %d %s", i, st, body)
		}
		if name := decodeMachine(t, body)["status_name"]; name != "Releasing" {
			t.Fatalf("status %v after release", name)
		}
	}
}

func TestOwnerData(t *testing.T) {
	ts := newTestServer(t)
	alice, _ := ts.key(t, "alice", false)
	m := ts.readyMachine(t, "node1", "52:54:00:00:00:01")
	if st, body := ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=set_owner_data", url.Values{"k": {"v"}}); st != 409 {
		t.Fatalf("owner data of an unheld machine: %d %s", st, body)
	}
	ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"node1"}})
	st, body := ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=set_owner_data", url.Values{"juju-model-uuid": {"abc"}, "unit": {"mysql/0"}})
	if st != 200 {
		t.Fatalf("set_owner_data: %d %s", st, body)
	}
	od := decodeMachine(t, body)["owner_data"].(map[string]any)
	if od["juju-model-uuid"] != "abc" || od["unit"] != "mysql/0" {
		t.Fatalf("owner_data %v", od)
	}
	st, body = ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=set_owner_data", url.Values{"unit": {""}})
	if od := decodeMachine(t, body)["owner_data"].(map[string]any); st != 200 || len(od) != 1 {
		t.Fatalf("remove a key: %d %v", st, od)
	}
	for _, bad := range []url.Values{{"bad key": {"x"}}, {"k": {strings.Repeat("x", store.MaxOwnerDataValue+1)}}} {
		if st, body := ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=set_owner_data", bad); st != 400 {
			t.Errorf("owner data %v: %d %s", bad, st, body)
		}
	}
	ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=release", url.Values{})
	if got, _ := ts.st.Machine(m.ID); got.OwnerData != nil {
		t.Fatalf("owner data %v after release", got.OwnerData)
	}
}

func TestDeploy(t *testing.T) {
	ts := newTestServer(t)
	alice, _ := ts.key(t, "alice", false)
	m := ts.readyMachine(t, "node1", "52:54:00:00:00:01")
	sha := strings.Repeat("a", 64)
	for _, im := range []store.Image{
		{Name: "jammy-server-cloudimg-amd64", Arch: "amd64", Purpose: store.PurposeDeploy},
		{Name: "bookworm", Arch: "amd64", Purpose: store.PurposeDeploy, OS: "debian", Series: "bookworm"},
		{Name: "noble-arm", Arch: "arm64", Purpose: store.PurposeDeploy},
	} {
		im.Files = []store.ImageFile{{Path: "disk.img", Role: "disk", SHA256: sha, Size: 1}}
		if _, err := ts.st.PutImage(context.Background(), store.System, im); err != nil {
			t.Fatal(err)
		}
	}
	ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"node1"}})
	deploy := func(params url.Values) (int, string) {
		return ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=deploy", params)
	}
	for _, c := range []struct {
		params url.Values
		want   string
	}{
		{url.Values{"distro_series": {"noble"}}, `is not available for amd64/generic: rackd has debian/bookworm, ubuntu/jammy`},
		{url.Values{"distro_series": {"ubuntu/bookworm"}}, "not available"},
		{url.Values{"user_data": {"not base64!"}}, "base64"},
		{url.Values{"install_kvm": {"true"}}, "KVM"},
	} {
		if st, body := deploy(c.params); st != 400 || !strings.Contains(body, c.want) {
			t.Errorf("deploy %v: %d %s, want 400 with %q", c.params, st, body, c.want)
		}
	}
	// Without a series, a machine never deployed has no image to default
	// to among two: the store's refusal names them.
	if st, body := deploy(url.Values{}); st != 400 || !strings.Contains(body, "jammy-server-cloudimg-amd64") {
		t.Errorf("deploy without a series: %d %s", st, body)
	}
	ud := base64.StdEncoding.EncodeToString([]byte("#cloud-config\n"))
	st, body := deploy(url.Values{"distro_series": {"ubuntu/jammy"}, "user_data": {ud}, "hwe_kernel": {"hwe-22.04"}})
	if st != 200 {
		t.Fatalf("deploy: %d %s", st, body)
	}
	v := decodeMachine(t, body)
	if v["status_name"] != "Deploying" || v["osystem"] != "ubuntu" || v["distro_series"] != "jammy" {
		t.Errorf("deploying machine: %v %v %v", v["status_name"], v["osystem"], v["distro_series"])
	}
	got, _ := ts.st.Machine(m.ID)
	if got.DeployImage != "jammy-server-cloudimg-amd64" {
		t.Errorf("deploy image %q", got.DeployImage)
	}
	if ud, err := ts.st.UserData(store.System, m.ID); err != nil || string(ud) != "#cloud-config\n" {
		t.Errorf("user data %q %v", ud, err)
	}
}

// pythonMultipart encodes params as python-libmaas does (email's
// MIMEMultipart): every part base64 with a Content-Transfer-Encoding
// header, strings text/plain, other values application/octet-stream.
func pythonMultipart(params [][2]string, file [2]string) ([]byte, string) {
	const boundary = "===============6215376483271736131=="
	var b strings.Builder
	part := func(name, ctype, filename string, content []byte) {
		b.WriteString("--" + boundary + "\r\n")
		b.WriteString("Content-Type: " + ctype + "\r\nMIME-Version: 1.0\r\nContent-Transfer-Encoding: base64\r\n")
		disp := `form-data; name="` + name + `"`
		if filename != "" {
			disp += `; filename="` + filename + `"`
		}
		b.WriteString("Content-Disposition: " + disp + "\r\n\r\n")
		enc := base64.StdEncoding.EncodeToString(content)
		for len(enc) > 76 {
			b.WriteString(enc[:76] + "\r\n")
			enc = enc[76:]
		}
		b.WriteString(enc + "\r\n")
	}
	for _, p := range params {
		part(p[0], `text/plain; charset="utf-8"`, "", []byte(p[1]))
	}
	if file[0] != "" {
		part(file[0], "application/octet-stream", file[0], []byte(file[1]))
	}
	b.WriteString("--" + boundary + "--\r\n")
	return []byte(b.String()), `multipart/form-data; boundary="` + boundary + `"`
}

// TestPythonMultipart: python-libmaas's and Ansible's multipart bodies,
// every part in base64, are read as their values.
func TestPythonMultipart(t *testing.T) {
	ts := newTestServer(t)
	key, _ := ts.key(t, "alice", false)
	m := ts.readyMachine(t, "node1", "52:54:00:00:00:01")
	long := strings.Repeat("juju-model-", 20)
	body, ctype := pythonMultipart([][2]string{{"name", "node1"}, {"agent_name", long}}, [2]string{})
	status, out, _ := ts.do(t, oauthHeader(key), "POST", "machines/?op=allocate", body, ctype)
	if status != 200 {
		t.Fatalf("allocate: %d %s", status, out)
	}
	if got, _ := ts.st.Machine(m.ID); got.AgentName != long {
		t.Fatalf("agent name %q, want %q", got.AgentName, long)
	}
	body, ctype = pythonMultipart([][2]string{{"unit", "mysql/0"}}, [2]string{})
	status, out, _ = ts.do(t, oauthHeader(key), "POST", "machines/"+m.ID+"/?op=set_owner_data", body, ctype)
	if status != 200 || decodeMachine(t, out)["owner_data"].(map[string]any)["unit"] != "mysql/0" {
		t.Fatalf("set_owner_data: %d %s", status, out)
	}
	// A file part: its content decoded too.
	body, ctype = pythonMultipart([][2]string{{"filename", "state"}}, [2]string{"file", "provider-state: 1\n"})
	f, err := decodeForm(ctype, bytes.NewReader(body), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.cleanup()
	fh := f.files["file"]
	if len(fh) != 1 || f.values.Get("filename") != "state" {
		t.Fatalf("file form: %v %v", f.values, f.files)
	}
	rd, _ := fh[0].Open()
	content, _ := io.ReadAll(rd)
	if string(content) != "provider-state: 1\n" {
		t.Fatalf("file content %q", content)
	}
	// Bad base64 is a malformed body.
	bad := bytes.Replace(body, []byte("c3RhdGU="), []byte("c3R!!!U="), 1)
	if _, err := decodeForm(ctype, bytes.NewReader(bad), 1<<20); err == nil {
		t.Fatalf("bad base64 in a part decoded")
	}
}

// TestDeployDefaultImage: without a series, the one deploy image of the
// machine's arch is deployed (and a Ready machine allocated first).
func TestDeployDefaultImage(t *testing.T) {
	ts := newTestServer(t)
	alice, _ := ts.key(t, "alice", false)
	m := ts.readyMachine(t, "node1", "52:54:00:00:00:01")
	im := store.Image{Name: "noble-server-cloudimg-amd64", Arch: "amd64", Purpose: store.PurposeDeploy,
		Files: []store.ImageFile{{Path: "disk.img", Role: "disk", SHA256: strings.Repeat("b", 64), Size: 1}}}
	if _, err := ts.st.PutImage(context.Background(), store.System, im); err != nil {
		t.Fatal(err)
	}
	st, body := ts.maas(t, alice, "POST", "machines/"+m.ID+"/?op=deploy", url.Values{"agent_name": {"tf"}})
	if st != 200 {
		t.Fatalf("deploy: %d %s", st, body)
	}
	v := decodeMachine(t, body)
	if v["status_name"] != "Deploying" || v["owner"] != "alice" || v["distro_series"] != "noble" {
		t.Fatalf("deployed %v %v %v", v["status_name"], v["owner"], v["distro_series"])
	}
	if got, _ := ts.st.Machine(m.ID); got.AgentName != "tf" {
		t.Errorf("agent name %q", got.AgentName)
	}
}
