package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/juju/gomaasapi/v2"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/netnstest"
)

// The whole deployment of a real OS: rackd commissions a VM behind an
// ipmi_sim BMC, a user with an SSH key allocates it and deploys the Debian
// image of `make image-debian` with user-data; the deploy environment writes
// the image and rackd's NoCloud seed to the disk, the VM boots Debian from
// its disk, stock cloud-init takes its identity from the seed and phones
// home, and only then is the machine DEPLOYED. OpenSSH's client logs in as
// the image's default user with the user's key at the machine's sticky
// address.

// machineDeployment reads the machine and its deployment object as the
// holder of token sees them.
func (l *lab) machineDeployment(token, id string) (api.Machine, *api.Deployment) {
	l.t.Helper()
	var raw json.RawMessage
	l.callAs(token, http.StatusOK, "GET", "/api/v1/machines/"+id, nil, &raw)
	var m api.Machine
	if err := json.Unmarshal(raw, &m); err != nil {
		l.t.Fatal(err)
	}
	var d struct {
		Deployment *api.Deployment `json:"deployment"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		l.t.Fatalf("machine %s: %v: %s", id, err, raw)
	}
	return m, d.Deployment
}

// events returns the machine's events, oldest first.
func (l *lab) events(id string) []api.Event {
	l.t.Helper()
	var evs []api.Event
	l.call(http.StatusOK, "GET", "/api/v1/machines/"+id+"/events?limit=1000", nil, &evs)
	if len(evs) > 1 && evs[0].Time.After(evs[len(evs)-1].Time) {
		for i, j := 0, len(evs)-1; i < j; i, j = i+1, j-1 {
			evs[i], evs[j] = evs[j], evs[i]
		}
	}
	return evs
}

// eventIndex returns the index of the first event at or after from whose
// reason contains s, or -1.
func eventIndex(evs []api.Event, from int, s string) int {
	for i := max(from, 0); i < len(evs); i++ {
		if strings.Contains(evs[i].Reason, s) {
			return i
		}
	}
	return -1
}

// newUser makes a user with an SSH key made by ssh-keygen and returns its
// token and private key.
func (l *lab) newUser(name string) (token, priv string) {
	l.t.Helper()
	var u struct {
		Token string `json:"token"`
	}
	l.call(http.StatusCreated, "POST", "/api/v1/users", map[string]any{"name": name}, &u)
	priv, pub := sshKey(l.t, name+"@e2e")
	l.callAs(u.Token, http.StatusCreated, "POST", "/api/v1/users/"+name+"/ssh-keys", map[string]string{"key": pub}, nil)
	return u.Token, priv
}

// juju is a client of MAAS's API as Juju makes it (gomaasapi), with a key
// of user's made through /api/v1, dialling into the lab's namespace.
func (l *lab) juju(user string) gomaasapi.Controller {
	l.t.Helper()
	var tk api.Token
	l.call(http.StatusCreated, "POST", "/api/v1/tokens", api.CreateToken{Name: "juju", User: user}, &tk)
	c, err := gomaasapi.NewController(gomaasapi.ControllerArgs{BaseURL: l.url + "/MAAS/", APIKey: tk.MAASKey,
		HTTPClient: l.client})
	if err != nil {
		l.t.Fatalf("gomaasapi.NewController for %s: %v", user, err)
	}
	return c
}

// jujuMachine reads one machine through MAAS's API.
func (l *lab) jujuMachine(c gomaasapi.Controller, id string) gomaasapi.Machine {
	l.t.Helper()
	ms, err := c.Machines(gomaasapi.MachinesArgs{SystemIDs: []string{id}})
	if err != nil || len(ms) != 1 {
		l.t.Fatalf("gomaasapi Machines system_id=%s: %d machines, %v", id, len(ms), err)
	}
	return ms[0]
}

// stickyIP returns the machine's IPv4 address in the lab's subnet.
func stickyIP(t *testing.T, m api.Machine) netip.Addr {
	t.Helper()
	sub := netip.MustParsePrefix("10.79.0.0/24")
	for _, s := range m.IPs {
		if a, err := netip.ParseAddr(s.IP); err == nil && sub.Contains(a) {
			return a
		}
	}
	t.Fatalf("machine %s has no address in %s: %+v", m.Hostname, sub, m.IPs)
	return netip.Addr{}
}

// requireDeployOS skips the tests that deploy and boot the Debian image
// unless RACKD_E2E_DEPLOY_OS (make test's second go test, make
// e2e-deploy-os) or RACKD_E2E_BENCH_OS (make bench-deploy-os) is set: under
// TCG on two cores they spend most of a quarter hour in QEMU, so make test
// runs them in a go test of their own beside the rest of the suite
// (scripts/test-unit.sh) rather than in its package e2e run.
func requireDeployOS(t *testing.T) {
	t.Helper()
	if os.Getenv("RACKD_E2E_DEPLOY_OS") == "" && os.Getenv("RACKD_E2E_BENCH_OS") == "" {
		t.Skip("deploys and boots the Debian image (10+ minutes under TCG): make test runs it in a go test of its own beside this one (RACKD_E2E_DEPLOY_OS=1), as does make e2e-deploy-os")
	}
}

// deployOSImage is the Debian image directory the test imports: the
// compressed one, or the raw one when RACKD_E2E_DEBIAN_RAW is set.
func deployOSImage(t *testing.T, imgs debianImages, nocloud bool) string {
	raw := os.Getenv("RACKD_E2E_DEBIAN_RAW") != ""
	switch {
	case nocloud && raw:
		return imgs.NoCloudRaw
	case nocloud:
		return imgs.NoCloud
	case raw:
		return imgs.Raw
	}
	return imgs.Zst
}

// osLab is a lab with one VM behind a BMC, commissioned and READY, and the
// images the test deploys imported.
type osLab struct {
	*lab
	v *bmcVM
	m api.Machine
}

// newOSLab builds the lab with rackd configured by o, imports the
// enlistment image and the image directories dirs, and commissions a VM
// (1 GiB of memory, a 3 GiB disk) behind an ipmi_sim BMC.
func newOSLab(t *testing.T, o labOptions, dirs ...string) *osLab {
	t.Helper()
	requireVM(t)
	netnstest.Tool(t, "ipmi_sim")
	netnstest.Tool(t, "ssh")
	requireDiskDrivers(t)
	img := enlistImage(t)
	requirePhaseModes(t, img)
	l := newLab(t, o)
	requireSeedRoute(t, l)
	l.importImage(img)
	for _, d := range dirs {
		l.importImage(d)
	}
	const memMB, cpus = 1024, 2
	v := newBMCVMDisk(t, l, memMB, cpus, 3<<30)
	var m api.Machine
	l.call(http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "vm1", MACs: []string{v.mac},
		Power: &api.PowerParams{Driver: "ipmi", Address: v.sim.Addr, Username: v.sim.User, Password: v.sim.Password}}, &m)
	start := time.Now()
	l.cli("machines", "commission", "vm1")
	m, _ = l.waitState(m.ID, "READY", "FAILED_COMMISSIONING")
	v.waitPower(false)
	l.waitObservedOff(m.ID)
	t.Logf("commissioned in %.1fs", time.Since(start).Seconds())
	return &osLab{lab: l, v: v, m: m}
}

// requireSeedRoute fails the test early, with a clear message, when rackd
// serves no seed endpoint (an anonymous GET of it is refused when it
// exists, and a 404 when it does not): without a seed the deployed OS
// cannot report, and the deployment would only time out later.
func requireSeedRoute(t *testing.T, l *lab) {
	t.Helper()
	resp, err := l.client.Get(l.url + enlist.PathSeed)
	if err != nil {
		t.Fatalf("GET %s: %v", enlist.PathSeed, err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		t.Fatalf("rackd answers GET %s with 404: it serves no NoCloud seed, so no deployed OS can report", enlist.PathSeed)
	}
}

// streamRate is the rate of the last image the deploy environment wrote,
// from its console line (MB of disk written a second).
func (o *osLab) streamRate() (float64, bool) {
	all := regexp.MustCompile(`wrote \d+ bytes to vda in [0-9.]+s \(([0-9.]+) MB/s\)`).FindAllStringSubmatch(o.v.text(), -1)
	if len(all) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(all[len(all)-1][1], 64)
	return v, err == nil
}

// TestE2EDeployOS: commission -> a user with an SSH key allocates ->
// deploy the Debian image with user-data -> DEPLOYED only after the OS
// phoned home -> SSH checks (FQDN, marker, static address, resolver) ->
// rackd's DHCP off and a reboot through IPMI: still reachable -> release
// with an erase: READY, the disk holds no OS and no seed, and the next
// power-on boots nothing -> redeploy to another user: the first user's key
// is refused, cloud-init sees the new instance id -> an image whose
// cloud-init is disabled: FAILED_DEPLOYMENT when the (shortened) deploying
// timeout passes, with the reason. One VM across all of it.
func TestE2EDeployOS(t *testing.T) {
	requireDeployOS(t)
	requireVM(t)
	imgs := debianImage(t)
	good, silent := deployOSImage(t, imgs, false), deployOSImage(t, imgs, true)
	// The second deployment streams the raw image (the first the
	// compressed one, unless RACKD_E2E_DEBIAN_RAW asked for raw).
	good2 := imgs.Raw
	// Long enough for a deployment of the good image on a loaded
	// machine; the never-reporting image's part restarts rackd with a
	// short one.
	opts := labOptions{deployingTimeout: "20m"}
	dirs := []string{good, silent}
	if good2 != good {
		dirs = append(dirs, good2)
	}
	o := newOSLab(t, opts, dirs...)
	l, v, m := o.lab, o.v, o.m
	goodName, good2Name, silentName := manifestName(t, good), manifestName(t, good2), manifestName(t, silent)

	// Alice allocates it and deploys with user-data that writes a marker.
	aliceTok, alicePriv := l.newUser("alice")
	l.callAs(aliceTok, http.StatusCreated, "POST", "/api/v1/allocations", map[string]any{"name": "vm1"}, nil)
	marker, content := "/var/tmp/rackd-e2e-marker", "alice-user-data"
	userData := cloudConfig(marker, content, "")
	udFile := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(udFile, []byte(userData), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l.cliAs(aliceTok, "machines", "deploy", "vm1", "--image", goodName, "--user-data", udFile)
	m, d := l.waitDeployedOS(aliceTok, m.ID)
	deployed := time.Since(start)
	ip := stickyIP(t, m)
	waitSSH(t, l.ns, alicePriv, ip, "true", nil)
	t.Logf("deploy request to DEPLOYED %.1fs, to the first SSH command %.1fs", deployed.Seconds(), time.Since(start).Seconds())
	if mb, ok := o.streamRate(); ok {
		t.Logf("image streamed to the VM's disk at %.1f MB/s", mb)
	}
	if d.UserDataBytes != len(userData) || d.SSHKeys != 1 || d.Image != goodName {
		t.Errorf("deployment %+v: want %d bytes of user-data, 1 key, image %s", d, len(userData), goodName)
	}
	id := osIdentity{fqdn: "vm1.e2e.test", addr: netip.PrefixFrom(ip, 24), gateway: labServer, dns: labServer,
		search: "e2e.test", marker: marker, content: content}
	iid1 := checkOS(t, l.ns, alicePriv, id)
	if iid1 != d.InstanceID {
		t.Errorf("cloud-init's instance id %q, rackd's %q", iid1, d.InstanceID)
	}
	if strings.Contains(l.log(), content) {
		t.Error("rackd's log holds the user-data")
	}

	// rackd's DHCP off, a reboot through the BMC: the OS comes back at
	// the same address by itself.
	l.restart(labOptions{deployingTimeout: opts.deployingTimeout, noDHCP: true})
	// sync first: the cycle is a power cut, and what cloud-init wrote in
	// the last half minute (the SSH host keys, say) is still in the page
	// cache; a cut would leave those files empty and sshd refusing to start.
	bootID := mustSSH(t, l.ns, alicePriv, ip, "sync; cat /proc/sys/kernel/random/boot_id")
	l.cli("power", "cycle", "vm1", "--wait")
	again := waitSSH(t, l.ns, alicePriv, ip, "cat /proc/sys/kernel/random/boot_id", nil)
	if again == bootID {
		t.Fatal("the VM did not reboot")
	}
	checkOS(t, l.ns, alicePriv, id)
	l.restart(opts)

	// Release with an erase: READY, the disk's OS and seed gone, the next
	// power-on boots nothing.
	l.cliAs(aliceTok, "release", "vm1", "--erase")
	m, _ = l.waitState(m.ID, "READY")
	v.waitPower(false)
	if !bytes.Equal(v.head(), make([]byte, 1<<20)) {
		t.Error("the erase left the head of the disk")
	}
	if tail := v.tail(16 << 20); bytes.Contains(tail, []byte(content)) || bytes.Contains(tail, []byte("#cloud-config")) {
		t.Error("the erase left the seed (user-data) at the end of the disk")
	}
	if _, d := l.machineDeployment(l.token, m.ID); d != nil {
		t.Errorf("a released machine still has a deployment: %+v", d)
	}
	booted := strings.Count(v.text(), "Linux version")
	l.cli("power", "on", "vm1", "--wait")
	v.waitConsole("No bootable device", 1)
	if strings.Count(v.text(), "Linux version") != booted {
		t.Error("after the erase, a power-on booted a kernel")
	}
	l.cli("power", "off", "vm1", "--wait")
	v.waitPower(false)

	// Bob gets it next, through MAAS's API with Juju's own client: he
	// allocates it by name and deploys it with a distro series (the
	// image's name) and user-data; his key logs in, Alice's no longer
	// does, and cloud-init sees a new instance.
	bobTok, bobPriv := l.newUser("bob")
	juju := l.juju("bob")
	held, _, err := juju.AllocateMachine(gomaasapi.AllocateMachineArgs{Hostname: "vm1"})
	if err != nil {
		t.Fatalf("gomaasapi AllocateMachine name=vm1: %v", err)
	}
	if held.SystemID() != m.ID {
		t.Fatalf("AllocateMachine name=vm1 gave %s, want %s", held.SystemID(), m.ID)
	}
	bobData := cloudConfig(marker, "bob-user-data", "")
	if err := held.Start(gomaasapi.StartArgs{UserData: base64.StdEncoding.EncodeToString([]byte(bobData)),
		DistroSeries: good2Name}); err != nil {
		t.Fatalf("gomaasapi Start distro_series=%s: %v", good2Name, err)
	}
	m, d2 := l.waitDeployedOS(bobTok, m.ID)
	// MAAS names what a machine runs by its series: the test image is
	// Debian 12's.
	if got := l.jujuMachine(juju, m.ID); got.StatusName() != "Deployed" || got.DistroSeries() != "bookworm" {
		t.Errorf("through MAAS's API the deployed machine reads %q %q, want Deployed bookworm", got.StatusName(), got.DistroSeries())
	}
	if d2.Image != good2Name || d2.UserDataBytes != len(bobData) {
		t.Errorf("the deployment through MAAS's API %+v: want image %s and %d bytes of user-data", d2, good2Name, len(bobData))
	}
	if d2.InstanceID == d.InstanceID {
		t.Errorf("the redeployment kept the instance id %s", d.InstanceID)
	}
	waitSSH(t, l.ns, bobPriv, ip, "true", nil)
	iid2 := checkOS(t, l.ns, bobPriv, osIdentity{fqdn: "vm1.e2e.test", addr: netip.PrefixFrom(ip, 24), gateway: labServer,
		dns: labServer, search: "e2e.test", marker: marker, content: "bob-user-data"})
	if iid2 != d2.InstanceID {
		t.Errorf("cloud-init's instance id %q after the redeployment, rackd's %q", iid2, d2.InstanceID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out, err := sshRun(ctx, l.ns, alicePriv, ip, "true")
	cancel()
	if err == nil {
		t.Error("Alice's key still logs in after the machine went to Bob")
	} else if !strings.Contains(out, "Permission denied") {
		t.Errorf("Alice's login: %v %s, want Permission denied", err, out)
	}
	// Another user's held machine is not Alice's to see at all.
	l.callAs(aliceTok, http.StatusNotFound, "GET", "/api/v1/machines/"+m.ID, nil, nil)
	l.callAs(aliceTok, http.StatusForbidden, "GET", "/api/v1/machines/"+m.ID+"/user-data", nil, nil)

	// Juju releases it, as it does at the end of a model: READY again.
	if err := juju.ReleaseMachines(gomaasapi.ReleaseMachinesArgs{SystemIDs: []string{m.ID}, Comment: "e2e done"}); err != nil {
		t.Fatalf("gomaasapi ReleaseMachines: %v", err)
	}
	m, _ = l.waitState(m.ID, "READY")
	if got := l.jujuMachine(juju, m.ID); got.StatusName() != "Ready" {
		t.Errorf("through MAAS's API the released machine reads %q, want Ready", got.StatusName())
	}

	// An OS that never reports: FAILED_DEPLOYMENT at the deploying
	// timeout, with the reason.
	v.waitPower(false)
	// The timeout must outlast writing the image (else the reason is
	// another): twice what the first deployment took to write it, and a
	// minute.
	short := (2*d.ImageWritten.Sub(d.Started) + time.Minute).Round(time.Second)
	short = max(short, 2*time.Minute)
	t.Logf("deploying_timeout %v for the OS that never reports", short)
	l.restart(labOptions{deployingTimeout: short.String()})
	l.callAs(bobTok, http.StatusCreated, "POST", "/api/v1/allocations", map[string]any{"name": "vm1"}, nil)
	l.cliAs(bobTok, "machines", "deploy", "vm1", "--image", silentName)
	m, _ = l.waitStateFor(m.ID, "FAILED_DEPLOYMENT", short+bootTimeout, "DEPLOYED")
	evs := l.events(m.ID)
	last := evs[len(evs)-1]
	if !strings.Contains(last.Reason, "did not report") || eventIndex(evs, 0, "image written") < 0 {
		t.Errorf("the failure's reason %q (events %+v): want that the OS did not report after the image was written", last.Reason, evs)
	}
}

// TestE2EDeployOSBench is what make bench-deploy-os measures (it skips
// unless RACKD_E2E_BENCH_OS is set): the deploy request to the first SSH
// command, the same OS on the same VM's disk powered on to its first SSH
// command, and the rate of the image stream raw, zstd and xz.
func TestE2EDeployOSBench(t *testing.T) {
	if os.Getenv("RACKD_E2E_BENCH_OS") == "" {
		t.Skip("a benchmark: make bench-deploy-os runs it (RACKD_E2E_BENCH_OS=1)")
	}
	requireVM(t)
	imgs := debianImage(t)
	if imgs.Xz == "" {
		t.Fatal("the xz image was not built (IMAGE_XZ=1 scripts/image-debian.sh)")
	}
	o := newOSLab(t, labOptions{deployingTimeout: "30m"}, imgs.Zst, imgs.Raw, imgs.Xz)
	l := o.lab
	tok, priv := l.newUser("bench")
	var ip netip.Addr
	deploy := func(dir string) float64 {
		t.Helper()
		name := manifestName(t, dir)
		l.callAs(tok, http.StatusCreated, "POST", "/api/v1/allocations", map[string]any{"name": "vm1"}, nil)
		start := time.Now()
		l.callAs(tok, http.StatusOK, "POST", "/api/v1/machines/"+o.m.ID+"/deploy", map[string]any{"image": name}, nil)
		m, _ := l.waitDeployedOS(tok, o.m.ID)
		ip = stickyIP(t, m)
		waitSSH(t, l.ns, priv, ip, "true", nil)
		secs := time.Since(start).Seconds()
		mb, ok := o.streamRate()
		if !ok {
			t.Fatalf("the deploy environment's console shows no stream rate for %s", name)
		}
		t.Logf("bench: %s: deploy request to the first SSH command %.1fs, stream %.1f MB/s", name, secs, mb)
		return secs
	}
	release := func() {
		t.Helper()
		l.callAs(tok, http.StatusOK, "POST", "/api/v1/machines/"+o.m.ID+"/release", map[string]any{}, nil)
		l.waitState(o.m.ID, "READY")
		o.v.waitPower(false)
	}
	secs := deploy(imgs.Zst)
	zst, _ := o.streamRate()
	recordResult(t, "deploy_to_ssh_s", secs)
	recordResult(t, "zst_stream_mb_s", zst)
	// The same OS, on the same disk: powered off, then on (rackd answers
	// the network boot with "boot the local disk", as it does for every
	// DEPLOYED machine), to the first SSH command. sync first: the power
	// off is a cut, and the files cloud-init wrote last (the SSH host keys)
	// would come back empty.
	mustSSH(t, l.ns, priv, ip, "sync")
	l.cli("power", "off", "vm1", "--wait")
	o.v.waitPower(false)
	start := time.Now()
	l.cli("power", "on", "vm1")
	waitSSH(t, l.ns, priv, ip, "true", nil)
	local := time.Since(start).Seconds()
	t.Logf("bench: the deployed OS powered on to the first SSH command %.1fs", local)
	recordResult(t, "local_boot_to_ssh_s", local)
	release()
	deploy(imgs.Raw)
	raw, _ := o.streamRate()
	recordResult(t, "raw_stream_mb_s", raw)
	release()
	deploy(imgs.Xz)
	xz, _ := o.streamRate()
	recordResult(t, "xz_stream_mb_s", xz)
	st, err := os.Stat(diskFile(t, imgs.Raw))
	if err != nil {
		t.Fatal(err)
	}
	recordResult(t, "image_mb", float64(st.Size()>>20))
}

// waitDeployedOS waits until the machine is DEPLOYED and checks that rackd
// waited for the OS: the events say the image was written, the machine
// rebooted to its disk and the OS then reported, in that order, before
// the transition.
func (l *lab) waitDeployedOS(token, id string) (api.Machine, *api.Deployment) {
	l.t.Helper()
	sawWritten := false
	bound := bootTimeout + osBootTimeout
	deadline := time.Now().Add(bound)
	for {
		m, d := l.machineDeployment(token, id)
		if m.State == "DEPLOYING" && d != nil && d.ImageWritten != nil && d.OSBooted == nil {
			sawWritten = true
		}
		if m.State == "DEPLOYED" {
			evs := l.events(id)
			w := eventIndex(evs, 0, "image written")
			r := eventIndex(evs, w, "rebooting to disk")
			b := eventIndex(evs, r, "OS booted, cloud-init finished")
			if w < 0 || r < 0 || b < 0 {
				l.t.Fatalf("DEPLOYED without the events image written -> rebooting to disk -> OS booted: %+v", evs)
			}
			if d == nil || d.OSBooted == nil || d.ImageWritten == nil || d.OSBooted.Before(*d.ImageWritten) {
				l.t.Fatalf("DEPLOYED with the deployment %+v", d)
			}
			if !sawWritten {
				l.t.Logf("note: never saw the machine DEPLOYING with its image written (polled too slowly?)")
			}
			if len(d.OSErrors) > 0 {
				l.t.Errorf("cloud-init reported errors: %+v", d.OSErrors)
			}
			return m, d
		}
		if m.State == "FAILED_DEPLOYMENT" {
			l.failedPhase(id)
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("machine %s is %s after %v, waiting for DEPLOYED (deployment %+v)", id, m.State, bound, d)
		}
		time.Sleep(time.Second)
	}
}

// failedPhase fails the test on a machine that failed its phase: each
// event on a line of its own, the failure's reason in the fatal line (make
// test's summary keeps a test's logged lines, not what follows their first
// line).
func (l *lab) failedPhase(id string) {
	l.t.Helper()
	evs := l.events(id)
	if len(evs) == 0 {
		l.t.Fatalf("machine %s failed its phase and has no events", id)
	}
	reason := "no event gives a reason"
	for _, e := range evs {
		l.t.Logf("event %d %s %s %s: %s -> %s: %q", e.Seq, e.Time.Format(time.RFC3339), e.Actor, e.Action, e.From, e.To, e.Reason)
		if e.Reason != "" {
			reason = e.Reason
		}
	}
	if c := evs[len(evs)-1].Console; c != "" {
		l.t.Logf("console at the failure:\n%s", c)
	}
	l.t.Fatalf("%s: %s", evs[len(evs)-1].To, reason)
}

// waitStateFor is waitState with its own bound.
func (l *lab) waitStateFor(id, want string, bound time.Duration, stop ...string) (api.Machine, time.Duration) {
	l.t.Helper()
	start := time.Now()
	for {
		var m api.Machine
		l.call(http.StatusOK, "GET", "/api/v1/machines/"+id, nil, &m)
		if m.State == want {
			return m, time.Since(start)
		}
		for _, s := range stop {
			if m.State == s {
				l.t.Fatalf("machine %s is %s, waiting for %s; events: %+v", id, m.State, want, l.events(id))
			}
		}
		if time.Since(start) > bound {
			l.t.Fatalf("machine %s is %s after %v, waiting for %s", id, m.State, bound, want)
		}
		time.Sleep(time.Second)
	}
}

// tail returns the last n bytes of the VM's disk.
func (v *bmcVM) tail(n int64) []byte {
	f, err := os.Open(v.disk)
	if err != nil {
		v.t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		v.t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, st.Size()-n); err != nil {
		v.t.Fatal(err)
	}
	return b
}

// manifestName is an image directory's name.
func manifestName(t *testing.T, dir string) string {
	t.Helper()
	var m struct{ Name string }
	raw, err := os.ReadFile(filepath.Join(dir, "rackd-image.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil || m.Name == "" {
		t.Fatalf("%s/rackd-image.json: %v", dir, err)
	}
	return m.Name
}
