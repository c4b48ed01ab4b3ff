package images

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rackd/internal/netnstest"
)

// cloudDir is a vendor's image directory: a raw image, its xz, a qcow2 made
// by qemu-img, and the SHA256SUMS, SHA512SUMS and BSD-style CHECKSUM lists
// the real sha256sum and sha512sum write for them.
func cloudDir(t *testing.T) (dir string, raw []byte) {
	t.Helper()
	for _, tool := range []struct{ name, pkg string }{{"sha256sum", "coreutils"}, {"sha512sum", "coreutils"}, {"xz", "xz-utils"}, {"qemu-img", "qemu-utils"}} {
		netnstest.Tool(t, tool.name)
	}
	dir = t.TempDir()
	raw = rawDisk(2 << 20)
	if err := os.WriteFile(filepath.Join(dir, "noble-server-cloudimg-amd64.img"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bookworm.raw.xz"), compress(t, "xz", []string{"-c", "-T1", "-1"}, raw), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(out string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		if out != "" {
			if err := os.WriteFile(filepath.Join(dir, out), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	run("", "qemu-img", "convert", "-f", "raw", "-O", "qcow2", "noble-server-cloudimg-amd64.img", "debian-12-genericcloud-amd64.qcow2")
	files := []string{"noble-server-cloudimg-amd64.img", "bookworm.raw.xz", "debian-12-genericcloud-amd64.qcow2"}
	run("SHA256SUMS", "sha256sum", append([]string{"--binary"}, files...)...)
	run("SHA512SUMS", "sha512sum", files...)
	run("CHECKSUM", "sha256sum", append([]string{"--tag"}, files...)...)
	return dir, raw
}

func importCloud(ctx context.Context, t *testing.T, s *Store, ci CloudImage) (*Imported, error) {
	t.Helper()
	src, err := OpenCloudImage(ci, URLOptions{})
	if err != nil {
		t.Fatalf("OpenCloudImage(%+v): %v", ci, err)
	}
	defer src.Close()
	return Import(ctx, s, src, ImportOptions{})
}

// A bare cloud image URL with the vendor's digest (given, or found in a
// checksum list the real tools wrote) imports as a deploy image with one
// disk file: raw as it is, xz kept compressed, qcow2 converted.
func TestImportCloudImage(t *testing.T) {
	dir, raw := cloudDir(t)
	srv := imageServer(t, dir, nil)
	rawFile := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	img := rawFile("noble-server-cloudimg-amd64.img")
	for _, tc := range []struct {
		name     string
		ci       CloudImage
		wantName string
		format   string
	}{
		{"sha256", CloudImage{URL: srv.URL + "/noble-server-cloudimg-amd64.img", SHA256: strings.ToUpper(sum(img))}, "noble-server-cloudimg-amd64", FormatRaw},
		{"SHA256SUMS", CloudImage{URL: srv.URL + "/noble-server-cloudimg-amd64.img", Checksums: srv.URL + "/SHA256SUMS", Name: "noble", Arch: "arm64"}, "noble", FormatRaw},
		{"SHA512SUMS xz", CloudImage{URL: srv.URL + "/bookworm.raw.xz", Checksums: srv.URL + "/SHA512SUMS"}, "bookworm", FormatXZ},
		{"BSD qcow2", CloudImage{URL: srv.URL + "/debian-12-genericcloud-amd64.qcow2", Checksums: srv.URL + "/CHECKSUM"}, "debian-12-genericcloud-amd64", FormatZstd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := mustOpen(t)
			im, err := importCloud(context.Background(), t, s, tc.ci)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Release()
			m := im.Manifest
			wantArch := tc.ci.Arch
			if wantArch == "" {
				wantArch = "amd64"
			}
			if m.Name != tc.wantName || m.Arch != wantArch || m.Purpose != PurposeDeploy || len(m.Files) != 1 || m.Files[0].Role != RoleDisk {
				t.Fatalf("manifest %+v", m)
			}
			f := im.Files[0]
			if f.Format != tc.format || f.RawSize != int64(len(raw)) || f.RawSHA256 != sum(raw) || !s.Has(f.SHA256) {
				t.Fatalf("stored %+v", f)
			}
		})
	}
}

// A download whose digest is not the vendor's is refused before anything
// is registered, and leaves nothing behind; so are a file the list does
// not name, a missing list, and a server that does not say the size.
func TestImportCloudImageRefused(t *testing.T) {
	dir, _ := cloudDir(t)
	other := sum([]byte("not the image"))
	wrongSums := other + "  noble-server-cloudimg-amd64.img\n"
	if err := os.WriteFile(filepath.Join(dir, "WRONGSUMS"), []byte(wrongSums), 0o644); err != nil {
		t.Fatal(err)
	}
	wrong512 := sum512([]byte("x")) + "  bookworm.raw.xz\n"
	if err := os.WriteFile(filepath.Join(dir, "WRONG512"), []byte(wrong512), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := imageServer(t, dir, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/chunked.img" {
			return false
		}
		w.WriteHeader(200)
		w.Write(make([]byte, 1000))
		w.(http.Flusher).Flush()
		w.Write(make([]byte, 1000))
		return true
	})
	img := srv.URL + "/noble-server-cloudimg-amd64.img"
	for _, tc := range []struct {
		name string
		ci   CloudImage
		err  string
	}{
		{"wrong sha256", CloudImage{URL: img, SHA256: other}, "sha256 mismatch: expected " + other},
		{"wrong list", CloudImage{URL: img, Checksums: srv.URL + "/WRONGSUMS"}, "sha256 mismatch: expected " + other},
		{"wrong sha512", CloudImage{URL: srv.URL + "/bookworm.raw.xz", Checksums: srv.URL + "/WRONG512"}, "sha512 mismatch"},
		{"not listed", CloudImage{URL: srv.URL + "/SHA512SUMS", Checksums: srv.URL + "/SHA256SUMS"}, `no entry for "SHA512SUMS" (it lists 3 files)`},
		{"no list", CloudImage{URL: img, Checksums: srv.URL + "/MISSING"}, "404 Not Found"},
		{"no image", CloudImage{URL: srv.URL + "/missing.img", SHA256: other}, "404 Not Found"},
		{"no size", CloudImage{URL: srv.URL + "/chunked.img", SHA256: other}, "does not say the image's size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, sdir := mustOpen(t)
			_, err := importCloud(context.Background(), t, s, tc.ci)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			assertEmpty(t, sdir)
		})
	}
}

func TestOpenCloudImageRefuses(t *testing.T) {
	sha := sum(nil)
	for _, tc := range []struct {
		name string
		ci   CloudImage
		err  string
	}{
		{"no digest", CloudImage{URL: "http://h/x.img"}, "exactly one of"},
		{"both", CloudImage{URL: "http://h/x.img", SHA256: sha, Checksums: "http://h/SUMS"}, "exactly one of"},
		{"bad sha", CloudImage{URL: "http://h/x.img", SHA256: "abc"}, "want 64 hex digits"},
		{"directory", CloudImage{URL: "http://h/images/", SHA256: sha}, "names no file"},
		{"no path", CloudImage{URL: "http://h", SHA256: sha}, "names no file"},
		{"ftp", CloudImage{URL: "ftp://h/x.img", SHA256: sha}, "want http:// or https://"},
		{"list ftp", CloudImage{URL: "http://h/x.img", Checksums: "ftp://h/SUMS"}, "checksums URL"},
		{"bad name", CloudImage{URL: "http://h/x.img", SHA256: sha, Name: "../x"}, "name"},
		{"bad arch", CloudImage{URL: "http://h/x.img", SHA256: sha, Arch: "a b"}, "arch"},
		{"nameless", CloudImage{URL: "http://h/.img", SHA256: sha}, "no name in the file name"},
	} {
		if _, err := OpenCloudImage(tc.ci, URLOptions{}); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

func TestCloudImageName(t *testing.T) {
	for in, want := range map[string]string{
		"debian-12-genericcloud-amd64.qcow2":     "debian-12-genericcloud-amd64",
		"noble-server-cloudimg-amd64.img":        "noble-server-cloudimg-amd64",
		"Fedora-Cloud-Base-41-1.4.x86_64.raw.xz": "Fedora-Cloud-Base-41-1.4.x86_64",
		"disk.img.zst":                           "disk",
		"a b~c.tar":                              "a-b-c.tar",
		".hidden.img":                            "hidden",
		strings.Repeat("x", 70) + ".img":         strings.Repeat("x", 64),
	} {
		if got := cloudImageName(in); got != want {
			t.Errorf("cloudImageName(%q) = %q, want %q", in, got, want)
		}
	}
}
