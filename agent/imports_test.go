package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/api"
)

// imageDir writes files (name -> content) and their manifest; cmdline and
// purpose go into the manifest, spoil names a file whose checksum is wrong.
func imageDir(t *testing.T, name, arch, purpose, cmdline string, files map[string][]byte, roles map[string]string, spoil string) string {
	t.Helper()
	dir := t.TempDir()
	var list []map[string]any
	for _, p := range sortedKeys(files) {
		h := sha256.Sum256(files[p])
		sum := hex.EncodeToString(h[:])
		if p == spoil {
			sum = strings.Repeat("0", 64)
		}
		list = append(list, map[string]any{"path": p, "role": roles[p], "sha256": sum, "size": len(files[p])})
		if err := os.WriteFile(filepath.Join(dir, p), files[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := map[string]any{"name": name, "arch": arch, "purpose": purpose, "files": list}
	if cmdline != "" {
		m["cmdline"] = cmdline
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "rackd-image.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func sortedKeys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// waitImport polls the job until it is no longer running (bounded).
func waitImport(t *testing.T, ta *testAgent, id string) api.ImportJob {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var j api.ImportJob
		if code, raw := ta.call(t, ta.admin, "GET", "/api/v1/images/imports/"+id, nil, &j); code != 200 {
			t.Fatalf("GET import %s: %d %s", id, code, raw)
		}
		if j.State != api.ImportRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("import %s still running after 30s: %+v", id, j)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func storeEmpty(t *testing.T, ta *testAgent) {
	t.Helper()
	for _, sub := range []string{"sha256", "tmp"} {
		ents, err := os.ReadDir(filepath.Join(ta.cfg.StateDir, "images", sub))
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 0 {
			t.Errorf("images/%s holds %d entries after a failed import", sub, len(ents))
		}
	}
	var ims []api.Image
	ta.call(t, ta.admin, "GET", "/api/v1/images", nil, &ims)
	if len(ims) != 0 {
		t.Errorf("failed import listed: %+v", ims)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A URL import runs in the background: rackd fetches the manifest and the
// files from a real HTTP server, the job reports bytes, and the image's
// cmdline lands in the boot configs after rackd's own arguments.
func TestImportURLBackground(t *testing.T) {
	ta := startAgent(t)
	kernel := []byte(strings.Repeat("KERNEL", 100000))
	initrd := []byte("INITRD")
	dir := imageDir(t, "enlist", "amd64", "enlist", "console=ttyS0,115200n8 -- single",
		map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd}, map[string]string{"vmlinuz": "kernel", "initrd.img": "initrd"}, "")
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()

	var j api.ImportJob
	code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: srv.URL + "/", Background: true}, &j)
	if code != 202 || j.ID == "" || j.State != api.ImportRunning && j.State != api.ImportDone {
		t.Fatalf("start: %d %s", code, raw)
	}
	j = waitImport(t, ta, j.ID)
	total := int64(len(kernel) + len(initrd))
	if j.State != api.ImportDone || j.BytesDone != total || j.BytesTotal != total || j.Files != 2 || j.FilesDone != 2 ||
		j.Image == nil || j.Image.Cmdline != "console=ttyS0,115200n8 -- single" || j.Source != srv.URL+"/rackd-image.json" || j.By != "admin" {
		t.Fatalf("job: %+v", j)
	}
	var jobs []api.ImportJob
	if code, _ := ta.call(t, ta.admin, "GET", "/api/v1/images/imports", nil, &jobs); code != 200 || len(jobs) != 1 || jobs[0].ID != j.ID {
		t.Fatalf("jobs: %d %+v", code, jobs)
	}
	user := ta.addUser(t, "bob", false)
	code, raw = ta.call(t, user, "GET", "/api/v1/images/imports/"+j.ID, nil, nil)
	wantError(t, code, raw, 403, api.CodeForbidden)

	code, script := httpGet(t, ta.url+"/boot/ipxe?mac=52:54:00:12:34:99")
	want := "rackd.mode=enlist console=ttyS0,115200n8 -- single || goto"
	if code != 200 || !strings.Contains(script, want) || !strings.Contains(script, "/boot/images/"+j.Image.Files[1].SHA256) {
		t.Fatalf("ipxe script lacks %q:\n%s", want, script)
	}
	if code, body := httpGet(t, ta.url+"/boot/images/"+j.Image.Files[1].SHA256); code != 200 || body != string(kernel) {
		t.Fatalf("kernel: %d, %d bytes", code, len(body))
	}
}

// Failed URL imports, in the background and in the foreground, leave no
// blob, no temporary file and no image.
func TestImportURLFailures(t *testing.T) {
	initrd := []byte(strings.Repeat("I", 100000))
	files := map[string][]byte{"vmlinuz": []byte("kernel"), "initrd.img": initrd}
	roles := map[string]string{"vmlinuz": "kernel", "initrd.img": "initrd"}
	truncating := func(dir string) http.Handler {
		fs := http.FileServer(http.Dir(dir))
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/initrd.img" {
				fs.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(initrd)))
			w.WriteHeader(200)
			w.Write(initrd[:1000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drops the connection mid-body
		})
	}
	tests := map[string]struct {
		spoil   string
		handler func(dir string) http.Handler
		wantErr string
	}{
		"wrong checksum": {spoil: "vmlinuz", wantErr: "sha256 mismatch"},
		"truncated":      {handler: truncating, wantErr: "truncated download"},
		"not found": {handler: func(dir string) http.Handler {
			return http.StripPrefix("/nothing", http.FileServer(http.Dir(dir)))
		}, wantErr: "404 Not Found"},
	}
	for name, tc := range tests {
		for _, background := range []bool{true, false} {
			t.Run(name+"/background="+strconv.FormatBool(background), func(t *testing.T) {
				ta := startAgent(t)
				dir := imageDir(t, "enlist", "amd64", "enlist", "", files, roles, tc.spoil)
				h := http.FileServer(http.Dir(dir))
				if tc.handler != nil {
					h = tc.handler(dir)
				}
				srv := httptest.NewServer(h)
				defer srv.Close()
				var j api.ImportJob
				code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: srv.URL, Background: background}, &j)
				if background {
					if code != 202 {
						t.Fatalf("start: %d %s", code, raw)
					}
					j = waitImport(t, ta, j.ID)
					if j.State != api.ImportFailed || !strings.Contains(j.Error, tc.wantErr) || j.Image != nil {
						t.Fatalf("job %+v, want failed with %q", j, tc.wantErr)
					}
				} else if e := wantError(t, code, raw, 400, api.CodeBadRequest); !strings.Contains(e.Error, tc.wantErr) {
					t.Fatalf("error %q, want %q", e.Error, tc.wantErr)
				}
				storeEmpty(t, ta)
			})
		}
	}
}

// Cancelling an import mid-file stops it and removes what it wrote.
func TestImportCancel(t *testing.T) {
	ta := startAgent(t)
	initrd := []byte(strings.Repeat("I", 100000))
	dir := imageDir(t, "enlist", "amd64", "enlist", "", map[string][]byte{"vmlinuz": []byte("kernel"), "initrd.img": initrd},
		map[string]string{"vmlinuz": "kernel", "initrd.img": "initrd"}, "")
	fs := http.FileServer(http.Dir(dir))
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/initrd.img" {
			fs.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(initrd)))
		w.WriteHeader(200)
		w.Write(initrd[:50000])
		w.(http.Flusher).Flush()
		select { // hold the download open until cancelled
		case <-r.Context().Done():
		case <-release:
		case <-time.After(30 * time.Second):
		}
	}))
	defer srv.Close()
	defer srv.CloseClientConnections()

	var j api.ImportJob
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: srv.URL, Background: true}, &j); code != 202 {
		t.Fatalf("start: %d %s", code, raw)
	}
	// Wait until half the initrd (the first file, by name) is in: the
	// import is mid-file.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ta.call(t, ta.admin, "GET", "/api/v1/images/imports/"+j.ID, nil, &j)
		if j.File == "initrd.img" && j.BytesDone >= 50000 {
			break
		}
		if j.State != api.ImportRunning || time.Now().After(deadline) {
			t.Fatalf("import not mid-file: %+v", j)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/imports/"+j.ID+"/cancel", nil, &j)
	if code != 200 || j.State != api.ImportCancelled || !strings.Contains(j.Error, "cancelled by admin") {
		t.Fatalf("cancel: %d %s", code, raw)
	}
	storeEmpty(t, ta)
	code, raw = ta.call(t, ta.admin, "POST", "/api/v1/images/imports/i-999/cancel", nil, nil)
	wantError(t, code, raw, 404, api.CodeNotFound)
}

func TestImportRequestValidation(t *testing.T) {
	ta := startAgent(t)
	dir := imageDir(t, "enlist", "amd64", "enlist", "", map[string][]byte{"vmlinuz": []byte("k")}, map[string]string{"vmlinuz": "kernel"}, "")
	for name, tc := range map[string]struct {
		req  api.ImportImage
		want string
	}{
		"neither":          {api.ImportImage{}, "exactly one of dir"},
		"both":             {api.ImportImage{Dir: dir, URL: "http://127.0.0.1:1/"}, "exactly one of dir"},
		"relative dir":     {api.ImportImage{Dir: "x/y"}, "absolute path"},
		"missing dir":      {api.ImportImage{Dir: "/nonexistent/rackd-test", Background: true}, "no such file"},
		"ftp":              {api.ImportImage{URL: "ftp://h/x"}, "want http:// or https://"},
		"unreachable host": {api.ImportImage{URL: "http://127.0.0.1:1/img/"}, "connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", tc.req, nil)
			if e := wantError(t, code, raw, 400, api.CodeBadRequest); !strings.Contains(e.Error, tc.want) {
				t.Fatalf("error %q, want %q", e.Error, tc.want)
			}
		})
	}
	// A cmdline no boot config could carry is refused before any file is
	// read; one the images package already refuses, too.
	for cmdline, want := range map[string]string{"rackd.url=http://evil": "reserved", "a=$x": "not allowed", "initrd=../x": "reserved"} {
		d := imageDir(t, "enlist", "amd64", "enlist", cmdline, map[string][]byte{"vmlinuz": []byte("k")}, map[string]string{"vmlinuz": "kernel"}, "")
		code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: d}, nil)
		if e := wantError(t, code, raw, 400, api.CodeBadRequest); !strings.Contains(e.Error, want) {
			t.Fatalf("cmdline %q: error %q, want %q", cmdline, e.Error, want)
		}
	}
	storeEmpty(t, ta)
}

// Bootloaders come from the registered bootloader image by their fixed
// names, over HTTP and through the same source TFTP uses; a name no image
// carries falls back to the boot tree, and deleting the image brings the
// tree's copy back.
func TestBootloaderImage(t *testing.T) {
	ta := startAgent(t)
	tree := filepath.Join(ta.cfg.StateDir, "boot")
	for name, body := range map[string]string{"pxelinux.0": "tree pxelinux", "ldlinux.c32": "tree ldlinux"} {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	amd := imageDir(t, "bootloaders", "amd64", "bootloader", "",
		map[string][]byte{"pxelinux.0": []byte("image pxelinux"), "bootx64.efi": []byte("shim")},
		map[string]string{"pxelinux.0": "bootloader", "bootx64.efi": "bootloader"}, "")
	arm := imageDir(t, "bootloaders", "arm64", "bootloader", "",
		map[string][]byte{"grubaa64.efi": []byte("grub arm64")}, map[string]string{"grubaa64.efi": "bootloader"}, "")
	for _, d := range []string{amd, arm} {
		if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: d}, nil); code != 201 {
			t.Fatalf("import %s: %d %s", d, code, raw)
		}
	}
	for name, want := range map[string]string{
		"pxelinux.0":   "image pxelinux",
		"bootx64.efi":  "shim",
		"grubaa64.efi": "grub arm64",
		"ldlinux.c32":  "tree ldlinux", // not in the image: the tree's
	} {
		if code, body := httpGet(t, ta.url+"/boot/"+name); code != 200 || body != want {
			t.Errorf("/boot/%s: %d %q, want %q", name, code, body, want)
		}
	}
	if code, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/images/bootloaders/amd64", nil, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, raw)
	}
	if code, body := httpGet(t, ta.url+"/boot/pxelinux.0"); code != 200 || body != "tree pxelinux" {
		t.Errorf("after delete /boot/pxelinux.0: %d %q, want the tree's", code, body)
	}
	if code, _ := httpGet(t, ta.url+"/boot/bootx64.efi"); code != 404 {
		t.Errorf("after delete /boot/bootx64.efi: %d, want 404", code)
	}
	if code, body := httpGet(t, ta.url+"/boot/grubaa64.efi"); code != 200 || body != "grub arm64" {
		t.Errorf("arm64 bootloader after amd64 delete: %d %q", code, body)
	}
}

// At most maxRunningImports run at once; a foreground import whose client
// goes away is cancelled and rolled back.
func TestImportLimitAndClientGone(t *testing.T) {
	ta := startAgent(t)
	initrd := []byte(strings.Repeat("I", 100000))
	dir := imageDir(t, "enlist", "amd64", "enlist", "", map[string][]byte{"initrd.img": initrd},
		map[string]string{"initrd.img": "initrd"}, "")
	fs := http.FileServer(http.Dir(dir))
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/initrd.img" {
			fs.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(initrd)))
		w.WriteHeader(200)
		w.Write(initrd[:10])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		case <-time.After(30 * time.Second):
		}
	}))
	defer srv.Close()
	defer srv.CloseClientConnections()
	defer close(release)

	var ids []string
	for i := 0; i < maxRunningImports; i++ {
		var j api.ImportJob
		if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: srv.URL, Background: true}, &j); code != 202 {
			t.Fatalf("import %d: %d %s", i, code, raw)
		}
		ids = append(ids, j.ID)
	}
	code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{URL: srv.URL, Background: true}, nil)
	if e := wantError(t, code, raw, 429, api.CodeUnavailable); !strings.Contains(e.Error, "running already") {
		t.Fatalf("fifth import: %q", e.Error)
	}
	for _, id := range ids {
		if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/imports/"+id+"/cancel", nil, nil); code != 200 {
			t.Fatalf("cancel %s: %d %s", id, code, raw)
		}
	}

	// A foreground import whose client gives up.
	body, _ := json.Marshal(api.ImportImage{URL: srv.URL})
	req, _ := http.NewRequest("POST", ta.url+"/api/v1/images/import", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+ta.admin)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("foreground import answered %d while its download hangs", resp.StatusCode)
	}
	// The job ends cancelled (bounded wait), and nothing is left.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var jobs []api.ImportJob
		ta.call(t, ta.admin, "GET", "/api/v1/images/imports", nil, &jobs)
		last := jobs[len(jobs)-1]
		if last.State == api.ImportCancelled && strings.Contains(last.Error, "client went away") {
			break
		}
		if last.State != api.ImportRunning || time.Now().After(deadline) {
			t.Fatalf("foreground job after its client left: %+v", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	storeEmpty(t, ta)
}
