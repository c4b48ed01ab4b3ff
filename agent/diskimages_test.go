package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"rackd/api"
	"rackd/internal/chunksum"
	"rackd/internal/netnstest"
)

func hexSum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// testDisk is a small raw disk image: boot code's first bytes, data, an
// MBR signature.
func testDisk() []byte {
	d := bytes.Repeat([]byte("rackd test disk "), 64<<10) // 1 MiB
	d[0], d[1], d[2] = 0xeb, 0x63, 0x90
	d[510], d[511] = 0x55, 0xaa
	return d
}

// peerOutput runs a peer program on stdin and returns its output.
func peerOutput(t *testing.T, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(netnstest.Tool(t, name), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out
}

// A zstd disk image (made by the real zstd) imports as it is: the API
// shows its format and raw size and digest, /boot/ serves the compressed
// file, and a DEPLOYING machine's config tells the deploy environment all
// of it.
func TestCompressedDiskImageBoots(t *testing.T) {
	ta := startAgent(t)
	raw := testDisk()
	zst := peerOutput(t, raw, "zstd", "-c", "-q")
	comm := imageDir(t, "commission", "amd64", "commission", "console=ttyS0",
		map[string][]byte{"vmlinuz": []byte("kernel"), "initrd": []byte("initrd")}, map[string]string{"vmlinuz": "kernel", "initrd": "initrd"}, "")
	disk := imageDir(t, "noble", "amd64", "deploy", "", map[string][]byte{"disk.img.zst": zst}, map[string]string{"disk.img.zst": "disk"}, "")
	for _, dir := range []string{comm, disk} {
		if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, nil); code != 201 {
			t.Fatalf("import %s: %d %s", dir, code, raw)
		}
	}
	var ims []api.Image
	ta.call(t, ta.admin, "GET", "/api/v1/images", nil, &ims)
	var f api.ImageFile
	for _, im := range ims {
		if im.Name == "noble" {
			f = im.Files[0]
		}
	}
	w := &chunksum.Writer{}
	w.Write(raw)
	list := w.List().Marshal()
	want := api.ImageFile{Path: "disk.img.zst", Role: "disk", SHA256: hexSum(zst), Size: int64(len(zst)), Format: "zstd", RawSize: int64(len(raw)), RawSHA256: hexSum(raw),
		Chunks: hexSum(list)}
	if f != want {
		t.Fatalf("disk file %+v, want %+v", f, want)
	}
	resp, err := http.Get(ta.url + "/boot/images/" + f.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(served, zst) {
		t.Fatalf("GET the blob: %d, %d bytes, want the %d-byte zstd file", resp.StatusCode, len(served), len(zst))
	}
	// The chunk list is served next to it.
	resp, err = http.Get(ta.url + "/boot/images/" + f.Chunks)
	if err != nil {
		t.Fatal(err)
	}
	served, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(served, list) {
		t.Fatalf("GET the chunk list: %d %q, want %q", resp.StatusCode, served, list)
	}
	ta.machineIn(t, "web1", "52:54:00:d1:00:01", "READY")
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "web1", AgentName: "t"}, nil); code != 201 {
		t.Fatalf("allocate: %d %s", code, raw)
	}
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/deploy", api.ActionRequest{Image: "noble"}, nil); code != 200 {
		t.Fatalf("deploy: %d %s", code, raw)
	}
	resp, err = http.Get(ta.url + "/boot/ipxe?mac=52:54:00:d1:00:01")
	if err != nil {
		t.Fatal(err)
	}
	script, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	args := "rackd.image=images/" + f.SHA256 + " rackd.image_sha256=" + f.SHA256 + " rackd.image_size=" + strconv.Itoa(len(zst)) +
		" rackd.image_format=zstd rackd.image_raw_size=" + strconv.Itoa(len(raw)) + " rackd.image_raw_sha256=" + hexSum(raw) + " rackd.image_chunks=" + f.Chunks + " console=ttyS0"
	if !strings.Contains(string(script), args) {
		t.Fatalf("the deploy config lacks %q:\n%s", args, script)
	}
	// Deleting the image removes its chunk list with its file.
	if code, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/images/noble/amd64", nil, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, raw)
	}
	for _, h := range []string{f.SHA256, f.Chunks} {
		if _, err := os.Stat(filepath.Join(ta.cfg.StateDir, "images", "sha256", h)); !os.IsNotExist(err) {
			t.Errorf("blob %s after the image's deletion: %v", h, err)
		}
	}
}

// A cloud image URL with the vendor's SHA256SUMS (written by the real
// sha256sum) imports as a deploy image of one disk file; a digest that
// does not match registers nothing and leaves no blob; the request's
// fields are checked before anything is fetched.
func TestImportCloudImage(t *testing.T) {
	ta := startAgent(t)
	dir := t.TempDir()
	raw := testDisk()
	xz := peerOutput(t, raw, "xz", "-c", "-1", "-T1")
	for name, b := range map[string][]byte{"jammy-server-cloudimg-amd64.img": raw, "bookworm.raw.xz": xz} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(netnstest.Tool(t, "sha256sum"), "jammy-server-cloudimg-amd64.img", "bookworm.raw.xz")
	cmd.Dir = dir
	sums, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), sums, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()

	var im api.Image
	code, body := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: srv.URL + "/bookworm.raw.xz", Checksums: srv.URL + "/SHA256SUMS"}, &im)
	if code != 201 {
		t.Fatalf("import: %d %s", code, body)
	}
	if im.Name != "bookworm" || im.Arch != "amd64" || im.Purpose != "deploy" || len(im.Files) != 1 ||
		im.Files[0].Format != "xz" || im.Files[0].RawSize != int64(len(raw)) || im.Files[0].SHA256 != hexSum(xz) {
		t.Fatalf("imported %+v", im)
	}

	wrong := strings.Repeat("ab", 32)
	code, body = ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: srv.URL + "/jammy-server-cloudimg-amd64.img", SHA256: wrong, Name: "jammy"}, nil)
	if e := wantError(t, code, body, 400, api.CodeBadRequest); !strings.Contains(e.Error, "sha256 mismatch: expected "+wrong) {
		t.Fatalf("wrong sha256: %q", e.Error)
	}
	var after []api.Image
	ta.call(t, ta.admin, "GET", "/api/v1/images", nil, &after)
	if len(after) != 1 {
		t.Fatalf("after a refused import: %+v", after)
	}
	// The first image's disk file and its chunk list, nothing else.
	ents, err := os.ReadDir(filepath.Join(ta.cfg.StateDir, "images", "sha256"))
	if err != nil || len(ents) != 2 || im.Files[0].Chunks == "" {
		t.Fatalf("blobs after a refused import: %v %v (chunk list %q)", ents, err, im.Files[0].Chunks)
	}

	for name, tc := range map[string]struct {
		req  api.ImportImage
		want string
	}{
		"name without a digest": {api.ImportImage{URL: srv.URL + "/x.img", Name: "x"}, "name and arch belong to a cloud image URL"},
		"digest of a directory": {api.ImportImage{Dir: dir, SHA256: wrong}, "not a directory"},
		"both digests":          {api.ImportImage{URL: srv.URL + "/x.img", SHA256: wrong, Checksums: srv.URL + "/SHA256SUMS"}, "exactly one of a sha256 and a checksums URL"},
		"bad digest":            {api.ImportImage{URL: srv.URL + "/x.img", SHA256: "123"}, "want 64 hex digits"},
		"no file":               {api.ImportImage{URL: srv.URL + "/", SHA256: wrong}, "names no file"},
	} {
		code, body := ta.call(t, ta.admin, "POST", "/api/v1/images/import", tc.req, nil)
		if e := wantError(t, code, body, 400, api.CodeBadRequest); !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: %q, want %q", name, e.Error, tc.want)
		}
	}
}
