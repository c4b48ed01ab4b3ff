package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/images"
	"rackd/internal/netnstest"
)

// TestBootloadersScript runs scripts/bootloaders.sh (make bootloaders'
// extraction) against the Debian mirror, like test-deps does: it downloads
// the packages into build/bootloaders-cache (ignored, kept between runs, so
// only the first run downloads), builds the two bootloader image
// directories, and checks that rackd imports them and serves every
// bootloader by the name DHCP hands out, over HTTP and TFTP, byte for byte.
func TestBootloadersScript(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads Debian packages; not in -short")
	}
	for _, tool := range []string{"apt-get", "dpkg-deb", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: make bootloaders needs a Debian system", tool)
		}
	}
	curl := netnstest.Tool(t, "curl")
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	// A bound, not a speed target: a clean clone downloads six packages
	// and extracts GRUB's module tree, which took more than 5 minutes at a
	// load of 10-15 (a clean-clone make test beside real-VM tests).
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "scripts", "bootloaders.sh"),
		"--image", "--cache", filepath.Join(repo, "build", "bootloaders-cache"), out)
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bootloaders.sh: %v\n%s", err, b)
	}

	want := map[string][]string{
		"amd64": {"pxelinux.0", "ldlinux.c32", "bootx64.efi", "grubx64.efi", "undionly.kpxe", "ipxe.efi", "snponly.efi"},
		"arm64": {"grubaa64.efi"},
		// Where the signed GRUB ($prefix /grub) loads the modules it
		// lacks from: http first, and the dependency list.
		"grub-amd64": {"grub/x86_64-efi/http.mod", "grub/x86_64-efi/moddep.lst"},
	}
	ta := startAgent(t, func(c *Config) { c.TFTP.Listen = "127.0.0.1:0" })
	select {
	case <-ta.tftp.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("tftp did not start")
	}
	for arch, names := range want {
		dir := filepath.Join(out, arch)
		data, err := os.ReadFile(filepath.Join(dir, images.ManifestName))
		if err != nil {
			t.Fatal(err)
		}
		m, err := images.ParseManifest(data)
		if err != nil {
			t.Fatalf("%s manifest: %v\n%s", arch, err, data)
		}
		ok := m.Name == "bootloaders" && m.Arch == arch && len(m.Files) == len(names)
		if arch == "grub-amd64" {
			// Every module of the package, not only the two checked.
			ok = m.Name == "grub-modules" && m.Arch == "amd64" && len(m.Files) > 100
		}
		if !ok || m.Purpose != images.PurposeBootloader {
			t.Fatalf("%s manifest: %+v", arch, m)
		}
		var im api.Image
		if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, &im); code != 201 {
			t.Fatalf("import %s: %d %s", arch, code, raw)
		}
		for _, name := range names {
			file, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if len(file) < 1024 {
				t.Errorf("%s: %d bytes: not a bootloader", name, len(file))
			}
			// The UEFI loaders are PE images.
			if filepath.Ext(name) == ".efi" && string(file[:2]) != "MZ" {
				t.Errorf("%s is not a PE image", name)
			}
			sum := sha256.Sum256(file)
			if code, body := httpGet(t, ta.url+"/boot/"+name); code != 200 || sha256.Sum256([]byte(body)) != sum {
				t.Errorf("/boot/%s over HTTP: %d, %d bytes, want the image's %d", name, code, len(body), len(file))
			}
			got, err := exec.CommandContext(ctx, curl, "-sS", "--tftp-blksize", "1468", "tftp://"+ta.tftp.Addr().String()+"/"+name).Output()
			if err != nil || sha256.Sum256(got) != sum {
				t.Errorf("%s over TFTP: %v, %d bytes, sha256 %s", name, err, len(got), hex.EncodeToString(sum[:]))
			}
		}
	}
}

// TestBootloadersScriptNoMirror: when the packages cannot be had, make
// bootloaders says why (no mirror reachable, no sources, sources without
// the packages) and what to do, instead of apt's "Unable to locate
// package", which hides the cause. The sources are BOOTLOADERS_SOURCES
// files naming a closed loopback port and a local repository.
func TestBootloadersScriptNoMirror(t *testing.T) {
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: make bootloaders needs a Debian system", tool)
		}
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now: the mirror is unreachable
	emptyRepo := t.TempDir()
	if err := os.WriteFile(filepath.Join(emptyRepo, "Packages"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const waysOut = "Ways out: give this machine access to the mirror"
	for _, tt := range []struct {
		name, sources string
		want          []string
	}{
		{"unreachable", "deb http://" + closed + "/debian bookworm main\n",
			[]string{"fetched no package lists for amd64: the Debian mirror is not reachable", "Could not connect", waysOut}},
		{"no sources", "# deb http://deb.example/debian bookworm main\n",
			[]string{"no APT sources are configured", waysOut}},
		{"no packages", "deb [trusted=yes] file:" + emptyRepo + " ./\n",
			[]string{"the APT sources have no grub-efi-amd64-signed ipxe pxelinux shim-signed syslinux-common for amd64", waysOut}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "sources.list")
			if err := os.WriteFile(src, []byte(tt.sources), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "scripts", "bootloaders.sh"),
				"--image", "--cache", t.TempDir(), t.TempDir())
			cmd.Env = append(os.Environ(), "BOOTLOADERS_SOURCES="+src)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("bootloaders.sh succeeded without packages:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
		})
	}
}
