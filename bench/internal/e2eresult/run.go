package e2eresult

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Run is one run of a real-VM e2e test by a benchmark.
type Run struct {
	Test    string        // the test's name, matched exactly (-run ^Test$)
	Package string        // its package, e.g. ./e2e/
	Env     []string      // more environment (KEY=VALUE) for the test
	Timeout time.Duration // bound on the whole go test, builds included
	Echo    []string      // output lines containing any of these are printed
	Prefix  string        // put before every echoed line (e.g. "run 2: ")
	Keys    []string      // figures the test must have recorded
}

// Do runs the test under go test with RACKD_E2E_RESULTS pointing at a file
// of its own, prints the lines of its output that Echo names, and returns
// the figures it recorded. A failed, skipped or silent test (a key of Keys
// missing) is an error carrying the test's whole output: a benchmark must
// never print a RESULT made of figures a test did not measure.
func (r Run) Do(ctx context.Context) (map[string]float64, error) {
	dir, err := os.MkdirTemp("", "e2eresult-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	results := filepath.Join(dir, "results")
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.CommandContext(ctx, goTool, "test", "-count=1", "-v", "-timeout", r.Timeout.String(),
		"-run", "^"+r.Test+"$", r.Package)
	cmd.Env = append(append(os.Environ(), "RACKD_E2E_RESULTS="+results), r.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -run %s: %w\n%s", r.Test, err, out)
	}
	if strings.Contains(string(out), "--- SKIP") {
		return nil, fmt.Errorf("%s skipped:\n%s", r.Test, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		for _, s := range r.Echo {
			if strings.Contains(line, s) {
				fmt.Println(r.Prefix + strings.TrimSpace(line))
				break
			}
		}
	}
	vals, err := Read(results)
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	for _, k := range r.Keys {
		if _, ok := vals[k]; !ok {
			return nil, fmt.Errorf("%s recorded no %s\n%s", r.Test, k, out)
		}
	}
	return vals, nil
}

// Accel is the QEMU accelerator the e2e tests use (RACKD_E2E_ACCEL, tcg by
// default), for the RESULT line.
func Accel() string {
	if a := os.Getenv("RACKD_E2E_ACCEL"); a != "" {
		return a
	}
	return "tcg"
}
