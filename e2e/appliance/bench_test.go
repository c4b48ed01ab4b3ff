package appliance

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"rackd/internal/vmtest"
	"strings"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// recordResult appends key=value to the file RACKD_E2E_RESULTS names, for
// make bench-appliance (bench/appliance) to read.
func recordResult(t *testing.T, key string, v float64) {
	t.Helper()
	path := os.Getenv("RACKD_E2E_RESULTS")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "%s=%g\n", key, v)
}

// waitHealthy polls the unauthenticated /healthz on the management address
// until it answers 200 (the store open and every DHCP interface bound) and
// returns how long after start it did. A peer that is not up yet refuses,
// resets or times out: all mean "not yet".
func (r *rig) waitHealthy(vm *netnstest.Proc, start time.Time) time.Duration {
	r.t.Helper()
	c := &http.Client{Timeout: 3 * time.Second, Transport: r.client.Transport}
	deadline := time.Now().Add(bootTimeout)
	for {
		resp, err := c.Get(fmt.Sprintf("http://%s:%d/healthz", mgmtAppliance, apiPort))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		select {
		case <-vm.Done():
			r.t.Fatalf("QEMU exited (%v) before /healthz answered 200", vm.Wait(time.Second))
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("/healthz did not answer 200 within %v (%v)", bootTimeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestApplianceBench measures, for make bench-appliance: the appliance's
// power-on to a healthy API (a boot after the first: the peer is measured
// installed too) against the same rackd installed with dist/appliance's
// install.sh into the Debian 12 image of make image-debian, booted in the
// same QEMU configuration (OVMF, the same memory, CPUs, disk bus and NICs,
// the same DHCP server); the first boot's power-on to a PXE client NEW; an
// update's command to the new slot healthy; a broken update's command to
// the old slot healthy again; and the image's size. Only when
// RACKD_E2E_BENCH_APPLIANCE=1 (bench/appliance sets it): it is a
// measurement, and half an hour under TCG.
func TestApplianceBench(t *testing.T) {
	if os.Getenv("RACKD_E2E_BENCH_APPLIANCE") != "1" {
		t.Skip("a benchmark: make bench-appliance runs it (RACKD_E2E_BENCH_APPLIANCE=1)")
	}
	root := vmtest.RepoRoot(t)
	dist := os.Getenv("RACKD_BENCH_DIST")
	if dist == "" {
		dist = filepath.Join(root, "dist", "appliance")
	}
	debianImg := filepath.Join(root, "build", "image-debian-raw", "debian-12.img")
	if d := os.Getenv("RACKD_E2E_DEBIAN"); d != "" {
		debianImg = filepath.Join(d, "image-debian-raw", "debian-12.img")
	}
	for _, f := range []string{filepath.Join(dist, "install.sh"), debianImg} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v (make bench-appliance builds dist/appliance and the Debian image first)", err)
		}
	}

	// The peer: Debian with rackd installed by install.sh at its first
	// boot (cloud-init runs it from a disk holding dist/appliance, then
	// powers off), then booted again and timed.
	t.Run("debian", func(t *testing.T) {
		r := newRig(t)
		d := disk(t, debianImg, 4096)
		tarDisk := tarDir(t, dist)
		seed := debianSeed(t)
		extra := []string{
			"-drive", "file=" + seed + ",if=virtio,format=raw,readonly=on",
			"-drive", "file=" + tarDisk + ",if=none,id=dist,format=raw,readonly=on",
			"-device", "virtio-blk-pci,drive=dist,serial=rackddist",
		}
		a := &appliance{t: t, r: r, disk: d, uefi: true, extra: extra}
		a.launch()
		if err := a.proc.Wait(bootTimeout + 10*time.Minute); err != nil {
			t.Fatalf("the Debian install boot did not power off: %v\n%s", err, a.console())
		}
		if !strings.Contains(a.console(), "install: done") {
			t.Fatalf("install.sh did not finish at the first boot:\n%s", a.console())
		}
		a.launch()
		at := r.waitHealthy(a.proc, a.start)
		t.Logf("bench: debian power-on to a healthy API %.1fs", at.Seconds())
		recordResult(t, "debian_boot_to_api_s", at.Seconds())
	})

	t.Run("appliance", func(t *testing.T) {
		imgA, bundleB, broken := image(t, variantA), image(t, variantB), image(t, variantBroken)
		if fi, err := os.Stat(imgA.img); err == nil {
			recordResult(t, "image_mb", float64(fi.Size())/(1<<20))
		}
		if fi, err := os.Stat(imgA.img + ".zst"); err == nil {
			t.Logf("bench: image %s.zst %.0f MiB", filepath.Base(imgA.img), float64(fi.Size())/(1<<20))
		}
		r := newRig(t)
		d := disk(t, imgA.img, 1536)
		editGrub(t, d, "panic=10", "panic=10 rackd.health_window=150s")
		a := r.boot(d, true)
		first := r.waitHealthy(a.proc, a.start)
		a.up(1, "a", variantA.version)
		t.Logf("bench: appliance first boot: power-on to a healthy API %.1fs", first.Seconds())
		pxeMAC := "52:54:00:42:00:98"
		vm := r.pxe(pxeMAC)
		a.waitNew(vm, pxeMAC)
		enlist := time.Since(a.start)
		t.Logf("bench: appliance power-on to the PXE client NEW %.1fs", enlist.Seconds())
		recordResult(t, "first_enlist_s", enlist.Seconds())
		_ = vm.Wait(2 * time.Minute)

		// A boot of the installed appliance, as the peer's.
		a.powerLoss()
		a.launch()
		at := r.waitHealthy(a.proc, a.start)
		a.up(1, "a", variantA.version)
		t.Logf("bench: appliance power-on to a healthy API %.1fs", at.Seconds())
		recordResult(t, "appliance_boot_to_api_s", at.Seconds())

		start := time.Now()
		if out, err := a.update(bundleB.bundle); err != nil {
			t.Fatalf("update: %v\n%s", err, out)
		}
		a.up(2, "b", variantB.version)
		recordResult(t, "update_s", time.Since(start).Seconds())
		start = time.Now()
		if out, err := a.update(broken.bundle); err != nil {
			t.Fatalf("broken update: %v\n%s", err, out)
		}
		a.up(3, "b", variantB.version)
		recordResult(t, "rollback_s", time.Since(start).Seconds())
		if st := a.status(); st.LastUpdate == nil || st.LastUpdate.Result != "failed" {
			t.Fatalf("the broken update did not end failed: %+v", st)
		}
	})
}

// tarDir writes dir as a tar archive under the top directory "appliance":
// a raw disk the guest reads with tar -x.
func tarDir(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dist.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = filepath.ToSlash(filepath.Join("appliance", rel))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if e.Type().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("tar %s: %v", dir, err)
	}
	return out
}

// debianSeed is the peer's NoCloud seed: DHCP on the management NIC, the
// rack NIC at 10.42.0.1/24 (as the appliance's), and a first boot that
// installs rackd from the dist disk with its [dhcp] interfaces set to the
// rack NIC's name, then powers off.
func debianSeed(t *testing.T) string {
	t.Helper()
	localds := netnstest.Tool(t, "cloud-localds")
	dir := t.TempDir()
	files := map[string]string{
		"meta-data": "instance-id: rackd-bench-debian\nlocal-hostname: rackd-debian\n",
		"network-config": fmt.Sprintf(`version: 2
ethernets:
  mgmt:
    match:
      macaddress: "%s"
    dhcp4: true
  rack:
    match:
      macaddress: "%s"
    addresses: [10.42.0.1/24]
`, mgmtMAC, rackMAC),
		"user-data": `#cloud-config
runcmd:
  - [sh, -c, 'set -e; mkdir -p /opt/rackd-dist; tar -xf /dev/disk/by-id/virtio-rackddist -C /opt/rackd-dist; nic=$(ip -o link | awk -F": " "/` + rackMAC + `/ {print \$2}"); mkdir -p /etc/rackd; sed "s/\"eth1\"/\"$nic\"/" /opt/rackd-dist/appliance/rackd.toml >/etc/rackd/rackd.toml; /opt/rackd-dist/appliance/install.sh >/dev/ttyS0 2>&1; sync']
power_state:
  mode: poweroff
  condition: true
`,
	}
	for name, s := range files {
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
