// Package initramfs describes, as data, the u-root enlistment initramfs
// that `make initramfs` (scripts/initramfs.sh) builds: the u-root commands
// it carries (commands.txt, imported by tools.go so that go.mod pins them)
// and the kernel modules it ships from the kernel it is paired with
// (modules.txt, with their dependencies). The enlist client
// (enlist/cmd/enlist) is its uinit; docs/ARCHITECTURE.md section 4 follows
// one boot through it.
package initramfs
