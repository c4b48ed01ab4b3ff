package nocloud

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/u-root/u-root/pkg/cpio"
)

// TestPeerLinuxVFAT: Debian 12's own kernel (the one `make initramfs`
// unpacks into build/initramfs/kernel, the same 6.1 a deployed Debian 12
// boots), in a QEMU VM, mounts two seed images (1 MiB, and the 2 MiB of
// the largest user-data) with its vfat driver and reads every file under
// its long name with the bytes we wrote. The host kernel
// here has no vfat, so this is the only test that mounts the image.
func TestPeerLinuxVFAT(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM: not in -short")
	}
	need(t, "qemu-system-x86_64")
	if runtime.GOARCH != "amd64" {
		t.Skip("the test VM is amd64")
	}
	// RACKD_TEST_KERNEL names another unpacked Debian kernel's vmlinuz
	// (its modules beside it, in ../lib/modules/VERSION).
	vmlinuz := os.Getenv("RACKD_TEST_KERNEL")
	if vmlinuz == "" {
		kernels, _ := filepath.Glob("../build/initramfs/kernel/linux-image-*/boot/vmlinuz-*")
		if len(kernels) == 0 {
			t.Skip("no Debian kernel under build/initramfs/kernel (make initramfs unpacks it; or set RACKD_TEST_KERNEL)")
		}
		vmlinuz = kernels[0]
	}
	version := strings.TrimPrefix(filepath.Base(vmlinuz), "vmlinuz-")
	modDir := filepath.Join(filepath.Dir(filepath.Dir(vmlinuz)), "lib", "modules", version)
	order, err := moduleOrder(filepath.Join(modDir, "modules.dep"),
		"kernel/drivers/virtio/virtio_pci.ko", "kernel/drivers/block/virtio_blk.ko",
		"kernel/fs/nls/nls_cp437.ko", "kernel/fs/nls/nls_ascii.ko", "kernel/fs/nls/nls_utf8.ko",
		"kernel/fs/fat/vfat.ko")
	if err != nil {
		t.Skipf("kernel modules of %s: %v", version, err)
	}

	dir := t.TempDir()
	initBin := filepath.Join(dir, "init")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", initBin, "./testdata/kernelinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the VM's init: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := writeInitrd(initrd, initBin, modDir, order); err != nil {
		t.Fatal(err)
	}

	// Two seeds: every file and a user-data of many clusters (1 MiB
	// image, 512-byte clusters), and the largest user-data allowed (2 MiB
	// image, 1 KiB clusters).
	seeds := map[string]Seed{}
	var drives []string
	for disk, ud := range map[string][]byte{
		"vda": []byte("#cloud-config\nwrite_files:\n" + strings.Repeat("  - {path: /var/tmp/x, content: \"0123456789abcdef\"}\n", 2000)),
		"vdb": bytes.Repeat([]byte("#"), MaxUserData),
	} {
		id := cases[1].id
		id.UserData = ud
		s := render(t, id)
		img, err := s.Image()
		if err != nil {
			t.Fatal(err)
		}
		seeds[disk] = s
		path := filepath.Join(dir, disk+".img")
		write(t, path, img)
		drives = append(drives, disk)
	}
	slices.Sort(drives)
	var qemuDisks []string
	for _, d := range drives {
		qemuDisks = append(qemuDisks, "-drive", "file="+filepath.Join(dir, d+".img")+",format=raw,if=virtio,readonly=on")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64", append([]string{
		"-accel", "tcg", "-m", "512", "-smp", "1",
		"-nodefaults", "-no-reboot", "-display", "none", "-serial", "stdio",
		"-kernel", vmlinuz, "-initrd", initrd,
		// loglevel=5: warnings and worse reach the console.
		"-append", "console=ttyS0 panic=-1 loglevel=5 kernelinit.disks=" + strings.Join(drives, ","),
	}, qemuDisks...)...)
	out, err := qemu.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the VM did not power off within 5 minutes:\n%s", out)
	}
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, out)
	}

	got := map[string]string{}
	done := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch f := strings.Fields(line); {
		case len(f) == 5 && f[0] == "FILE":
			got[f[1]+" "+f[2]] = f[3] + " " + f[4]
		case line == "DONE":
			done = true
		case strings.HasPrefix(line, "FAIL "):
			t.Errorf("in the VM: %s", line)
		case strings.Contains(line, "FAT-fs"):
			t.Errorf("the kernel complains: %s", line) // e.g. a bad geometry or a dirty volume
		}
	}
	if !done {
		t.Fatalf("the VM's init did not finish:\n%s", out)
	}
	t.Logf("Linux's vfat reads %v", got)
	want := map[string]string{}
	for disk, s := range seeds {
		for name, b := range seedFiles(s) {
			want[disk+" "+name] = fmt.Sprintf("%d %x", len(b), sha256.Sum256(b))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Linux's vfat reads\n%v\nwant\n%v", got, want)
	}
}

// moduleOrder returns the modules to load, dependencies first, from
// modules.dep (each line: a module, then every module it depends on).
func moduleOrder(depFile string, wanted ...string) ([]string, error) {
	b, err := os.ReadFile(depFile)
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		mod, rest, ok := strings.Cut(l, ":")
		if ok {
			deps[mod] = strings.Fields(rest)
		}
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string) error
	visit = func(m string) error {
		if seen[m] {
			return nil
		}
		seen[m] = true
		ds, ok := deps[m]
		if !ok {
			return fmt.Errorf("%s is not in %s", m, depFile)
		}
		for _, d := range ds {
			if err := visit(d); err != nil {
				return err
			}
		}
		order = append(order, m)
		return nil
	}
	for _, m := range wanted {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// writeInitrd writes a newc cpio with /init and the modules under
// /modules, their load order in /modules/order.
func writeInitrd(path, initBin, modDir string, order []string) error {
	bin, err := os.ReadFile(initBin)
	if err != nil {
		return err
	}
	recs := []cpio.Record{cpio.StaticFile("init", string(bin), 0o755)}
	var names []string
	for _, m := range order {
		b, err := os.ReadFile(filepath.Join(modDir, m))
		if err != nil {
			return err
		}
		names = append(names, filepath.Base(m))
		recs = append(recs, cpio.StaticFile("modules/"+filepath.Base(m), string(b), 0o644))
	}
	recs = append(recs, cpio.StaticFile("modules/order", strings.Join(names, "\n")+"\n", 0o644))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := cpio.Newc.Writer(f)
	if err := cpio.WriteRecordsAndDirs(w, recs); err != nil {
		f.Close()
		return err
	}
	if err := cpio.WriteTrailer(w); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
