// Command deployos measures the deployment of a real OS, the Debian image
// of `make image-debian`, on a real VM powered by a real BMC: the wall time
// from the deploy request to the first successful SSH command, against the
// same image, already on the same VM's disk, powered on to its first SSH
// command in the same run (the ideal: a deployment cannot be faster than a
// boot); and the rate at which the deploy environment streams the image to
// the disk when it is served raw, zstd- and xz-compressed (MB of disk
// written a second).
//
// It runs the real-VM test TestE2EDeployOSBench (package e2e: rackd and an
// ipmi_sim BMC powering a QEMU VM in a network namespace of their own)
// and prints what it measured and, last, one line:
//
//	RESULT deploy_to_ssh_s=<n> local_boot_to_ssh_s=<n> overhead_ratio=<deploy/local> raw_stream_mb_s=<n> zst_stream_mb_s=<n> xz_stream_mb_s=<n> image_mb=<n> accel=<tcg|kvm|auto>
//
// It needs root, QEMU, ipmi_sim, mmdebstrap and OpenSSH's client (make
// bench-deploy-os installs what is missing); the Debian and enlistment
// images are built first when they are missing (both are cached).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"rackd/bench/internal/e2eresult"
)

func main() {
	timeout := flag.Duration("timeout", 60*time.Minute, "bound on the run, including first builds of the images")
	flag.Parse()
	if err := run(*timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-deploy-os:", err)
		os.Exit(1)
	}
}

// keys are what the test records, in the RESULT line's order.
var keys = []string{"deploy_to_ssh_s", "local_boot_to_ssh_s", "raw_stream_mb_s", "zst_stream_mb_s", "xz_stream_mb_s", "image_mb"}

func run(timeout time.Duration) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, a tap device for the VM)")
	}
	vals, err := e2eresult.Run{
		Test: "TestE2EDeployOSBench", Package: "./e2e/", Env: []string{"RACKD_E2E_BENCH_OS=1"},
		Timeout: timeout, Echo: []string{"bench: ", "image-debian.sh"}, Keys: keys,
	}.Do(context.Background())
	if err != nil {
		return err
	}
	fmt.Printf("RESULT deploy_to_ssh_s=%.1f local_boot_to_ssh_s=%.1f overhead_ratio=%.2f raw_stream_mb_s=%.1f zst_stream_mb_s=%.1f xz_stream_mb_s=%.1f image_mb=%.0f accel=%s\n",
		vals["deploy_to_ssh_s"], vals["local_boot_to_ssh_s"], vals["deploy_to_ssh_s"]/vals["local_boot_to_ssh_s"],
		vals["raw_stream_mb_s"], vals["zst_stream_mb_s"], vals["xz_stream_mb_s"], vals["image_mb"], e2eresult.Accel())
	return nil
}
