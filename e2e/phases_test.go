package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"rackd/internal/vmtest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/ipmisim"
	"rackd/internal/netnstest"
	"rackd/internal/redfishsim"
)

// Commissioning, deployment and release on a real VM powered by a real BMC: an ipmi_sim BMC whose power
// hook starts the QEMU VM on power on and stops it on power off, the VM's
// NIC on rackd's bridge and a disk attached. Nothing in the test powers the
// VM but rackd, through IPMI.

// osMarker is what the test's "operating system" (the boot sector of the
// raw disk image) prints on the serial port when the VM boots its disk.
const (
	osMarker      = "RACKD-E2E-DEPLOYED-OS-BOOTED"
	corruptMarker = "RACKD-E2E-CORRUPT-IMAGE-BOOTED"
)

// rawImageBytes is the size of the test's raw images: 8 MiB, or
// RACKD_E2E_RAW_MB MiB (bench-deploy streams a larger one); the VM's disk
// is 64 MiB or the image and 16 MiB more.
func rawImageBytes(t *testing.T) int {
	s := os.Getenv("RACKD_E2E_RAW_MB")
	if s == "" {
		return 8 << 20
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 4096 {
		t.Fatalf("RACKD_E2E_RAW_MB=%q: want 1..4096", s)
	}
	return n << 20
}

func vmDiskBytes(t *testing.T) int64 { return max(64<<20, int64(rawImageBytes(t))+16<<20) }

// bootSector is a BIOS boot sector that writes the message at its end to
// the first serial port (COM1, 0x3F8) and halts:
//
//	xor ax, ax; mov ds, ax; mov si, 0x7C16; mov dx, 0x3F8
//	loop: lodsb; test al, al; jz halt; out dx, al; jmp loop
//	halt: cli; hlt; jmp halt
//	0x7C16: the message, NUL-terminated
var bootSector = []byte{0x31, 0xC0, 0x8E, 0xD8, 0xBE, 0x16, 0x7C, 0xBA, 0xF8, 0x03,
	0xAC, 0x84, 0xC0, 0x74, 0x03, 0xEE, 0xEB, 0xF8, 0xFA, 0xF4, 0xEB, 0xFC}

// rawImage builds a bootable raw disk image: the boot sector printing
// marker, then seeded random bytes, so that two images differ and a flipped
// byte anywhere changes the checksum.
func rawImage(t *testing.T, name, marker string, seed uint64) (dir, sum string) {
	t.Helper()
	b := make([]byte, rawImageBytes(t))
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	copy(b, bootSector)
	msg := append([]byte("\r\n"+marker+"\r\n"), 0)
	copy(b[len(bootSector):], msg)
	// An MBR with four free slots: the 55 AA that SeaBIOS boots by is also
	// the MBR signature, so the deploy environment adds the seed's
	// partition in slot 1 (a deploy image needs a partition table).
	clear(b[len(bootSector)+len(msg) : 510])
	b[510], b[511] = 0x55, 0xAA
	h := sha256.Sum256(b)
	sum = hex.EncodeToString(h[:])
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "disk.img"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf(`{"name": %q, "arch": "amd64", "purpose": "deploy", "files": [{"path": "disk.img", "role": "disk", "sha256": %q, "size": %d}]}`,
		name, sum, len(b))
	if err := os.WriteFile(filepath.Join(dir, "rackd-image.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, sum
}

// bmcVM is a VM behind a BMC: an ipmi_sim BMC (sim), or a simulated
// Redfish BMC (redfish).
type bmcVM struct {
	t       *testing.T
	sim     *ipmisim.Sim
	redfish *redfishsim.Sim
	serial  string
	disk    string
	mac     string
}

// newBMCVM prepares the VM (tap on the lab's bridge, a disk file, the
// serial console appended to one file across power cycles) and starts its
// BMC inside the lab's namespace, where rackd reaches it and where QEMU,
// started by the BMC's power hook, finds its tap.
func newBMCVM(t *testing.T, l *lab, memMB, cpus int) *bmcVM {
	t.Helper()
	return newBMCVMDisk(t, l, memMB, cpus, vmDiskBytes(t))
}

// newBMCVMDisk is newBMCVM with a disk of diskBytes (a sparse file).
func newBMCVMDisk(t *testing.T, l *lab, memMB, cpus int, diskBytes int64) *bmcVM {
	t.Helper()
	return newBMCVMWith(t, l, memMB, cpus, diskBytes, false)
}

// vmSerialAddr is where an in-band BMC listens for its VM's IPMI
// interface, inside the lab's namespace.
const vmSerialAddr = "127.0.0.1:9002"

// newBMCVMWith is newBMCVMDisk; inband also gives the VM an in-band IPMI
// interface to the same BMC: a KCS system interface (isa-ipmi-kcs) whose
// BMC is the ipmi_sim (ipmi-bmc-extern on a socket to its "serial 15
// ... codec VM" port), so the guest's /dev/ipmi0 manages the BMC rackd
// powers the VM through.
func newBMCVMWith(t *testing.T, l *lab, memMB, cpus int, diskBytes int64, inband bool) *bmcVM {
	t.Helper()
	netnstest.Tool(t, "ipmi_sim")
	v, argv := newVM(t, l, memMB, cpus, diskBytes)
	opts := ipmisim.Options{Addr: "127.0.0.1:623", Machine: argv}
	if inband {
		host, port, _ := net.SplitHostPort(vmSerialAddr)
		opts.VMSerial = vmSerialAddr
		opts.Machine = append(opts.Machine,
			"-chardev", "socket,id=ipmi0,host="+host+",port="+port+",reconnect=1",
			"-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0",
			"-device", "isa-ipmi-kcs,bmc=bmc0")
	}
	v.startIPMI(l, opts)
	return v
}

// startIPMI starts the VM's ipmi_sim BMC with opts inside the lab's
// namespace; the test's end stops it (printing the VM's console and the
// BMC's hook log when the test failed).
func (v *bmcVM) startIPMI(l *lab, opts ipmisim.Options) {
	t := v.t
	t.Helper()
	err := l.ns.Do(func() error {
		// Started from a thread inside the namespace, ipmi_sim (and
		// the QEMU its hook starts) live there.
		var err error
		v.sim, err = ipmisim.New(opts)
		return err
	})
	if err != nil {
		t.Fatalf("BMC: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RACKD_E2E_CONSOLE") != "" {
			t.Logf("serial console of the VM %s:\n%s", v.mac, v.text())
			t.Logf("BMC hook log:\n%s", v.sim.HookLog())
		}
		if err := v.sim.Close(); err != nil {
			t.Errorf("BMC: %v", err)
		}
	})
}

// newRedfishVM is newBMCVM behind a simulated Redfish BMC (HTTPS, its own
// self-signed certificate) listening on loopback inside the lab's
// namespace, where rackd reaches it; its power-on starts QEMU inside the
// namespace, where the VM's tap is.
func newRedfishVM(t *testing.T, l *lab, memMB, cpus int) *bmcVM {
	t.Helper()
	v, argv := newVM(t, l, memMB, cpus, vmDiskBytes(t))
	argv = append([]string{"ip", "netns", "exec", l.ns.Name}, argv...)
	err := l.ns.Do(func() error {
		// The listening socket is made here, inside the namespace.
		var err error
		v.redfish, err = redfishsim.New(redfishsim.Options{Password: "e2e-" + v.mac, Machine: argv})
		return err
	})
	if err != nil {
		t.Fatalf("Redfish BMC: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RACKD_E2E_CONSOLE") != "" {
			t.Logf("serial console of the VM %s:\n%s", v.mac, v.text())
			t.Logf("the Redfish BMC's machine log:\n%s", v.redfish.MachineLog())
		}
		if err := v.redfish.Close(); err != nil {
			t.Errorf("Redfish BMC: %v", err)
		}
	})
	return v
}

// newVM prepares a VM (tap on the lab's bridge, a disk file of diskBytes,
// the serial console appended to one file across power cycles) and returns
// the QEMU command line a BMC's power-on runs.
func newVM(t *testing.T, l *lab, memMB, cpus int, diskBytes int64) (*bmcVM, []string) {
	t.Helper()
	qemu := netnstest.Tool(t, "qemu-system-x86_64")
	tap := netnstest.Name("rktap")
	l.ns.IP("tuntap", "add", "dev", tap, "mode", "tap")
	l.ns.Attach(tap, l.br)
	l.ns.Up(tap)
	dir := t.TempDir()
	v := &bmcVM{t: t, serial: filepath.Join(dir, "serial.log"), disk: filepath.Join(dir, "disk.img"), mac: randomMAC()}
	f, err := os.Create(v.disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(diskBytes); err != nil {
		t.Fatal(err)
	}
	f.Close()
	argv := append([]string{qemu}, accelArgs(t)...)
	argv = append(argv, "-m", fmt.Sprint(memMB), "-smp", fmt.Sprint(cpus),
		"-nographic", "-monitor", "none",
		"-chardev", "file,id=s0,append=on,path="+v.serial, "-serial", "chardev:s0",
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		// Network first, then the disk: rackd's "boot from local disk"
		// answer (iPXE's exit) hands over to the next boot device.
		"-device", "virtio-net-pci,netdev=n0,bootindex=1,mac="+v.mac,
		"-drive", "if=none,id=d0,format=raw,file="+v.disk,
		"-device", "virtio-blk-pci,drive=d0,bootindex=2")
	return v, argv
}

func (v *bmcVM) text() string {
	b, _ := os.ReadFile(v.serial)
	return string(b)
}

func (v *bmcVM) head() []byte {
	f, err := os.Open(v.disk)
	if err != nil {
		v.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1<<20)
	if _, err := f.ReadAt(b, 0); err != nil {
		v.t.Fatal(err)
	}
	return b
}

// waitConsole waits (bounded) until the console shows s n times.
func (v *bmcVM) waitConsole(s string, n int) {
	v.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for strings.Count(v.text(), s) < n {
		if time.Now().After(deadline) {
			v.t.Fatalf("the console did not show %q %d time(s) within %v", s, n, bootTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// power is what the VM's BMC says of its power.
func (v *bmcVM) power() (bool, error) {
	if v.redfish != nil {
		switch p := v.redfish.Power(); p {
		case "On":
			return true, nil
		case "Off":
			return false, nil
		default:
			return false, fmt.Errorf("the Redfish BMC says %q", p)
		}
	}
	return v.sim.Power()
}

// waitPower waits (bounded) until the BMC says the VM is on or off.
func (v *bmcVM) waitPower(on bool) {
	v.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		got, err := v.power()
		if err == nil && got == on {
			return
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("the VM is not powered %v within %v (%v)", map[bool]string{true: "on", false: "off"}[on], bootTimeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitState polls the machine until it reaches want, failing at once on
// any state in stop.
func (l *lab) waitState(id, want string, stop ...string) (api.Machine, time.Duration) {
	l.t.Helper()
	start := time.Now()
	deadline := start.Add(bootTimeout)
	for {
		var m api.Machine
		l.call(http.StatusOK, "GET", "/api/v1/machines/"+id, nil, &m)
		if m.State == want {
			return m, time.Since(start)
		}
		for _, s := range stop {
			if m.State == s {
				var evs []api.Event
				l.call(http.StatusOK, "GET", "/api/v1/machines/"+id+"/events", nil, &evs)
				l.t.Fatalf("machine %s is %s, waiting for %s; events: %+v", id, m.State, want, evs)
			}
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("machine %s is %s after %v, waiting for %s", id, m.State, bootTimeout, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (l *lab) lastEvent(id string) api.Event {
	l.t.Helper()
	var evs []api.Event
	l.call(http.StatusOK, "GET", "/api/v1/machines/"+id+"/events?limit=1", nil, &evs)
	if len(evs) != 1 {
		l.t.Fatalf("events of %s: %+v", id, evs)
	}
	return evs[0]
}

// TestE2ECommissionDeployRelease is a machine's whole life end to end: commission (the VM
// boots, sends its inventory, is READY and powered off), deploy a bootable
// raw image (the VM writes it, reboots, boots it from its disk: DEPLOYED),
// release with an erase (READY, disk wiped, powered off), deploy a
// corrupted image (FAILED_DEPLOYMENT, and the next boot finds nothing to
// boot), release (READY, powered off).
func TestE2ECommissionDeployRelease(t *testing.T) {
	requireVM(t)
	netnstest.Tool(t, "ipmi_sim")
	requireDiskDrivers(t)
	img := enlistImage(t)
	requirePhaseModes(t, img)
	l := newLab(t, labOptions{})
	if os.Getenv("RACKD_E2E_BENCH") != "" {
		// bench-deploy: the same environment as a commissioning image
		// that also times a plain download of the image first.
		l.importImage(benchEnvironment(t, img))
	} else {
		l.importImage(img) // also the commissioning, deploy and erase environment
	}
	goodDir, goodSHA := rawImage(t, "e2e-raw", osMarker, 1)
	badDir, badSHA := rawImage(t, "e2e-raw-bad", corruptMarker, 2)
	l.importImage(goodDir)
	l.importImage(badDir)
	// Rot one byte of the bad image in rackd's store: what rackd serves no
	// longer hashes to what its registry says.
	blob := filepath.Join(l.state, "images", "sha256", badSHA)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatalf("blob of the bad image: %v", err)
	}
	data[5<<20] ^= 0xFF
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}

	const memMB, cpus = 768, 2
	v := newBMCVM(t, l, memMB, cpus)
	var m api.Machine
	l.call(http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "vm1", MACs: []string{v.mac},
		Power: &api.PowerParams{Driver: "ipmi", Address: v.sim.Addr, Username: v.sim.User, Password: v.sim.Password}}, &m)

	// Commission.
	start := time.Now()
	l.cli("machines", "commission", "vm1")
	v.waitPower(true)
	// The power queue set the next boot to PXE before powering on.
	if dev, err := v.sim.BootDevice(); err != nil || dev != "pxe" {
		t.Errorf("boot device at power on: %q %v, want pxe", dev, err)
	}
	m, _ = l.waitState(m.ID, "READY", "FAILED_COMMISSIONING")
	commission := time.Since(start)
	if m.CPUCount != cpus || m.MemoryMB != memMB || m.Inventory == nil || len(m.Inventory.Disks) != 1 ||
		m.Inventory.Disks[0].Name != "vda" || m.Inventory.Disks[0].SizeBytes != vmDiskBytes(t) || m.MACs[0] != v.mac {
		t.Fatalf("after commissioning: %+v, inventory %+v", m, m.Inventory)
	}
	v.waitPower(false)
	l.waitObservedOff(m.ID)
	t.Logf("commissioned in %.1fs: %d CPUs, %d MiB, disk %s %d bytes, IPs %+v", commission.Seconds(), m.CPUCount, m.MemoryMB,
		m.Inventory.Disks[0].Name, m.Inventory.Disks[0].SizeBytes, m.IPs)
	if show := l.cli("machines", "show", "vm1"); !regexp.MustCompile(`(?m)^Disks:\s+vda `).MatchString(show) {
		t.Errorf("machines show lacks the disk:\n%s", show)
	}

	// Deploy the good image: written with its seed, rebooted, booted from
	// the disk; DEPLOYED once "the OS" reports.
	l.cli("allocate", "--name", "vm1", "--agent-name", "e2e")
	start = time.Now()
	l.cli("machines", "deploy", "vm1", "--image", "e2e-raw")
	m = l.waitImageWritten(m.ID)
	deploy := time.Since(start)
	v.waitConsole(osMarker, 1)
	booted := time.Since(start)
	if e := l.lastEvent(m.ID); e.Reason != "rebooting to disk" {
		t.Errorf("last event once the image is written: %+v", e)
	}
	// The marker OS has no cloud-init: the test does what cloud-init's
	// phone_home would, with the seed on the VM's disk.
	if status := l.phoneHomeFromDisk(v, m.Deployment.InstanceID); status != http.StatusOK {
		t.Fatalf("phone-home with the seed's URL: %d", status)
	}
	m, _ = l.waitState(m.ID, "DEPLOYED", "FAILED_DEPLOYMENT")
	var evs []api.Event
	l.call(http.StatusOK, "GET", "/api/v1/machines/"+m.ID+"/events", nil, &evs)
	written := false
	for _, e := range evs {
		written = written || (strings.HasPrefix(e.Reason, "image written (") && strings.Contains(e.Reason, goodSHA))
	}
	if !written {
		t.Errorf("no image written event naming %s: %+v", goodSHA, evs)
	}
	// The boot code is the image's; the partition table (bytes 446-509)
	// gained the seed's partition.
	if head, img := v.head(), mustRead(t, filepath.Join(goodDir, "disk.img")); !bytes.Equal(head[:446], img[:446]) ||
		!bytes.Equal(head[510:512], img[510:512]) || bytes.Equal(head[446:510], img[446:510]) {
		t.Error("the VM's disk does not start with the image and a partition table with the seed's partition")
	}
	t.Logf("deployed in %.1fs (the image written reported), the OS on its disk printed its marker by %.1fs", deploy.Seconds(), booted.Seconds())
	if mb, ok := consoleRate(v.text(), `wrote \d+ bytes to vda in [0-9.]+s \(([0-9.]+) MB/s\)`); ok {
		t.Logf("image streamed to the VM's disk at %.1f MB/s (HTTP, sha256, write, fsync)", mb)
		if i := strings.Index(v.text(), "time spent (overlapping)"); i >= 0 {
			line, _, _ := strings.Cut(v.text()[i:], "\n")
			t.Logf("deploy environment: %s", strings.TrimSpace(line))
		}
		recordResult(t, "e2e_stream_mb_s", mb)
	}
	if mb, ok := consoleRate(v.text(), `download only: \d+ bytes in [0-9.]+s \(([0-9.]+) MB/s\)`); ok {
		t.Logf("plain download of the image into nothing in the same environment: %.1f MB/s", mb)
		recordResult(t, "e2e_download_mb_s", mb)
	}

	// Release with an erase.
	start = time.Now()
	l.cli("release", "vm1", "--erase")
	m, _ = l.waitState(m.ID, "READY")
	v.waitPower(false)
	erase := time.Since(start)
	if !bytes.Equal(v.head(), make([]byte, 1<<20)) {
		t.Error("the erase left the head of the disk")
	}
	t.Logf("released with an erase in %.1fs", erase.Seconds())

	// Deploy the corrupted image: FAILED_DEPLOYMENT, nothing bootable.
	l.cli("allocate", "--name", "vm1", "--agent-name", "e2e")
	start = time.Now()
	l.cli("machines", "deploy", "vm1", "--image", "e2e-raw-bad")
	m, _ = l.waitState(m.ID, "FAILED_DEPLOYMENT", "DEPLOYED")
	failed := time.Since(start)
	if e := l.lastEvent(m.ID); !strings.Contains(e.Reason, "sha256 mismatch") || !strings.Contains(e.Reason, badSHA) {
		t.Errorf("failure event %+v", e)
	}
	v.waitPower(false)
	if !bytes.Equal(v.head(), make([]byte, 1<<20)) {
		t.Error("the failed deployment left a bootable head on the disk")
	}
	t.Logf("failed deployment reported in %.1fs", failed.Seconds())
	// The next boot (rackd powers it on) finds nothing to boot: rackd
	// answers "local disk" for a failed deployment, and the disk's head
	// is empty.
	l.cli("power", "on", "vm1", "--wait")
	v.waitConsole("No bootable device", 1)
	if strings.Contains(v.text(), corruptMarker) || strings.Count(v.text(), osMarker) != 1 {
		t.Error("a failed deployment booted something from the disk")
	}

	// Release: READY, powered off.
	l.cli("release", "vm1")
	l.waitState(m.ID, "READY")
	v.waitPower(false)
	l.waitObservedOff(m.ID)
	if got := l.metric("rackd_phase_failures_total", `phase="deploy"`, `reason="reported"`); got != 1 {
		t.Errorf("deploy failures reported: %v", got)
	}
	// Each environment claimed its phase credential (no boot config
	// carries one) from the address of its DHCP lease, the default
	// binding: commission, deploy, erase, deploy; none was refused.
	for outcome, want := range map[string]float64{"granted": 4, "refused": 0, "conflict": 0} {
		if got := l.metric("rackd_metadata_requests_total", `endpoint="credential"`, `outcome="`+outcome+`"`); got != want {
			t.Errorf("credential claims %s: %v, want %v", outcome, got, want)
		}
	}
	for _, phase := range []string{"commission", "deploy", "erase"} {
		if !strings.Contains(v.text(), "claimed the "+phase+" credential") {
			t.Errorf("the console does not show the %s environment claiming its credential", phase)
		}
	}
	recordResult(t, "e2e_commission_s", commission.Seconds())
	recordResult(t, "e2e_deploy_s", deploy.Seconds())
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// requireDiskDrivers fails the test unless the enlistment image it boots
// loads the VM's disk driver (virtio_blk): the image built from this tree
// lists it in initramfs/modules.txt, so a tree without it is a regression,
// not a reason to skip. RACKD_E2E_IMAGE names another image, whose drivers
// are its builder's business.
func requireDiskDrivers(t *testing.T) {
	t.Helper()
	if os.Getenv("RACKD_E2E_IMAGE") != "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(vmtest.RepoRoot(t), "initramfs", "modules.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if strings.TrimSpace(line) == "virtio_blk" {
			return
		}
	}
	t.Fatal("initramfs/modules.txt lists no disk driver (virtio_blk): the enlistment environment cannot see the VM's disk to inventory or deploy it")
}

// consoleRate reads the first submatch of re on the console as a number.
func consoleRate(console, re string) (float64, bool) {
	m := regexp.MustCompile(re).FindStringSubmatch(console)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// benchEnvironment is the enlistment image as a commissioning image whose
// command line asks the deploy mode to time a plain download first.
func benchEnvironment(t *testing.T, img string) string {
	t.Helper()
	dir := copyImage(t, img, "bench-commission", "commission")
	p := filepath.Join(dir, "rackd-image.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	cl, _ := m["cmdline"].(string)
	m["cmdline"] = strings.TrimSpace(cl + " enlist.measure_download=1")
	out, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// requirePhaseModes fails clearly when the enlistment image was built from
// a tree whose enlist client predates the phase modes (a stale
// build/initramfs/image): it would answer rackd.mode=commission with a
// whoami and reboot until the watchdog gives up.
func requirePhaseModes(t *testing.T, img string) {
	t.Helper()
	f, err := os.Open(filepath.Join(img, "initramfs.cpio.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", f.Name(), err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, 256<<20))
	if err != nil {
		t.Fatalf("%s: %v", f.Name(), err)
	}
	if !bytes.Contains(data, []byte("rackd.image_sha256")) {
		t.Fatalf("the enlistment image %s predates the commission/deploy/erase modes of the enlist client: rebuild it (make initramfs)", img)
	}
}

// waitObservedOff waits (bounded) until rackd, through the BMC, sees the
// machine off and wants it off.
func (l *lab) waitObservedOff(id string) {
	l.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		var ps api.MachinePower
		l.call(http.StatusOK, "GET", "/api/v1/machines/"+id+"/power", nil, &ps)
		if ps.Desired == "off" && ps.Observed == "off" {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("rackd's power view of %s after %v: %+v, want desired and observed off", id, bootTimeout, ps)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
