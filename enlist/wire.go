package enlist

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Action is what rackd tells the enlistment environment to do.
type Action string

// The actions.
const (
	ActionEnlist   Action = "enlist"
	ActionReboot   Action = "reboot"
	ActionPowerOff Action = "poweroff"
)

// Valid reports whether a is one of the actions.
func (a Action) Valid() bool {
	return a == ActionEnlist || a == ActionReboot || a == ActionPowerOff
}

// The paths of the metadata endpoints, under rackd's base URL.
const (
	PathWhoAmI = "/metadata/v1/whoami"
	PathEnlist = "/metadata/v1/enlist"
	// PathSeed answers a deploying machine's phase credential with its
	// NoCloud seed: a FAT file system image labelled CIDATA.
	PathSeed = "/metadata/v1/seed"
	// PathOSPrefix prefixes the deployed OS's report endpoints:
	// <prefix><OS credential>/phone-home and .../events.
	PathOSPrefix = "/metadata/v1/os/"
	// PathCredential is where a phase environment claims its credential
	// (see Client.ClaimCredential).
	PathCredential = "/metadata/v1/credential"
)

// CodeAlreadyKnown is the error code of an enlistment refused because a MAC
// or the system UUID already belongs to a machine.
const CodeAlreadyKnown = "already_known"

// WhoAmI is the answer of GET /metadata/v1/whoami.
type WhoAmI struct {
	Known bool `json:"known"`
	// State is the machine's lifecycle state, when known.
	State  string `json:"state,omitempty"`
	Action Action `json:"action"`
}

// Inventory is what a machine says about itself in POST /metadata/v1/enlist.
type Inventory struct {
	// Hostname is optional; rackd makes one up from the first MAC when it is
	// empty.
	Hostname string   `json:"hostname,omitempty"`
	MACs     []string `json:"macs"`
	// Arch is the Go/Debian architecture name ("amd64", "arm64").
	Arch     string `json:"arch"`
	CPUCount int    `json:"cpu_count"`
	MemoryMB int    `json:"memory_mb"`
	Disks    []Disk `json:"disks"`
	DMI      DMI    `json:"dmi"`
	// BMCAddress is the IP address of the machine's BMC as the machine
	// itself reads it in-band, when it can.
	BMCAddress string `json:"bmc_address,omitempty"`
}

// Disk is one block device.
type Disk struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
}

// DMI is the system identity from SMBIOS (/sys/class/dmi/id).
type DMI struct {
	Vendor  string `json:"vendor,omitempty"`
	Product string `json:"product,omitempty"`
	Serial  string `json:"serial,omitempty"`
	UUID    string `json:"uuid,omitempty"`
}

// Enlisted is the answer of a successful enlistment (201).
type Enlisted struct {
	ID     string `json:"id"`
	Action Action `json:"action"`
}

// Refusal is the body of a refused enlistment; Action is set with
// CodeAlreadyKnown.
type Refusal struct {
	Error  string `json:"error"`
	Code   string `json:"code"`
	Action Action `json:"action,omitempty"`
}

// Limits on an inventory. Real machines stay far below them; they bound what
// an unauthenticated client can make rackd store.
const (
	MaxMACs      = 64
	MaxDisks     = 256
	MaxTextLen   = 128 // DMI fields, disk names, models, serials
	MaxCPUs      = 1 << 16
	MaxMemoryMB  = 1 << 40 // a petabyte... times a thousand
	MaxDiskBytes = 1 << 62
)

var (
	archRE     = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	diskNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:!-]{1,64}$`)
)

// Validate says what is wrong with an inventory, all at once, in terms a
// human at the console can act on. It does not canonicalise MACs (the store
// does) but refuses ones that do not parse.
func (inv Inventory) Validate() error {
	var errs []error
	if len(inv.MACs) == 0 {
		errs = append(errs, errors.New("macs: at least one MAC address is needed"))
	}
	if len(inv.MACs) > MaxMACs {
		errs = append(errs, fmt.Errorf("macs: %d MAC addresses, at most %d", len(inv.MACs), MaxMACs))
	} else {
		for _, m := range inv.MACs {
			if hw, err := net.ParseMAC(m); err != nil || len(hw) != 6 {
				errs = append(errs, fmt.Errorf("macs: %q is not a MAC address like 52:54:00:12:34:56", clip(m)))
			}
		}
	}
	if inv.Arch != "" && !archRE.MatchString(inv.Arch) {
		errs = append(errs, fmt.Errorf("arch %q: want a name like amd64 or arm64", clip(inv.Arch)))
	}
	if inv.CPUCount < 0 || inv.CPUCount > MaxCPUs {
		errs = append(errs, fmt.Errorf("cpu_count %d: want 0 to %d", inv.CPUCount, MaxCPUs))
	}
	if inv.MemoryMB < 0 || inv.MemoryMB > MaxMemoryMB {
		errs = append(errs, fmt.Errorf("memory_mb %d: want 0 to %d", inv.MemoryMB, MaxMemoryMB))
	}
	if len(inv.Disks) > MaxDisks {
		errs = append(errs, fmt.Errorf("disks: %d disks, at most %d", len(inv.Disks), MaxDisks))
	} else {
		for _, d := range inv.Disks {
			if !diskNameRE.MatchString(d.Name) {
				errs = append(errs, fmt.Errorf("disks: name %q: want a kernel device name like sda or nvme0n1", clip(d.Name)))
			}
			if d.SizeBytes < 0 || d.SizeBytes > MaxDiskBytes {
				errs = append(errs, fmt.Errorf("disks: %s: size_bytes %d is out of range", clip(d.Name), d.SizeBytes))
			}
			errs = appendText(errs, "disks: model", d.Model)
			errs = appendText(errs, "disks: serial", d.Serial)
		}
	}
	errs = appendText(errs, "dmi.vendor", inv.DMI.Vendor)
	errs = appendText(errs, "dmi.product", inv.DMI.Product)
	errs = appendText(errs, "dmi.serial", inv.DMI.Serial)
	errs = appendText(errs, "dmi.uuid", inv.DMI.UUID)
	if inv.BMCAddress != "" {
		if _, err := netip.ParseAddr(inv.BMCAddress); err != nil {
			errs = append(errs, fmt.Errorf("bmc_address %q is not an IP address", clip(inv.BMCAddress)))
		}
	}
	if len(inv.Hostname) > 253 {
		errs = append(errs, errors.New("hostname is longer than 253 characters"))
	}
	return errors.Join(errs...)
}

// appendText checks a free-text field: bounded, valid UTF-8, printable.
func appendText(errs []error, field, s string) []error {
	switch {
	case len(s) > MaxTextLen:
		return append(errs, fmt.Errorf("%s is longer than %d bytes", field, MaxTextLen))
	case !utf8.ValidString(s):
		return append(errs, fmt.Errorf("%s is not valid UTF-8", field))
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return append(errs, fmt.Errorf("%s %q contains control characters", field, clip(s)))
	}
	return errs
}

// clip shortens what an error message quotes from the client.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Console lines. Prefix starts every line the enlist program prints; the
// Marker* strings are the fixed parts of the final lines (see the package
// documentation for the complete lines).
const (
	Prefix             = "rackd-enlist: "
	MarkerEnlisted     = Prefix + "enlisted as "    // + "<id>, powering off" | "<id>, rebooting"
	MarkerKnown        = Prefix + "known machine (" // + "<STATE>), rebooting" | "<STATE>), powering off"
	MarkerAlreadyKnown = Prefix + "already known, " // + "rebooting" | "powering off"
	MarkerFailed       = Prefix + "failed: "        // + reason
	SuffixPowerOff     = "powering off"
	SuffixReboot       = "rebooting"
)

// Doing says what an action does, as the final console lines spell it.
func (a Action) Doing() string {
	if a == ActionReboot {
		return SuffixReboot
	}
	return SuffixPowerOff
}
