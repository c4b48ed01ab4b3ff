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
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"rackd/bench/internal/e2eresult"
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
	var times, offs []float64
	for i := 1; i <= reps; i++ {
		vals, err := e2eresult.Run{
			Test: "TestE2EEnlistBIOS", Package: "./e2e/", Timeout: timeout, Prefix: fmt.Sprintf("run %d: ", i),
			Echo: []string{"timeline from VM start", "make initramfs took"}, Keys: []string{"e2e_enlist_s", "e2e_poweroff_s"},
		}.Do(context.Background())
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		v, off := vals["e2e_enlist_s"], vals["e2e_poweroff_s"]
		fmt.Printf("run %d: VM start to NEW machine %.2f s, to powered off %.2f s\n", i, v, off)
		times, offs = append(times, v), append(offs, off)
	}
	slices.Sort(times)
	slices.Sort(offs)
	fmt.Printf("RESULT e2e_enlist_s=%.1f poweroff_s=%.1f reps=%d accel=%s\n", times[len(times)/2], offs[len(offs)/2], reps, e2eresult.Accel())
	return nil
}
