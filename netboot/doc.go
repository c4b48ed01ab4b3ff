// Package netboot will hold the boot domain types (architecture, firmware,
// boot spec) shared by rackd's DHCP, TFTP and HTTP boot servers, which live
// in its sub-packages. See DESIGN.md sections 2 and 3; not built yet.
package netboot
