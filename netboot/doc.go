// Package netboot holds the boot domain shared by rackd's DHCP, TFTP and
// HTTP boot servers, which live in its sub-packages: the client
// architectures of DHCP option 93 (RFC 4578), and ChooseBoot, the one
// function that decides which loader a network-booting client fetches
// (pxelinux for BIOS, shim or grub for UEFI, a URL for UEFI HTTP boot, an
// HTTP script for iPXE). docs/ARCHITECTURE.md section 4 follows one boot
// from DHCPDISCOVER to a rendered config.
package netboot
