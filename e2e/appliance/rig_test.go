package appliance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"rackd/internal/vmtest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// The management network: the test's end of the appliance's management NIC
// and the address dnsmasq gives the appliance there.
var (
	mgmtHost      = netip.MustParsePrefix("10.81.0.1/24")
	mgmtAppliance = netip.MustParseAddr("10.81.0.10")
)

const (
	// bootTimeout bounds every wait for a boot: under TCG on two loaded
	// cores, firmware, GRUB, the kernel and the first boot's format and
	// imports take minutes.
	bootTimeout = 8 * time.Minute
	// buildTimeout bounds one image build (a u-root initramfs build of
	// minutes when its sources changed).
	buildTimeout = 30 * time.Minute
	// apiPort is the appliance's default listen port.
	apiPort = 5240
)

// variant is one build of scripts/appliance-image.sh.
type variant struct {
	name    string
	version string
	build   int64
	env     []string // more knobs
	full    bool     // the disk too, not only the bundle
}

// The builds the tests use: A (the disk and its bundle), B (the same code
// with another version and a later build: an update) and a slot whose
// rackd fails at start.
var (
	variantA      = variant{name: "a", version: "e2e-a", build: 1000, full: true}
	variantB      = variant{name: "b", version: "e2e-b", build: 1001}
	variantBroken = variant{name: "broken", version: "e2e-broken", build: 1002,
		env: []string{"APPLIANCE_RACKD_PKG=./internal/brokenrackd"}}
)

// built is what one variant's build left in its DIST directory.
type built struct {
	img, bundle string
}

var (
	buildMu sync.Mutex
	builds  = map[string]built{}
)

func TestMain(m *testing.M) { os.Exit(vmtest.Main(m)) }

// image builds v once per test binary into build/e2e-appliance/NAME. The
// script always runs (a minute or two: the slot's squashfs and the disk),
// keeping the initramfs while its sources are unchanged; with
// RACKD_E2E_APPLIANCE_REUSE=1 a build already there is taken as it is (a
// second test process beside one that built them).
func image(t *testing.T, v variant) built {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if b, ok := builds[v.name]; ok {
		return b
	}
	root := vmtest.RepoRoot(t)
	dir := filepath.Join(root, "build", "e2e-appliance", v.name)
	dist := filepath.Join(dir, "dist")
	base := filepath.Join(dist, "rackd-appliance-"+v.version+"-amd64")
	b := built{bundle: base + ".bundle"}
	if v.full {
		b.img = base + ".img"
	}
	if os.Getenv("RACKD_E2E_APPLIANCE_REUSE") == "1" {
		if _, err := os.Stat(b.bundle); err == nil {
			t.Logf("reusing the appliance build %s (RACKD_E2E_APPLIANCE_REUSE=1)", dist)
			builds[v.name] = b
			return b
		}
	}
	if err := os.RemoveAll(dist); err != nil {
		t.Fatal(err)
	}
	env := []string{"VERSION=" + v.version, fmt.Sprintf("APPLIANCE_BUILD=%d", v.build),
		"OUT=" + dir, "DIST=" + dist, "PATH=" + os.Getenv("PATH") + ":/usr/local/go/bin:/usr/sbin:/sbin"}
	if !v.full {
		env = append(env, "APPLIANCE_BUNDLE_ONLY=1")
	}
	start := time.Now()
	out, err := vmtest.Script(t, buildTimeout, append(env, v.env...), "scripts/appliance-image.sh")
	if err != nil {
		t.Fatalf("scripts/appliance-image.sh (%s): %v\n%s", v.name, err, out)
	}
	t.Logf("built appliance %s in %v", v.name, time.Since(start).Round(time.Second))
	for _, f := range []string{b.img, b.bundle} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the build of %s left no %s: %v\n%s", v.name, f, err, out)
		}
	}
	builds[v.name] = b
	return b
}

// signingKey is the development key the builds sign with.
func signingKey(t *testing.T) string {
	return filepath.Join(vmtest.RepoRoot(t), "build", "appliance-key", "signing.key")
}

// rig is the test's namespace: the management tap with dnsmasq on it and
// the rack bridge.
type rig struct {
	t       *testing.T
	ns      *netnstest.NS
	mgmtTap string
	rackBr  string
	leases  string // dnsmasq's lease file
	client  *http.Client
}

// newRig builds the namespace. Everything in it goes when the test ends.
func newRig(t *testing.T) *rig {
	t.Helper()
	netnstest.Require(t)
	netnstest.Tool(t, "qemu-system-x86_64")
	dnsmasq := netnstest.Tool(t, "dnsmasq")
	ns := netnstest.New(t)
	r := &rig{t: t, ns: ns, mgmtTap: netnstest.Name("rkmg"), rackBr: ns.Bridge()}
	ns.IP("tuntap", "add", "dev", r.mgmtTap, "mode", "tap")
	ns.AddAddr(r.mgmtTap, mgmtHost)
	ns.Up(r.mgmtTap)
	dir := t.TempDir()
	r.leases = filepath.Join(dir, "leases")
	// A real DHCP server on the management network, as an office's
	// would be: any client gets an address of the range; the
	// appliance's MAC gets mgmtAppliance.
	ns.Start(dnsmasq, "--keep-in-foreground", "--no-daemon", "--conf-file=/dev/null", "--port=0",
		"--interface="+r.mgmtTap, "--bind-interfaces", "--dhcp-authoritative",
		"--dhcp-range=10.81.0.100,10.81.0.150,255.255.255.0,10m",
		"--dhcp-host="+mgmtMAC+","+mgmtAppliance.String(),
		"--dhcp-leasefile="+r.leases, "--log-dhcp", "--log-facility=-")
	r.client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(r.client.CloseIdleConnections)
	return r
}

// The appliance's NICs' MACs: management first (the init takes the first
// NIC by PCI path), then the rack NIC.
const (
	mgmtMAC = "52:54:00:81:00:10"
	rackMAC = "52:54:00:42:00:01"
)

// disk copies the image to a larger sparse file (an appliance's disk is
// larger than the image: the first boot grows the data partition) and
// returns its path.
func disk(t *testing.T, img string, sizeMB int64) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "disk.img")
	if out, err := exec.Command("cp", "--sparse=always", img, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp %s: %v: %s", img, err, out)
	}
	if err := os.Truncate(dst, sizeMB<<20); err != nil {
		t.Fatal(err)
	}
	return dst
}

// partition is one GPT entry, in bytes.
type partition struct {
	start, size int64
}

// partitions reads the disk file's GPT with sfdisk, by partition name.
func partitions(t *testing.T, file string) map[string]partition {
	t.Helper()
	out, err := exec.Command("sfdisk", "--json", file).Output()
	if err != nil {
		t.Fatalf("sfdisk --json %s: %v", file, err)
	}
	var pt struct {
		PartitionTable struct {
			SectorSize int64 `json:"sectorsize"`
			Partitions []struct {
				Start int64  `json:"start"`
				Size  int64  `json:"size"`
				Name  string `json:"name"`
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &pt); err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	ss := pt.PartitionTable.SectorSize
	if ss == 0 {
		ss = 512
	}
	m := map[string]partition{}
	for _, p := range pt.PartitionTable.Partitions {
		m[p.Name] = partition{p.Start * ss, p.Size * ss}
	}
	for _, want := range []string{"esp", "rackd-a", "rackd-b", "rackd-data"} {
		if _, ok := m[want]; !ok {
			t.Fatalf("%s has no partition %q: %s", file, want, out)
		}
	}
	return m
}

// digest is the sha256 of a partition's bytes on the disk file.
func digest(t *testing.T, file string, p partition) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, p.start, p.size)); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// editGrub rewrites grub.cfg on the disk file's ESP (mtools, as one would
// from a laptop), replacing old with new once.
func editGrub(t *testing.T, file, old, new string) {
	t.Helper()
	esp := partitions(t, file)["esp"]
	at := fmt.Sprintf("%s@@%d", file, esp.start)
	cfg, err := exec.Command("mtype", "-i", at, "::/grub/grub.cfg").Output()
	if err != nil {
		t.Fatalf("mtype grub.cfg: %v", err)
	}
	if !bytes.Contains(cfg, []byte(old)) {
		t.Fatalf("grub.cfg has no %q", old)
	}
	tmp := filepath.Join(t.TempDir(), "grub.cfg")
	if err := os.WriteFile(tmp, bytes.Replace(cfg, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mcopy", "-o", "-i", at, tmp, "::/grub/grub.cfg").CombinedOutput(); err != nil {
		t.Fatalf("mcopy grub.cfg: %v: %s", err, out)
	}
}

// grubenv reads the GRUB environment from the disk file's ESP.
func grubenv(t *testing.T, file string) map[string]string {
	t.Helper()
	esp := partitions(t, file)["esp"]
	out, err := exec.Command("mtype", "-i", fmt.Sprintf("%s@@%d", file, esp.start), "::/grub/grubenv").Output()
	if err != nil {
		t.Fatalf("mtype grubenv: %v", err)
	}
	if len(out) != 1024 {
		t.Errorf("grubenv is %d bytes, want 1024 (GRUB's save_env writes its blocks in place)", len(out))
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	return env
}

// appliance is one QEMU process running the appliance's disk; a guest
// reboot stays in the same process (and the same console file).
type appliance struct {
	t      *testing.T
	r      *rig
	disk   string
	uefi   bool
	proc   *netnstest.Proc
	serial string
	start  time.Time
	token  string
	url    string
	extra  []string // more QEMU arguments (the benchmark's Debian peer: its seed and dist disks)
}

// boot starts QEMU on disk: the disk first in the boot order, the
// management NIC on the rig's tap, the rack NIC on its bridge. QEMU is
// stopped by PID when the test ends.
func (r *rig) boot(disk string, uefi bool) *appliance {
	t := r.t
	t.Helper()
	a := &appliance{t: t, r: r, disk: disk, uefi: uefi}
	a.launch()
	return a
}

// launch starts (or, after a power loss, starts again) the QEMU process.
func (a *appliance) launch() {
	t := a.t
	t.Helper()
	rackTap := netnstest.Name("rkrt")
	a.r.ns.IP("tuntap", "add", "dev", rackTap, "mode", "tap")
	a.r.ns.Attach(rackTap, a.r.rackBr)
	a.r.ns.Up(rackTap)
	t.Cleanup(func() { a.r.ns.IP("link", "del", rackTap) })
	dir := t.TempDir()
	a.serial = filepath.Join(dir, "serial.log")
	args := append(vmtest.Accel(t, nil), "-m", "1536", "-smp", "2",
		"-nographic", "-monitor", "none", "-serial", "file:"+a.serial,
		"-drive", "file="+a.disk+",if=none,id=d0,format=raw,cache=writeback",
		"-device", "virtio-blk-pci,drive=d0,bootindex=1",
		// No option ROMs: the appliance boots from its disk only.
		"-netdev", "tap,id=m0,ifname="+a.r.mgmtTap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=m0,mac="+mgmtMAC+",romfile=,addr=0x4",
		"-netdev", "tap,id=r0,ifname="+rackTap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=r0,mac="+rackMAC+",romfile=,addr=0x5",
		// A hardware watchdog, which the appliance's init arms.
		"-device", "i6300esb")
	args = append(args, a.extra...)
	if a.uefi {
		code, vars := vmtest.OVMF(t)
		own := filepath.Join(dir, "OVMF_VARS.fd")
		b, err := os.ReadFile(vars)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(own, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+code,
			"-drive", "if=pflash,format=raw,unit=1,file="+own)
	}
	a.start = time.Now()
	a.proc = a.r.ns.Start("qemu-system-x86_64", args...)
	serial := a.serial
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RACKD_E2E_CONSOLE") != "" {
			b, _ := os.ReadFile(serial)
			t.Logf("the appliance's serial console:\n%s", b)
		}
	})
}

// powerLoss kills QEMU at once, as pulling the plug would: nothing the
// guest had not written to the disk file survives.
func (a *appliance) powerLoss() {
	a.t.Helper()
	if err := syscall.Kill(a.proc.PID(), syscall.SIGKILL); err != nil {
		a.t.Fatalf("kill QEMU: %v", err)
	}
	_ = a.proc.Wait(30 * time.Second)
}

// console returns the serial console of the current QEMU process.
func (a *appliance) console() string {
	b, _ := os.ReadFile(a.serial)
	return string(b)
}

// bannerRE is the line the init prints once rackd is healthy (docs/APPLIANCE.md,
// "The appliance image"): the version, the slot, the API's URL and, at the
// first boot, the admin token.
var bannerRE = regexp.MustCompile(`rackd appliance (\S+) \(slot ([ab])\): API (http://[0-9.]+:\d+)/?(?: — admin token: (\S+))?`)

// banner is one banner line.
type banner struct {
	version, slot, url, token string
	at                        time.Duration // after QEMU's start
}

// waitBanner waits for the n-th banner on the console of this QEMU
// process, failing the test when QEMU exits first or bootTimeout passes.
func (a *appliance) waitBanner(n int) banner {
	a.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		m := bannerRE.FindAllStringSubmatch(a.console(), -1)
		if len(m) >= n {
			b := banner{version: m[n-1][1], slot: m[n-1][2], url: m[n-1][3], token: m[n-1][4], at: time.Since(a.start)}
			a.t.Logf("banner %d after %.1fs: %s", n, b.at.Seconds(), m[n-1][0])
			return b
		}
		select {
		case <-a.proc.Done():
			a.t.Fatalf("QEMU exited (%v) before the appliance's banner #%d\n%s", a.proc.Wait(time.Second), n, a.proc.Output())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("no appliance banner #%d within %v", n, bootTimeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitConsole waits until the console shows s at least n times.
func (a *appliance) waitConsole(s string, n int, d time.Duration) {
	a.t.Helper()
	deadline := time.Now().Add(d)
	for strings.Count(a.console(), s) < n {
		select {
		case <-a.proc.Done():
			a.t.Fatalf("QEMU exited (%v) before the console showed %q", a.proc.Wait(time.Second), s)
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("the console did not show %q %d time(s) within %v", s, n, d)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// call makes an API call to the appliance with the admin token; it returns
// the status and the body.
func (a *appliance) call(method, path string, body io.Reader, ctype string) (int, []byte) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := a.r.client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// get is a GET that must answer 200, decoded into out.
func (a *appliance) get(path string, out any) {
	a.t.Helper()
	code, raw := a.call("GET", path, nil, "")
	if code != http.StatusOK {
		a.t.Fatalf("GET %s: %d %s", path, code, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		a.t.Fatalf("GET %s: %v: %s", path, err, raw)
	}
}

// cli runs the rackd CLI in the namespace against the appliance, bounded
// by d; it returns the output and the error.
func (a *appliance) cli(d time.Duration, args ...string) (string, error) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	args = append(args, "--url", a.url, "--api-token", a.token)
	out, err := a.r.ns.Exec(ctx, vmtest.Rackd(a.t), args...)
	return string(out), err
}

// status is the part of GET /api/v1/appliance/status the tests read.
type status struct {
	Version string `json:"version"`
	Build   int64  `json:"build"`
	Booted  string `json:"booted"`
	Trial   bool   `json:"trial"`
	Slots   map[string]struct {
		Version string `json:"version"`
		Build   int64  `json:"build"`
		State   string `json:"state"`
	} `json:"slots"`
	LastUpdate *struct {
		Version string `json:"version"`
		Build   int64  `json:"build"`
		Slot    string `json:"slot"`
		Result  string `json:"result"`
		Reason  string `json:"reason"`
	} `json:"last_update"`
}

func (a *appliance) status() status {
	a.t.Helper()
	var st status
	a.get("/api/v1/appliance/status", &st)
	return st
}
