// Package initramfs will build the u-root enlistment initramfs, described as
// data. See DESIGN.md section 2; not built yet.
package initramfs
