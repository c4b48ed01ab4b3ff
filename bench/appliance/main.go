// Command appliance measures the rackd appliance image (make
// appliance-image) on real VMs: its power-on to a healthy API against the
// peer a user would pick instead, the same rackd installed with
// dist/appliance's install.sh into the Debian 12 image of make image-debian
// (systemd, cloud-init), booted in the same QEMU configuration in the same
// run; the first boot's power-on to a PXE client on the rack network
// appearing NEW; an update's command to the new slot healthy; a broken
// update's command to the old slot healthy again; and the image's size.
//
// It runs the real-VM test TestApplianceBench (package e2e/appliance) and
// prints what it measured and, last, one line:
//
//	RESULT appliance_boot_to_api_s=<n> debian_boot_to_api_s=<n> ratio=<debian/appliance> first_enlist_s=<n> update_s=<n> rollback_s=<n> image_mb=<n> accel=<tcg|kvm>
//
// It needs root, QEMU, OVMF, dnsmasq and cloud-localds (make
// bench-appliance installs what is missing and builds dist/appliance and
// the Debian image first).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"rackd/bench/internal/e2eresult"
)

func main() {
	timeout := flag.Duration("timeout", 90*time.Minute, "bound on the run, including the appliance's image builds")
	flag.Parse()
	if err := run(*timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-appliance:", err)
		os.Exit(1)
	}
}

// keys are what the test records.
var keys = []string{"appliance_boot_to_api_s", "debian_boot_to_api_s", "first_enlist_s", "update_s", "rollback_s", "image_mb"}

func run(timeout time.Duration) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, tap devices for the VMs)")
	}
	accel := os.Getenv("RACKD_E2E_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	dir, err := os.MkdirTemp("", "bench-appliance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	results := filepath.Join(dir, "results")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.CommandContext(ctx, goTool, "test", "-count=1", "-v", "-timeout", timeout.String(),
		"-run", "^TestApplianceBench$", "./e2e/appliance/")
	cmd.Env = append(os.Environ(), "RACKD_E2E_RESULTS="+results, "RACKD_E2E_BENCH_APPLIANCE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go test: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "--- SKIP") {
		return fmt.Errorf("the test skipped:\n%s", out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, "bench: ") || strings.Contains(line, "built appliance") {
			fmt.Println(strings.TrimSpace(line))
		}
	}
	vals, err := e2eresult.Read(results)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	for _, k := range keys {
		if _, ok := vals[k]; !ok {
			return fmt.Errorf("the test recorded no %s\n%s", k, out)
		}
	}
	fmt.Printf("RESULT appliance_boot_to_api_s=%.1f debian_boot_to_api_s=%.1f ratio=%.2f first_enlist_s=%.1f update_s=%.1f rollback_s=%.1f image_mb=%.0f accel=%s\n",
		vals["appliance_boot_to_api_s"], vals["debian_boot_to_api_s"], vals["debian_boot_to_api_s"]/vals["appliance_boot_to_api_s"],
		vals["first_enlist_s"], vals["update_s"], vals["rollback_s"], vals["image_mb"], accel)
	return nil
}
