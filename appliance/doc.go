// Package appliance holds the rules of the rackd appliance's firmware-style
// updates: the signed bundle format, the ed25519 keys it is signed with, the
// GRUB environment block that arms a one-shot boot of the other slot, the
// slot selection and boot-counting rules (the Go mirror of the appliance's
// grub.cfg), the update writer and the status and descriptor files.
//
// It is plain Go with no dependency on the agent: the appliance's init uses
// it before rackd runs, the agent's admin API uses it to take an update, and
// the build uses it to sign a bundle. docs/ARCHITECTURE.md describes the
// update model.
package appliance

// ExitReboot is the exit code with which rackd asks the appliance's init to
// reboot (after an update is armed or a factory reset requested). The init
// syncs, unmounts and reboots instead of restarting rackd.
const ExitReboot = 100
