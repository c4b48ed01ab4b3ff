package netboot

// This file is the boot decision shared by DHCP, TFTP and HTTP: given what a
// client said about itself, which loader it must fetch. Per-machine choices
// (enlist, commission, deploy, local disk) are made by the configs that loader
// fetches, so DHCP needs to know the client's firmware, not the machine.
