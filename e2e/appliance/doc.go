// Package appliance holds the real-VM tests of the rackd appliance image
// (make appliance-image): QEMU boots the flashable disk itself, under OVMF
// and under SeaBIOS, with two NICs: the management NIC on a tap in the
// test's network namespace, where a real dnsmasq answers DHCP, and the rack
// NIC on a bridge in the same namespace. No rackd runs on the host: the
// tests talk to the appliance's API on the address dnsmasq gave it, with
// the admin token its console prints, as an operator would.
//
// The lifecycle test then PXE-boots a second VM on the rack bridge from the
// appliance (it appears NEW), updates the appliance to a bundle of the same
// code with another version (machines, leases and tokens kept; slot B
// booted and good), refuses unsigned, wrongly signed, truncated and older
// bundles with nothing written to the inactive slot (its bytes on the disk
// file are compared), rolls a broken update (a slot whose rackd exits at
// start: internal/brokenrackd) back by itself, and survives a power loss in
// the middle of writing a slot (QEMU killed) before a retried update
// succeeds.
//
// The images are built by scripts/appliance-image.sh into
// build/e2e-appliance/ (they share one base initramfs, kept while its
// sources do not change: a build then takes about a minute). The tests need
// root, QEMU, OVMF, dnsmasq and the image build's tools
// (scripts/test-deps.sh installs them all); without root they skip. QEMU
// runs under TCG unless RACKD_E2E_ACCEL=kvm. Timings are logged, never
// asserted; make bench-appliance measures them.
//
//	make e2e-appliance
package appliance
