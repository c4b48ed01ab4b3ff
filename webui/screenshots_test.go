package webui_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/ipmisim"
	"rackd/internal/redfishsim"
	"rackd/store/storetest"
)

// TestBrowserScreenshots takes the documentation's pictures of every page
// (RACKD_UI_SCREENSHOTS=docs/ui writes them there) from a rack with a
// history made the way a real one's is: machines commissioned and deployed
// through their environments' reports and the deployed OS's phone-home,
// powered by a real IPMI BMC (ipmi_sim) and a Redfish one (redfishsim),
// users with tokens and keys, an import running. Each page must also
// leave the console clean.
func TestBrowserScreenshots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim from scripts/test-deps.sh); run as root or via make test")
	}
	chrome := newChrome(t)
	bmcIPMI := ipmisim.Start(t, ipmisim.Options{})
	bmcRedfish := redfishsim.Start(t, redfishsim.Options{})
	rg := start(t)
	ok := func(st int, what string, want ...int) {
		t.Helper()
		for _, w := range append(want, http.StatusOK, http.StatusCreated, http.StatusAccepted) {
			if st == w {
				return
			}
		}
		t.Fatalf("%s: %d", what, st)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(waitFor)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s", what, waitFor)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	machine := func(id string) api.Machine {
		t.Helper()
		var m api.Machine
		ok(rg.api(t, rg.admin, "GET", "/api/v1/machines/"+id, nil, &m), "get "+id)
		return m
	}
	inState := func(id, state string) {
		t.Helper()
		until(id+" "+state, func() bool { return machine(id).State == state })
	}
	powerIdle := func(id string) {
		t.Helper()
		until(id+"'s power requests end", func() bool {
			var mp api.MachinePower
			rg.api(t, rg.admin, "GET", "/api/v1/machines/"+id+"/power", nil, &mp)
			return len(mp.Pending) == 0
		})
	}
	// report is a phase environment's report, with the machine's phase
	// credential.
	report := func(id, path string, rep enlist.Report) {
		t.Helper()
		sm, err := rg.Store().Machine(id)
		if err != nil {
			t.Fatal(err)
		}
		rep.Machine = id
		ok(rg.api(t, rg.Store().PhaseToken(sm), "POST", path, rep, nil), "report "+path)
	}
	inventory := func(macs []string, cpus, memMB int, serial string) *enlist.Inventory {
		return &enlist.Inventory{MACs: macs, Arch: "amd64", CPUCount: cpus, MemoryMB: memMB,
			DMI: enlist.DMI{Vendor: "Supermicro", Product: "SYS-1029U-TRT", Serial: serial, UUID: "4c4c4544-0051-3510-8052-" + serial[len(serial)-6:] + "0c0d34"},
			Disks: []enlist.Disk{{Name: "nvme0n1", SizeBytes: 960197124096, Model: "SAMSUNG MZ1LB960HAJQ", Serial: "S435NE0M" + serial[len(serial)-4:]},
				{Name: "sda", SizeBytes: 3840755982336, Model: "MICRON 5300 PRO", Serial: "2030" + serial[len(serial)-4:] + "A1"}}}
	}
	commission := func(id string, inv *enlist.Inventory) {
		t.Helper()
		ok(rg.api(t, rg.admin, "POST", "/api/v1/machines/"+id+"/commission", nil, nil), "commission")
		report(id, enlist.PathCommissioned, enlist.Report{Inventory: inv})
		inState(id, "READY")
		powerIdle(id)
	}

	// The network, users, keys and images.
	ok(rg.api(t, rg.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.20.0.0/24", Gateway: "10.20.0.1", DNSServers: []string{"10.20.0.2"},
		Domain: "rack1.example", DynamicRanges: []api.Range{{Start: "10.20.0.100", End: "10.20.0.199"}},
		ReservedRanges: []api.Range{{Start: "10.20.0.2", End: "10.20.0.9"}}}, nil), "subnet")
	ok(rg.api(t, rg.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.21.0.0/24", Gateway: "10.21.0.1",
		DynamicRanges: []api.Range{{Start: "10.21.0.10", End: "10.21.0.250"}}}, nil), "subnet")
	alice := rg.addUser(t, "alice", false)
	rg.addUser(t, "bob", false)
	rg.addUser(t, "carol", true)
	for _, tk := range []api.CreateToken{{Name: "terraform"}, {Name: "ci", User: "alice", Expires: "30d"}, {Name: "laptop", User: "bob", Expires: "2027-06-30"}} {
		ok(rg.api(t, rg.admin, "POST", "/api/v1/tokens", tk, nil), "token "+tk.Name)
	}
	for _, k := range []string{storetest.SSHKey(t, "ed25519", 0, "ops@bastion"), storetest.SSHKey(t, "rsa", 4096, "admin@laptop")} {
		ok(rg.api(t, rg.admin, "POST", "/api/v1/users/admin/ssh-keys", api.AddSSHKey{Key: k}, nil), "ssh key")
	}
	storetest.DeployImages(t, rg.Store(), "amd64", "ubuntu-24.04")
	storetest.DeployImages(t, rg.Store(), "arm64", "debian-12")
	disk := bytes.Repeat([]byte("rackd screenshot disk image. "), 50000)
	sum := sha256.Sum256(disk)
	hold := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(hold) }) }
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(disk)))
		if !strings.Contains(r.URL.Path, "trixie") {
			w.Write(disk)
			return
		}
		// The second import stays running, two fifths done, for the
		// picture.
		w.Write(disk[:2*len(disk)/5])
		w.(http.Flusher).Flush()
		select {
		case <-hold:
			w.Write(disk[2*len(disk)/5:])
		case <-r.Context().Done():
		}
	}))
	defer mirror.Close()
	defer free() // before the Close, which waits for the held answer
	ok(rg.api(t, rg.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: mirror.URL + "/cdimage/cloud/bookworm/20251117-2299/debian-12-generic-amd64-20251117-2299.raw",
		SHA256: hex.EncodeToString(sum[:]), Name: "debian-12", Arch: "amd64"}, nil), "import")
	until("the debian-12 import", func() bool {
		var ims []api.Image
		rg.api(t, rg.admin, "GET", "/api/v1/images", nil, &ims)
		for _, im := range ims {
			if im.Name == "debian-12" && im.Arch == "amd64" {
				return true
			}
		}
		return false
	})
	ok(rg.api(t, rg.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: mirror.URL + "/cdimage/cloud/trixie/daily/20251201-2310/debian-13-generic-amd64-daily-20251201-2310.raw",
		SHA256: hex.EncodeToString(sum[:]), Name: "debian-13-daily", Arch: "amd64", Background: true}, nil), "import")

	// r1-n01: Redfish, commissioned, deployed for alice's juju, with a
	// first deployment aborted and some power queries.
	n01 := rg.addMachine(t, api.CreateMachine{Hostname: "r1-n01", Arch: "amd64", MACs: []string{"3c:ec:ef:10:20:01", "3c:ec:ef:10:20:02"}, Tags: []string{"rack1", "nvme"}, Zone: "az1",
		Power: &api.PowerParams{Driver: "redfish", Address: bmcRedfish.URL, Username: bmcRedfish.User, Password: bmcRedfish.Password, BootMode: "uefi"}})
	commission(n01.ID, inventory(n01.MACs, 48, 196608, "S4120001"))
	ok(rg.api(t, rg.admin, "POST", "/api/v1/machines/"+n01.ID+"/ips", api.AssignIP{MAC: n01.MACs[0], Subnet: "10.20.0.0/24"}, nil), "assign")
	ok(rg.api(t, alice, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "r1-n01", AgentName: "juju-controller"}, nil), "allocate")
	ok(rg.api(t, alice, "POST", "/api/v1/machines/"+n01.ID+"/deploy", api.ActionRequest{Image: "ubuntu-24.04"}, nil), "deploy")
	powerIdle(n01.ID)
	ok(rg.api(t, alice, "POST", "/api/v1/machines/"+n01.ID+"/abort", api.ActionRequest{Reason: "wrong image"}, nil), "abort")
	powerIdle(n01.ID)
	userData := []byte("#cloud-config\npackages: [htop, chrony]\n")
	ok(rg.api(t, alice, "POST", "/api/v1/machines/"+n01.ID+"/deploy", api.ActionRequest{Image: "debian-12",
		UserData: base64.StdEncoding.EncodeToString(userData), SSHKeys: []string{storetest.SSHKey(t, "ed25519", 0, "alice@workstation")}}, nil), "deploy")
	powerIdle(n01.ID)
	sm, err := rg.Store().Machine(n01.ID)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := rg.Store().Seed(t.Context(), rg.Store().PhaseToken(sm))
	if err != nil {
		t.Fatal(err)
	}
	report(n01.ID, enlist.PathDeployed, enlist.Report{Disk: "nvme0n1", Bytes: int64(len(disk)), SHA256: hex.EncodeToString(sum[:]), WriteSeconds: 38.4})
	var dep api.Machine
	ok(rg.api(t, alice, "GET", "/api/v1/machines/"+n01.ID, nil, &dep), "get")
	form := url.Values{"instance_id": {dep.Deployment.InstanceID}, "hostname": {"r1-n01"}, "fqdn": {"r1-n01.rack1.example"}}
	resp, err := http.Post(rg.url+enlist.PathOSPrefix+seed.OSToken+"/phone-home", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ok(resp.StatusCode, "phone-home")
	inState(n01.ID, "DEPLOYED")
	ok(rg.api(t, alice, "POST", "/api/v1/machines/"+n01.ID+"/power", api.PowerAction{Action: "query"}, nil), "query")
	powerIdle(n01.ID)

	// r1-n02: IPMI, commissioned, READY.
	n02 := rg.addMachine(t, api.CreateMachine{Hostname: "r1-n02", Arch: "amd64", MACs: []string{"3c:ec:ef:10:20:11"}, Tags: []string{"rack1"}, Zone: "az1",
		Power: &api.PowerParams{Driver: "ipmi", Address: bmcIPMI.Addr, Username: bmcIPMI.User, Password: bmcIPMI.Password}})
	commission(n02.ID, inventory(n02.MACs, 32, 131072, "S4120002"))

	// r1-n03: enlisted, never commissioned, no power yet.
	n03 := rg.addMachine(t, api.CreateMachine{Hostname: "r1-n03", Arch: "amd64", MACs: []string{"3c:ec:ef:10:20:21"}, Tags: []string{"rack1"}})

	// The rest of the rack (the fake driver): READY, NEW, a broken one, a
	// failed commissioning, one adopted DEPLOYED.
	for i := 4; i <= 14; i++ {
		cm := api.CreateMachine{Hostname: fmt.Sprintf("r%d-n%02d", 1+i/9, i), Arch: "amd64", MACs: []string{fmt.Sprintf("3c:ec:ef:10:20:%02x", 0x30+i)},
			CPUCount: 16 * (1 + i%3), MemoryMB: 65536 * (1 + i%2), Tags: []string{fmt.Sprintf("rack%d", 1+i/9)}, State: "READY",
			Power: &api.PowerParams{Driver: "fake", Address: fmt.Sprintf("10.20.0.%d", 30+i)}}
		switch i {
		case 5, 11:
			cm.State, cm.CPUCount, cm.MemoryMB = "NEW", 0, 0
		case 9:
			cm.State = "DEPLOYED"
		}
		m := rg.addMachine(t, cm)
		switch i {
		case 6:
			ok(rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/mark-broken", api.ActionRequest{Reason: "PSU 2 failed; DC ticket 4471"}, nil), "broken")
		case 11:
			ok(rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/commission", nil, nil), "commission")
			report(m.ID, enlist.PathCommissioned, enlist.Report{Error: "disk sda: SMART overall-health self-assessment test FAILED"})
			inState(m.ID, "FAILED_COMMISSIONING")
		case 12:
			ok(rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/commission", nil, nil), "commission")
		}
		if cm.State != "NEW" {
			ok(rg.api(t, rg.admin, "POST", "/api/v1/machines/"+m.ID+"/ips", api.AssignIP{MAC: cm.MACs[0], Subnet: "10.20.0.0/24"}, nil), "assign")
		}
	}
	// r2-n10: allocated to the admin, for the deploy form.
	ok(rg.api(t, rg.admin, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "r2-n10", AgentName: "webui"}, nil), "allocate")
	ok(rg.api(t, rg.admin, "POST", "/api/v1/ips/reservations", api.ReserveRequest{IP: "10.20.0.5", Hostname: "pdu-a", Purpose: "rack 1 PDU A"}, nil), "reserve")

	admin := rg.tab(t, chrome)
	// readable checks a page the way an operator reads it: nothing wider
	// than the window, and no word of the elements sel finds broken
	// across two lines (each word's range lies on one line).
	readable := func(t *testing.T, tb *tab, sel string) {
		t.Helper()
		if over := eval[int](t, tb, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 0 {
			t.Errorf("the page is %d pixels wider than the window", over)
		}
		if sel == "" {
			return
		}
		broken := eval[[]string](t, tb, `(function(){var out=[];document.querySelectorAll(`+jsString(sel)+`).forEach(function(el){
			var w=document.createTreeWalker(el,NodeFilter.SHOW_TEXT);for(var n=w.nextNode();n;n=w.nextNode()){
			var re=/\S+/g,m;while((m=re.exec(n.data))){var r=document.createRange();r.setStart(n,m.index);r.setEnd(n,m.index+m[0].length);
			var tops={};Array.from(r.getClientRects()).forEach(function(c){if(c.width>0)tops[Math.round(c.top)]=1});
			if(Object.keys(tops).length>1)out.push(m[0])}}});return out})()`)
		if len(broken) > 0 {
			t.Errorf("words broken across lines in %s: %q", sel, broken)
		}
	}
	t.Run("login", func(t *testing.T) {
		admin.open(t, "/login")
		readable(t, admin, ".login p")
		admin.screenshot(t, "login", true)
		// A phone's width too.
		admin.do(t, "a phone's viewport", chromedp.EmulateViewport(375, 740))
		readable(t, admin, ".login p")
		admin.do(t, "the laptop's viewport", chromedp.EmulateViewport(1280, 800))
		admin.clean(t, "/login")
	})
	admin.login(t, rg.admin)
	for _, p := range []struct{ name, path, words string }{
		{"dashboard", "/", "#recent-events time"},
		{"machines", "/machines", "#machines time, #machines td.num, #machines td.power"},
		{"machine", "/machines/" + n01.ID, "main time, #power-requests td.nowrap"},
		{"machine-new", "/machines/" + n03.ID, "#power-settings label, #needs-power"},
		{"machine-deploy", "/machines/r2-n10", ".action-form label"},
		{"subnets", "/subnets", "main time"},
		{"images", "/images", "#imports td.progress, main time"},
		{"users", "/users", "main time, #ssh-keys td:first-child"},
	} {
		t.Run(p.name, func(t *testing.T) {
			admin.openLive(t, p.path)
			if p.name == "images" {
				admin.do(t, "an import running", chromedp.WaitReady(chromedp.CSS(`#imports tr[data-state="running"]`)))
			}
			readable(t, admin, p.words)
			admin.screenshot(t, p.name, true)
			admin.clean(t, p.path)
		})
	}
}
