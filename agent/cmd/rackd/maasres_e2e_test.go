package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/canonical/gomaasclient/client"
	"github.com/canonical/gomaasclient/entity"
	maassubnet "github.com/canonical/gomaasclient/entity/subnet"
	"github.com/juju/gomaasapi/v2"

	"rackd/api"
)

// MAAS's API as its own clients see it, from the real rackd binary: the
// resources around machines through Juju's gomaasapi and Terraform's
// gomaasclient, which decode strictly (gomaasapi's schema checks fail on a
// missing or mistyped field, gomaasclient's json on a mistyped one).

// maasLab is a rackd with a subnet, an image, a machine in a zone, and two
// users with MAAS API keys.
type maasLab struct {
	d          *daemon
	state      string // rackd's state directory
	admin      string // the admin's bearer token
	alice, bob string // MAAS API keys
	adminKey   string
}

func newMAASLab(t *testing.T) *maasLab {
	t.Helper()
	return newMAASLabWith(t, "")
}

// newMAASLabWith is newMAASLab with rackd's configuration (TOML).
func newMAASLabWith(t *testing.T, config string) *maasLab {
	t.Helper()
	state := t.TempDir()
	var args []string
	if config != "" {
		path := filepath.Join(t.TempDir(), "rackd.toml")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		args = []string{"--config", path}
	}
	l := &maasLab{d: startDaemon(t, state, args...), state: state}
	l.admin = adminToken(t, state)
	l.call(t, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.77.0.0/24", Gateway: "10.77.0.1", DNSServers: []string{"10.77.0.1"},
		Domain: "rack.test", LeaseSeconds: 600, DynamicRanges: []api.Range{{Start: "10.77.0.100", End: "10.77.0.199"}}}, http.StatusCreated, nil)
	l.call(t, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "n1", Arch: "amd64", MACs: []string{"52:54:00:77:00:01"},
		CPUCount: 4, MemoryMB: 8192, Zone: "rack2", Tags: []string{"gpu"}, State: "READY"}, http.StatusCreated, nil)
	for _, u := range []string{"alice", "bob"} {
		l.call(t, "POST", "/api/v1/users", api.CreateUser{Name: u}, http.StatusCreated, nil)
	}
	l.alice, l.bob, l.adminKey = l.key(t, "alice"), l.key(t, "bob"), l.key(t, "")
	// An image, as rackd images import makes one from a directory.
	dir := t.TempDir()
	kernel, initrd := []byte(strings.Repeat("KERNEL", 100)), []byte(strings.Repeat("INITRD", 100))
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	m, _ := json.Marshal(map[string]any{"name": "commission", "arch": "amd64", "purpose": "commission", "files": []map[string]any{
		{"path": "vmlinuz", "role": "kernel", "sha256": sum(kernel), "size": len(kernel)},
		{"path": "initrd.img", "role": "initrd", "sha256": sum(initrd), "size": len(initrd)}}})
	for n, b := range map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd, "rackd-image.json": m} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l.call(t, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, http.StatusCreated, nil)
	return l
}

func (l *maasLab) call(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	status, raw, err := l.d.api(http.DefaultClient, l.admin, method, path, body, out)
	if err != nil || status != want {
		t.Fatalf("%s %s: %d %s (%v), want %d", method, path, status, raw, err, want)
	}
}

// key makes a token of user's ("": the admin's) and returns it as a MAAS
// API key.
func (l *maasLab) key(t *testing.T, user string) string {
	t.Helper()
	var tk api.Token
	l.call(t, "POST", "/api/v1/tokens", api.CreateToken{Name: "maas", User: user}, http.StatusCreated, &tk)
	if tk.MAASKey == "" {
		t.Fatalf("token of %q without a MAAS key: %+v", user, tk)
	}
	return tk.MAASKey
}

func (l *maasLab) juju(t *testing.T, key string) gomaasapi.Controller {
	t.Helper()
	c, err := gomaasapi.NewController(gomaasapi.ControllerArgs{BaseURL: l.d.url + "/MAAS/", APIKey: key})
	if err != nil {
		t.Fatalf("gomaasapi.NewController: %v", err)
	}
	return c
}

func (l *maasLab) terraform(t *testing.T, key string) *client.Client {
	t.Helper()
	c, err := client.GetClient(l.d.url+"/MAAS/", key, "2.0")
	if err != nil {
		t.Fatalf("gomaasclient.GetClient: %v", err)
	}
	return c
}

// TestMAASResourcesJuju: Juju's client reads rackd's zones, spaces,
// fabrics, subnets, static routes, domains, pools, tags and boot
// resources, and keeps its provider state in files/ as Juju does: add,
// get, list by prefix, delete; another user's key sees none of it.
func TestMAASResourcesJuju(t *testing.T) {
	l := newMAASLab(t)
	c := l.juju(t, l.alice)

	zones, err := c.Zones()
	if err != nil {
		t.Fatalf("Zones: %v", err)
	}
	var zoneNames []string
	for _, z := range zones {
		zoneNames = append(zoneNames, z.Name())
	}
	if !slices.Equal(zoneNames, []string{"default", "rack2"}) {
		t.Errorf("zones %v, want default and rack2", zoneNames)
	}
	spaces, err := c.Spaces()
	if err != nil {
		t.Fatalf("Spaces: %v", err)
	}
	if len(spaces) != 1 || spaces[0].Name() != "undefined" || len(spaces[0].Subnets()) != 1 {
		t.Fatalf("spaces: %+v", spaces)
	}
	sn := spaces[0].Subnets()[0]
	if sn.CIDR() != "10.77.0.0/24" || sn.Gateway() != "10.77.0.1" || sn.Space() != "undefined" || !slices.Equal(sn.DNSServers(), []string{"10.77.0.1"}) ||
		sn.VLAN() == nil || sn.VLAN().VID() != 0 || sn.VLAN().Fabric() != "fabric-0" || sn.ID() == 0 {
		t.Errorf("subnet: id %d cidr %s gw %s space %s dns %v", sn.ID(), sn.CIDR(), sn.Gateway(), sn.Space(), sn.DNSServers())
	}
	fabrics, err := c.Fabrics()
	if err != nil {
		t.Fatalf("Fabrics: %v", err)
	}
	if len(fabrics) != 1 || fabrics[0].Name() != "fabric-0" || len(fabrics[0].VLANs()) != 1 || fabrics[0].VLANs()[0].ID() != sn.VLAN().ID() || !fabrics[0].VLANs()[0].DHCP() {
		t.Errorf("fabrics: %+v", fabrics)
	}
	if routes, err := c.StaticRoutes(); err != nil || len(routes) != 0 {
		t.Errorf("StaticRoutes: %v %v", routes, err)
	}
	if ds, err := c.Domains(); err != nil || len(ds) != 1 || ds[0].Name() != "rack.test" {
		t.Errorf("Domains: %v %v", ds, err)
	}
	if ps, err := c.Pools(); err != nil || len(ps) != 1 || ps[0].Name() != "default" {
		t.Errorf("Pools: %v %v", ps, err)
	}
	if tags, err := c.Tags(); err != nil || len(tags) != 1 || tags[0].Name() != "gpu" {
		t.Errorf("Tags: %v %v", tags, err)
	}
	brs, err := c.BootResources()
	if err != nil {
		t.Fatalf("BootResources: %v", err)
	}
	if len(brs) != 1 || brs[0].Architecture() != "amd64/generic" || brs[0].Type() == "" || brs[0].Name() == "" {
		t.Errorf("boot resources: %+v", brs)
	}

	// Files, as Juju's provider storage uses them.
	state := []byte("state-instances:\n- abc123\n\x00\xff")
	if err := c.AddFile(gomaasapi.AddFileArgs{Filename: "ctrl-provider-state", Content: state}); err != nil {
		t.Fatalf("AddFile: %v", err)
	}
	if err := c.AddFile(gomaasapi.AddFileArgs{Filename: "ctrl-bootstrap-verify", Reader: bytes.NewReader([]byte("ok")), Length: 2}); err != nil {
		t.Fatalf("AddFile from a reader: %v", err)
	}
	if err := c.AddFile(gomaasapi.AddFileArgs{Filename: "other", Content: []byte("x")}); err != nil {
		t.Fatalf("AddFile: %v", err)
	}
	f, err := c.GetFile("ctrl-provider-state")
	if err != nil {
		t.Fatalf("GetFile: %v", err)
	}
	if got, err := f.ReadAll(); err != nil || !bytes.Equal(got, state) {
		t.Fatalf("ReadAll: %q %v", got, err)
	}
	if f.AnonymousURL() == "" {
		t.Error("no anonymous URL")
	}
	files, err := c.Files("ctrl-")
	if err != nil {
		t.Fatalf("Files: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Filename())
	}
	if !slices.Equal(names, []string{"ctrl-bootstrap-verify", "ctrl-provider-state"}) {
		t.Errorf("Files(ctrl-): %v", names)
	}
	// A file listed is read from the server (no content in a listing).
	if got, err := files[1].ReadAll(); err != nil || !bytes.Equal(got, state) {
		t.Errorf("ReadAll of a listed file: %q %v", got, err)
	}
	// Writing again replaces.
	if err := c.AddFile(gomaasapi.AddFileArgs{Filename: "ctrl-provider-state", Content: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	if f, err := c.GetFile("ctrl-provider-state"); err != nil {
		t.Fatal(err)
	} else if got, _ := f.ReadAll(); string(got) != "v2" {
		t.Errorf("after replacing: %q", got)
	}
	// Files are kept: a rackd killed and started again serves them.
	l.d.kill()
	l.d = startDaemon(t, l.state)
	c = l.juju(t, l.alice)
	if f, err := c.GetFile("ctrl-provider-state"); err != nil {
		t.Fatalf("GetFile after a restart: %v", err)
	} else if got, _ := f.ReadAll(); string(got) != "v2" {
		t.Errorf("after a restart: %q", got)
	}
	if files, err = c.Files("ctrl-"); err != nil || len(files) != 2 {
		t.Fatalf("Files after a restart: %v %v", files, err)
	}
	// Another user's key: no such file, to Juju a NoMatch.
	bob := l.juju(t, l.bob)
	if _, err := bob.GetFile("ctrl-provider-state"); !gomaasapi.IsNoMatchError(err) {
		t.Errorf("bob's GetFile of alice's file: %v, want a NoMatch error", err)
	}
	if fs, err := bob.Files(""); err != nil || len(fs) != 0 {
		t.Errorf("bob's Files: %v %v", fs, err)
	}
	if err := files[0].Delete(); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := c.GetFile("ctrl-bootstrap-verify"); !gomaasapi.IsNoMatchError(err) {
		t.Errorf("GetFile after Delete: %v, want a NoMatch error", err)
	}
	if err := files[0].Delete(); !gomaasapi.IsNoMatchError(err) {
		t.Errorf("Delete again: %v, want a NoMatch error", err)
	}
	if err := c.AddFile(gomaasapi.AddFileArgs{Filename: "big", Content: make([]byte, 1<<20+1)}); err == nil {
		t.Error("a file over 1 MiB was stored")
	}
}

// TestMAASResourcesTerraform: Terraform's client reads the same resources,
// and reserves and releases an address as its maas_* resources would;
// another user's key cannot release it.
func TestMAASResourcesTerraform(t *testing.T) {
	l := newMAASLab(t)
	c := l.terraform(t, l.alice)

	subnets, err := c.Subnets.Get()
	if err != nil {
		t.Fatalf("Subnets.Get: %v", err)
	}
	if len(subnets) != 1 || subnets[0].CIDR != "10.77.0.0/24" || subnets[0].GatewayIP.String() != "10.77.0.1" || subnets[0].VLAN.VID != 0 || !subnets[0].Managed {
		t.Fatalf("subnets: %+v", subnets)
	}
	id := subnets[0].ID
	if sn, err := c.Subnet.Get(id); err != nil || sn.CIDR != "10.77.0.0/24" {
		t.Fatalf("Subnet.Get(%d): %+v %v", id, sn, err)
	}
	if fs, err := c.Fabrics.Get(); err != nil || len(fs) != 1 || fs[0].ID != 0 {
		t.Errorf("Fabrics.Get: %+v %v", fs, err)
	}
	if vs, err := c.VLANs.Get(0); err != nil || len(vs) != 1 || vs[0].ID != subnets[0].VLAN.ID {
		t.Errorf("VLANs.Get: %+v %v", vs, err)
	}
	if v, err := c.VLAN.Get(0, 0); err != nil || v.Name != "untagged" {
		t.Errorf("VLAN.Get: %+v %v", v, err)
	}
	if ss, err := c.Spaces.Get(); err != nil || len(ss) != 1 || len(ss[0].Subnets) != 1 {
		t.Errorf("Spaces.Get: %+v %v", ss, err)
	}
	if zs, err := c.Zones.Get(); err != nil || len(zs) != 2 {
		t.Errorf("Zones.Get: %+v %v", zs, err)
	}
	if z, err := c.Zone.Get("rack2"); err != nil || z.Name != "rack2" {
		t.Errorf("Zone.Get: %+v %v", z, err)
	}
	if ps, err := c.ResourcePools.Get(); err != nil || len(ps) != 1 || ps[0].Name != "default" {
		t.Errorf("ResourcePools.Get: %+v %v", ps, err)
	}
	if ds, err := c.Domains.Get(); err != nil || len(ds) != 1 || !ds[0].IsDefault {
		t.Errorf("Domains.Get: %+v %v", ds, err)
	}
	if rs, err := c.IPRanges.Get(); err != nil || len(rs) != 1 || rs[0].Type != "dynamic" || rs[0].StartIP.String() != "10.77.0.100" {
		t.Errorf("IPRanges.Get: %+v %v", rs, err)
	}
	if brs, err := c.BootResources.Get(&entity.BootResourcesReadParams{}); err != nil || len(brs) != 1 || brs[0].Architecture != "amd64/generic" {
		t.Errorf("BootResources.Get: %+v %v", brs, err)
	}
	if tag, err := c.Tag.Get("gpu"); err != nil || tag.Name != "gpu" {
		t.Errorf("Tag.Get: %+v %v", tag, err)
	}

	// Reserve: the next free address, then one asked for with a name.
	ip1, err := c.IPAddresses.Reserve(&entity.IPAddressesParams{Subnet: "10.77.0.0/24"})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if ip1.IP == nil || ip1.AllocType != 4 || ip1.Owner.UserName != "alice" || ip1.Subnet.ID != id {
		t.Fatalf("reserved %+v", ip1)
	}
	if _, err := c.IPAddresses.Reserve(&entity.IPAddressesParams{IP: "10.77.0.50"}); err != nil {
		t.Fatalf("Reserve 10.77.0.50: %v", err)
	}
	if _, err := c.IPAddresses.Reserve(&entity.IPAddressesParams{IP: "10.77.0.50"}); err == nil {
		t.Fatal("the same address reserved twice")
	}
	mine, err := c.IPAddresses.Get(&entity.IPAddressesParams{})
	if err != nil || len(mine) != 2 {
		t.Fatalf("IPAddresses.Get: %+v %v", mine, err)
	}
	// The subnet's views count them, and n1's own address (a machine
	// created READY gets one).
	used, err := c.Subnet.GetIPAddresses(id)
	if err != nil || len(used) != 3 || used[0].NodeSummary.Hostname != "n1" || used[0].NodeSummary.FQDN != "n1.rack.test" ||
		used[0].AllocType != 1 || used[1].User != "alice" || used[2].IP.String() != "10.77.0.50" {
		t.Fatalf("GetIPAddresses: %+v %v", used, err)
	}
	reserved, err := c.Subnet.GetReservedIPRanges(id)
	if err != nil || !slices.ContainsFunc(reserved, func(r maassubnet.ReservedIPRange) bool {
		return r.Start.String() == "10.77.0.50" && slices.Contains(r.Purpose, "assigned-ip")
	}) {
		t.Fatalf("GetReservedIPRanges: %+v %v", reserved, err)
	}
	stats, err := c.Subnet.GetStatistics(id)
	if err != nil || stats.TotalAddresses != 254 || stats.NumUnavailable != 1+100+1+2 || stats.IPVersion != 4 {
		t.Fatalf("GetStatistics: %+v %v", stats, err)
	}
	if free, err := c.Subnet.GetUnreservedIPRanges(id); err != nil || len(free) == 0 {
		t.Fatalf("GetUnreservedIPRanges: %+v %v", free, err)
	}
	// Bob's key can neither see nor release alice's reservations.
	bob := l.terraform(t, l.bob)
	if theirs, err := bob.IPAddresses.Get(&entity.IPAddressesParams{}); err != nil || len(theirs) != 0 {
		t.Fatalf("bob's IPAddresses.Get: %+v %v", theirs, err)
	}
	if err := bob.IPAddresses.Release(&entity.IPAddressesParams{IP: "10.77.0.50"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("bob released alice's reservation: %v, want MAAS's 400", err)
	}
	if err := bob.IPAddresses.Release(&entity.IPAddressesParams{IP: "10.77.0.50", Force: true}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("bob force-released alice's reservation: %v, want 403", err)
	}
	if err := c.IPAddresses.Release(&entity.IPAddressesParams{IP: "10.77.0.50"}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := c.IPAddresses.Release(&entity.IPAddressesParams{IP: ip1.IP.String()}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if mine, err := c.IPAddresses.Get(&entity.IPAddressesParams{}); err != nil || len(mine) != 0 {
		t.Fatalf("after release: %+v %v", mine, err)
	}
	// A write rackd has no notion of: MAAS's 501, naming the op.
	if _, err := c.Zones.Create(&entity.ZoneParams{Name: "z"}); err == nil || !strings.Contains(err.Error(), "501") {
		t.Errorf("Zones.Create: %v, want a 501", err)
	}
}

// waitStatus waits until the machine's status_name, as Terraform polls it
// (Machine.Get), is one of want, and fails on one outside want and pass.
func waitStatus(t *testing.T, c *client.Client, id string, pass, want []string) *entity.Machine {
	t.Helper()
	var m *entity.Machine
	waitUntil(t, fmt.Sprintf("machine %s to be %v", id, want), func() bool {
		var err error
		if m, err = c.Machine.Get(id); err != nil {
			t.Fatalf("Machine.Get(%s): %v", id, err)
		}
		if !slices.Contains(want, m.StatusName) && !slices.Contains(pass, m.StatusName) {
			t.Fatalf("machine %s is %q on its way to %v", id, m.StatusName, want)
		}
		return slices.Contains(want, m.StatusName)
	})
	return m
}

// TestMAASTerraformMachines: Terraform's client drives a machine as its
// maas_instance resource does (allocate, deploy with base64 user data,
// poll until Deploying/Deployed, release with a comment, poll until
// Releasing/Ready) and as its maas_machine resource does (create with
// power parameters, update them, delete), against the real binary with
// simulated BMCs.
func TestMAASTerraformMachines(t *testing.T) {
	l := newMAASLabWith(t, "[power.fake]\nenabled = true\n")
	l.importDeployImage(t, "golden", "ubuntu", "noble")
	var inst api.Machine
	l.call(t, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "inst1", Arch: "amd64", MACs: []string{"52:54:00:77:20:01"},
		CPUCount: 8, MemoryMB: 16384, State: "READY", Power: &api.PowerParams{Driver: "fake", Address: "10.0.0.9"}}, http.StatusCreated, &inst)
	tf := l.terraform(t, l.alice)

	// maas_instance.
	m, err := tf.Machines.Allocate(&entity.MachineAllocateParams{Name: "inst1", CPUCount: 4, Mem: 8192})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if m.SystemID != inst.ID || m.StatusName != "Allocated" || m.Owner != "alice" || m.Zone.Name != "default" || m.Pool.Name != "default" {
		t.Fatalf("allocated %s %q owner %q zone %q pool %q", m.SystemID, m.StatusName, m.Owner, m.Zone.Name, m.Pool.Name)
	}
	// Another user's key does not see it while alice holds it.
	bob := l.terraform(t, l.bob)
	if _, err := bob.Machine.Get(m.SystemID); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("bob's Machine.Get of alice's machine: %v, want a 404", err)
	}
	if _, err := bob.Machine.Deploy(m.SystemID, &entity.MachineDeployParams{DistroSeries: "noble"}); err == nil {
		t.Fatal("bob deployed alice's machine")
	}
	userData := "#cloud-config\nruncmd:\n  - touch /var/lib/terraform-was-here\n"
	m, err = tf.Machine.Deploy(m.SystemID, &entity.MachineDeployParams{DistroSeries: "noble",
		UserData: base64.StdEncoding.EncodeToString([]byte(userData))})
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	m = waitStatus(t, tf, m.SystemID, []string{"Allocated"}, []string{"Deploying", "Deployed"})
	if m.OSystem != "ubuntu" || m.DistroSeries != "noble" {
		t.Errorf("deploying %s/%s, want ubuntu/noble", m.OSystem, m.DistroSeries)
	}
	// The user data reached the deployment as it was sent, decoded.
	var ud struct {
		UserData []byte `json:"user_data"`
	}
	status, raw, err := l.d.api(http.DefaultClient, bearer(l.alice), "GET", "/api/v1/machines/"+m.SystemID+"/user-data", nil, &ud)
	if err != nil || status != http.StatusOK || string(ud.UserData) != userData {
		t.Fatalf("user-data: %d %s %v, want %q", status, raw, err, userData)
	}
	// terraform destroy in the middle of the deploy.
	if err := tf.Machines.Release([]string{m.SystemID}, "Released by Terraform"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	waitStatus(t, tf, m.SystemID, []string{"Deploying", "Releasing"}, []string{"Ready"})
	var ev []api.Event
	l.call(t, "GET", "/api/v1/machines/"+m.SystemID+"/events", nil, http.StatusOK, &ev)
	if !slices.ContainsFunc(ev, func(e api.Event) bool { return strings.Contains(e.Reason, "Released by Terraform") }) {
		t.Errorf("no event gives the release's comment: %+v", ev)
	}

	// maas_machine, an admin's.
	admin := l.terraform(t, l.adminKey)
	no := false
	pp := map[string]any{"power_parameters_power_address": "10.0.0.21", "power_parameters_power_user": "root", "power_parameters_power_pass": "calvin"}
	mm, err := admin.Machines.Create(&entity.MachineCreateParams{Commission: &no, PowerType: "fake", Hostname: "tf1",
		MACAddresses: []string{"52:54:00:77:20:02"}, Architecture: "amd64/generic"}, pp)
	if err != nil {
		t.Fatalf("Machines.Create: %v", err)
	}
	if mm.Hostname != "tf1" || mm.PowerType != "fake" || mm.Architecture != "amd64/generic" || mm.StatusName != "New" ||
		len(mm.InterfaceSet) != 1 || mm.InterfaceSet[0].MACAddress != "52:54:00:77:20:02" {
		t.Fatalf("created %s %q %q %q %q %+v", mm.SystemID, mm.Hostname, mm.PowerType, mm.Architecture, mm.StatusName, mm.InterfaceSet)
	}
	// Credentials never leave rackd through an API.
	params, err := admin.Machine.GetPowerParameters(mm.SystemID)
	if err != nil || params["power_address"] != "10.0.0.21" || params["power_pass"] != nil || strings.Contains(fmt.Sprint(params), "calvin") {
		t.Fatalf("power parameters: %v %v", params, err)
	}
	mm, err = admin.Machine.Update(mm.SystemID, &entity.MachineUpdateParams{Hostname: "tf1b", PowerType: "fake"},
		map[string]any{"power_parameters_power_address": "10.0.0.22"})
	if err != nil {
		t.Fatalf("Machine.Update: %v", err)
	}
	if got, err := admin.Machine.Get(mm.SystemID); err != nil || got.Hostname != "tf1b" {
		t.Fatalf("after update: %+v %v", got, err)
	}
	if params, err := admin.Machine.GetPowerParameters(mm.SystemID); err != nil || params["power_address"] != "10.0.0.22" {
		t.Fatalf("power parameters after update: %v %v", params, err)
	}
	// Created with Terraform's default, commission: it commissions (the
	// simulated BMC powers it into the commissioning environment).
	mc, err := admin.Machines.Create(&entity.MachineCreateParams{PowerType: "fake", Hostname: "tf2",
		MACAddresses: []string{"52:54:00:77:20:03"}, Architecture: "amd64/generic"}, map[string]any{"power_parameters_power_address": "10.0.0.23"})
	if err != nil {
		t.Fatalf("Machines.Create, commissioning: %v", err)
	}
	if mc.StatusName != "Commissioning" {
		t.Fatalf("created to commission: %q", mc.StatusName)
	}
	// Only an admin creates machines.
	if _, err := tf.Machines.Create(&entity.MachineCreateParams{Commission: &no, Hostname: "x", MACAddresses: []string{"52:54:00:77:20:04"}}, nil); err == nil ||
		!strings.Contains(err.Error(), "403") {
		t.Fatalf("alice created a machine: %v, want a 403", err)
	}
	for _, id := range []string{mm.SystemID} {
		if err := admin.Machine.Delete(id); err != nil {
			t.Fatalf("Machine.Delete(%s): %v", id, err)
		}
		if _, err := admin.Machine.Get(id); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("Get after Delete: %v, want a 404", err)
		}
	}
}

// TestMAASTerraformTags: Terraform's maas_tag, step by step as its
// provider makes the calls through gomaasclient: create (a tag no machine
// carries yet), read it back, tag the machines named, change the comment,
// untag the others, delete; a user who is not an admin cannot define one,
// and what rackd cannot do (an XPath definition) is refused.
func TestMAASTerraformTags(t *testing.T) {
	l := newMAASLab(t)
	admin, alice := l.terraform(t, l.adminKey), l.terraform(t, l.alice)
	l.call(t, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "n2", Arch: "amd64", MACs: []string{"52:54:00:77:00:02"},
		State: "READY"}, http.StatusCreated, nil)

	find := func(c *client.Client, name string) *entity.Tag {
		t.Helper()
		tags, err := c.Tags.Get()
		if err != nil {
			t.Fatalf("Tags.Get: %v", err)
		}
		for _, tg := range tags {
			if tg.Name == name {
				return &tg
			}
		}
		return nil
	}
	tagged := func(name string) []string {
		t.Helper()
		ms, err := admin.Tag.GetMachines(name)
		if err != nil {
			t.Fatalf("Tag.GetMachines(%s): %v", name, err)
		}
		var hosts []string
		for _, m := range ms {
			hosts = append(hosts, m.Hostname)
		}
		slices.Sort(hosts)
		return hosts
	}

	// Create: findTag, then Tags.Create when it is not there.
	if find(admin, "fast") != nil {
		t.Fatal("tag fast exists before it is created")
	}
	tg, err := admin.Tags.Create(&entity.TagParams{Name: "fast", Comment: "NVMe boxes"})
	if err != nil || tg.Name != "fast" || tg.Comment != "NVMe boxes" {
		t.Fatalf("Tags.Create: %+v %v", tg, err)
	}
	// Read: the tag is there (and alice sees it), though no machine carries it.
	if got := find(alice, "fast"); got == nil || got.Comment != "NVMe boxes" || got.Definition != "" || got.KernelOpts != "" {
		t.Fatalf("alice's Tags.Get after the create: %+v", got)
	}
	if hosts := tagged("fast"); len(hosts) != 0 {
		t.Fatalf("machines of a new tag: %v", hosts)
	}
	// Update with machines: AddMachines, then untag the others.
	ms, err := admin.Machines.Get(&entity.MachinesParams{})
	if err != nil {
		t.Fatalf("Machines.Get: %v", err)
	}
	ids := map[string]string{}
	for _, m := range ms {
		ids[m.Hostname] = m.SystemID
	}
	if err := admin.Tag.AddMachines("fast", []string{ids["n1"], ids["n2"]}); err != nil {
		t.Fatalf("Tag.AddMachines: %v", err)
	}
	if hosts := tagged("fast"); !slices.Equal(hosts, []string{"n1", "n2"}) {
		t.Fatalf("tagged: %v", hosts)
	}
	if _, err := admin.Tag.Update("fast", &entity.TagParams{Name: "fast", Comment: "only n1"}); err != nil {
		t.Fatalf("Tag.Update: %v", err)
	}
	if err := admin.Tag.RemoveMachines("fast", []string{ids["n2"]}); err != nil {
		t.Fatalf("Tag.RemoveMachines: %v", err)
	}
	if got := find(admin, "fast"); got == nil || got.Comment != "only n1" {
		t.Fatalf("after the update: %+v", got)
	}
	if hosts := tagged("fast"); !slices.Equal(hosts, []string{"n1"}) {
		t.Fatalf("tagged after the update: %v", hosts)
	}
	// The machines show it.
	if m, err := admin.Machine.Get(ids["n1"]); err != nil || !slices.Contains(m.TagNames, "fast") {
		t.Fatalf("n1's tag_names: %+v %v", m.TagNames, err)
	}

	// Not an admin's: refused. An XPath definition: refused, never ignored.
	if _, err := alice.Tags.Create(&entity.TagParams{Name: "mine"}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("alice creates a tag: %v", err)
	}
	if _, err := admin.Tags.Create(&entity.TagParams{Name: "xpath", Definition: "//node[@class='disk']"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("a tag with a definition: %v", err)
	}
	if find(admin, "xpath") != nil || find(admin, "mine") != nil {
		t.Error("a refused tag was made")
	}

	// Delete: gone, and off every machine.
	if err := admin.Tag.Delete("fast"); err != nil {
		t.Fatalf("Tag.Delete: %v", err)
	}
	if find(admin, "fast") != nil {
		t.Fatal("tag fast still listed after its delete")
	}
	if m, err := admin.Machine.Get(ids["n1"]); err != nil || slices.Contains(m.TagNames, "fast") {
		t.Fatalf("n1's tag_names after the delete: %+v %v", m.TagNames, err)
	}
}
