package docs

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// layers ranks rackd's packages from the bottom up (the longest prefix
// names a package's layer): a package may import its own layer and those
// below it, never one above. The shape it holds: wire types, file formats
// and library packages at the bottom; the protocol servers and drivers
// above them, knowing nothing of the store; the store; what runs on the
// store (the power queue, its HTTP statuses); the HTTP front ends (web UI,
// MAAS's API); the agent that composes them all; its command line; the
// binaries.
var layers = []struct {
	rank     int
	prefixes []string
}{
	{0, []string{"api", "internal", "cluster", "netboot", "power", "enlist", "nocloud", "appliance",
		"images", "store/kv", "store/boltfile", "initramfs"}},
	{1, []string{"netboot/dhcp", "netboot/dns", "netboot/httpboot", "netboot/tftp", "power/ipmi", "power/redfish",
		"power/manual", "power/consolehub", "store/kv/etcdkv", "agent/client", "enlist/cmd", "appliance/cmd"}},
	{2, []string{"store"}},
	{3, []string{"store/httpstatus", "power/queue"}},
	{4, []string{"webui", "maasapi"}},
	{5, []string{"agent"}},
	{6, []string{"agent/cli"}},
	{7, []string{"agent/cmd"}},
}

// Test support, benchmarks, scripts and the virtual lab stand outside the layers:
// they may use anything, and no production package may use them.
var outside = []string{"e2e", "bench", "lab", "docs", "scripts", "internal/ipmisim", "internal/redfishsim", "internal/vmtest",
	"internal/netnstest", "internal/etcdtest", "internal/brokenrackd", "store/storetest", "store/kv/kvtest",
	"netboot/dhcp/dhcptest", "power/powertest"}

func under(pkg, prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }

// rankOf is pkg's layer (pkg without the module's name), -1 outside them.
func rankOf(pkg string) int {
	for _, o := range outside {
		if under(pkg, o) {
			return -1
		}
	}
	best, rank := "", -2
	for _, l := range layers {
		for _, p := range l.prefixes {
			if under(pkg, p) && len(p) > len(best) {
				best, rank = p, l.rank
			}
		}
	}
	return rank
}

// TestLayers fails when a package imports one of a layer above its own, or
// a production package imports test support, or a package has no layer.
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "rackd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		pkg := strings.TrimPrefix(p.ImportPath, "rackd/")
		r := rankOf(pkg)
		if r == -2 {
			t.Errorf("package %s has no layer: add it to docs/layers_test.go", pkg)
			continue
		}
		if r == -1 {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, "rackd/") {
				continue
			}
			dep := strings.TrimPrefix(imp, "rackd/")
			switch dr := rankOf(dep); {
			case dr == -1:
				t.Errorf("%s (a production package) imports %s (test support or the lab)", pkg, dep)
			case dr > r:
				t.Errorf("%s (layer %d) imports %s (layer %d, above it)", pkg, r, dep, dr)
			}
		}
	}
	if n < 50 {
		t.Fatalf("go list found %d packages: not the whole tree", n)
	}
}

// TestArchitectureNamesEveryPackage fails when a production package has no
// row of its own in docs/ARCHITECTURE.md (its folder, backquoted): the
// table of folders and their one job is the map of the tree.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "rackd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		pkg := strings.TrimPrefix(imp, "rackd/")
		if rankOf(pkg) < 0 || strings.Contains(pkg, "/cmd/") {
			continue // test support, the lab, benchmarks; binaries: their package's row
		}
		if !strings.Contains(string(doc), "`"+pkg+"/`") && !strings.Contains(string(doc), "`"+pkg+"`") {
			t.Errorf("docs/ARCHITECTURE.md has no row for package %s: add `%s/` and its one job to section 2's table", pkg, pkg)
		}
	}
}
