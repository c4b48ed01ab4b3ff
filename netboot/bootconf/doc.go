// Package bootconf renders the per-machine boot configurations that rackd's
// TFTP and HTTP servers answer with: GRUB (grub/grub.cfg-<mac>, the
// per-architecture defaults and the grub/grub.cfg pre-loader), pxelinux
// (pxelinux.cfg/01-<mac>, pxelinux.cfg/default) and iPXE (ipxe/<mac>.ipxe,
// /boot/ipxe?mac=<mac>). The paths are listed in docs/API.md ("Boot files").
//
// # One decision, three languages
//
// Decide is the one place that maps a machine's lifecycle state to what it
// boots: an unknown MAC enlists, COMMISSIONING commissions, DEPLOYING
// deploys its image, every other state boots from local disk. Render asks
// a Source for the machine and the imported environments on every request
// and writes the decision in the loader's language; nothing is cached and
// nothing is written to disk, so a state change shows on the very next
// request. (netboot.ChooseBoot is the DHCP half: which loader a client
// fetches; this package decides what that loader then boots.)
//
// # Safety
//
// Every string that reaches a config (machine ID, hostname, state, image
// name, kernel and initrd paths, kernel arguments, the base URL) is
// checked against a conservative character set, and a value outside it is
// refused with ErrInvalid rather than escaped: pxelinux has no quoting at
// all, the kernel command line has only double quotes without an escape,
// and GRUB and iPXE expand $ differently. Refusing is the one rule that is
// right for all of them, and it keeps a hostile hostname or image name from
// adding a line or an argument to a config.
//
// An environment's own kernel arguments (an image's cmdline) come after
// rackd's rackd.url, rackd.mode and rackd.machine (never a credential: the
// environment claims that from rackd), so that an image can end its arguments with "--" and arguments for init; rackd.*
// and initrd= are refused in them (CheckArgs), so an image can neither
// override rackd's arguments nor name initrds of its own.
//
// # GRUB without http
//
// GRUB configs load kernels and initrds over HTTP when GRUB can open an
// http device, and otherwise over TFTP from the HTTP base's host, whose
// root is the tree HTTP serves under /boot/: Debian's signed network GRUB,
// the one shim accepts under Secure Boot, has no http module built in and
// may not load an unsigned one.
//
// # Caveats
//
// ParsePath expects paths relative to the boot tree: the TFTP layer strips
// the leading slash some clients send (GRUB's TFTP does), and the HTTP
// layer strips "/boot/".
package bootconf
