// Package e2e holds rackd's real-VM end-to-end tests: a QEMU virtual
// machine network-boots through a real rackd (DHCP, TFTP, HTTP /boot/, the
// metadata endpoints) into the u-root enlistment initramfs that
// `make initramfs` builds, and the tests watch its serial console and
// rackd's API.
//
// Everything runs in a network namespace the test creates: a bridge with
// rackd bound to it, a tap device as the VM's cable. The tests need root,
// qemu-system-x86_64 with QEMU's iPXE option ROMs (ipxe-qemu), OVMF (ovmf)
// and the initramfs build's tools (scripts/test-deps.sh installs them all).
// Without root they skip; as root a missing tool fails them, so that CI
// cannot pass without running them. A missing enlistment image is built
// with `make initramfs` (about a minute and a half).
//
// QEMU runs under TCG (software emulation) unless RACKD_E2E_ACCEL=auto,
// which first checks with a bounded probe whether KVM boots the kernel;
// RACKD_E2E_ACCEL=kvm forces KVM. Timings are printed (t.Log), never
// asserted; benchmarks live in bench/boot.
//
//	make e2e                       # just these tests
//	go test -count=1 -v ./e2e/     # the same
package e2e
