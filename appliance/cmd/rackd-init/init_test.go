//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"rackd/appliance"
	"rackd/appliance/boot"
	"rackd/internal/netnstest"
)

// layout is the appliance image's partition table (sfdisk script), with a
// data partition of 1 MiB at the end of a 12 MiB image.
const layout = `label: gpt
unit: sectors
first-lba: 2048
start=2048, size=2048, type=21686148-6449-6E6F-744E-656564454649, name="bios"
start=4096, size=4096, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="esp"
start=8192, size=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-a"
start=12288, size=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-b"
start=16384, size=2048, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-data"
`

func tool(t *testing.T, name string) string {
	t.Helper()
	for _, p := range []string{name, "/usr/sbin/" + name, "/sbin/" + name} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatalf("%s not found (scripts/test-deps.sh installs it)", name)
	return ""
}

// applianceRoot is a root directory as the init sees the appliance with
// -mount=false: proc/cmdline, a sysfs with the disk's partitions and the
// two NICs (the namespace's veth ends, management first in PCI order),
// dev/ with the disk image and one file per partition, the slot's and the
// ESP's content.
type applianceRoot struct {
	dir, mgmt, rack string
}

func newRoot(t *testing.T, mgmt, rack string) *applianceRoot {
	t.Helper()
	r := &applianceRoot{dir: t.TempDir(), mgmt: mgmt, rack: rack}
	mk := func(p string) string {
		p = filepath.Join(r.dir, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(p string, b []byte) {
		if err := os.WriteFile(filepath.Join(r.dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(r.dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("proc")
	mk("dev")
	mk("sys/class/block")
	mk("sys/class/net")
	dd := "sys/devices/pci0000:00/0000:00:05.0/virtio3/block/vda"
	mk(dd)
	link("../../devices/pci0000:00/0000:00:05.0/virtio3/block/vda", "sys/class/block/vda")
	write(dd+"/uevent", []byte("DEVNAME=vda\nDEVTYPE=disk\n"))
	for i, name := range []string{"bios", "esp", "rackd-a", "rackd-b", "rackd-data"} {
		dev := fmt.Sprintf("vda%d", i+1)
		mk(dd + "/" + dev)
		write(dd+"/"+dev+"/uevent", fmt.Appendf(nil, "DEVNAME=%s\nDEVTYPE=partition\nPARTN=%d\nPARTNAME=%s\n", dev, i+1, name))
		link("../../devices/pci0000:00/0000:00:05.0/virtio3/block/vda/"+dev, "sys/class/block/"+dev)
		write("dev/"+dev, nil)
	}
	// The data partition: blank, 16 MiB.
	if err := os.Truncate(filepath.Join(r.dir, "dev/vda5"), 16<<20); err != nil {
		t.Fatal(err)
	}
	// The disk: the image's table, on a disk larger than the image.
	disk := filepath.Join(r.dir, "dev/vda")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 12<<20); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool(t, "sfdisk"), "--no-reread", "--no-tell-kernel", disk)
	cmd.Stdin = strings.NewReader(layout)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	for name, bus := range map[string]string{mgmt: "0000:00:03.0", rack: "0000:00:04.0"} {
		nd := "sys/devices/pci0000:00/" + bus + "/net/" + name
		mk(nd)
		write(nd+"/type", []byte("1\n"))
		link("../../../"+bus, nd+"/device")
		link("../../devices/pci0000:00/"+bus+"/net/"+name, "sys/class/net/"+name)
		mk("sys/devices/pci0000:00/" + bus)
	}
	mk("slot/images/enlist-amd64")
	write("slot/manifest.json", []byte(`{"version": "v1.2.3-test", "build": 1764633600, "arch": "amd64"}`))
	write("slot/bundle.pub", []byte("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"))
	write("slot/images/enlist-amd64/rackd-image.json", []byte(`{"name": "rackd-enlist", "arch": "amd64", "purpose": "enlist",
  "files": [{"path": "vmlinuz", "role": "kernel", "sha256": "`+strings.Repeat("ab", 32)+`", "size": 1}]}`))
	mk("esp/grub")
	write("esp/grub/appliance.toml", []byte("[log]\nmax_mb = 1\nkeep = 2\n"))
	return r
}

func (r *applianceRoot) path(p string) string { return filepath.Join(r.dir, p) }

func (r *applianceRoot) setEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	p := r.path("esp/grub/grubenv")
	os.Remove(p)
	if err := appliance.CreateEnvFile(p, appliance.EnvOf(vars)); err != nil {
		t.Fatal(err)
	}
}

func (r *applianceRoot) env(t *testing.T) map[string]string {
	t.Helper()
	e, err := appliance.ReadEnvFile(r.path("esp/grub/grubenv"))
	if err != nil {
		t.Fatal(err)
	}
	return e.Map()
}

func (r *applianceRoot) status(t *testing.T) appliance.Status {
	t.Helper()
	st, err := appliance.LoadStatus(r.path("data/appliance/status.json"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// boot runs the init in ns with the command line and the fake rackd's
// mode, until it exits; want is a console line to wait for, after which
// stop (if set) is called.
func (r *applianceRoot) boot(t *testing.T, ns *netnstest.NS, cmdline, mode string, waitFor string, then func()) (string, int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return r.bootWith(t, ns, self, cmdline, mode, waitFor, then)
}

// bootWith is boot with rackd the binary at rackd.
func (r *applianceRoot) bootWith(t *testing.T, ns *netnstest.NS, rackd, cmdline, mode string, waitFor string, then func()) (string, int) {
	t.Helper()
	if err := os.WriteFile(r.path("proc/cmdline"), []byte(cmdline+" console=ttyS0,115200 panic=10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RACKD_INIT_TEST_ROLE", "init")
	t.Setenv("FAKE_RACKD", mode)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := ns.Start(self, "-root", r.dir, "-mount=false", "-reboot=false", "-rackd", rackd, "-mke2fs", tool(t, "mke2fs"),
		"-health-poll", "100ms", "-device-wait", "5s", "-dhcp-wait", "30s")
	deadline := time.Now().Add(90 * time.Second)
	if waitFor != "" {
		for !strings.Contains(p.Output(), waitFor) {
			select {
			case <-p.Done():
				t.Fatalf("the init exited before %q:\n%s", waitFor, p.Output())
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q within 90s:\n%s", waitFor, p.Output())
			}
		}
		if then != nil {
			then()
		}
	}
	err = p.Wait(time.Until(deadline))
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("the init: %v\n%s", err, p.Output())
	}
	t.Logf("the init with %q exited with code %d:\n%s", cmdline, code, p.Output())
	return p.Output(), code
}

// TestApplianceBoots is the init's life on an appliance, outside PID 1:
// a first boot that is the trial of slot b, from a blank data partition
// (grown, formatted, defaults written), with the management interface's
// address from a real dnsmasq; rackd healthy marks slot b good, the rack
// subnet and the slot's image are put in rackd, and rackd's exit code 100
// reboots. Then a trial of slot a whose rackd keeps exiting: recorded, and
// a reboot; then the boot of the good slot b, which records the failed
// update and keeps the data partition.
func TestApplianceBoots(t *testing.T) {
	netnstest.Require(t)
	dnsmasq := netnstest.Tool(t, "dnsmasq")
	tool(t, "curl")
	srv, box := netnstest.New(t), netnstest.New(t)
	srvIf, mgmt := netnstest.Veth(t, srv, box)
	rackPeer := netnstest.New(t)
	_, rack := netnstest.Veth(t, rackPeer, box)
	srv.AddAddr(srvIf, netip.MustParsePrefix("10.78.0.1/24"))
	srv.Start(dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--user=root", "--group=root",
		"--interface="+srvIf, "--bind-interfaces", "--dhcp-range=10.78.0.50,10.78.0.60,255.255.255.0,2m",
		"--dhcp-option=option:router,10.78.0.1", "--dhcp-option=option:dns-server,10.78.0.53",
		"--dhcp-leasefile="+filepath.Join(t.TempDir(), "leases"), "--dhcp-authoritative", "--no-ping")
	r := newRoot(t, mgmt, rack)
	exitRackd := func() {
		if out, err := box.Exec(context.Background(), "curl", "-fsS", "-X", "POST", "http://127.0.0.1:5240/fake/exit"); err != nil {
			t.Fatalf("curl: %v: %s", err, out)
		}
	}

	// 1. First boot, the trial of slot b (GRUB saved rackd_tries=0), with
	// a watchdog device (a file here: it takes the pets, not the timeout).
	r.setEnv(t, map[string]string{"rackd_good": "a", "rackd_try": "b", "rackd_tries": "0"})
	if err := os.WriteFile(r.path("dev/watchdog"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := r.boot(t, box, "rackd.slot=b rackd.trial=1", "ok", "admin token:", exitRackd)
	if code != appliance.ExitReboot {
		t.Fatalf("exit code %d, want %d (reboot):\n%s", code, appliance.ExitReboot, out)
	}
	for _, want := range []string{
		"first boot: the data partition vda5 is blank",
		"grew the data partition vda5",
		"made an ext4 file system",
		"rack interface " + rack + ": 10.42.0.1/24",
		"management interface " + mgmt + ": 10.78.0.",
		"rackd is healthy",
		"slot b (v1.2.3-test) is the good slot now",
		"created the rack subnet 10.42.0.0/24 (DHCP 10.42.0.100-10.42.0.199) on " + rack,
		"imported rackd-enlist/amd64",
		"rackd asked for a reboot",
		"reboot (not done: -reboot=false)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	token, err := os.ReadFile(r.path("data/state/admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	banner := fmt.Sprintf("rackd-init: rackd appliance v1.2.3-test (slot b): API http://10.78.0.")
	if !strings.Contains(out, banner) || !strings.Contains(out, ":5240/ — admin token: "+strings.TrimSpace(string(token))+" (also in /data/state/admin.token)") {
		t.Errorf("no first-boot banner with the token")
	}
	if t.Failed() {
		t.Fatalf("console:\n%s", out)
	}
	// Petted while coming up, and disarmed (the magic close) as the init
	// exits without a reboot.
	if wd, _ := os.ReadFile(r.path("dev/watchdog")); len(wd) < 2 || wd[0] != 0 || wd[len(wd)-1] != 'V' || !strings.Contains(out, "watchdog armed") {
		t.Fatalf("the watchdog got %q", wd)
	}
	os.Remove(r.path("dev/watchdog"))
	if out, err := exec.Command(tool(t, "sfdisk"), "--verify", r.path("dev/vda")).CombinedOutput(); err != nil {
		t.Fatalf("sfdisk --verify after the grow: %v\n%s", err, out)
	}
	if out, err := exec.Command(tool(t, "e2fsck"), "-fn", r.path("dev/vda5")).CombinedOutput(); err != nil {
		t.Fatalf("e2fsck -fn of the data partition: %v\n%s", err, out)
	}
	if env := r.env(t); env["rackd_good"] != "b" || env["rackd_try"] != "" || env["rackd_tries"] != "0" {
		t.Fatalf("grubenv after a good trial: %v", env)
	}
	st := r.status(t)
	if st.Booted != appliance.SlotB || st.Slot(appliance.SlotB).State != appliance.StateGood || st.Slot(appliance.SlotB).Version != "v1.2.3-test" {
		t.Fatalf("status after a good trial: %+v", st)
	}
	var d appliance.Descriptor
	if b, err := os.ReadFile(r.path("run/rackd/appliance.json")); err != nil || json.Unmarshal(b, &d) != nil {
		t.Fatalf("descriptor: %v", err)
	}
	if d.Booted != appliance.SlotB || !d.Trial || d.Slots[appliance.SlotA] != r.path("dev/vda3") || d.GrubEnv != r.path("esp/grub/grubenv") ||
		d.StatusFile != r.path("data/appliance/status.json") || d.PublicKey != r.path("slot/bundle.pub") || d.Build != 1764633600 {
		t.Fatalf("descriptor %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	rc, err := os.ReadFile(r.path("data/etc/rackd.toml"))
	if err != nil || !strings.Contains(string(rc), `interfaces = ["`+rack+`"]`) || !strings.Contains(string(rc), `descriptor = "`+r.path("run/rackd/appliance.json")+`"`) {
		t.Fatalf("rackd.toml: %v\n%s", err, rc)
	}
	// The ESP's seed became appliance.toml; its log settings apply.
	if b, _ := os.ReadFile(r.path("data/etc/appliance.toml")); !strings.Contains(string(b), "max_mb = 1") {
		t.Fatalf("appliance.toml is not the ESP's seed: %s", b)
	}
	if b, _ := os.ReadFile(r.path("data/log/rackd.log")); !strings.Contains(string(b), "fake rackd: serving on 0.0.0.0:5240") ||
		!strings.Contains(string(b), "rackd-init: rackd is healthy") {
		t.Fatalf("rackd.log:\n%s", b)
	}

	// 2. An update to slot a whose rackd exits at start: its trial gives up
	// after the (shortened) health window and reboots. The windows here
	// are long enough for rackd to have exited, or answered, on a loaded
	// machine: the reason recorded is the last thing seen.
	r.setEnv(t, map[string]string{"rackd_good": "b", "rackd_try": "a", "rackd_tries": "0"})
	out, code = r.boot(t, box, "rackd.slot=a rackd.trial=1 rackd.health_window=10s", "crash", "", nil)
	if code != appliance.ExitReboot || !strings.Contains(out, "trial of slot a failed: not healthy within 10s: rackd exited") {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	if strings.Contains(out, "first boot") {
		t.Fatalf("the second boot formatted the data partition again:\n%s", out)
	}
	st = r.status(t)
	if u := st.LastUpdate; u == nil || u.Slot != appliance.SlotA || u.Result != appliance.ResultFailed ||
		!strings.Contains(u.Reason, "schema 99 is newer than this build") {
		t.Fatalf("status after a failed trial: %+v %+v", st, st.LastUpdate)
	}

	// 2a. The same crashing rackd with a health window far longer than the
	// test's own bound: the trial fails once rackd exited TrialExitLimit
	// times, without waiting for the window.
	r.setEnv(t, map[string]string{"rackd_good": "b", "rackd_try": "a", "rackd_tries": "0"})
	out, code = r.boot(t, box, "rackd.slot=a rackd.trial=1 rackd.health_window=1h", "crash", "", nil)
	if code != appliance.ExitReboot || !strings.Contains(out, fmt.Sprintf("trial of slot a failed: rackd exited %d times without becoming healthy: rackd exited %[1]d times", TrialExitLimit)) {
		t.Fatalf("a crash-looping trial with a long window: exit code %d:\n%s", code, out)
	}
	if u := r.status(t).LastUpdate; u == nil || u.Result != appliance.ResultFailed || !strings.Contains(u.Reason, "schema 99 is newer than this build") {
		t.Fatalf("status after a crash-looping trial: %+v", u)
	}

	// 2b. Again with a rackd that runs but never binds its DHCP interface:
	// the reason is /healthz's.
	r.setEnv(t, map[string]string{"rackd_good": "b", "rackd_try": "a", "rackd_tries": "0"})
	out, code = r.boot(t, box, "rackd.slot=a rackd.trial=1 rackd.health_window=6s", "unbound", "", nil)
	if code != appliance.ExitReboot {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	if u := r.status(t).LastUpdate; u == nil || u.Result != appliance.ResultFailed ||
		!strings.Contains(u.Reason, "/healthz: 503 dhcp interface "+rack+" not bound") {
		t.Fatalf("status after a trial that never bound: %+v", u)
	}

	// 3. GRUB boots the good slot b: the failed try is cleared and kept in
	// the status; the data partition, token and images stay as they were.
	out, code = r.boot(t, box, "rackd.slot=b", "ok", "(admin token in /data/state/admin.token)", exitRackd)
	if code != appliance.ExitReboot {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	if !strings.Contains(out, "the update in slot a failed: not healthy within 6s: /healthz: 503 dhcp interface "+rack+" not bound") || strings.Contains(out, "imported") ||
		strings.Contains(out, "created the rack subnet") || strings.Contains(out, "first boot") {
		t.Fatalf("third boot:\n%s", out)
	}
	if env := r.env(t); env["rackd_good"] != "b" || env["rackd_try"] != "" {
		t.Fatalf("grubenv after the failed try: %v", env)
	}
	if t2, _ := os.ReadFile(r.path("data/state/admin.token")); string(t2) != string(token) {
		t.Fatal("the admin token changed")
	}
	st = r.status(t)
	if st.Slot(appliance.SlotA).State != appliance.StateFailed || st.Slot(appliance.SlotB).State != appliance.StateGood ||
		st.LastUpdate == nil || !strings.Contains(st.LastUpdate.Reason, "not bound") {
		t.Fatalf("status after the failed try: %+v %+v", st, st.LastUpdate)
	}

	// 4. A factory reset asked for in the GRUB environment (rackd
	// appliance reset): a new data partition, a new token, the defaults
	// and the slot's images again; the request is cleared.
	r.setEnv(t, map[string]string{"rackd_good": "b", "rackd_reset": "1"})
	out, code = r.boot(t, box, "rackd.slot=b", "ok", "admin token:", exitRackd)
	if code != appliance.ExitReboot {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	for _, want := range []string{"factory reset: formatting the data partition vda5", "made an ext4 file system",
		"created the rack subnet 10.42.0.0/24", "imported rackd-enlist/amd64"} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if strings.Contains(out, "grew the data partition") {
		t.Error("the data partition was grown again")
	}
	if env := r.env(t); env["rackd_reset"] != "" || env["rackd_good"] != "b" {
		t.Errorf("grubenv after the reset: %v", env)
	}
	if t3, _ := os.ReadFile(r.path("data/state/admin.token")); len(t3) == 0 || string(t3) == string(token) {
		t.Errorf("the admin token after a factory reset: %q (before: %q)", t3, token)
	}
	if st := r.status(t); st.LastUpdate != nil || st.Slot(appliance.SlotB).State != appliance.StateGood {
		t.Errorf("status after a factory reset: %+v", st)
	}

	// 5. The power button (an input device; a FIFO here): rackd stops,
	// the file systems are unmounted, the machine powers off.
	if err := os.MkdirAll(r.path("dev/input"), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := r.path("dev/input/event0")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = r.boot(t, box, "rackd.slot=b", "ok", "(admin token in /data/state/admin.token)", func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(boot.PowerKeyEvent()); err != nil {
			t.Fatal(err)
		}
	})
	if code != 0 || !strings.Contains(out, "power button: stopping rackd, then powering off") || !strings.Contains(out, "power off (not done: -reboot=false)") {
		t.Fatalf("power button: exit code %d:\n%s", code, out)
	}
}
