// Package enlist is the metadata protocol spoken between rackd and the
// enlistment initramfs (docs/API.md "Metadata"): the wire
// types of whoami and enlist, their validation, and the client the
// initramfs program (enlist/cmd/enlist) uses, with retries and backoff.
// Package enlist/inventory reads the hardware inventory from /sys, /proc
// and DMI.
//
// A machine can land in the enlistment environment although rackd knows it
// (its firmware gave up on a slow per-MAC answer and booted the default
// config), so the environment asks rackd whether it is known before acting:
// a known machine must not wait, or enlist again, in the wrong environment.
//
//	GET  /metadata/v1/whoami?mac=A&mac=B  -> {"known", "state"?, "action"}
//	POST /metadata/v1/enlist  Inventory   -> 201 {"id", "action"}
//	                                        | 409 {"error", "code": "already_known", "action"}
//
// The action is one of enlist (unknown: send the inventory), reboot (known
// and in a state that boots from the network: the next PXE round gets the
// real config) and poweroff (known and idle, or just enlisted).
//
// # Console lines
//
// The enlist program prints progress on stdout (the console), every line
// starting with "rackd-enlist: ". Exactly one of these final lines ends a
// run, just before the program acts (tests watching a serial console wait
// for them; the constants below hold their fixed parts):
//
//	rackd-enlist: enlisted as <id>, powering off
//	rackd-enlist: enlisted as <id>, rebooting          (auto-commission)
//	rackd-enlist: known machine (<STATE>), rebooting
//	rackd-enlist: known machine (<STATE>), powering off
//	rackd-enlist: already known, rebooting             (409 already_known)
//	rackd-enlist: already known, powering off
//	rackd-enlist: failed: <reason>                     (then exits 1; no action)
//
// # Phase modes
//
// Booted with rackd.mode=commission, deploy or erase (rackd renders it for a
// machine COMMISSIONING, DEPLOYING a raw disk image, or RELEASING with an
// erase), the program skips whoami, claims the machine's phase credential
// (ClaimCredential: once per phase, from the address of its DHCP lease; the
// boot config carries none), does the phase's work, then reports with the
// credential as a Bearer token (see Report and phases.go). Its final lines
// are:
//
//	rackd-enlist: commissioned (READY), powering off
//	rackd-enlist: deployed <bytes> bytes to <disk>, rebooting
//	rackd-enlist: erased <disk> <disk>..., powering off
//	rackd-enlist: phase failed: <mode>: <reason> (reported), powering off
//	rackd-enlist: failed: <reason>     (the report itself failed: exits 1)
//	rackd-enlist: failed: credential refused: <rackd's answer>
//	                                   (the claim was refused: exits 1)
package enlist
