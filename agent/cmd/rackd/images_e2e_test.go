package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"rackd/api"
	"rackd/internal/netnstest"
)

// TestCLIImportsCloudImage: the real CLI against a real rackd imports a
// vendor's qcow2 (made by qemu-img) from a loopback HTTP server with the
// SHA512SUMS the real sha512sum wrote; rackd converts it, and what curl
// fetches from /boot/ is the zstd of the raw image (the real zstd says
// so). A wrong --sha256 registers nothing.
func TestCLIImportsCloudImage(t *testing.T) {
	qemuImg, sha512sum, curl, zstd := netnstest.Tool(t, "qemu-img"), netnstest.Tool(t, "sha512sum"), netnstest.Tool(t, "curl"), netnstest.Tool(t, "zstd")
	dir := t.TempDir()
	raw := bytes.Repeat([]byte("a cloud image's root file system "), 64<<10)
	raw = append(raw, make([]byte, 3<<20)...) // and the zeros qcow2 leaves out
	raw[0], raw[1], raw[510], raw[511] = 0xeb, 0x63, 0x55, 0xaa
	if err := os.WriteFile(filepath.Join(dir, "disk.raw"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		return out
	}
	const file = "debian-12-genericcloud-amd64.qcow2"
	run(qemuImg, "convert", "-f", "raw", "-O", "qcow2", "disk.raw", file)
	if err := os.WriteFile(filepath.Join(dir, "SHA512SUMS"), run(sha512sum, file), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()

	state := t.TempDir()
	d := startDaemon(t, state)
	asAdmin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	out := mustCLI(t, d, asAdmin, "images", "import", srv.URL+"/"+file, "--checksums", srv.URL+"/SHA512SUMS", "--json")
	var im api.Image
	if err := json.Unmarshal([]byte(out), &im); err != nil {
		t.Fatalf("images import --json: %v\n%s", err, out)
	}
	rawSum := sha256.Sum256(raw)
	if im.Name != "debian-12-genericcloud-amd64" || im.Purpose != "deploy" || len(im.Files) != 1 {
		t.Fatalf("imported %+v", im)
	}
	f := im.Files[0]
	if f.Role != "disk" || f.Format != "zstd" || f.RawSize != int64(len(raw)) || f.RawSHA256 != hex.EncodeToString(rawSum[:]) {
		t.Fatalf("disk file %+v", f)
	}
	blob := filepath.Join(t.TempDir(), "blob")
	run(curl, "-fsS", "-o", blob, d.url+"/boot/images/"+f.SHA256)
	back := run(zstd, "-d", "-c", "-q", blob)
	if !bytes.Equal(back, raw) {
		t.Fatalf("zstd -d of what /boot/ serves: %d bytes, not the %d-byte raw image", len(back), len(raw))
	}
	if list := mustCLI(t, d, asAdmin, "images", "list"); !strings.Contains(list, "zstd:"+strconv.Itoa(len(raw))) {
		t.Fatalf("images list:\n%s", list)
	}

	wrong := strings.Repeat("0", 64)
	code, _, errs := runCLI(t, d, asAdmin, "images", "import", srv.URL+"/"+file, "--sha256", wrong, "--name", "wrong")
	if code != 1 || !strings.Contains(errs, "sha256 mismatch: expected "+wrong) {
		t.Fatalf("a wrong --sha256: exit %d, %q", code, errs)
	}
	if list := mustCLI(t, d, asAdmin, "images", "list"); strings.Contains(list, "wrong") {
		t.Fatalf("a refused import is listed:\n%s", list)
	}
	ents, err := os.ReadDir(filepath.Join(state, "images", "tmp"))
	if err != nil || len(ents) != 0 {
		t.Fatalf("images/tmp after the refused import: %v %v", ents, err)
	}
}
