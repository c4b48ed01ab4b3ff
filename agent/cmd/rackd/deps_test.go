package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestShippedBinaryLinksNoTestCode: the rackd that is built and shipped
// (no build tags) links neither the fake power driver nor any other test
// helper: a config that enables [power.fake] on a real rackd fails at start
// instead of simulating BMCs.
func TestShippedBinaryLinksNoTestCode(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "rackd/agent/cmd/rackd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 || !slices.Contains(pkgs, "rackd/power/ipmi") {
		t.Fatalf("go list -deps gave %d packages, without rackd/power/ipmi: %q", len(pkgs), out)
	}
	for _, p := range pkgs {
		if p == "testing" || p == "rackd/internal/ipmisim" || (strings.HasPrefix(p, "rackd/") && strings.HasSuffix(p, "test")) {
			t.Errorf("the shipped rackd links %s", p)
		}
	}
}
