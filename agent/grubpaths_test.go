package agent

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
)

// TestGrubPathsResolve: every file a rendered GRUB config loads resolves,
// to the same bytes, on both of its branches: under (http,HOST)/boot/ over
// HTTP, and under (tftp,HOST)/ over rackd's TFTP server, the fallback of a
// GRUB without the http module (Debian's signed GRUB under Secure Boot).
// GRUB's TFTP sends the path with its leading slash, as the fetches here.
func TestGrubPathsResolve(t *testing.T) {
	curl := netnstest.Tool(t, "curl")
	ta := startAgent(t, func(c *Config) { c.TFTP.Listen = "127.0.0.1:0" })
	select {
	case <-ta.tftp.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("tftp did not start")
	}
	kernel := []byte(strings.Repeat("KERNEL", 5000))
	dir := writeImageDir(t, "enlist", "enlist", kernel, []byte(strings.Repeat("INITRD", 700)), false)
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, nil); code != 201 {
		t.Fatalf("import: %d %s", code, raw)
	}
	tftp := func(name string) string {
		t.Helper()
		out, err := exec.Command(curl, "-sS", "--tftp-blksize", "1024", "tftp://"+ta.tftp.Addr().String()+"/"+name).Output()
		if err != nil {
			t.Fatalf("tftp %s: %v", name, err)
		}
		return string(out)
	}
	// The config as GRUB fetches it, over TFTP.
	cfg := tftp("/grub/grub.cfg-default-amd64")
	base := regexp.MustCompile(`(?m)^\s*set rackd_base=(\S+)$`).FindAllStringSubmatch(cfg, -1)
	if len(base) != 2 || !strings.HasPrefix(base[0][1], "(http,127.0.0.1:") || !strings.HasSuffix(base[0][1], ")/boot") ||
		base[1][1] != "(tftp,127.0.0.1)" {
		t.Fatalf("rackd_base settings %q, want an http one then (tftp,127.0.0.1)\n%s", base, cfg)
	}
	var paths []string
	for _, m := range regexp.MustCompile(`\$rackd_base/(\S+)`).FindAllStringSubmatch(cfg, -1) {
		paths = append(paths, m[1])
	}
	if len(paths) != 2 {
		t.Fatalf("files %q in the config, want the kernel and the initrd\n%s", paths, cfg)
	}
	for i, p := range paths {
		code, overHTTP := httpGet(t, ta.url+"/boot/"+p)
		overTFTP := tftp("/" + p)
		if code != 200 || overTFTP != overHTTP || len(overTFTP) < 4000 {
			t.Errorf("file %d %s: HTTP %d with %d bytes, TFTP %d bytes; want the same file on both", i, p, code, len(overHTTP), len(overTFTP))
		}
		if i == 0 && overTFTP != string(kernel) {
			t.Errorf("kernel %s over TFTP is not the imported kernel", p)
		}
	}
}
