package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rackd/api"
)

// writeImageDir writes a kernel, an initrd and their manifest into a new
// directory; badSum spoils the initrd's checksum.
func writeImageDir(t *testing.T, name, purpose string, kernel, initrd []byte, badSum bool) string {
	t.Helper()
	dir := t.TempDir()
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	isum := sum(initrd)
	if badSum {
		isum = sum([]byte("something else"))
	}
	m := map[string]any{"name": name, "arch": "amd64", "purpose": purpose, "files": []map[string]any{
		{"path": "vmlinuz", "role": "kernel", "sha256": sum(kernel), "size": len(kernel)},
		{"path": "initrd.img", "role": "initrd", "sha256": isum, "size": len(initrd)},
	}}
	data, _ := json.Marshal(m)
	for n, b := range map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd, "rackd-image.json": data} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestImagesImportAndBoot(t *testing.T) {
	ta := startAgent(t)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(ta.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	list := func() []api.Image {
		t.Helper()
		var ims []api.Image
		if code, raw := ta.call(t, ta.admin, "GET", "/api/v1/images", nil, &ims); code != 200 {
			t.Fatalf("list: %d %s", code, raw)
		}
		return ims
	}
	blobs := func() int {
		ents, err := os.ReadDir(filepath.Join(ta.cfg.StateDir, "images", "sha256"))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}

	// A wrong checksum: 400, nothing listed, no blob left behind.
	bad := writeImageDir(t, "enlist", "enlist", []byte("bad kernel"), []byte("bad initrd"), true)
	code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: bad}, nil)
	if e := wantError(t, code, raw, 400, api.CodeBadRequest); !strings.Contains(e.Error, "sha256 mismatch") {
		t.Fatalf("bad checksum error: %q", e.Error)
	}
	if ims := list(); len(ims) != 0 {
		t.Fatalf("failed import listed: %+v", ims)
	}
	if n := blobs(); n != 0 {
		t.Fatalf("failed import left %d blobs", n)
	}
	code, raw = ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: "relative/dir"}, nil)
	wantError(t, code, raw, 400, api.CodeBadRequest)
	user := ta.addUser(t, "alice", false)
	code, raw = ta.call(t, user, "POST", "/api/v1/images/import", api.ImportImage{Dir: bad}, nil)
	wantError(t, code, raw, 403, api.CodeForbidden)

	kernel := []byte(strings.Repeat("KERNEL", 5000))
	dir := writeImageDir(t, "enlist", "enlist", kernel, []byte("INITRD"), false)
	var im api.Image
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, &im); code != 201 {
		t.Fatalf("import: %d %s", code, raw)
	}
	if im.Name != "enlist" || im.Arch != "amd64" || im.Purpose != "enlist" || len(im.Files) != 2 || im.Files[0].Size != int64(len(kernel)) {
		t.Fatalf("imported %+v", im)
	}
	if ims := list(); len(ims) != 1 || ims[0].Name != "enlist" {
		t.Fatalf("list: %+v", ims)
	}

	kurl := "/boot/images/" + im.Files[0].SHA256
	code, script := get("/boot/ipxe?mac=52:54:00:12:34:99")
	if code != 200 || !strings.Contains(script, kurl) || !strings.Contains(script, "/boot/images/"+im.Files[1].SHA256) {
		t.Fatalf("ipxe for an unknown MAC with enlist imported: %d\n%s", code, script)
	}
	if code, body := get(kurl); code != 200 || body != string(kernel) {
		t.Fatalf("kernel: %d, %d bytes", code, len(body))
	}
	if code, _ := get("/boot/images/" + strings.Repeat("0", 64)); code != 404 {
		t.Fatalf("absent blob: %d", code)
	}
	if code, _ := get("/boot/images/nothex"); code != 404 {
		t.Fatalf("bad blob name: %d", code)
	}

	// A second image sharing the kernel: deleting the first keeps it.
	dir2 := writeImageDir(t, "ubuntu", "deploy", kernel, []byte("OTHER INITRD"), false)
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir2}, nil); code != 201 {
		t.Fatalf("import 2: %d %s", code, raw)
	}
	if n := blobs(); n != 3 {
		t.Fatalf("%d blobs, want 3", n)
	}
	code, raw = ta.call(t, user, "DELETE", "/api/v1/images/enlist/amd64", nil, nil)
	wantError(t, code, raw, 403, api.CodeForbidden)
	if code, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/images/enlist/amd64", nil, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, raw)
	}
	code, raw = ta.call(t, ta.admin, "DELETE", "/api/v1/images/enlist/amd64", nil, nil)
	wantError(t, code, raw, 404, api.CodeNotFound)
	if n := blobs(); n != 2 {
		t.Fatalf("%d blobs after delete, want 2 (shared kernel kept)", n)
	}
	if code, body := get(kurl); code != 200 || body != string(kernel) {
		t.Fatalf("shared kernel after delete: %d", code)
	}
	if code, _ := get("/boot/images/" + im.Files[1].SHA256); code != 404 {
		t.Fatalf("deleted initrd still served: %d", code)
	}
	if code, script := get("/boot/ipxe?mac=52:54:00:12:34:99"); code != 200 || strings.Contains(script, kurl) {
		t.Fatalf("enlist config after delete: %d\n%s", code, script)
	}
}

// TestImageOSSeries: a deploy image's os and series come from the import
// request, else its manifest, else its name; MAAS's API deploys by them.
func TestImageOSSeries(t *testing.T) {
	ta := startAgent(t)
	k, i := []byte("kernel"), []byte("initrd")
	var im api.Image
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import",
		api.ImportImage{Dir: writeImageDir(t, "noble-server-cloudimg-amd64", "deploy", k, i, false)}, &im); code != 201 || im.OS != "ubuntu" || im.Series != "noble" {
		t.Fatalf("import by name: %d %s", code, raw)
	}
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import",
		api.ImportImage{Dir: writeImageDir(t, "golden", "deploy", k, i, false), OS: "ubuntu", Series: "jammy"}, &im); code != 201 || im.OS != "ubuntu" || im.Series != "jammy" {
		t.Fatalf("import with os and series: %d %s", code, raw)
	}
	code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import",
		api.ImportImage{Dir: writeImageDir(t, "commission", "commission", k, i, false), OS: "ubuntu"}, nil)
	wantError(t, code, raw, 400, api.CodeBadRequest)
	code, raw = ta.call(t, ta.admin, "POST", "/api/v1/images/import",
		api.ImportImage{Dir: writeImageDir(t, "x", "deploy", k, i, false), Series: "Bad Series"}, nil)
	wantError(t, code, raw, 400, api.CodeBadRequest)
}
