// Command boot measures the enlistment path end to end: the wall time from
// a QEMU VM's start until rackd has it as a NEW machine (the enlist client's
// "enlisted as" line, printed once rackd answered), through iPXE, the
// enlistment kernel and initramfs, and the enlist client; and until the VM
// has powered itself off. It runs
// the real-VM test TestE2EEnlistBIOS (package e2e: rackd in a network
// namespace of its own, the VM on a tap on its bridge) -reps times and
// prints each time and, last, one line:
//
//	RESULT e2e_enlist_s=<median s> poweroff_s=<median s> reps=<n> accel=<tcg|kvm|auto>
//
// It needs root and QEMU (make bench-boot installs what is missing); the
// enlistment image is built first when it is missing (make initramfs).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	reps := flag.Int("reps", 1, "boots to measure (the median is reported)")
	timeout := flag.Duration("timeout", 20*time.Minute, "bound on each run, including a first build of the image")
	flag.Parse()
	if err := run(*reps, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-boot:", err)
		os.Exit(1)
	}
}

func run(reps int, timeout time.Duration) error {
	if reps < 1 || reps > 20 {
		return fmt.Errorf("-reps %d: want 1..20", reps)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, a tap device for the VM)")
	}
	accel := os.Getenv("RACKD_E2E_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	dir, err := os.MkdirTemp("", "bench-boot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	var times, offs []float64
	for i := 1; i <= reps; i++ {
		results := filepath.Join(dir, fmt.Sprintf("results-%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		cmd := exec.CommandContext(ctx, goTool, "test", "-count=1", "-v", "-run", "^TestE2EEnlistBIOS$", "./e2e/")
		cmd.Env = append(os.Environ(), "RACKD_E2E_RESULTS="+results)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("run %d: go test: %v\n%s", i, err, out)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(line, "timeline from VM start") || strings.Contains(line, "make initramfs took") {
				fmt.Printf("run %d: %s\n", i, strings.TrimSpace(line))
			}
		}
		v, err := readResult(results, "e2e_enlist_s")
		if err != nil {
			return fmt.Errorf("run %d: %w\n%s", i, err, out)
		}
		off, err := readResult(results, "e2e_poweroff_s")
		if err != nil {
			return fmt.Errorf("run %d: %w\n%s", i, err, out)
		}
		fmt.Printf("run %d: VM start to NEW machine %.2f s, to powered off %.2f s\n", i, v, off)
		times, offs = append(times, v), append(offs, off)
	}
	slices.Sort(times)
	slices.Sort(offs)
	fmt.Printf("RESULT e2e_enlist_s=%.1f poweroff_s=%.1f reps=%d accel=%s\n", times[len(times)/2], offs[len(offs)/2], reps, accel)
	return nil
}

// readResult reads key=value lines written by the e2e test.
func readResult(path, key string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("no result from the test: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", key, path)
}
