// Package inventory reads what a machine is made of from the kernel's view
// of it: /sys/class/net (MACs), /sys/devices/system/cpu and /proc/cpuinfo
// (CPUs), /sys/devices/system/memory and /proc/meminfo (memory), /sys/block
// (disks) and /sys/class/dmi/id (vendor, product, serial, system UUID).
//
// Every reader is a pure function over an fs.FS rooted at "/" (paths like
// "sys/class/net"), so tests hand in fixture trees (testdata/) and the
// program hands in os.DirFS("/"). Nothing here needs root except the DMI
// serial and UUID, which the kernel shows to root only.
package inventory

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	"rackd/enlist"
)

// NIC is a physical network interface.
type NIC struct {
	Name string
	MAC  string // lower-case colon form
}

// Collect reads the whole inventory. Only the MACs are essential (rackd
// identifies machines by them); any other part that cannot be read is left
// empty and reported in warnings, so that a machine with an odd kernel still
// enlists.
func Collect(fsys fs.FS, arch string) (inv enlist.Inventory, warnings []error, err error) {
	nics, err := NICs(fsys)
	if err != nil {
		return inv, nil, err
	}
	return CollectNICs(fsys, arch, nics)
}

// CollectNICs is Collect with the network interfaces already chosen (see
// NamedNICs).
func CollectNICs(fsys fs.FS, arch string, nics []NIC) (inv enlist.Inventory, warnings []error, err error) {
	if len(nics) == 0 {
		return inv, nil, errors.New("no physical network interface found in /sys/class/net (are the NIC drivers loaded?)")
	}
	for _, n := range nics {
		inv.MACs = append(inv.MACs, n.MAC)
	}
	inv.Arch = arch
	warn := func(what string, err error) {
		warnings = append(warnings, fmt.Errorf("%s: %w", what, err))
	}
	if inv.CPUCount, err = CPUs(fsys); err != nil {
		warn("cpus", err)
	}
	if inv.MemoryMB, err = MemoryMB(fsys); err != nil {
		warn("memory", err)
	}
	if inv.Disks, err = Disks(fsys); err != nil {
		warn("disks", err)
	}
	inv.DMI = ReadDMI(fsys)
	return inv, warnings, nil
}

// readTrim reads a small sysfs attribute and trims it.
func readTrim(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", err
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	return strings.TrimSpace(string(b)), nil
}

func exists(fsys fs.FS, name string) bool {
	_, err := fs.Stat(fsys, name)
	return err == nil
}

// NICs lists the physical Ethernet interfaces, sorted by name. An interface
// is physical when the kernel links it to a device (sys/class/net/X/device);
// bridges, bonds, veths, tunnels and lo have none. Interfaces of another
// link type (type != 1, ARPHRD_ETHER), without a usable MAC, or with a MAC
// the kernel made up (addr_assign_type 1) are left out.
func NICs(fsys fs.FS) ([]NIC, error) {
	ents, err := fs.ReadDir(fsys, "sys/class/net")
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []NIC
	for _, e := range ents {
		dir := path.Join("sys/class/net", e.Name())
		if e.Name() == "lo" || !exists(fsys, path.Join(dir, "device")) {
			continue
		}
		if t, err := readTrim(fsys, path.Join(dir, "type")); err == nil && t != "1" {
			continue
		}
		if t, err := readTrim(fsys, path.Join(dir, "addr_assign_type")); err == nil && t == "1" {
			continue
		}
		addr, err := readTrim(fsys, path.Join(dir, "address"))
		if err != nil {
			continue
		}
		mac, ok := ParseMAC(addr)
		if !ok {
			continue
		}
		out = append(out, NIC{Name: e.Name(), MAC: mac})
	}
	slices.SortFunc(out, func(a, b NIC) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// NamedNICs returns the interfaces with these names that have a usable
// MAC, physical or not, in the order given: for machines whose NIC the
// kernel shows as virtual, and for tests in network namespaces (veth).
func NamedNICs(fsys fs.FS, names []string) ([]NIC, error) {
	var out []NIC
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
			return nil, fmt.Errorf("interface name %q is not one", name)
		}
		addr, err := readTrim(fsys, path.Join("sys/class/net", name, "address"))
		if err != nil {
			continue // not there (yet)
		}
		if mac, ok := ParseMAC(addr); ok {
			out = append(out, NIC{Name: name, MAC: mac})
		}
	}
	return out, nil
}

// ParseMAC returns a 6-octet MAC in lower-case colon form; all-zero,
// broadcast and multicast addresses are not a machine's.
func ParseMAC(s string) (string, bool) {
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 || hw[0]&1 == 1 || bytes.Equal(hw, make([]byte, 6)) {
		return "", false
	}
	return hw.String(), true
}

// CPUs counts the online logical CPUs: sys/devices/system/cpu/online, or
// the "processor" lines of proc/cpuinfo when that is missing.
func CPUs(fsys fs.FS) (int, error) {
	if s, err := readTrim(fsys, "sys/devices/system/cpu/online"); err == nil {
		if n, err := ParseCPUList(s); err == nil && n > 0 {
			return n, nil
		}
	}
	b, err := fs.ReadFile(fsys, "proc/cpuinfo")
	if err != nil {
		return 0, fmt.Errorf("neither sys/devices/system/cpu/online nor proc/cpuinfo is readable: %w", err)
	}
	n := CountCPUInfo(b)
	if n == 0 {
		return 0, errors.New("proc/cpuinfo lists no processor")
	}
	return n, nil
}

// ParseCPUList counts the CPUs of a kernel CPU list such as "0-3,8,10-11".
func ParseCPUList(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("cpu list %q: bad number %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		if b-a >= enlist.MaxCPUs || n+b-a+1 > enlist.MaxCPUs {
			return 0, fmt.Errorf("cpu list %q: more than %d CPUs", s, enlist.MaxCPUs)
		}
		n += b - a + 1
	}
	return n, nil
}

// CountCPUInfo counts the "processor : N" stanzas of /proc/cpuinfo.
func CountCPUInfo(b []byte) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		k, _, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "processor" {
			n++
		}
	}
	return n
}

// MemoryMB is the installed memory in MiB. The memory blocks of
// sys/devices/system/memory add up to what the machine has (a 1 GiB VM
// says 1024), where MemTotal of proc/meminfo is that less what the
// firmware and kernel keep; MemTotal is the fallback when the kernel has no
// memory block devices.
func MemoryMB(fsys fs.FS) (int, error) {
	if mb, err := memoryBlocksMB(fsys); err == nil && mb > 0 {
		return mb, nil
	}
	b, err := fs.ReadFile(fsys, "proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read proc/meminfo: %w", err)
	}
	return ParseMeminfo(b)
}

func memoryBlocksMB(fsys fs.FS) (int, error) {
	s, err := readTrim(fsys, "sys/devices/system/memory/block_size_bytes")
	if err != nil {
		return 0, err
	}
	size, err := strconv.ParseUint(s, 16, 64) // the kernel prints it in hex, without 0x
	if err != nil || size == 0 || size > 1<<40 {
		return 0, fmt.Errorf("block_size_bytes %q", s)
	}
	ents, err := fs.ReadDir(fsys, "sys/devices/system/memory")
	if err != nil {
		return 0, err
	}
	var blocks uint64
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "memory") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "memory")); err != nil {
			continue
		}
		if st, err := readTrim(fsys, path.Join("sys/devices/system/memory", e.Name(), "state")); err == nil && st != "online" {
			continue
		}
		blocks++
	}
	mb := blocks * (size >> 20)
	if mb > enlist.MaxMemoryMB {
		return 0, fmt.Errorf("%d memory blocks of %d bytes is implausible", blocks, size)
	}
	return int(mb), nil
}

// ParseMeminfo returns MemTotal of /proc/meminfo in MiB.
func ParseMeminfo(b []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("meminfo: MemTotal %q: want \"<n> kB\"", strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb/1024 > enlist.MaxMemoryMB {
			return 0, fmt.Errorf("meminfo: MemTotal %q is not a plausible number", f[0])
		}
		return int(kb / 1024), nil
	}
	return 0, errors.New("meminfo: no MemTotal line")
}

// skipDisk names block devices that are not disks of the machine: loop
// devices, RAM disks, compressed swap, device-mapper and md volumes (made of
// disks listed anyway), and floppies.
func skipDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "zram", "dm-", "md", "fd", "nbd"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Disks lists the block devices with their sizes (sys/block/X/size counts
// 512-byte sectors whatever the disk's own sector size), sorted by name.
// Empty devices (a CD drive without a disc) are left out.
func Disks(fsys fs.FS) ([]enlist.Disk, error) {
	ents, err := fs.ReadDir(fsys, "sys/block")
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	out := []enlist.Disk{}
	for _, e := range ents {
		name := e.Name()
		if skipDisk(name) || len(out) >= enlist.MaxDisks {
			continue
		}
		dir := path.Join("sys/block", name)
		s, err := readTrim(fsys, path.Join(dir, "size"))
		if err != nil {
			continue
		}
		sectors, err := strconv.ParseInt(s, 10, 64)
		if err != nil || sectors <= 0 || sectors > enlist.MaxDiskBytes/512 {
			continue
		}
		d := enlist.Disk{Name: name, SizeBytes: sectors * 512}
		d.Model, _ = readTrim(fsys, path.Join(dir, "device/model"))
		d.Serial, _ = readTrim(fsys, path.Join(dir, "device/serial"))
		d.Model, d.Serial = printable(d.Model), printable(d.Serial)
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b enlist.Disk) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ReadDMI reads the system identity from sys/class/dmi/id. Missing
// attributes (no SMBIOS, or not root) stay empty.
func ReadDMI(fsys fs.FS) enlist.DMI {
	get := func(name string) string {
		s, _ := readTrim(fsys, path.Join("sys/class/dmi/id", name))
		return printable(s)
	}
	return enlist.DMI{
		Vendor:  get("sys_vendor"),
		Product: get("product_name"),
		Serial:  get("product_serial"),
		UUID:    strings.ToLower(get("product_uuid")),
	}
}

// printable keeps what rackd accepts of a firmware string: printable
// characters, at most enlist.MaxTextLen bytes.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if len(s) > enlist.MaxTextLen {
		// Cutting may split a rune; ToValidUTF8 drops its leftover bytes.
		s = strings.ToValidUTF8(s[:enlist.MaxTextLen], "")
	}
	return strings.TrimSpace(s)
}

// ParseCmdline returns the value of key=value on a kernel command line, and
// whether the key is there. The last occurrence wins, as in the kernel.
// Double-quoted values (key="a b") are unquoted.
func ParseCmdline(cmdline, key string) (string, bool) {
	val, found := "", false
	for _, w := range splitCmdline(cmdline) {
		k, v, _ := strings.Cut(w, "=")
		if k == key {
			val, found = strings.Trim(v, `"`), true
		}
	}
	return val, found
}

// splitCmdline splits on white space outside double quotes, as the kernel
// does.
func splitCmdline(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// ParseBMCAddress reads the answer to IPMI "Get LAN Configuration
// Parameters", parameter 3 (IP address): completion code, parameter
// revision, then four octets. It returns "" for an unset address (0.0.0.0).
func ParseBMCAddress(resp []byte) (string, error) {
	if len(resp) != 6 {
		return "", fmt.Errorf("ipmi: LAN IP address answer has %d bytes, want 6", len(resp))
	}
	if resp[0] != 0 {
		return "", fmt.Errorf("ipmi: LAN IP address refused with completion code %#02x", resp[0])
	}
	ip := net.IPv4(resp[2], resp[3], resp[4], resp[5])
	if ip.IsUnspecified() {
		return "", nil
	}
	return ip.String(), nil
}

// BootMAC reads the boot interface from a BOOTIF=01-aa-bb-cc-dd-ee-ff
// command-line word (pxelinux IPAPPEND 2, or an iPXE script passing
// ${netX/mac}); "" when there is none.
func BootMAC(cmdline string) string {
	v, ok := ParseCmdline(cmdline, "BOOTIF")
	if !ok {
		return ""
	}
	v = strings.ReplaceAll(v, "-", ":")
	if hwtype, rest, ok := strings.Cut(v, ":"); ok && len(v) == 20 && hwtype == "01" {
		v = rest
	}
	mac, _ := ParseMAC(v)
	return mac
}
