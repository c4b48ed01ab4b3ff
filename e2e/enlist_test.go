package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"rackd/api"
	"rackd/internal/netnstest"
)

// Console lines of the enlist client (see the enlist package).
const (
	markEnlisted    = "rackd-enlist: enlisted as "
	markKnownReboot = "rackd-enlist: known machine (DEPLOYING), rebooting"
)

// requireVM skips without root and fails (as root) without QEMU.
func requireVM(t *testing.T) {
	t.Helper()
	netnstest.Require(t)
	netnstest.Tool(t, "qemu-system-x86_64")
}

// requireAllE2E skips a real-VM test that make e2e runs and make test
// leaves out (RACKD_E2E_ALL=1 runs it): one whose protocol is also checked
// against its real peer outside a VM, kept out of make test so that make
// test stays within half an hour on two cores.
func requireAllE2E(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("RACKD_E2E_ALL") == "" {
		t.Skipf("make e2e runs it (RACKD_E2E_ALL=1), make test does not: %s", why)
	}
}

// cmdlines returns the kernel command lines the console shows, in boot
// order.
func cmdlines(console string) []string {
	var out []string
	for line := range strings.SplitSeq(console, "\n") {
		if _, after, ok := strings.Cut(line, "Command line: "); ok {
			out = append(out, strings.TrimSpace(after))
		}
	}
	return out
}

// checkEnlisted checks that the VM with mac is in rackd as a NEW machine
// with the VM's hardware.
func checkEnlisted(t *testing.T, l *lab, o vmOptions) api.Machine {
	t.Helper()
	m, ok := l.machineByMAC(o.mac)
	if !ok {
		t.Fatalf("no machine with MAC %s after enlistment; machines: %+v", o.mac, l.machines())
	}
	if m.State != "NEW" {
		t.Errorf("machine %s is %s, want NEW", m.ID, m.State)
	}
	if m.CPUCount != o.cpus {
		t.Errorf("machine %s has %d CPUs, want %d (-smp)", m.ID, m.CPUCount, o.cpus)
	}
	if m.MemoryMB != o.memMB {
		t.Errorf("machine %s has %d MiB, want %d (-m)", m.ID, m.MemoryMB, o.memMB)
	}
	if m.Arch != "amd64" {
		t.Errorf("machine %s has arch %q, want amd64", m.ID, m.Arch)
	}
	return m
}

// recordResult appends k=v to the file RACKD_E2E_RESULTS names, for
// bench/boot.
func recordResult(t *testing.T, k string, v float64) {
	p := os.Getenv("RACKD_E2E_RESULTS")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("results file: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s=%.2f\n", k, v)
}

// TestE2EEnlistBIOS: an unknown VM PXE-boots with its NIC's iPXE ROM from
// rackd (DHCP with the iPXE user class -> HTTP script -> the enlistment
// kernel and initramfs over HTTP), the enlist client enlists it, and it
// powers itself off; rackd lists it NEW with its MAC, CPU count and memory.
func TestE2EEnlistBIOS(t *testing.T) {
	requireVM(t)
	img := enlistImage(t)
	l := newLab(t, labOptions{})
	l.importImage(img)
	if ms := l.machines(); len(ms) != 0 {
		t.Fatalf("machines before the boot: %+v", ms)
	}

	o := vmOptions{mac: randomMAC(), memMB: 768, cpus: 2}
	v := l.startVM(o)
	_, enlisted := l.waitMachine(v, o.mac)
	m := checkEnlisted(t, l, o)
	off := v.waitExit()
	v.logTimeline("powered off", off)
	v.finalLine(markEnlisted)
	lines := cmdlines(v.text())
	if len(lines) != 1 || !strings.Contains(lines[0], "rackd.mode=enlist") || !strings.Contains(lines[0], "rackd.url="+l.url) {
		t.Errorf("kernel command lines %q: want one enlist boot told rackd.url=%s", lines, l.url)
	}
	t.Logf("VM %s enlisted as %s (%d CPUs, %d MiB) %.1fs after it started, and powered off at %.1fs",
		o.mac, m.ID, m.CPUCount, m.MemoryMB, enlisted.Seconds(), off.Seconds())
	recordResult(t, "e2e_enlist_s", enlisted.Seconds())
	recordResult(t, "e2e_poweroff_s", off.Seconds())
}

// TestE2EKnownMachineReboots: a machine rackd knows as
// DEPLOYING lands in the default enlistment environment anyway (rackd is
// told to answer its first per-MAC request with the default config, as
// firmware that gave up on a slow answer would boot); whoami tells the
// enlist client to reboot instead of enlisting or powering off; the VM
// reboots (a second iPXE DHCP exchange) and this time gets its DEPLOYING
// config: the deploy image, rackd.mode=deploy.
func TestE2EKnownMachineReboots(t *testing.T) {
	requireVM(t)
	img := enlistImage(t)
	l := newLab(t, labOptions{defaultFirst: 1})
	l.importImage(img)
	// The deploy image: the same kernel and initramfs under another name
	// and purpose (the blobs are shared); it boots with rackd.mode=deploy.
	l.importImage(copyImage(t, img, "e2e-deploy", "deploy"))

	o := vmOptions{mac: randomMAC(), memMB: 768, cpus: 2, reboot: true}
	l.call(http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{
		Hostname: "vm1", Arch: "amd64", MACs: []string{o.mac}, CPUCount: o.cpus, MemoryMB: o.memMB, State: "READY"}, nil)
	l.call(http.StatusCreated, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "vm1", AgentName: "e2e"}, nil)
	l.call(http.StatusOK, "POST", "/api/v1/machines/vm1/deploy", api.ActionRequest{Image: "e2e-deploy"}, nil)
	before, ok := l.machineByMAC(o.mac)
	if !ok || before.State != "DEPLOYING" {
		t.Fatalf("machine before the boot: %+v (%v), want DEPLOYING", before, ok)
	}
	acks0 := l.metric("rackd_dhcp_replies_total", `outcome="ack"`)

	v := l.startVM(o)
	// The second boot: the kernel's second command line.
	deployAt := v.waitFor("Command line: ", 2)
	v.logTimeline("second kernel", deployAt)
	v.stop()
	v.finalLine(markKnownReboot)
	whoamiReboot := `endpoint="whoami",outcome="reboot"`
	if n := l.metric("rackd_metadata_requests_total", whoamiReboot); n < 1 {
		t.Errorf("rackd answered whoami with reboot %v times, want at least 1", n)
	}
	if n := l.metric("rackd_metadata_requests_total", `endpoint="enlist"`); n != 0 {
		t.Errorf("the known machine sent %v enlist requests, want none", n)
	}

	lines := cmdlines(v.text())
	if len(lines) < 2 {
		t.Fatalf("kernel command lines %q: want two boots", lines)
	}
	if !strings.Contains(lines[0], "rackd.mode=enlist") || strings.Contains(lines[0], "rackd.machine=") {
		t.Errorf("first boot %q: want the default enlistment config (rackd.mode=enlist, no machine)", lines[0])
	}
	if !strings.Contains(lines[1], "rackd.mode=deploy") || !strings.Contains(lines[1], "rackd.machine="+before.ID) {
		t.Errorf("second boot %q: want the DEPLOYING config (rackd.mode=deploy rackd.machine=%s)", lines[1], before.ID)
	}
	if n := strings.Count(v.text(), markEnlisted); n != 0 {
		t.Errorf("the known machine enlisted %d time(s)", n)
	}
	// Two boots are two iPXE DHCP exchanges, besides the enlist
	// client's own: at least three ACKs in all.
	if acks := l.metric("rackd_dhcp_replies_total", `outcome="ack"`) - acks0; acks < 3 {
		t.Errorf("rackd sent %v DHCP ACKs during the two boots, want at least 3 (iPXE twice, the enlist client once)", acks)
	}
	after, ok := l.machineByMAC(o.mac)
	if !ok || after.State != "DEPLOYING" || after.ID != before.ID {
		t.Errorf("machine after the boots: %+v, want it unchanged in DEPLOYING", after)
	}
	if ms := l.machines(); len(ms) != 1 {
		t.Errorf("%d machines after the boots, want 1: %+v", len(ms), ms)
	}
	t.Logf("known VM %s: whoami said reboot, and the DEPLOYING config booted %.1fs after the VM's start",
		o.mac, deployAt.Seconds())
}

// GRUB passes the kernel's path as BOOT_IMAGE: it says which of the two
// branches of the config rackd rendered loaded the kernel from rackd's
// images, over HTTP (GRUB with the http module) or over TFTP (without).
var (
	bootImageHTTPRE = regexp.MustCompile(`BOOT_IMAGE=\(http,[0-9.]+:[0-9]+\)/boot/images/[0-9a-f]{64}`)
	bootImageTFTPRE = regexp.MustCompile(`BOOT_IMAGE=\(tftp,[0-9.]+\)/images/[0-9a-f]{64}`)
)

// TestE2EUEFIGrub: an unknown VM under OVMF (UEFI) PXE-boots with the
// firmware's own PXE stack (no iPXE ROM on its NIC): DHCP (arch 7) -> shim
// (bootx64.efi) and GRUB (grubx64.efi) over TFTP from the bootloader image
// of Debian's signed packages (make bootloaders) -> GRUB loads its config
// from rackd, the per-MAC one by its pre-loader. That signed GRUB, alone,
// as a Secure Boot machine runs it: it has no http module and finds none
// to load, so the config's TFTP fallback loads the enlistment kernel and
// initrd from rackd's TFTP server; the VM enlists and powers off.
func TestE2EUEFIGrub(t *testing.T) {
	uefiGrub(t, false)
}

// TestE2EUEFIGrubHTTPModule: the same boot with GRUB's modules of the same
// version served where the signed GRUB looks for them ($prefix/x86_64-efi/:
// the grub-modules image make bootloaders builds and imports, for machines
// without Secure Boot): insmod http succeeds and the kernel and initrd come
// over HTTP.
func TestE2EUEFIGrubHTTPModule(t *testing.T) {
	uefiGrub(t, true)
}

func uefiGrub(t *testing.T, modules bool) {
	requireVM(t)
	img := enlistImage(t)
	loaders := bootloaders(t)
	l := newLab(t, labOptions{tftp: true})
	l.importImage(loaders)
	if modules {
		l.importImage(filepath.Join(filepath.Dir(loaders), "grub-amd64"))
	}
	l.importImage(img)

	o := vmOptions{mac: randomMAC(), memMB: 768, cpus: 2, uefi: true, noROM: true}
	v := l.startVM(o)
	l.waitMachine(v, o.mac)
	checkEnlisted(t, l, o)
	log := l.rackd.Output()
	// GRUB asked rackd for this machine's own config (by TFTP).
	if !regexp.MustCompile(`"msg":"tftp: sent".*"file":"[^"]*grub\.cfg-(01-)?` + strings.ReplaceAll(o.mac, ":", "[:-]")).MatchString(log) {
		t.Errorf("rackd's log shows no per-MAC GRUB config sent to %s", o.mac)
	}
	// The kernel and the initrd were sent by TFTP exactly when GRUB had
	// no http module.
	sentImages := len(regexp.MustCompile(`"msg":"tftp: sent".*"file":"/?images/[0-9a-f]{64}"`).FindAllString(log, -1))
	off := v.waitExit()
	v.logTimeline("powered off", off)
	v.finalLine(markEnlisted)
	lines := cmdlines(v.text())
	want, how := bootImageHTTPRE, "HTTP"
	if !modules {
		want, how = bootImageTFTPRE, "TFTP"
		if sentImages < 2 {
			t.Errorf("rackd's log shows %d image blobs sent by TFTP, want the kernel and the initrd", sentImages)
		}
	} else if sentImages != 0 {
		t.Errorf("rackd's log shows %d image blobs sent by TFTP, want none: GRUB had the http module", sentImages)
	}
	if len(lines) != 1 || !want.MatchString(lines[0]) || !strings.Contains(lines[0], "rackd.mode=enlist") {
		t.Errorf("kernel command lines %q: want one enlist boot by GRUB over %s", lines, how)
	}
	t.Logf("UEFI VM %s enlisted through GRUB (kernel over %s) and powered off %.1fs after it started", o.mac, how, off.Seconds())
}
