package agent

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/images"
	"rackd/internal/netnstest"
	"rackd/netboot/bootconf"
	"rackd/store"
)

// TestBootHTTP: /boot/ serves the boot tree with ranges, refuses escapes,
// and renders per-MAC configs from the machine's current state on every
// request.
func TestBootHTTP(t *testing.T) {
	ta := startAgent(t)
	tree := filepath.Join(ta.cfg.StateDir, "boot")
	payload := strings.Repeat("0123456789", 1000)
	if err := os.WriteFile(filepath.Join(tree, "pxelinux.0"), []byte(payload), 0o644); err != nil {
		t.Fatal(err)
	}
	get := func(path string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", ta.url+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/boot/pxelinux.0"); code != 200 || body != payload {
		t.Fatalf("file: %d, %d bytes", code, len(body))
	}
	if code, body := get("/boot/pxelinux.0", "Range", "bytes=10-19"); code != 206 || body != "0123456789" {
		t.Fatalf("range: %d %q", code, body)
	}
	if code, _ := get("/boot/nosuch"); code != 404 {
		t.Fatalf("unknown file: %d", code)
	}
	if code, _ := get("/boot/%2e%2e/%2e%2e/etc/passwd"); code != 403 && code != 400 {
		t.Fatalf("escape: %d", code)
	}
	// An unknown MAC gets the enlistment config; nothing is imported yet,
	// so it says so and boots the local disk.
	code, body := get("/boot/ipxe?mac=52:54:00:12:34:56")
	if code != 200 || !strings.Contains(body, "#!ipxe") || !strings.Contains(body, "exit") {
		t.Fatalf("ipxe for an unknown MAC: %d\n%s", code, body)
	}
	// A known machine's config follows its state at once.
	ta.addMachine(t, api.CreateMachine{Hostname: "web1", MACs: []string{"52:54:00:00:00:01"}, State: "DEPLOYED"})
	code, local := get("/boot/ipxe/52:54:00:00:00:01.ipxe")
	if code != 200 || !strings.Contains(local, "exit") || !strings.Contains(local, "web1") {
		t.Fatalf("deployed machine: %d\n%s", code, local)
	}
	if _, err := ta.Store().Transition(t.Context(), store.System, store.TransitionRequest{Machine: "web1", Action: store.ActionMarkBroken}); err != nil {
		t.Fatal(err)
	}
	if code, pxe := get("/boot/pxelinux.cfg/01-52-54-00-00-00-01"); code != 200 || !strings.Contains(strings.ToUpper(pxe), "LOCALBOOT") {
		t.Fatalf("pxelinux for a broken machine: %d\n%s", code, pxe)
	}
}

// TestBootTFTP: the same tree and configs over TFTP, fetched with curl.
func TestBootTFTP(t *testing.T) {
	curl := netnstest.Tool(t, "curl")
	ta := startAgent(t, func(c *Config) { c.TFTP.Listen = "127.0.0.1:0" })
	select {
	case <-ta.tftp.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("tftp did not start")
	}
	payload := strings.Repeat("rackd", 20000)
	if err := os.WriteFile(filepath.Join(ta.cfg.StateDir, "boot", "undionly.kpxe"), []byte(payload), 0o644); err != nil {
		t.Fatal(err)
	}
	ta.addMachine(t, api.CreateMachine{Hostname: "node7", MACs: []string{"52:54:00:00:00:07"}, State: "READY"})
	fetch := func(name string) (string, error) {
		out, err := exec.Command(curl, "-sS", "--tftp-blksize", "1468", "tftp://"+ta.tftp.Addr().String()+"/"+name).Output()
		return string(out), err
	}
	if got, err := fetch("undionly.kpxe"); err != nil || got != payload {
		t.Fatalf("file over tftp: %v, %d bytes", err, len(got))
	}
	if got, err := fetch("pxelinux.cfg/01-52-54-00-00-00-07"); err != nil || !strings.Contains(strings.ToUpper(got), "LOCALBOOT") {
		t.Fatalf("config over tftp: %v\n%s", err, got)
	}
	if _, err := fetch("../../etc/passwd"); err == nil {
		t.Fatal("traversal over tftp was served")
	}
}

// TestDeployedBootsLocalAtOnce: over TFTP, a DEPLOYING machine's config
// loads its image; the very next request after it is marked DEPLOYED boots
// the local disk (no cache anywhere between the store and the answer).
func TestDeployedBootsLocalAtOnce(t *testing.T) {
	curl := netnstest.Tool(t, "curl")
	ta := startAgent(t, func(c *Config) { c.TFTP.Listen = "127.0.0.1:0" })
	select {
	case <-ta.tftp.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("tftp did not start")
	}
	dir := writeImageDir(t, "debian", "deploy", []byte("kernel-bytes"), []byte("initrd-bytes"), false)
	var im api.Image
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, &im); status != 201 {
		t.Fatalf("import: %d %s", status, raw)
	}
	ta.addMachine(t, api.CreateMachine{Hostname: "db1", MACs: []string{"52:54:00:00:0d:01"}, State: "READY"})
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "db1", AgentName: "t"}, nil); status != 201 {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/db1/deploy", api.ActionRequest{Image: "debian"}, nil); status != 200 {
		t.Fatalf("deploy: %d %s", status, raw)
	}
	fetch := func() string {
		out, err := exec.Command(curl, "-sS", "tftp://"+ta.tftp.Addr().String()+"/ipxe/52:54:00:00:0d:01.ipxe").Output()
		if err != nil {
			t.Fatalf("tftp: %v", err)
		}
		return string(out)
	}
	kernelURL := "/boot/images/" + im.Files[0].SHA256
	if got := fetch(); !strings.Contains(got, kernelURL) || !strings.Contains(got, "rackd.mode=deploy") {
		t.Fatalf("DEPLOYING config does not load the image:\n%s", got)
	}
	if _, err := ta.Store().Transition(t.Context(), store.System, store.TransitionRequest{Machine: "db1", Action: store.ActionDeploymentDone}); err != nil {
		t.Fatal(err)
	}
	if got := fetch(); strings.Contains(got, kernelURL) || !strings.Contains(got, "exit") {
		t.Fatalf("DEPLOYED config still loads the image:\n%s", got)
	}
}

// TestHTTPBaseFor: the HTTP base of a config served without a Host header
// (over TFTP) follows the address the request arrived at whenever HTTP
// listens on more than one address, and is the listen address when HTTP
// listens on one.
func TestHTTPBaseFor(t *testing.T) {
	v4 := netip.MustParseAddr("10.0.0.1")
	tests := []struct {
		listen string
		local  netip.Addr
		want   string
	}{
		{"0.0.0.0:5240", v4, "http://10.0.0.1:5240"},
		{"[::]:5240", v4, "http://10.0.0.1:5240"},
		{":5240", v4, "http://10.0.0.1:5240"},
		{"0.0.0.0:5240", netip.MustParseAddr("::ffff:10.0.0.1"), "http://10.0.0.1:5240"},
		{"0.0.0.0:5240", netip.MustParseAddr("fd00::1"), "http://[fd00::1]:5240"},
		{"0.0.0.0:5240", netip.MustParseAddr("fe80::1%eth0"), "http://[fe80::1]:5240"},
		{"0.0.0.0:5240", netip.Addr{}, ""},
		{"10.0.0.2:5240", v4, "http://10.0.0.2:5240"}, // the one address HTTP answers on
		{"10.0.0.2:5240", netip.Addr{}, "http://10.0.0.2:5240"},
		{"127.0.0.1:5240", netip.MustParseAddr("127.0.0.1"), "http://127.0.0.1:5240"},
		{"127.0.0.1:5240", netip.Addr{}, "http://127.0.0.1:5240"},
		{"127.0.0.1:5240", v4, "http://10.0.0.1:5240"}, // unreachable either way: warned about at start
		{"localhost:5240", v4, "http://10.0.0.1:5240"},
		{"rackd.example:5240", v4, "http://rackd.example:5240"},
		{"garbage", v4, ""},
	}
	for _, tt := range tests {
		if got := httpBaseFor(tt.listen, tt.local); got != tt.want {
			t.Errorf("httpBaseFor(%q, %v) = %q, want %q", tt.listen, tt.local, got, tt.want)
		}
	}
}

// TestBootTFTPErrors: a TFTP client is told why a file is not served, in
// terms of what the operator must do.
func TestBootTFTPErrors(t *testing.T) {
	hpa := netnstest.Tool(t, "tftp")
	ta := startAgent(t, func(c *Config) { c.TFTP.Listen = "127.0.0.1:0" })
	select {
	case <-ta.tftp.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("tftp did not start")
	}
	host, port := ta.tftp.Addr().Addr().String(), strconv.Itoa(int(ta.tftp.Addr().Port()))
	for _, tt := range []struct{ name, want string }{
		{"pxelinux.0", "Error code 1: File not found: pxelinux.0: no bootloader image provides it (BIOS PXE): make bootloaders"},
		{"bootx64.efi", "Error code 1: File not found: bootx64.efi: no bootloader image provides it (x86-64 UEFI): make bootloaders"},
		{"nosuch", "Error code 1: File not found: nosuch"},
		{"../etc/passwd", "Error code 2: Access violation: ../etc/passwd: parent directory element"},
		{"pxelinux.cfg/01-zz-54-00-00-00-01", "Error code 1: File not found: pxelinux.cfg/01-zz-54-00-00-00-01"},
	} {
		// tftp-hpa: -c last; host:name keeps colons in names intact.
		out, _ := exec.Command(hpa, "-m", "binary", host, port, "-c", "get", host+":"+tt.name, filepath.Join(t.TempDir(), "f")).CombinedOutput()
		if !strings.Contains(string(out), tt.want) {
			t.Errorf("tftp-hpa get %s printed %q, want %q", tt.name, out, tt.want)
		}
	}
}

// The boot rule reads purposes and roles under its own names (bootconf does
// not import store or images): they must be the registry's spellings.
func TestBootImageNames(t *testing.T) {
	for _, p := range [][2]string{
		{bootconf.PurposeEnlist, store.PurposeEnlist},
		{bootconf.PurposeCommission, store.PurposeCommission},
		{bootconf.PurposeDeploy, store.PurposeDeploy},
		{bootconf.RoleKernel, images.RoleKernel},
		{bootconf.RoleInitrd, images.RoleInitrd},
		{bootconf.RoleDisk, images.RoleDisk},
	} {
		if p[0] != p[1] {
			t.Errorf("bootconf spells %q, the registry %q", p[0], p[1])
		}
	}
	im := store.Image{Name: "jammy", Arch: "amd64", Purpose: store.PurposeDeploy, Cmdline: "quiet",
		Files: []store.ImageFile{{Path: "vmlinuz", Role: images.RoleKernel, SHA256: strings.Repeat("a", 64), Size: 7}}}
	got := bootImages([]store.Image{im})
	want := []bootconf.Image{{Name: "jammy", Arch: "amd64", Purpose: store.PurposeDeploy, Cmdline: "quiet",
		Files: []bootconf.ImageFile{{Role: images.RoleKernel, Path: "images/" + strings.Repeat("a", 64), SHA256: strings.Repeat("a", 64), Size: 7}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bootImages = %+v, want %+v", got, want)
	}
}

// TestBootHTTPNoHost: an HTTP/1.0 request without a Host header gets a
// config pointing at the address the connection came to.
func TestBootHTTPNoHost(t *testing.T) {
	ta := startAgent(t)
	dir := writeImageDir(t, "enlist", "enlist", []byte("kernel"), []byte("initrd"), false)
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, nil); code != 201 {
		t.Fatalf("import: %d %s", code, raw)
	}
	addr := strings.TrimPrefix(ta.url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /boot/ipxe?mac=52:54:00:12:34:56 HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "HTTP/1.0 200") || !strings.Contains(string(b), "rackd.url=http://"+addr+" ") {
		t.Fatalf("answer without Host, want rackd.url=http://%s:\n%s", addr, b)
	}
}
