package netboot

// This file is the boot decision shared by DHCP, TFTP and HTTP: given what a
// client said about itself, which loader it must fetch. Per-machine choices
// (enlist, commission, deploy, local disk) are made by the configs that loader
// fetches, so DHCP needs to know the client's firmware, not the machine.

import (
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Arch is a client system architecture type (DHCP option 93), as registered
// by IANA under RFC 4578 section 2.1 and its updates (RFC 5970 for the HTTP
// boot values).
type Arch uint16

// The architectures rackd knows. Other values are valid on the wire but get
// no boot file: rackd has no loader for them.
const (
	ArchBIOS         Arch = 0  // Intel x86PC: legacy BIOS PXE
	ArchEFIIA32      Arch = 6  // EFI IA32: known, but rackd ships no 32-bit EFI loader
	ArchEFIX64       Arch = 7  // EFI x86-64 (the value most x86-64 UEFI firmware sends)
	ArchEFIBC        Arch = 9  // EFI BC: used by some x86-64 firmware for the same thing as 7
	ArchEFIARM64     Arch = 11 // EFI ARM 64-bit
	ArchEFIX64HTTP   Arch = 16 // EFI x86-64 boot from HTTP (UEFI 2.5 HTTP boot)
	ArchEFIARM64HTTP Arch = 19 // EFI ARM 64-bit boot from HTTP
)

// Vendor classes (option 60) as firmware sends them and as a server must echo
// them: PXE 2.1 section 2.2 for "PXEClient", UEFI 2.5+ section 24.7 for
// "HTTPClient". A UEFI HTTP boot client ignores an offer that does not echo
// HTTPClient.
const (
	VendorPXE  = "PXEClient"
	VendorHTTP = "HTTPClient"
)

// UserClassIPXE is the user class (option 77) iPXE sends; it marks a client
// that already runs iPXE and can fetch its script over HTTP.
const UserClassIPXE = "iPXE"

// Client is what a booting client said about itself in its DHCP request.
type Client struct {
	// MAC is the client hardware address (chaddr).
	MAC net.HardwareAddr
	// Arch is the client's architecture, valid only when HasArch is set.
	// It comes from option 93 (its first entry: the list is in order of
	// preference, RFC 4578 section 2.1) or, when option 93 is missing, from
	// the "Arch:NNNNN" field of a PXEClient vendor class.
	Arch    Arch
	HasArch bool
	// VendorClass is option 60 verbatim ("PXEClient:Arch:00007:UNDI:003016").
	VendorClass string
	// UserClass lists the option 77 user classes (RFC 3004), or the raw
	// option as one string when it is not in RFC 3004 form (iPXE sends a
	// bare "iPXE").
	UserClass []string
}

// IPXE reports whether the client is iPXE (user class "iPXE").
func (c Client) IPXE() bool {
	for _, uc := range c.UserClass {
		if uc == UserClassIPXE {
			return true
		}
	}
	return false
}

// NetBoot reports whether the client is a network-boot firmware or loader:
// a PXEClient or HTTPClient vendor class, or iPXE. Such a client gets a boot
// file and the short PXE lease.
func (c Client) NetBoot() bool {
	return strings.HasPrefix(c.VendorClass, VendorPXE) ||
		strings.HasPrefix(c.VendorClass, VendorHTTP) || c.IPXE()
}

// BootConfig is where boot files are served from.
type BootConfig struct {
	// TFTPServer is the next-server (siaddr) of PXE replies. Invalid: the
	// next-server field stays 0.0.0.0.
	TFTPServer netip.Addr
	// HTTPBase is rackd's HTTP base URL without trailing slash, e.g.
	// "http://10.0.0.1:5240". Empty: no HTTP boot and no iPXE script.
	HTTPBase string
	// HTTPPort, when HTTPBase is empty, lets the DHCP server build the base
	// from the receiving interface's address: http://<address>:HTTPPort.
	// (The DHCP server likewise uses that address when TFTPServer is
	// invalid.)
	HTTPPort int
}

// Boot is the DHCP half of a boot decision: what goes into the reply.
type Boot struct {
	// NextServer is siaddr (RFC 2131 section 2: the server to use in the
	// next bootstrap step, i.e. TFTP).
	NextServer netip.Addr
	// File is the boot file name (the file field, and option 67 when
	// asked for): a TFTP path, or a full URL for HTTP boot and iPXE.
	File string
	// VendorClass is the option 60 to echo: VendorPXE or VendorHTTP.
	VendorClass string
}

// ChooseBoot decides what a network-booting client must load. It returns
// false when the client is not booting from the network or is of an
// architecture rackd cannot boot; the DHCP reply then carries no boot
// fields.
//
// iPXE is recognised first, whatever the architecture: it is already a
// loader and fetches its per-MAC script over HTTP. Otherwise the
// architecture decides: BIOS gets pxelinux, x86-64 UEFI the signed shim
// (which loads grubx64.efi from the same directory), arm64 UEFI grub, and the
// UEFI HTTP boot architectures a full URL with vendor class HTTPClient.
func ChooseBoot(c Client, cfg BootConfig) (Boot, bool) {
	vendor := VendorPXE
	if strings.HasPrefix(c.VendorClass, VendorHTTP) {
		vendor = VendorHTTP
	}
	if c.IPXE() {
		if cfg.HTTPBase == "" || len(c.MAC) == 0 {
			return Boot{}, false
		}
		// The MAC's colons are legal in a query (RFC 3986 section 3.4),
		// and iPXE passes the URL through as is.
		return Boot{
			NextServer:  cfg.TFTPServer,
			File:        cfg.HTTPBase + "/boot/ipxe?mac=" + c.MAC.String(),
			VendorClass: vendor,
		}, true
	}
	if !c.HasArch {
		return Boot{}, false
	}
	var file string
	switch c.Arch {
	case ArchBIOS:
		file = "pxelinux.0"
	case ArchEFIX64, ArchEFIBC:
		file = "bootx64.efi"
	case ArchEFIARM64:
		file = "grubaa64.efi"
	case ArchEFIX64HTTP, ArchEFIARM64HTTP:
		if cfg.HTTPBase == "" {
			return Boot{}, false
		}
		name := "bootx64.efi"
		if c.Arch == ArchEFIARM64HTTP {
			name = "grubaa64.efi"
		}
		// UEFI HTTP boot takes the URL from the file field and only
		// accepts an offer that echoes HTTPClient (UEFI 2.5 section
		// 24.7.2), whatever vendor class the request carried.
		return Boot{NextServer: cfg.TFTPServer, File: cfg.HTTPBase + "/boot/" + name, VendorClass: VendorHTTP}, true
	default:
		// Includes ArchEFIIA32: there is no 32-bit UEFI loader to give.
		return Boot{}, false
	}
	return Boot{NextServer: cfg.TFTPServer, File: file, VendorClass: VendorPXE}, true
}

// ParseClient extracts from a DHCPv4 request what ChooseBoot needs. It never
// fails: absent or malformed options leave their fields empty, which
// ChooseBoot answers with "no boot".
func ParseClient(m *dhcpv4.DHCPv4) Client {
	c := Client{
		VendorClass: m.ClassIdentifier(),
	}
	if len(m.ClientHWAddr) > 0 {
		c.MAC = append(net.HardwareAddr(nil), m.ClientHWAddr...)
	}
	// Option 93 is a list of 16-bit values (RFC 4578 section 2.1); a
	// length that is zero or odd is malformed and ignored.
	if v := m.Options.Get(dhcpv4.OptionClientSystemArchitectureType); len(v) >= 2 && len(v)%2 == 0 {
		c.Arch = Arch(uint16(v[0])<<8 | uint16(v[1]))
		c.HasArch = true
	} else if a, ok := archFromVendorClass(c.VendorClass); ok {
		c.Arch, c.HasArch = a, true
	}
	if m.Options.Has(dhcpv4.OptionUserClassInformation) {
		c.UserClass = m.UserClass()
	}
	return c
}

// archFromVendorClass reads the architecture from a PXE vendor class,
// "PXEClient:Arch:xxxxx:UNDI:yyyzzz" (PXE 2.1 section 2.2.5; UEFI uses the
// same form with HTTPClient), for clients that omit option 93.
func archFromVendorClass(vc string) (Arch, bool) {
	f := strings.Split(vc, ":")
	if len(f) < 3 || (f[0] != VendorPXE && f[0] != VendorHTTP) || f[1] != "Arch" || len(f[2]) != 5 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[2], 10, 16)
	if err != nil {
		return 0, false
	}
	return Arch(n), true
}
