//go:build linux

// Command rackd-init is the rackd appliance's init: u-root's init runs it
// as its uinit. At every boot it
//
//  1. loads the kernel modules the initramfs lists (-modules) and those of
//     rackd.modules=, and reads the kernel command line: rackd.slot=a|b
//     (the booted slot), rackd.trial=1 (a one-shot boot of an update),
//     rackd.factory_reset=1, rackd.health_window=DURATION;
//  2. finds the partitions by GPT name (esp, rackd-a, rackd-b, rackd-data)
//     and mounts the booted slot's squashfs read-only at /slot, the ESP at
//     /esp and the data partition (ext4) at /data;
//  3. on a blank data partition (first boot) or a factory reset, grows the
//     data partition to the disk's end (the backup GPT moves there), makes
//     an ext4 file system on it and writes the defaults: etc/appliance.toml
//     (the ESP's grub/appliance.toml when there is one), etc/rackd.toml;
//  4. brings up the management interface (DHCP, or static) and the rack
//     interfaces (static), as etc/appliance.toml says, and writes rackd's
//     appliance descriptor, /run/rackd/appliance.json;
//  5. applies the boot-count rules to the GRUB environment and the status
//     file, puts back the database copy of this build's schema when the
//     database is newer (a rollback), and starts rackd serve, restarting it
//     with backoff (1s doubling to 30s) and logging its output to the
//     console and to /data/log/rackd.log (rotated);
//  6. waits for rackd's /healthz within the health window: on a trial boot a
//     healthy rackd marks the slot good, an unhealthy one is recorded in the
//     status file and the machine reboots into the good slot. Once healthy
//     it creates the rack subnet, imports /slot/images/* and prints the API
//     URL (and, at first boot, the admin token).
//
// When rackd exits with code 100 (an update armed, a factory reset asked
// for) it syncs, unmounts /data and /esp and reboots; the power button
// (an ACPI button's input device, with the button and evdev modules)
// stops rackd the same way and powers off. The kernel command line
// carries panic=10, so a kernel panic reboots too, and GRUB's boot
// counting makes a trial slot that never reaches this program's health
// check fall back to the good one. A hardware watchdog (/dev/watchdog,
// 60 s), when there is one, is petted through the health window and while
// rackd answers /healthz: a hung kernel, init or rackd resets the machine.
//
// Outside PID 1 (tests), -root DIR prefixes every path (proc, sys, dev,
// run, etc, slot, esp, data), -mount=false takes slot, esp and data as
// directories already there (a format of the data partition empties
// ROOT/data, as a new file system would be), and -reboot=false exits with
// code 100 instead of rebooting.
//
// Every console line starts with "rackd-init: ".
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rackd-init:", err)
		os.Exit(2)
	}
	os.Exit(run(ctx, o, realSystem(o)))
}
