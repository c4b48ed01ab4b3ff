package nocloud

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"
)

// MaxUserData is the largest user-data Render accepts, in bytes: the limit
// the deploy API enforces, so the seed (and the partition holding it) stays
// small.
const MaxUserData = 1 << 20

// Interface is the static configuration of one network interface, matched
// by its MAC address. An interface with no addresses is configured by DHCP.
type Interface struct {
	MAC       string
	Addresses []netip.Prefix // host addresses with their subnet's prefix length
	Gateway   netip.Addr     // the default route's next hop, or the zero Addr
	DNS       []netip.Addr
	Search    []string
}

// Identity is what a deployed OS learns about itself from its seed.
type Identity struct {
	InstanceID string   // new for every deployment, so cloud-init reruns per-instance modules
	Hostname   string   // the fully qualified name
	SSHKeys    []string // authorized_keys lines; a key given twice is listed once
	UserData   []byte   // the user's, passed through unchanged; empty gets an empty cloud-config
	Interfaces []Interface
	// Full URLs, each holding the deployment's credential in its path:
	// phone_home can send no header of its own.
	PhoneHomeURL, EventsURL string
}

// Seed holds the four files of a NoCloud seed. NetworkConfig is nil when the
// identity has no interfaces: cloud-init then falls back to DHCP on its own.
type Seed struct {
	MetaData, UserData, VendorData, NetworkConfig []byte
}

// emptyUserData is the user-data of a deployment without any: the smallest
// cloud-config that cloud-init's schema check accepts (a lone
// "#cloud-config" line is refused as "not a YAML dict", and cloud-init logs
// that as a schema warning at boot).
const emptyUserData = "#cloud-config\n{}\n"

// Render validates id and renders its seed. The error names the first field
// that is wrong and why.
func Render(id Identity) (Seed, error) {
	if err := checkInstanceID(id.InstanceID); err != nil {
		return Seed{}, err
	}
	if err := checkFQDN(id.Hostname); err != nil {
		return Seed{}, fmt.Errorf("hostname %q: %w", id.Hostname, err)
	}
	keys, err := checkKeys(id.SSHKeys)
	if err != nil {
		return Seed{}, err
	}
	if len(id.UserData) > MaxUserData {
		return Seed{}, fmt.Errorf("user-data is %d bytes: at most %d are allowed", len(id.UserData), MaxUserData)
	}
	for _, u := range []struct{ name, url string }{{"phone-home URL", id.PhoneHomeURL}, {"events URL", id.EventsURL}} {
		if err := checkURL(u.url); err != nil {
			return Seed{}, fmt.Errorf("%s: %w", u.name, err)
		}
	}
	ifaces, err := checkInterfaces(id.Interfaces)
	if err != nil {
		return Seed{}, err
	}

	s := Seed{
		MetaData:   metaData(id.InstanceID, id.Hostname, keys),
		UserData:   bytes.Clone(id.UserData),
		VendorData: vendorData(id.PhoneHomeURL, id.EventsURL),
	}
	if len(s.UserData) == 0 {
		s.UserData = []byte(emptyUserData)
	}
	if len(ifaces) > 0 {
		s.NetworkConfig = networkConfig(ifaces)
	}
	return s, nil
}

func metaData(instanceID, hostname string, keys []string) []byte {
	var w yamlWriter
	w.line(0, "instance-id: %s", quote(instanceID))
	w.line(0, "local-hostname: %s", quote(hostname))
	w.list(0, "public-keys", keys)
	return w.bytes()
}

// vendorData is rackd's own cloud-config. Every key is one a user may
// override in user-data (cloud-init merges user-data over vendor-data):
//   - phone_home (cc_phone_home, in the final stage): the report that the
//     OS booted and cloud-init finished, which makes the machine DEPLOYED;
//   - reporting: cloud-init's webhook reporter posts every stage's start
//     and finish, so errors reach the machine's events; a timeout keeps a
//     hung connection from holding cloud-init at the end of a stage;
//   - manage_etc_hosts: localhost maps the FQDN in /etc/hosts (one line, the
//     rest of the file is kept), so `hostname -f` answers it without DNS.
func vendorData(phoneHome, events string) []byte {
	var w yamlWriter
	w.line(0, "#cloud-config")
	w.line(0, "# rackd's vendor-data. cloud-init merges user-data over it: your value of a key wins.")
	w.line(0, "manage_etc_hosts: localhost")
	w.line(0, "phone_home:")
	w.line(1, "url: %s", quote(phoneHome))
	w.line(1, "post: [instance_id, hostname, fqdn]")
	w.line(1, "tries: 10")
	w.line(0, "reporting:")
	w.line(1, "rackd:")
	w.line(2, "type: webhook")
	w.line(2, "endpoint: %s", quote(events))
	w.line(2, "timeout: 10")
	w.line(2, "retries: 3")
	return w.bytes()
}

// iface is a validated Interface in the form the renderer writes.
type iface struct {
	id, mac   string
	addresses []string
	gateway   netip.Addr
	dns       []string
	search    []string
}

// networkConfig renders network config version 2. Each interface is keyed
// by an id made from its MAC ("nic" and 12 hex digits: 15 characters, a
// valid interface name should a renderer fall back to it) and matched by
// that MAC; cloud-init names it after the kernel's interface with that MAC
// (no set-name: the OS keeps its own names). gateway4/gateway6 rather than a
// default route: cloud-init 22.4 renders them as ifupdown's own "gateway"
// option, while routes become "route add" hooks that need net-tools and
// ignore their failure.
func networkConfig(ifaces []iface) []byte {
	var w yamlWriter
	w.line(0, "version: 2")
	w.line(0, "ethernets:")
	for _, ifc := range ifaces {
		w.line(1, "%s:", ifc.id)
		w.line(2, "match:")
		w.line(3, "macaddress: %s", quote(ifc.mac))
		if len(ifc.addresses) == 0 {
			w.line(2, "dhcp4: true")
		} else {
			w.line(2, "dhcp4: false")
			w.line(2, "dhcp6: false")
			w.list(2, "addresses", ifc.addresses)
		}
		if ifc.gateway.IsValid() {
			key := "gateway4"
			if ifc.gateway.Is6() {
				key = "gateway6"
			}
			w.line(2, "%s: %s", key, quote(ifc.gateway.String()))
		}
		if len(ifc.dns) > 0 || len(ifc.search) > 0 {
			w.line(2, "nameservers:")
			w.list(3, "addresses", ifc.dns)
			w.list(3, "search", ifc.search)
		}
	}
	return w.bytes()
}

// checkInstanceID: cloud-init makes the instance-id a directory name under
// /var/lib/cloud/instances, so it is kept to a portable file name.
func checkInstanceID(s string) error {
	if s == "" {
		return errors.New("instance-id is empty")
	}
	if len(s) > 128 {
		return fmt.Errorf("instance-id is %d characters long: at most 128 are allowed", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return fmt.Errorf("instance-id %q: character %d (%q) is not allowed: use letters, digits and - _ . (not first)", s, i+1, c)
		}
	}
	return nil
}

// checkFQDN accepts a fully qualified host name: at least two labels of
// letters, digits and hyphens (RFC 1123), no trailing dot.
func checkFQDN(s string) error {
	if !strings.Contains(s, ".") {
		return errors.New("not a fully qualified name (no domain)")
	}
	if err := checkDomain(s); err != nil {
		return err
	}
	last := s[strings.LastIndexByte(s, '.')+1:]
	if strings.Trim(last, "0123456789") == "" {
		return errors.New("the top-level label is all digits")
	}
	return nil
}

// checkDomain accepts a domain name of one or more labels.
func checkDomain(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > 253 {
		return fmt.Errorf("%d characters long: at most 253 are allowed", len(s))
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return errors.New("has an empty label")
		}
		if len(label) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("label %q has %q: only letters, digits and hyphens are allowed", label, c)
			}
		}
	}
	return nil
}

// checkKeys accepts authorized_keys lines (options allowed), one key per
// line, and drops repeats of a key already in the list (the owner's keys
// and the deploy's extra ones may overlap).
func checkKeys(lines []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for i, line := range lines {
		if strings.ContainsAny(line, "\r\n") {
			return nil, fmt.Errorf("SSH key %d: holds a line break: one authorized_keys line per key", i+1)
		}
		if !utf8.ValidString(line) {
			return nil, fmt.Errorf("SSH key %d: not valid UTF-8", i+1)
		}
		for _, r := range line {
			if r < 0x20 && r != '\t' || r == 0x7f {
				return nil, fmt.Errorf("SSH key %d: holds control character %q", i+1, r)
			}
		}
		pub, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("SSH key %d: not an authorized_keys line: %w", i+1, err)
		}
		if len(bytes.TrimSpace(rest)) > 0 {
			return nil, fmt.Errorf("SSH key %d: more than one key", i+1)
		}
		blob := string(pub.Marshal())
		if seen[blob] {
			continue
		}
		seen[blob] = true
		out = append(out, strings.TrimSpace(line))
	}
	return out, nil
}

// checkURL accepts an absolute http or https URL of printable ASCII.
func checkURL(s string) error {
	if s == "" {
		return errors.New("missing")
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return fmt.Errorf("%q: character %d is a space, a control character or not ASCII", s, i+1)
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q: no host", s)
	}
	if u.User != nil {
		return fmt.Errorf("%q: user information is not allowed", s)
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return fmt.Errorf("%q: a fragment is not allowed", s)
	}
	return nil
}

func checkInterfaces(in []Interface) ([]iface, error) {
	var out []iface
	macs := map[string]int{}
	addrs := map[netip.Addr]int{}
	gateways := map[bool]int{} // Is4 -> interface number holding that family's default route
	for n, ifc := range in {
		num := n + 1
		hw, err := net.ParseMAC(ifc.MAC)
		if err != nil {
			return nil, fmt.Errorf("interface %d: MAC %q: %w", num, ifc.MAC, err)
		}
		if len(hw) != 6 {
			return nil, fmt.Errorf("interface %d: MAC %q is not a 48-bit Ethernet address", num, ifc.MAC)
		}
		if hw[0]&1 != 0 {
			return nil, fmt.Errorf("interface %d: MAC %q is a multicast address", num, ifc.MAC)
		}
		mac := hw.String()
		if prev, dup := macs[mac]; dup {
			return nil, fmt.Errorf("interface %d: MAC %s is also interface %d's", num, mac, prev)
		}
		macs[mac] = num
		o := iface{id: "nic" + strings.ReplaceAll(mac, ":", ""), mac: mac}

		for _, p := range ifc.Addresses {
			if err := checkHostPrefix(p); err != nil {
				return nil, fmt.Errorf("interface %d: address %s: %w", num, p, err)
			}
			if prev, dup := addrs[p.Addr()]; dup {
				return nil, fmt.Errorf("interface %d: address %s is also on interface %d", num, p.Addr(), prev)
			}
			addrs[p.Addr()] = num
			o.addresses = append(o.addresses, p.String())
		}

		if g := ifc.Gateway; g.IsValid() {
			if err := checkGateway(g, ifc.Addresses); err != nil {
				return nil, fmt.Errorf("interface %d: gateway %s: %w", num, g, err)
			}
			if prev, dup := gateways[g.Is4()]; dup {
				return nil, fmt.Errorf("interface %d: gateway %s: interface %d already has the default %s route (one per family: two would fight over it)", num, g, prev, family(g))
			}
			gateways[g.Is4()] = num
			o.gateway = g
		}

		for _, d := range ifc.DNS {
			if !d.IsValid() || d.IsUnspecified() || d.IsMulticast() || d.Zone() != "" || d.Is4In6() {
				return nil, fmt.Errorf("interface %d: DNS server %q is not a usable unicast address", num, d)
			}
			o.dns = append(o.dns, d.String())
		}
		for _, s := range ifc.Search {
			if err := checkDomain(s); err != nil {
				return nil, fmt.Errorf("interface %d: search domain %q: %w", num, s, err)
			}
			o.search = append(o.search, s)
		}
		out = append(out, o)
	}
	return out, nil
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// checkHostPrefix accepts an address a host can hold in its prefix: not the
// prefix's network address (nor, in IPv4, its broadcast address) unless the
// prefix is a point-to-point /31 or a single address.
func checkHostPrefix(p netip.Prefix) error {
	if !p.IsValid() {
		return errors.New("not a valid address/prefix")
	}
	a := p.Addr()
	if a.Is4In6() {
		return errors.New("an IPv4-mapped IPv6 address: give the IPv4 form")
	}
	if a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
		return errors.New("not a unicast host address")
	}
	if p.Bits() == 0 {
		return errors.New("a /0 prefix")
	}
	last := a.BitLen()
	if p.Bits() >= last-1 {
		return nil
	}
	if a == p.Masked().Addr() {
		return fmt.Errorf("the network address of %s", p.Masked())
	}
	if a.Is4() && a == broadcast(p) {
		return fmt.Errorf("the broadcast address of %s", p.Masked())
	}
	return nil
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// checkGateway accepts a next hop inside one of the interface's prefixes of
// the same family (or, in IPv6, a link-local router, on-link by definition).
func checkGateway(g netip.Addr, prefixes []netip.Prefix) error {
	if g.Zone() != "" {
		return errors.New("has a zone: the interface is implied")
	}
	if g.Is4In6() {
		return errors.New("an IPv4-mapped IPv6 address: give the IPv4 form")
	}
	if g.IsUnspecified() || g.IsLoopback() || g.IsMulticast() {
		return errors.New("not a unicast address")
	}
	if len(prefixes) == 0 {
		return errors.New("the interface has no static address (a DHCP interface learns its gateway from DHCP)")
	}
	if g.Is6() && g.IsLinkLocalUnicast() {
		for _, p := range prefixes {
			if p.Addr().Is6() {
				return nil
			}
		}
		return errors.New("an IPv6 gateway on an interface without an IPv6 address")
	}
	for _, p := range prefixes {
		if p.Addr() == g {
			return errors.New("the interface's own address")
		}
	}
	for _, p := range prefixes {
		if p.Contains(g) && checkHostPrefix(netip.PrefixFrom(g, p.Bits())) == nil {
			return nil
		}
	}
	return errors.New("not a host address in any of the interface's subnets")
}
