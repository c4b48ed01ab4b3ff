package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
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

// The Debian image that `make image-debian` builds (scripts/image-debian.sh),
// booted as a real OS: GRUB from its own disk under SeaBIOS and OVMF, stock
// cloud-init taking its identity from a NoCloud seed, OpenSSH's client
// logging in.

// debianImages are the image directories of one build.
type debianImages struct {
	Zst, Raw, NoCloud, NoCloudRaw string
	Xz                            string // when RACKD_E2E_BENCH_OS asked for it
}

var (
	debianOnce sync.Once
	debianDirs debianImages
	debianErr  error
)

// debianImage returns the directories `make image-debian` makes, running it
// (bounded) when its result is missing; the script caches its build outside
// the tree, so that is seconds unless the script changed. RACKD_E2E_DEBIAN
// names another build directory holding the same four directories.
func debianImage(t testing.TB) debianImages {
	t.Helper()
	debianOnce.Do(func() {
		root := vmtest.RepoRoot(t)
		base := os.Getenv("RACKD_E2E_DEBIAN")
		if base == "" {
			base = filepath.Join(root, "build")
			var env []string
			if os.Getenv("RACKD_E2E_BENCH_OS") != "" {
				env = []string{"IMAGE_XZ=1"}
			}
			start := time.Now()
			out, err := vmtest.Script(t, 20*time.Minute, env, "scripts/image-debian.sh")
			if err != nil {
				debianErr = fmt.Errorf("scripts/image-debian.sh: %v\n%s", err, out)
				return
			}
			t.Logf("scripts/image-debian.sh (%v): %s", time.Since(start).Round(time.Second), lastLine(string(out)))
		}
		debianDirs = debianImages{
			Zst:        filepath.Join(base, "image-debian"),
			Raw:        filepath.Join(base, "image-debian-raw"),
			NoCloud:    filepath.Join(base, "image-debian-nocloud"),
			NoCloudRaw: filepath.Join(base, "image-debian-nocloud-raw"),
		}
		if xz := filepath.Join(base, "image-debian-xz"); os.Getenv("RACKD_E2E_BENCH_OS") != "" {
			debianDirs.Xz = xz
		}
		for _, d := range []string{debianDirs.Zst, debianDirs.Raw, debianDirs.NoCloud, debianDirs.NoCloudRaw, debianDirs.Xz} {
			if d == "" {
				continue
			}
			if _, err := os.Stat(filepath.Join(d, "rackd-image.json")); err != nil {
				debianErr = fmt.Errorf("the Debian image: %w", err)
				return
			}
		}
	})
	if debianErr != nil {
		t.Fatal(debianErr)
	}
	return debianDirs
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// diskFile returns the path of the disk file an image directory's manifest
// names.
func diskFile(t testing.TB, dir string) string {
	t.Helper()
	var m struct {
		Files []struct{ Path, Role string }
	}
	raw, err := os.ReadFile(filepath.Join(dir, "rackd-image.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s/rackd-image.json: %v", dir, err)
	}
	for _, f := range m.Files {
		if f.Role == "disk" {
			return filepath.Join(dir, f.Path)
		}
	}
	t.Fatalf("%s: no disk file in the manifest", dir)
	return ""
}

// sshUser is the login of the image's default user (Debian's cloud.cfg).
const sshUser = "debian"

// osBootTimeout bounds the wait for a booting OS to answer SSH or phone
// home: 40-55 s under TCG on a quiet machine, ten times that was seen on
// two cores shared with other builds.
const osBootTimeout = 10 * time.Minute

// sshKey makes an ed25519 key pair with OpenSSH's ssh-keygen and returns
// the private key's path and the public key's authorized_keys line.
func sshKey(t testing.TB, comment string) (priv, pub string) {
	t.Helper()
	keygen := netnstest.Tool(t, "ssh-keygen")
	priv = filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", priv).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	b, err := os.ReadFile(priv + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return priv, strings.TrimSpace(string(b))
}

// sshRun runs cmd on addr as the image's default user with OpenSSH's ssh,
// inside ns, with the private key priv and nothing else (no agent, no
// password, no known hosts file).
func sshRun(ctx context.Context, ns *netnstest.NS, priv string, addr netip.Addr, cmd string) (string, error) {
	out, err := ns.Exec(ctx, "ssh", "-F", "none", "-i", priv, "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
		"-o", "BatchMode=yes", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
		sshUser+"@"+addr.String(), cmd)
	return string(out), err
}

// waitSSH waits (bounded) until cmd succeeds over SSH and returns its
// output. onWait runs between tries (to fail early on a dead VM).
func waitSSH(t testing.TB, ns *netnstest.NS, priv string, addr netip.Addr, cmd string, onWait func()) string {
	t.Helper()
	deadline := time.Now().Add(osBootTimeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := sshRun(ctx, ns, priv, addr, cmd)
		cancel()
		if err == nil {
			return out
		}
		last = fmt.Sprintf("%v: %s", err, strings.TrimSpace(out))
		if onWait != nil {
			onWait()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no SSH login as %s@%s within %v; last try: %s", sshUser, addr, osBootTimeout, last)
		}
		time.Sleep(time.Second)
	}
}

// mustSSH runs cmd over SSH once and fails the test if it fails.
func mustSSH(t testing.TB, ns *netnstest.NS, priv string, addr netip.Addr, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := sshRun(ctx, ns, priv, addr, cmd)
	if err != nil {
		t.Fatalf("ssh %s@%s %q: %v\n%s", sshUser, addr, cmd, err, out)
	}
	return out
}

// osIdentity is what a deployed OS is expected to have become.
type osIdentity struct {
	fqdn    string
	addr    netip.Prefix
	gateway netip.Addr
	dns     netip.Addr
	search  string
	marker  string // path of the file the user-data's runcmd writes
	content string // and what it writes there
}

// checkOS logs in and checks the identity the seed gave the OS: its FQDN,
// the user-data's marker, the address configured statically (no DHCP
// client for it), the resolver, and that cloud-init finished without
// errors. It returns the instance id cloud-init saw.
func checkOS(t *testing.T, ns *netnstest.NS, priv string, id osIdentity) string {
	t.Helper()
	a := id.addr.Addr()
	if got := strings.TrimSpace(mustSSH(t, ns, priv, a, "hostname -f")); got != id.fqdn {
		t.Errorf("hostname -f: %q, want %q", got, id.fqdn)
	}
	if got := strings.TrimSpace(mustSSH(t, ns, priv, a, "cat "+id.marker)); got != id.content {
		t.Errorf("the user-data's marker %s: %q, want %q", id.marker, got, id.content)
	}
	// The address is there, and not as a DHCP client's: no "dynamic"
	// flag (a lease's lifetime), no dhclient running, no lease file.
	addrs := mustSSH(t, ns, priv, a, "ip -o -4 addr show scope global")
	if !strings.Contains(addrs, " "+id.addr.String()+" ") {
		t.Errorf("the OS lacks its address %s:\n%s", id.addr, addrs)
	}
	if strings.Contains(addrs, "dynamic") {
		t.Errorf("the address is a DHCP lease:\n%s", addrs)
	}
	if out := mustSSH(t, ns, priv, a, "pgrep -a dhclient; ls /var/lib/dhcp/ 2>/dev/null | grep -c lease; true"); strings.TrimSpace(out) != "0" {
		t.Errorf("a DHCP client ran: %q", out)
	}
	if route := mustSSH(t, ns, priv, a, "ip -4 route show default"); !strings.Contains(route, "via "+id.gateway.String()) {
		t.Errorf("default route: %q, want via %s", route, id.gateway)
	}
	resolv := mustSSH(t, ns, priv, a, "cat /etc/resolv.conf")
	if !strings.Contains(resolv, "nameserver "+id.dns.String()) || !strings.Contains(resolv, id.search) {
		t.Errorf("/etc/resolv.conf lacks nameserver %s or search %s:\n%s", id.dns, id.search, resolv)
	}
	status := mustSSH(t, ns, priv, a, "cloud-init status --wait --long; true")
	if !strings.Contains(status, "status: done") {
		t.Errorf("cloud-init status:\n%s", status)
	}
	iid := strings.TrimSpace(mustSSH(t, ns, priv, a, "cloud-init query instance_id"))
	if iid == "" {
		t.Error("cloud-init query instance_id: empty")
	}
	return iid
}

// phoneHome is an HTTP server in a namespace that records cloud-init's
// phone_home POSTs (form-encoded: instance_id, hostname, fqdn).
type phoneHome struct {
	mu    sync.Mutex
	posts []url.Values
	got   chan struct{}
}

func startPhoneHome(t *testing.T, ns *netnstest.NS, addr netip.AddrPort) *phoneHome {
	t.Helper()
	p := &phoneHome{got: make(chan struct{}, 16)}
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatalf("phone home listener: %v", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		v, _ := url.ParseQuery(string(body))
		p.mu.Lock()
		p.posts = append(p.posts, v)
		p.mu.Unlock()
		select {
		case p.got <- struct{}{}:
		default:
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

// wait waits (bounded) for the next POST and returns it.
func (p *phoneHome) wait(t *testing.T, alive func()) url.Values {
	t.Helper()
	deadline := time.After(osBootTimeout)
	for {
		select {
		case <-p.got:
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.posts[len(p.posts)-1]
		case <-deadline:
			t.Fatalf("no phone_home POST within %v", osBootTimeout)
		case <-time.After(time.Second):
			alive()
		}
	}
}

// seedFiles writes the NoCloud seed's files to a directory and makes a
// seed disk of them with Debian's cloud-localds.
func seedDisk(t *testing.T, metaData, userData, networkConfig string) string {
	t.Helper()
	localds := netnstest.Tool(t, "cloud-localds")
	dir := t.TempDir()
	for name, s := range map[string]string{"meta-data": metaData, "user-data": userData, "network-config": networkConfig} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seed := filepath.Join(dir, "seed.img")
	out, err := exec.Command(localds, "--network-config="+filepath.Join(dir, "network-config"), seed,
		filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data")).CombinedOutput()
	if err != nil {
		t.Fatalf("cloud-localds: %v\n%s", err, out)
	}
	return seed
}

// overlay makes a qcow2 file backed by the raw image, so that a VM boots
// the image without copying it (and without changing it).
func overlay(t *testing.T, raw string, size int64) string {
	t.Helper()
	qimg := netnstest.Tool(t, "qemu-img")
	p := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command(qimg, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", raw, p, fmt.Sprint(size)).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v\n%s", err, out)
	}
	return p
}

// osVM is a QEMU VM booting from its disk in a namespace.
type osVM struct {
	t      *testing.T
	proc   *netnstest.Proc
	serial string
	start  time.Time
}

func (v *osVM) text() string {
	b, _ := os.ReadFile(v.serial)
	return string(b)
}

// alive fails the test if QEMU has exited.
func (v *osVM) alive() {
	v.t.Helper()
	select {
	case <-v.proc.Done():
		v.t.Fatalf("QEMU exited: %v\n%s", v.proc.Wait(time.Second), v.proc.Output())
	default:
	}
}

// startOSVM starts a VM in ns with a NIC on bridge br and the given disks
// (the first is the boot disk), under SeaBIOS or OVMF.
func startOSVM(t *testing.T, ns *netnstest.NS, br, mac string, uefi bool, disks ...string) *osVM {
	t.Helper()
	qemu := netnstest.Tool(t, "qemu-system-x86_64")
	tap := netnstest.Name("rktap")
	ns.IP("tuntap", "add", "dev", tap, "mode", "tap")
	ns.Attach(tap, br)
	ns.Up(tap)
	dir := t.TempDir()
	v := &osVM{t: t, serial: filepath.Join(dir, "serial.log")}
	args := append(accelArgs(t), "-m", "1024", "-smp", "2", "-no-reboot",
		"-nographic", "-monitor", "none", "-serial", "file:"+v.serial,
		"-netdev", "tap,id=n0,ifname="+tap+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,romfile=,mac="+mac)
	for i, d := range disks {
		format := "raw"
		if strings.HasSuffix(d, ".qcow2") {
			format = "qcow2"
		}
		dev := fmt.Sprintf("virtio-blk-pci,drive=d%d", i)
		if i == 0 {
			dev += ",bootindex=1"
		}
		args = append(args, "-drive", fmt.Sprintf("if=none,id=d%d,format=%s,file=%s", i, format, d), "-device", dev)
	}
	if uefi {
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
	v.start = time.Now()
	v.proc = ns.Start(qemu, args...)
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("RACKD_E2E_CONSOLE") != "" {
			t.Logf("serial console of the VM %s:\n%s", mac, v.text())
		}
	})
	return v
}

// cloudConfig is the test's user-data: a marker written by runcmd and a
// phone_home POST to url when cloud-init's final stage runs.
func cloudConfig(marker, content, phoneHomeURL string) string {
	s := "#cloud-config\nruncmd:\n  - [sh, -c, 'echo " + content + " > " + marker + "']\n"
	if phoneHomeURL != "" {
		s += "phone_home:\n  url: " + phoneHomeURL + "\n  post: [instance_id, hostname, fqdn]\n  tries: 10\n"
	}
	return s
}

// networkConfigV2 is a network-config (version 2) setting addr statically
// on the NIC with mac, as rackd's seed does.
func networkConfigV2(mac string, addr netip.Prefix, gw, dns netip.Addr, search string) string {
	return fmt.Sprintf(`version: 2
ethernets:
  nic0:
    match:
      macaddress: "%s"
    addresses: [%s]
    gateway4: %s
    nameservers:
      addresses: [%s]
      search: [%s]
`, mac, addr, gw, dns, search)
}

// TestE2EDebianLocalBoot boots the image that `make image-debian` builds,
// from its own disk, under SeaBIOS and under OVMF, with a NoCloud seed
// disk made by Debian's cloud-localds: stock cloud-init must take its
// hostname, the SSH key, the static network (matched by MAC) and the
// user-data from it, and phone home; OpenSSH's client then logs in with the
// key and checks what the OS became. No rackd is involved: this proves the
// image, and its time from power on to the first SSH command is the ideal a
// deployment is measured against (bench/deployos).
func TestE2EDebianLocalBoot(t *testing.T) {
	requireDeployOS(t)
	requireVM(t)
	imgs := debianImage(t)
	raw := diskFile(t, imgs.Raw)
	for _, fw := range []struct {
		name string
		uefi bool
	}{{"bios", false}, {"uefi", true}} {
		t.Run(fw.name, func(t *testing.T) {
			s := localBoot(t, raw, fw.uefi)
			t.Logf("%s: power on to the first SSH command %.1fs, to phone_home %.1fs", fw.name, s.ssh.Seconds(), s.phoneHome.Seconds())
			recordResult(t, "local_boot_to_ssh_s_"+fw.name, s.ssh.Seconds())
		})
	}
}

// bootTimes are the moments of a boot, from QEMU's start.
type bootTimes struct {
	ssh, phoneHome time.Duration
}

// localBoot boots raw (through a qcow2 overlay) with a cloud-localds seed in
// a namespace of its own and checks the OS over SSH.
func localBoot(t *testing.T, raw string, uefi bool) bootTimes {
	ns := netnstest.New(t)
	br := ns.Bridge()
	host := netip.MustParseAddr("10.81.0.1")
	guest := netip.MustParsePrefix("10.81.0.10/24")
	ns.AddAddr(br, netip.PrefixFrom(host, 24))
	ph := startPhoneHome(t, ns, netip.AddrPortFrom(host, 8080))
	priv, pub := sshKey(t, "e2e-local")
	mac := randomMAC()
	const fqdn = "vm-local.e2e.test"
	marker, content := "/var/tmp/e2e-marker", "written-by-user-data"
	iid := "i-local-" + netnstest.Name("")
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\npublic-keys:\n  - %s\n", iid, fqdn, pub)
	// manage_etc_hosts is what rackd's vendor-data adds: hostname -f
	// answers from /etc/hosts, with no DNS server on the lab's network.
	seed := seedDisk(t, meta,
		cloudConfig(marker, content, fmt.Sprintf("http://%s:8080/phone-home/$INSTANCE_ID", host))+"manage_etc_hosts: localhost\n",
		networkConfigV2(mac, guest, host, host, "e2e.test"))
	disk := overlay(t, raw, 3<<30)
	v := startOSVM(t, ns, br, mac, uefi, disk, seed)
	out := waitSSH(t, ns, priv, guest.Addr(), "true", v.alive)
	_ = out
	var bt bootTimes
	bt.ssh = time.Since(v.start)
	post := ph.wait(t, v.alive)
	bt.phoneHome = time.Since(v.start)
	if post.Get("instance_id") != iid || post.Get("fqdn") != fqdn {
		t.Errorf("phone_home posted %v, want instance_id %s, fqdn %s", post, iid, fqdn)
	}
	got := checkOS(t, ns, priv, osIdentity{fqdn: fqdn, addr: guest, gateway: host, dns: host, search: "e2e.test",
		marker: marker, content: content})
	if got != iid {
		t.Errorf("cloud-init's instance id %q, want %q", got, iid)
	}
	// growpart grew the root file system past the image's size.
	if df := mustSSH(t, ns, priv, guest.Addr(), "df -B1M --output=size / | tail -n1"); !grewPast(df, 2048) {
		t.Errorf("the root file system was not grown to the disk: %s MiB", strings.TrimSpace(df))
	}
	return bt
}

// grewPast reports whether df's size in MiB is above mb.
func grewPast(df string, mb int) bool {
	var n int
	_, err := fmt.Sscan(strings.TrimSpace(df), &n)
	return err == nil && n > mb
}
