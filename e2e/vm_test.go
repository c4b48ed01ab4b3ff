package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"rackd/internal/vmtest"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// failMarker starts the line the enlist client prints when it gives up
// (enlist package documentation).
const failMarker = "rackd-enlist: failed"

// vmOptions describe one VM.
type vmOptions struct {
	mac    string
	memMB  int
	cpus   int
	uefi   bool // OVMF instead of SeaBIOS
	noROM  bool // no iPXE option ROM on the NIC: the firmware's own PXE
	reboot bool // a guest reboot boots again (else QEMU exits)
}

// vm is one QEMU process in the lab's namespace, its serial console in a
// file.
type vm struct {
	t      *testing.T
	proc   *netnstest.Proc
	serial string
	start  time.Time
	seen   map[string]time.Duration // first sighting of each awaited marker

	mu       sync.Mutex
	timeline []event // first sightings of timelineMarkers
}

// event is a moment in a VM's boot.
type event struct {
	what string
	at   time.Duration
}

// timelineMarkers are console texts whose first appearance the timeline
// records, with their names.
var timelineMarkers = [][2]string{
	{"iPXE", "iPXE"},
	{"PXE over IPv4", "firmware PXE"},
	{"Welcome to GRUB", "GRUB"},
	{"Linux version", "kernel"},
	{"Welcome to u-root", "u-root"},
	{"rackd-enlist: ", "enlist client"},
}

// randomMAC returns a locally administered unicast MAC in QEMU's 52:54:00
// range.
func randomMAC() string {
	b := make([]byte, 3)
	rand.Read(b)
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[0], b[1], b[2])
}

// startVM starts a VM whose only NIC is a tap on the lab's bridge. QEMU is
// stopped by PID when the test ends.
func (l *lab) startVM(o vmOptions) *vm {
	t := l.t
	t.Helper()
	qemu := netnstest.Tool(t, "qemu-system-x86_64")
	tap := netnstest.Name("rktap")
	l.ns.IP("tuntap", "add", "dev", tap, "mode", "tap")
	l.ns.Attach(tap, l.br)
	l.ns.Up(tap)
	dir := t.TempDir()
	v := &vm{t: t, serial: filepath.Join(dir, "serial.log"), seen: map[string]time.Duration{}}
	nic := "virtio-net-pci,netdev=n0,mac=" + o.mac
	if o.noROM {
		nic += ",romfile="
	}
	args := append(accelArgs(t),
		"-m", fmt.Sprint(o.memMB), "-smp", fmt.Sprint(o.cpus),
		// Firmware, iPXE, GRUB and the kernel all write to the
		// serial port only with -nographic and no monitor on it.
		"-nographic", "-monitor", "none", "-serial", "file:"+v.serial,
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", nic, "-boot", "n")
	if !o.reboot {
		args = append(args, "-no-reboot")
	}
	if o.uefi {
		code, vars := vmtest.OVMF(t)
		own := filepath.Join(dir, "OVMF_VARS.fd")
		b, err := os.ReadFile(vars)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(own, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+code,
			"-drive", "if=pflash,format=raw,unit=1,file="+own)
	}
	v.start = time.Now()
	v.proc = l.ns.Start(qemu, args...)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go v.watch(stop, watched)
	t.Cleanup(func() {
		close(stop)
		<-watched
	})
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RACKD_E2E_CONSOLE") != "" {
			t.Logf("serial console of the VM %s:\n%s", o.mac, v.text())
		}
	})
	return v
}

// watch records the timeline until stop is closed or QEMU exits.
func (v *vm) watch(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	seen := map[string]bool{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		text := v.text()
		for _, m := range timelineMarkers {
			if !seen[m[1]] && strings.Contains(text, m[0]) {
				seen[m[1]] = true
				v.mu.Lock()
				v.timeline = append(v.timeline, event{m[1], time.Since(v.start)})
				v.mu.Unlock()
			}
		}
		select {
		case <-stop:
			return
		case <-v.proc.Done():
			return
		case <-tick.C:
		}
	}
}

// logTimeline prints the first sighting of each timeline marker, and end
// as the last event.
func (v *vm) logTimeline(end string, at time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	parts := make([]string, 0, len(v.timeline)+1)
	for _, e := range v.timeline {
		parts = append(parts, fmt.Sprintf("%s %.1fs", e.what, e.at.Seconds()))
	}
	parts = append(parts, fmt.Sprintf("%s %.1fs", end, at.Seconds()))
	v.t.Logf("timeline from VM start: %s", strings.Join(parts, ", "))
}

// text returns the serial console so far.
func (v *vm) text() string {
	b, _ := os.ReadFile(v.serial)
	return string(b)
}

// waitFor waits until the serial console shows marker at least n times and
// returns how long after the VM's start it first did. It fails the test
// when the enlist client gives up, QEMU exits first, or bootTimeout passes.
func (v *vm) waitFor(marker string, n int) time.Duration {
	v.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		text := v.text()
		if strings.Count(text, marker) >= n {
			d := time.Since(v.start)
			key := fmt.Sprintf("%s#%d", marker, n)
			if _, ok := v.seen[key]; !ok {
				v.seen[key] = d
			}
			return v.seen[key]
		}
		if i := strings.Index(text, failMarker); i >= 0 {
			line, _, _ := strings.Cut(text[i:], "\n")
			v.t.Fatalf("the enlist client gave up waiting for %q: %s", marker, line)
		}
		select {
		case <-v.proc.Done():
			// One last look: the line may have landed just before
			// the exit.
			if strings.Count(v.text(), marker) >= n {
				continue
			}
			v.t.Fatalf("QEMU exited (%v) before the console showed %q %d time(s)\n%s", v.proc.Wait(time.Second), marker, n, v.proc.Output())
		default:
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("the console did not show %q %d time(s) within %v", marker, n, bootTimeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// failed fails the test if the enlist client printed that it gave up.
func (v *vm) failed() {
	v.t.Helper()
	text := v.text()
	if i := strings.Index(text, failMarker); i >= 0 {
		line, _, _ := strings.Cut(text[i:], "\n")
		v.t.Fatalf("the enlist client gave up: %s", line)
	}
}

// finalLine checks that the console shows the enlist client's final line.
// The client prints it just before it powers off or reboots, and a guest
// that acts at once can lose the last bytes still queued for the serial
// port; so a missing line is reported, not failed: rackd's side (the API,
// the metrics) is what the tests assert.
func (v *vm) finalLine(marker string) {
	v.t.Helper()
	if !strings.Contains(v.text(), marker) {
		v.t.Logf("note: the console lacks the enlist client's final line %q (lost with the serial port's queue when the guest acted at once?)", marker)
	}
}

// waitExit waits for QEMU to exit by itself (the guest powered off) and
// returns how long after the start it did.
func (v *vm) waitExit() time.Duration {
	v.t.Helper()
	if err := v.proc.Wait(bootTimeout); err != nil {
		v.t.Fatalf("QEMU did not exit cleanly after the guest powered off: %v\n%s", err, v.proc.Output())
	}
	return time.Since(v.start)
}

// stop stops QEMU now.
func (v *vm) stop() { v.proc.Stop(5 * time.Second) }

// accelArgs returns QEMU's accelerator arguments: TCG unless
// RACKD_E2E_ACCEL says kvm, or auto and a bounded probe shows that KVM
// boots Debian's kernel here (it does not under every nested hypervisor:
// some abort on an MSR, others hang early in boot).
func accelArgs(t *testing.T) []string {
	return vmtest.Accel(t, func(kvm []string) (bool, string) { return probeKVM(t, kvm) })
}

// probeKVM boots the enlistment kernel directly under KVM, without a
// network, and reports whether it reached the initramfs within 30 s.
func probeKVM(t *testing.T, kvm []string) (bool, string) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false, "no /dev/kvm"
	}
	img := enlistImage(t)
	serial := filepath.Join(t.TempDir(), "probe.log")
	// The context outlives the probe's own 30 s by a margin, so that
	// a timeout is reported as such rather than as QEMU killed.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	args := append(append([]string{}, kvm...), "-m", "512", "-nographic", "-monitor", "none",
		"-serial", "file:"+serial, "-no-reboot", "-nic", "none",
		"-kernel", filepath.Join(img, "vmlinuz"), "-initrd", filepath.Join(img, "initramfs.cpio.gz"),
		"-append", "console=ttyS0 panic=-1")
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	if err := cmd.Start(); err != nil {
		return false, err.Error()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cancel() // kills it (by its PID) if it still runs
		<-done
	}()
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		if b, _ := os.ReadFile(serial); strings.Contains(string(b), "Run /init") {
			t.Logf("KVM probe: the kernel reached the initramfs in %v", time.Since(start).Round(time.Millisecond))
			return true, ""
		}
		select {
		case err := <-done:
			done <- err
			return false, fmt.Sprintf("QEMU exited: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	last := "nothing"
	if b, _ := os.ReadFile(serial); len(b) > 0 {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		last = fmt.Sprintf("%q", strings.TrimSpace(lines[len(lines)-1]))
	}
	return false, fmt.Sprintf("the kernel did not reach the initramfs within 30s (its console's last line: %s)", last)
}
