package agent

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/netnstest"
	"rackd/nocloud"
	"rackd/store"
	"rackd/store/storetest"
)

// getSeed fetches the seed as the deploy environment does.
func (ta *testAgent) getSeed(t *testing.T, auth string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", ta.url+enlist.PathSeed, nil)
	if err != nil {
		t.Fatal(err)
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
	return resp.StatusCode, resp.Header, b
}

// seedFiles takes the four files out of a seed image with mtools, as a
// peer that knows nothing of rackd's FAT writer.
func seedFiles(t *testing.T, img []byte) map[string]string {
	t.Helper()
	mcopy := netnstest.Tool(t, "mcopy")
	dir := t.TempDir()
	path := filepath.Join(dir, "seed.img")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range []string{"meta-data", "user-data", "vendor-data", "network-config"} {
		b, err := exec.Command(mcopy, "-n", "-i", path, "::"+name, "-").Output()
		if err != nil {
			if name == "network-config" {
				continue // a seed without interfaces has none
			}
			t.Fatalf("mcopy %s: %v", name, err)
		}
		out[name] = string(b)
	}
	return out
}

var phoneHomeURL = regexp.MustCompile(`(?m)^  url: "([^"]+)"$`)

// TestSeed: the deploy environment's phase credential, and nothing else,
// gets its own machine's seed, which holds the deployment's identity and
// the machine's static network; the phone-home URL in it is the one that
// makes the machine DEPLOYED; once the image is written the seed is gone.
func TestSeed(t *testing.T) {
	f := newDeployFixture(t)
	if status, raw := f.call(t, f.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.77.0.0/24", Gateway: "10.77.0.1",
		DNSServers: []string{"10.77.0.2", "10.77.0.3"}, Domain: "rack.example"}, nil); status != 201 {
		t.Fatalf("subnet: %d %s", status, raw)
	}
	m := f.machine(t, "web1", "52:54:00:00:1e:01", f.alice)
	if len(m.IPs) != 1 || m.IPs[0].Kind != "sticky" {
		t.Fatalf("sticky address: %+v", m.IPs)
	}
	sticky := m.IPs[0].IP
	extra := storetest.SSHKey(t, "ed25519", 0, "ci")
	req := api.ActionRequest{Image: "debian", UserData: base64.StdEncoding.EncodeToString([]byte(secretUserData)), SSHKeys: []string{extra}}
	var dep api.Machine
	if status, raw := f.call(t, f.alice, "POST", "/api/v1/machines/"+m.ID+"/deploy", req, &dep); status != 200 {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	other := f.machine(t, "web2", "52:54:00:00:1e:02", f.bob)
	if status, raw := f.call(t, f.bob, "POST", "/api/v1/machines/"+other.ID+"/deploy", api.ActionRequest{Image: "debian"}, nil); status != 200 {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	mm, _ := f.Store().Machine(m.ID)
	phase := f.Store().PhaseToken(mm)
	om, _ := f.Store().Machine(other.ID)

	// Nobody but the deploy environment gets it.
	for name, auth := range map[string]string{"anonymous": "", "alice's API token": "Bearer " + f.alice,
		"the admin's API token": "Bearer " + f.admin, "a forged token": "Bearer " + strings.Repeat("A", 43), "basic": "Basic " + phase} {
		status, _, raw := f.getSeed(t, auth)
		wantError(t, status, raw, 401, api.CodeUnauthorized)
		if strings.Contains(string(raw), "USERDATA-SECRET") || strings.Contains(string(raw), m.ID) {
			t.Fatalf("%s: the refusal says too much: %s", name, raw)
		}
	}
	// Another machine's credential gets that machine's seed, not this one's.
	status, _, img := f.getSeed(t, "Bearer "+f.Store().PhaseToken(om))
	if status != 200 {
		t.Fatalf("the other machine's seed: %d %s", status, img)
	}
	if files := seedFiles(t, img); strings.Contains(files["user-data"], "USERDATA-SECRET") || !strings.Contains(files["meta-data"], `"web2.rack.example"`) {
		t.Fatalf("the other machine's seed: %+v", files)
	}

	status, hdr, img := f.getSeed(t, "Bearer "+phase)
	if status != 200 || hdr.Get("Content-Type") != "application/octet-stream" || hdr.Get("Content-Length") != strconv.Itoa(len(img)) || len(img)%(1<<20) != 0 {
		t.Fatalf("seed: %d %v, %d bytes", status, hdr, len(img))
	}
	files := seedFiles(t, img)
	var v api.Machine
	f.call(t, f.alice, "GET", "/api/v1/machines/"+m.ID, nil, &v)
	d := v.Deployment
	if d == nil || d.SeedServed == nil {
		t.Fatalf("the seed's fetch is not shown: %+v", d)
	}
	for _, want := range []string{`instance-id: "` + d.InstanceID + `"`, `local-hostname: "web1.rack.example"`, f.aliceKey, extra} {
		if !strings.Contains(files["meta-data"], want) {
			t.Errorf("meta-data lacks %q:\n%s", want, files["meta-data"])
		}
	}
	if files["user-data"] != secretUserData {
		t.Errorf("user-data %q, want the deploy's", files["user-data"])
	}
	for _, want := range []string{`macaddress: "52:54:00:00:1e:01"`, `"` + sticky + `/24"`, `gateway4: "10.77.0.1"`,
		`"10.77.0.2"`, `"10.77.0.3"`, `"rack.example"`} {
		if !strings.Contains(files["network-config"], want) {
			t.Errorf("network-config lacks %q:\n%s", want, files["network-config"])
		}
	}
	u := phoneHomeURL.FindStringSubmatch(files["vendor-data"])
	if u == nil || !strings.HasPrefix(u[1], f.url+enlist.PathOSPrefix+m.ID+".") || !strings.HasSuffix(u[1], "/phone-home") ||
		!strings.Contains(files["vendor-data"], `endpoint: "`+strings.TrimSuffix(u[1], "/phone-home")+`/events"`) {
		t.Fatalf("vendor-data's URLs (base %s):\n%s", f.url, files["vendor-data"])
	}
	// A retry of the download gets the same seed.
	if status, _, again := f.getSeed(t, "Bearer "+phase); status != 200 || string(again) != string(img) {
		t.Fatalf("second download: %d, same=%t", status, string(again) == string(img))
	}

	// The image written: the seed went with it.
	body := []byte(`{"machine":"` + m.ID + `","disk":"vda","bytes":1000000}`)
	if status, raw := f.post(t, phase, "/metadata/v1/deployed", "application/json", body); status != 200 {
		t.Fatalf("deployed: %d %s", status, raw)
	}
	status, _, raw := f.getSeed(t, "Bearer "+phase)
	wantError(t, status, raw, 409, api.CodeConflict)

	// The URL in the seed is the one cloud-init's phone_home posts to.
	form := url.Values{"instance_id": {d.InstanceID}, "hostname": {"web1"}, "fqdn": {"web1.rack.example"}}
	resp, err := http.PostForm(u[1], form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _ := f.Store().Machine(m.ID); resp.StatusCode != 200 || got.State != store.StateDeployed {
		t.Fatalf("phone-home to the seed's URL: %d, machine %s", resp.StatusCode, got.State)
	}
	if strings.Contains(f.log.String(), strings.TrimPrefix(u[1], f.url+enlist.PathOSPrefix+m.ID+".")) {
		t.Error("the log holds the OS credential")
	}
	_, metrics := f.call(t, "", "GET", "/metrics", nil, nil)
	for _, series := range []string{`rackd_metadata_seed_requests_total{outcome="served"} 3`,
		`rackd_metadata_seed_requests_total{outcome="unauthorized"} 5`, `rackd_metadata_seed_requests_total{outcome="conflict"} 1`} {
		if !strings.Contains(string(metrics), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// TestSeedIdentity: the rule that makes the OS's identity from the store's
// records, checked by nocloud.Render.
func TestSeedIdentity(t *testing.T) {
	v4 := store.Subnet{CIDR: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1"),
		DNSServers: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, Domain: "rack.example"}
	v4b := store.Subnet{CIDR: netip.MustParsePrefix("10.1.0.0/24"), Gateway: netip.MustParseAddr("10.1.0.1"),
		DNSServers: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.1.0.2")}, Domain: "storage.example"}
	v6 := store.Subnet{CIDR: netip.MustParsePrefix("fd00::/64"), Gateway: netip.MustParseAddr("fd00::1")}
	src := store.SeedSource{
		Machine:    store.Machine{Hostname: "web1"},
		Deployment: store.Deployment{InstanceID: "i-0123456789abcdef", SSHKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIqI4910CfGV/VLbLTy6XXLKZwm/HZQSG/N0iAG0D29c a"}},
		OSToken:    "m-1.tok",
		Addresses: []store.SeedAddress{
			{MAC: "52:54:00:00:00:01", IP: netip.MustParseAddr("10.0.0.5"), Subnet: v4},
			{MAC: "52:54:00:00:00:01", IP: netip.MustParseAddr("fd00::5"), Subnet: v6},
			{MAC: "52:54:00:00:00:02", IP: netip.MustParseAddr("10.1.0.5"), Subnet: v4b},
		},
	}
	id := seedIdentity(src, "http://10.0.0.1:5240")
	if id.Hostname != "web1.rack.example" || id.PhoneHomeURL != "http://10.0.0.1:5240/metadata/v1/os/m-1.tok/phone-home" ||
		id.EventsURL != "http://10.0.0.1:5240/metadata/v1/os/m-1.tok/events" || len(id.Interfaces) != 2 {
		t.Fatalf("identity %+v", id)
	}
	a, b := id.Interfaces[0], id.Interfaces[1]
	if a.MAC != "52:54:00:00:00:01" || len(a.Addresses) != 2 || a.Addresses[0].String() != "10.0.0.5/24" || a.Addresses[1].String() != "fd00::5/64" ||
		a.Gateway.String() != "10.0.0.1" || len(a.Search) != 1 {
		t.Errorf("first interface %+v", a)
	}
	// One default route per family: the second interface's IPv4 gateway
	// would be a second one.
	if b.Gateway.IsValid() || len(b.DNS) != 2 || b.Search[0] != "storage.example" {
		t.Errorf("second interface %+v", b)
	}
	if _, err := nocloud.Render(id); err != nil {
		t.Fatalf("Render: %v", err)
	}
	// No sticky address: no interfaces (cloud-init falls back to DHCP), and
	// a name in the default domain.
	id = seedIdentity(store.SeedSource{Machine: store.Machine{Hostname: "web2"}, Deployment: src.Deployment, OSToken: "m-2.tok"}, "http://h:1")
	if id.Hostname != "web2.internal" || len(id.Interfaces) != 0 {
		t.Fatalf("identity without addresses %+v", id)
	}
	if _, err := nocloud.Render(id); err != nil {
		t.Fatalf("Render: %v", err)
	}
	if got := fqdn("db1.site.example", "rack.example"); got != "db1.site.example" {
		t.Errorf("fqdn of a qualified hostname: %s", got)
	}
}
