package cli_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rackd/appliance"
)

const applianceStatus = `{"version":"v1.0","build":100,"booted":"a","trial":false,"good_slot":"a","next_boot":"b","next_boot_trial":true,"reset_requested":false,
"slots":{"a":{"version":"v1.0","build":100,"state":"good","device":"/dev/vda3"},"b":{"version":"v2.0","build":200,"state":"trying","device":"/dev/vda4"}},
"last_update":{"version":"v2.0","build":200,"slot":"b","started":"2026-12-02T03:00:00Z","finished":"2026-12-02T03:01:00Z","result":"armed"}%s}`

func TestApplianceUpdateUploads(t *testing.T) {
	isolate(t)
	f := newFake(t, map[string]answer{"POST /api/v1/appliance/update": {200, strings.Replace(applianceStatus, "%s", "", 1)}})
	bundle := filepath.Join(t.TempDir(), "x.bundle")
	content := bytes.Repeat([]byte("bundle bytes "), 100000)
	os.WriteFile(bundle, content, 0o644)
	code, out, errOut := run(t, "appliance", "update", bundle, "--no-reboot", "--allow-downgrade", "--url", f.srv.URL, "--token", "t")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].Body != string(content) || !strings.Contains(reqs[0].Query, "reboot=0") || !strings.Contains(reqs[0].Query, "allow_downgrade=1") {
		t.Fatalf("request %+v (body %d bytes)", reqs[0].Query, len(reqs[0].Body))
	}
	if !strings.Contains(out, "v2.0 (build 200) written to slot b and armed") || !strings.Contains(out, "Not rebooting") {
		t.Fatalf("stdout %q", out)
	}
	if !strings.Contains(errOut, "upload x.bundle") || !strings.Contains(errOut, "100%") || !strings.Contains(errOut, "done") {
		t.Fatalf("no progress on stderr: %q", errOut)
	}

	// Rebooting.
	f2 := newFake(t, map[string]answer{"POST /api/v1/appliance/update": {200, strings.Replace(applianceStatus, "%s", `,"rebooting":true`, 1)}})
	code, out, _ = run(t, "appliance", "update", bundle, "--url", f2.srv.URL, "--token", "t")
	if code != 0 || !strings.Contains(out, "rebooting into slot b") || strings.Contains(f2.requests()[0].Query, "reboot=0") {
		t.Fatalf("exit %d: %q %+v", code, out, f2.requests())
	}
}

func TestApplianceUpdateURLAndRefusal(t *testing.T) {
	isolate(t)
	f := newFake(t, map[string]answer{"POST /api/v1/appliance/update": {403, `{"error":"bundle signature does not verify","code":"bundle_signature"}`}})
	code, _, errOut := run(t, "appliance", "update", "https://example.invalid/x.bundle", "--url", f.srv.URL, "--token", "t")
	if code != 1 || !strings.Contains(errOut, "bundle signature does not verify") {
		t.Fatalf("exit %d: %q", code, errOut)
	}
	if r := f.requests(); len(r) != 1 || r[0].Body != `{"url":"https://example.invalid/x.bundle"}` {
		t.Fatalf("requests %+v", r)
	}
	if code, _, _ := run(t, "appliance", "update", "ftp://x/y", "--url", f.srv.URL, "--token", "t"); code != 2 {
		t.Fatalf("ftp URL: exit %d", code)
	}
	if code, _, errOut := run(t, "appliance", "update", filepath.Join(t.TempDir(), "missing"), "--url", f.srv.URL, "--token", "t"); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("missing file: exit %d %q", code, errOut)
	}
}

func TestApplianceStatusTable(t *testing.T) {
	isolate(t)
	f := newFake(t, map[string]answer{"GET /api/v1/appliance/status": {200, strings.Replace(applianceStatus, "%s", "", 1)}})
	code, out, errOut := run(t, "appliance", "status", "--url", f.srv.URL, "--token", "t")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"running: v1.0 (build 100) from slot a\n", "SLOT  VERSION  BUILD  STATE   DEVICE     NOTES\n",
		"a     v1.0     100    good    /dev/vda3  booted, fallback\n", "b     v2.0     200    trying  /dev/vda4  -\n",
		"next boot: slot b (trial of an update)", "last update: v2.0 (build 200) to slot b: armed"} {
		if !strings.Contains(out, want) {
			t.Errorf("status has no %q:\n%s", want, out)
		}
	}
}

func TestApplianceReset(t *testing.T) {
	isolate(t)
	f := newFake(t, map[string]answer{"POST /api/v1/appliance/reset": {200, strings.Replace(applianceStatus, "%s", `,"rebooting":true`, 1)}})
	code, _, errOut := run(t, "appliance", "reset", "--url", f.srv.URL, "--token", "t")
	if code != 2 || !strings.Contains(errOut, "--yes") || len(f.requests()) != 0 {
		t.Fatalf("without --yes: exit %d %q", code, errOut)
	}
	code, out, _ := run(t, "appliance", "reset", "--yes", "--url", f.srv.URL, "--token", "t")
	if code != 0 || !strings.Contains(out, "rebooting") {
		t.Fatalf("exit %d %q", code, out)
	}
	if r := f.requests(); len(r) != 1 || r[0].Body != `{"confirm":true}` || r[0].Query != "" {
		t.Fatalf("requests %+v", r)
	}
}

// keygen and bundle make what the appliance's update reader accepts.
func TestApplianceKeygenAndBundle(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if code, out, errOut := run(t, "appliance", "keygen", keys); code != 0 || !strings.Contains(out, "signing.key") {
		t.Fatalf("keygen: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := run(t, "appliance", "keygen", keys); code != 1 || !strings.Contains(errOut, "exists") {
		t.Fatalf("second keygen: %d %s", code, errOut)
	}
	payload := bytes.Repeat([]byte{1, 2, 3, 4, 5}, 300000)
	os.WriteFile(filepath.Join(dir, "slot.img"), payload, 0o644)
	out := filepath.Join(dir, "out.bundle")
	code, stdout, errOut := run(t, "appliance", "bundle", "--key", filepath.Join(keys, "signing.key"), "--payload", filepath.Join(dir, "slot.img"),
		"--version", "v2.0-3-gabc", "--build", "1764633600", "--arch", "amd64", "-o", out)
	if code != 0 || !strings.Contains(stdout, "v2.0-3-gabc") {
		t.Fatalf("bundle: %d %s %s", code, stdout, errOut)
	}
	pub, err := appliance.LoadPublicKey(filepath.Join(keys, "signing.pub"))
	if err != nil {
		t.Fatal(err)
	}
	bf, _ := os.Open(out)
	defer bf.Close()
	b, err := appliance.ReadBundle(bf, pub)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(b.Payload)
	if err != nil || !bytes.Equal(got, payload) || b.Manifest.Build != 1764633600 || b.Manifest.Version != "v2.0-3-gabc" || b.Manifest.Arch != "amd64" {
		t.Fatalf("bundle read back: %+v %v", b.Manifest, err)
	}
	for _, args := range [][]string{
		{"appliance", "bundle", "--key", filepath.Join(keys, "signing.key"), "--payload", filepath.Join(dir, "slot.img"), "--version", "v", "-o", out},
		{"appliance", "bundle", "--payload", filepath.Join(dir, "slot.img"), "--version", "v", "--build", "1", "-o", out},
	} {
		if code, _, _ := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	// A public key is no signing key.
	if code, _, errOut := run(t, "appliance", "bundle", "--key", filepath.Join(keys, "signing.pub"), "--payload", filepath.Join(dir, "slot.img"),
		"--version", "v", "--build", "1", "-o", filepath.Join(dir, "other.bundle")); code != 1 || !strings.Contains(errOut, "PRIVATE KEY") {
		t.Fatalf("public key as --key: %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "other.bundle")); !os.IsNotExist(err) {
		t.Fatal("a failed bundle left its output")
	}
}
