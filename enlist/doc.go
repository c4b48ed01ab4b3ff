// Package enlist will hold the metadata protocol (whoami, enlist) spoken
// between rackd and the enlistment initramfs, and the client that runs in
// it. See DESIGN.md section 2; not built yet.
package enlist
