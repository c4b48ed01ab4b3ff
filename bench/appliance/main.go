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
	vals, err := e2eresult.Run{
		Test: "TestApplianceBench", Package: "./e2e/appliance/", Env: []string{"RACKD_E2E_BENCH_APPLIANCE=1"},
		Timeout: timeout, Echo: []string{"bench: ", "built appliance"}, Keys: keys,
	}.Do(context.Background())
	if err != nil {
		return err
	}
	fmt.Printf("RESULT appliance_boot_to_api_s=%.1f debian_boot_to_api_s=%.1f ratio=%.2f first_enlist_s=%.1f update_s=%.1f rollback_s=%.1f image_mb=%.0f accel=%s\n",
		vals["appliance_boot_to_api_s"], vals["debian_boot_to_api_s"], vals["debian_boot_to_api_s"]/vals["appliance_boot_to_api_s"],
		vals["first_enlist_s"], vals["update_s"], vals["rollback_s"], vals["image_mb"], e2eresult.Accel())
	return nil
}
