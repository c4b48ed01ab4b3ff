package appliance

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"rackd/internal/vmtest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rackd/internal/netnstest"
)

// up waits for the n-th banner of this QEMU process and checks it: the
// slot and version expected, the API on the address dnsmasq gave the
// management NIC. The first boot's banner carries the admin token.
func (a *appliance) up(n int, slot, version string) banner {
	a.t.Helper()
	b := a.waitBanner(n)
	if b.slot != slot || b.version != version {
		a.t.Fatalf("the appliance came up as %s on slot %s, want %s on slot %s", b.version, b.slot, version, slot)
	}
	u, err := url.Parse(b.url)
	if err != nil || u.Hostname() != mgmtAppliance.String() || u.Port() != fmt.Sprint(apiPort) {
		a.t.Fatalf("the banner's API %s is not on the management address %s:%d that dnsmasq gave", b.url, mgmtAppliance, apiPort)
	}
	a.url = strings.TrimSuffix(b.url, "/")
	if b.token != "" {
		a.token = b.token
	}
	if a.token == "" {
		a.t.Fatal("no admin token: the first boot's banner prints it")
	}
	return b
}

// TestApplianceBoot: the image boots under OVMF and under SeaBIOS, gets
// its management address from a real DHCP server, and serves its API there
// with the admin token its console printed; the first boot made the rack
// subnet and imported the slot's images.
func TestApplianceBoot(t *testing.T) {
	requireApplianceE2E(t)
	for _, fw := range []struct {
		name string
		uefi bool
	}{{"uefi", true}, {"bios", false}} {
		t.Run(fw.name, func(t *testing.T) {
			img := image(t, variantA)
			r := newRig(t)
			a := r.boot(disk(t, img.img, 1024), fw.uefi)
			b := a.up(1, "a", variantA.version)
			t.Logf("%s: power-on to API %.1fs", fw.name, b.at.Seconds())
			a.checkBooted(r)
		})
	}
}

// checkBooted: a first boot got its management address from rig r's
// dnsmasq, serves its API there to the token its console printed (and to no
// other), runs slot a as good, and made the rack subnet and imported the
// slot's images.
func (a *appliance) checkBooted(r *rig) {
	t := a.t
	t.Helper()
	leases, err := os.ReadFile(r.leases)
	if err != nil || !strings.Contains(string(leases), mgmtMAC) {
		t.Errorf("dnsmasq's leases lack the management NIC %s (%v): %s", mgmtMAC, err, leases)
	}
	if code, raw := a.callAs("", "GET", "/api/v1/machines"); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/machines without a token: %d %s, want 401", code, raw)
	}
	var v struct {
		Version string `json:"version"`
	}
	a.get("/api/v1/version", &v)
	if v.Version != variantA.version {
		t.Errorf("rackd reports version %q, want %q", v.Version, variantA.version)
	}
	st := a.status()
	if st.Booted != "a" || st.Slots["a"].State != "good" || st.Trial {
		t.Errorf("status: booted %q trial %v, slot a %+v; want a, good, no trial", st.Booted, st.Trial, st.Slots["a"])
	}
	a.checkFirstBoot()
}

// checkFirstBoot: the rack subnet and the slot's images are there.
func (a *appliance) checkFirstBoot() {
	a.t.Helper()
	var subnets []struct {
		CIDR string `json:"cidr"`
	}
	a.get("/api/v1/subnets", &subnets)
	if !slices.ContainsFunc(subnets, func(s struct {
		CIDR string `json:"cidr"`
	}) bool {
		return s.CIDR == "10.42.0.0/24"
	}) {
		a.t.Errorf("no rack subnet 10.42.0.0/24: %+v", subnets)
	}
	var images []struct {
		Name    string `json:"name"`
		Purpose string `json:"purpose"`
	}
	a.get("/api/v1/images", &images)
	var purposes []string
	for _, im := range images {
		purposes = append(purposes, im.Purpose)
	}
	for _, want := range []string{"enlist", "bootloader"} {
		if !slices.Contains(purposes, want) {
			a.t.Errorf("the first boot imported no %s image: %+v", want, images)
		}
	}
}

// callAs is call with another token ("" for none).
func (a *appliance) callAs(token, method, path string) (int, []byte) {
	a.t.Helper()
	saved := a.token
	a.token = token
	defer func() { a.token = saved }()
	return a.call(method, path, nil, "")
}

// machine is the part of a machine the tests read.
type machine struct {
	ID    string   `json:"id"`
	State string   `json:"state"`
	MACs  []string `json:"macs"`
}

// machineByMAC returns the appliance's machine with mac, if any.
func (a *appliance) machineByMAC(mac string) (machine, bool) {
	a.t.Helper()
	var ms []machine
	a.get("/api/v1/machines", &ms)
	for _, m := range ms {
		if slices.ContainsFunc(m.MACs, func(x string) bool { return strings.EqualFold(x, mac) }) {
			return m, true
		}
	}
	return machine{}, false
}

// pxe starts a second VM on the rack bridge that network-boots (SeaBIOS,
// the NIC's iPXE ROM) from the appliance and powers off after enlisting.
func (r *rig) pxe(mac string) *netnstest.Proc {
	r.t.Helper()
	tap := netnstest.Name("rkpx")
	r.ns.IP("tuntap", "add", "dev", tap, "mode", "tap")
	r.ns.Attach(tap, r.rackBr)
	r.ns.Up(tap)
	r.t.Cleanup(func() { r.ns.IP("link", "del", tap) })
	serial := filepath.Join(r.t.TempDir(), "pxe.log")
	t := r.t
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RACKD_E2E_CONSOLE") != "" {
			b, _ := os.ReadFile(serial)
			t.Logf("the PXE VM's serial console:\n%s", b)
		}
	})
	return r.ns.Start("qemu-system-x86_64", append(vmtest.Accel(r.t, nil), "-m", "768", "-smp", "1",
		"-nographic", "-monitor", "none", "-serial", "file:"+serial, "-no-reboot",
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+mac, "-boot", "n")...)
}

// waitNew waits until the appliance lists a NEW machine with mac.
func (a *appliance) waitNew(vm *netnstest.Proc, mac string) machine {
	a.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		if m, ok := a.machineByMAC(mac); ok && m.State == "NEW" {
			return m
		}
		select {
		case <-vm.Done():
			if m, ok := a.machineByMAC(mac); ok && m.State == "NEW" {
				return m
			}
			a.t.Fatalf("the PXE VM exited (%v) and the appliance has no NEW machine with MAC %s", vm.Wait(time.Second), mac)
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("no NEW machine with MAC %s on the appliance within %v", mac, bootTimeout)
		}
		time.Sleep(time.Second)
	}
}

// bundleParts splits a bundle file (magic, manifest length, manifest,
// signature, payload) for the tests that forge bad ones.
type bundleParts struct {
	raw      []byte
	manifest []byte
	sigAt    int // offset of the signature
	payload  []byte
}

func readBundle(t *testing.T, file string) bundleParts {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 12 || string(raw[:8]) != "RKDBNDL1" {
		t.Fatalf("%s is not a bundle", file)
	}
	n := int(binary.BigEndian.Uint32(raw[8:12]))
	if len(raw) < 12+n+64 {
		t.Fatalf("%s is shorter than its manifest and signature", file)
	}
	return bundleParts{raw: raw, manifest: raw[12 : 12+n], sigAt: 12 + n, payload: raw[12+n+64:]}
}

// update runs `rackd appliance update FILE` and returns its output and
// error.
func (a *appliance) update(file string, args ...string) (string, error) {
	a.t.Helper()
	return a.cli(10*time.Minute, append([]string{"appliance", "update", file}, args...)...)
}

// TestApplianceLifecycle: on one appliance under OVMF, a machine PXE-boots
// from it and enlists; bad bundles are refused with nothing written; an
// update to B keeps the state and marks B good; a broken update rolls back
// by itself. The power loss in the middle of an update is
// TestAppliancePowerLoss.
func TestApplianceLifecycle(t *testing.T) {
	requireApplianceE2E(t)
	imgA, bundleB, broken := image(t, variantA), image(t, variantB), image(t, variantBroken)
	r := newRig(t)
	d := disk(t, imgA.img, 1536)
	// A short health window (the init's kernel command line knob): the
	// broken slot's rollback waits for it to pass at most.
	editGrub(t, d, "panic=10", "panic=10 rackd.health_window=150s")
	parts := partitions(t, d)
	a := r.boot(d, true)
	a.up(1, "a", variantA.version)
	t.Logf("power-on to API %.1fs", time.Since(a.start).Seconds())
	// What TestApplianceBoot checks of a first boot under OVMF (make test
	// runs this test and not that one: one boot less under TCG).
	a.checkBooted(r)

	// 1. A machine on the rack network PXE-boots from the appliance and
	// enlists.
	pxeMAC := "52:54:00:42:00:99"
	vm := r.pxe(pxeMAC)
	m := a.waitNew(vm, pxeMAC)
	t.Logf("power-on to the PXE VM NEW %.1fs (machine %s)", time.Since(a.start).Seconds(), m.ID)
	_ = vm.Wait(2 * time.Minute) // it powers off after enlisting
	var leases []struct {
		MAC string `json:"mac"`
	}
	a.get("/api/v1/leases", &leases)

	// 2. Bundles the appliance must refuse, before writing anything: the
	// inactive slot's bytes stay the same.
	before := digest(t, d, parts["rackd-b"])
	b := readBundle(t, bundleB.bundle)
	dir := t.TempDir()
	payload := filepath.Join(dir, "payload")
	if err := os.WriteFile(payload, b.payload, 0o644); err != nil {
		t.Fatal(err)
	}
	unsigned := bytes.Clone(b.raw)
	clear(unsigned[b.sigAt : b.sigAt+64])
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cli := vmtest.Rackd(t)
	run := func(args ...string) {
		t.Helper()
		if out, err := a.r.ns.Exec(t.Context(), cli, args...); err != nil {
			t.Fatalf("rackd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("appliance", "keygen", filepath.Join(dir, "other"))
	other := filepath.Join(dir, "other.bundle")
	run("appliance", "bundle", "--key", filepath.Join(dir, "other", "signing.key"), "--payload", payload,
		"--version", "e2e-other", "--build", "1001", "-o", other)
	older := filepath.Join(dir, "older.bundle")
	run("appliance", "bundle", "--key", signingKey(t), "--payload", payload,
		"--version", "e2e-older", "--build", "999", "-o", older)
	for _, c := range []struct{ name, file string }{
		{"unsigned", write("unsigned.bundle", unsigned)},
		{"signed with another key", other},
		{"truncated", write("truncated.bundle", b.raw[:len(b.raw)/2])},
		{"older than the running version", older},
	} {
		out, err := a.update(c.file, "--no-reboot")
		if err == nil {
			t.Fatalf("a bundle %s was accepted:\n%s", c.name, out)
		}
		t.Logf("refused (%s): %s", c.name, strings.TrimSpace(out))
	}
	if got := digest(t, d, parts["rackd-b"]); got != before {
		t.Fatal("a refused bundle wrote to the inactive slot B")
	}
	if st := a.status(); st.Booted != "a" || st.Trial {
		t.Fatalf("after the refusals: booted %q trial %v, want a", st.Booted, st.Trial)
	}

	// 3. A -> B: the same code with another version.
	start := time.Now()
	if out, err := a.update(bundleB.bundle); err != nil {
		t.Fatalf("update to B: %v\n%s", err, out)
	}
	a.up(2, "b", variantB.version)
	t.Logf("update to B: command to healthy %.1fs", time.Since(start).Seconds())
	st := a.status()
	if st.Booted != "b" || st.Version != variantB.version || st.Slots["b"].State != "good" ||
		st.LastUpdate == nil || st.LastUpdate.Result != "good" {
		t.Fatalf("after the update to B: %+v", st)
	}
	if _, ok := a.machineByMAC(pxeMAC); !ok {
		t.Fatal("the update lost the enlisted machine")
	}
	var leasesAfter []struct {
		MAC string `json:"mac"`
	}
	a.get("/api/v1/leases", &leasesAfter)
	if len(leasesAfter) < len(leases) {
		t.Errorf("the update lost leases: %d before, %d after", len(leases), len(leasesAfter))
	}
	if env := grubenv(t, d); env["rackd_good"] != "b" || env["rackd_try"] != "" {
		t.Errorf("grubenv after the update to B: %v", env)
	}

	// 4. A broken update (its rackd exits at start) rolls back to B with
	// no hand on it.
	start = time.Now()
	if out, err := a.update(broken.bundle); err != nil {
		t.Fatalf("update to the broken slot: %v\n%s", err, out)
	}
	a.up(3, "b", variantB.version)
	t.Logf("broken update: command to the old slot healthy again %.1fs", time.Since(start).Seconds())
	st = a.status()
	if st.Booted != "b" || st.LastUpdate == nil || st.LastUpdate.Result != "failed" || st.LastUpdate.Reason == "" ||
		st.Slots["a"].State != "failed" {
		t.Fatalf("after the broken update: %+v", st)
	}
	t.Logf("the failed update's reason: %s", st.LastUpdate.Reason)
	if _, ok := a.machineByMAC(pxeMAC); !ok {
		t.Fatal("the rollback lost the enlisted machine")
	}
}

// TestAppliancePowerLoss: a power loss in the middle of writing the
// inactive slot leaves the appliance on its good slot with its state, and
// the retried update succeeds. It boots an appliance of its own so that
// make test can leave it to make e2e-appliance (two boots and a slow
// upload under TCG).
func TestAppliancePowerLoss(t *testing.T) {
	requireApplianceE2E(t)
	imgA, bundleB := image(t, variantA), image(t, variantB)
	r := newRig(t)
	d := disk(t, imgA.img, 1536)
	parts := partitions(t, d)
	// Slot B holds a copy of A, and the first half of B's payload is
	// mostly the same bytes: with the slot emptied, what the interrupted
	// update wrote shows on the disk file before the power is cut.
	punch(t, d, parts["rackd-b"])
	a := r.boot(d, true)
	a.up(1, "a", variantA.version)
	// A record the power loss must not lose.
	const mac = "52:54:00:42:00:98"
	if out, err := a.cli(time.Minute, "machines", "add", "--hostname", "kept", "--mac", mac); err != nil {
		t.Fatalf("machines add: %v\n%s", err, out)
	}
	b := readBundle(t, bundleB.bundle)

	// Power loss while slot B is written: B's bundle streamed slowly,
	// QEMU killed with half of it sent.
	half := len(b.raw) / 2
	was := digest(t, d, parts["rackd-b"])
	g := &gate{sent: make(chan struct{}), stop: make(chan struct{})}
	body := io.MultiReader(bytes.NewReader(b.raw[:half]), g)
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequest("POST", a.url+"/api/v1/appliance/update", body)
		if err != nil {
			done <- err
			return
		}
		req.ContentLength = int64(len(b.raw))
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := a.r.client.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the update answered %s with half a bundle sent", resp.Status)
		}
		done <- err
	}()
	select {
	case <-g.sent:
	case <-time.After(5 * time.Minute):
		t.Fatal("half of the bundle was not sent within 5 minutes")
	}
	// The appliance writes as the bytes arrive; give it a moment's worth
	// of them on the disk (bounded: a condition, not a race to win).
	waitChanged(t, d, parts["rackd-b"], was, time.Minute)
	a.powerLoss()
	// The client's transport waits for its body writer: end the body,
	// or the request never returns.
	close(g.stop)
	<-done
	a.launch()
	a.up(1, "a", variantA.version)
	if st := a.status(); st.Booted != "a" || st.Slots["a"].State != "good" {
		t.Fatalf("after the power loss: %+v", st)
	}
	if _, ok := a.machineByMAC(mac); !ok {
		t.Fatal("the power loss lost the machine added before it")
	}
	// The retried update succeeds.
	if out, err := a.update(bundleB.bundle); err != nil {
		t.Fatalf("retried update: %v\n%s", err, out)
	}
	a.up(2, "b", variantB.version)
	if st := a.status(); st.Booted != "b" || st.Slots["b"].State != "good" || st.LastUpdate == nil || st.LastUpdate.Result != "good" {
		t.Fatalf("after the retried update: %+v", st)
	}
	if _, ok := a.machineByMAC(mac); !ok {
		t.Fatal("the retried update lost the machine")
	}
}

// punch empties partition p of the disk file (a hole: reads give zeros).
func punch(t *testing.T, file string, p partition) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, p.start, p.size); err != nil {
		t.Fatalf("empty the partition at %d of %s: %v", p.start, file, err)
	}
}

// gate is a reader that, once reached, says so and then blocks until stop
// is closed (the rest of a request body that never comes).
type gate struct {
	once       sync.Once
	sent, stop chan struct{}
}

func (g *gate) Read([]byte) (int, error) {
	g.once.Do(func() { close(g.sent) })
	<-g.stop
	return 0, io.ErrUnexpectedEOF
}

// waitChanged waits (bounded) until a partition's bytes on the disk file
// differ from was: the guest has written some of the slot. It only logs
// when they do not: the guest may still hold them in its page cache.
func waitChanged(t *testing.T, file string, p partition, was string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if digest(t, file, p) != was {
			t.Log("part of the slot is on the disk file: cutting the power")
			return
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("the slot's bytes on the disk file did not change within %v: cutting the power anyway", d)
}

// requireApplianceE2E skips the appliance's real-VM tests unless
// RACKD_E2E_APPLIANCE is set (make e2e-appliance sets it, and make test for
// its run beside the suite): they build three appliance images and boot
// them many times under TCG, which the main go test ./... run must not
// wait on.
func requireApplianceE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("RACKD_E2E_APPLIANCE") == "" {
		t.Skip("builds and boots the appliance image (20+ minutes under TCG): make e2e-appliance and make test run it beside the suite (RACKD_E2E_APPLIANCE=1)")
	}
}
