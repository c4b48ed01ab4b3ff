package maasapi

import (
	"cmp"
	"hash/fnv"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"rackd/store"
)

// MAAS's network model, as rackd has it. rackd manages subnets and nothing
// around them: no fabrics, VLANs or spaces of its own. It answers what MAAS
// gives an installation that has none: one fabric, "fabric-0" (id 0), with
// its untagged VLAN (id 5001, vid 0) holding every subnet, and no spaces, so
// that every subnet's space is "undefined" and spaces/ lists MAAS's
// "undefined" placeholder (id -1) with all of them, as MAAS does for Juju.
//
// A subnet's id is a number made from its CIDR (stableID), the same on
// every rackd of a cluster and across restarts; so are the ids of the
// other things rackd keeps by name (IP ranges, domains, zones, DNS
// records, boot resources).

const (
	fabricID      = 0
	fabricName    = "fabric-0"
	vlanID        = 5001
	vlanName      = "untagged"
	defaultMTU    = 1500
	undefinedName = "undefined"
	undefinedID   = -1
)

// stableID is the id MAAS's API shows for something rackd names by key:
// a hash of kind and key, from 2^24 up (below are MAAS's fixed ids: the
// default zone 1, the untagged VLAN 5001...).
func stableID(kind, key string) int {
	h := fnv.New32a()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return 1<<24 + int(h.Sum32()%(1<<31-1<<24))
}

// uri is a resource_uri: Prefix and the path's parts, each escaped, and
// MAAS's trailing slash.
func uri(parts ...string) string {
	var b strings.Builder
	b.WriteString(Prefix)
	for _, p := range parts {
		b.WriteString(url.PathEscape(p))
		b.WriteByte('/')
	}
	return b.String()
}

// vlanJSON is a VLAN as MAAS shows one.
type vlanJSON struct {
	ID            int     `json:"id"`
	Name          string  `json:"name"`
	VID           int     `json:"vid"`
	Fabric        string  `json:"fabric"`
	FabricID      int     `json:"fabric_id"`
	MTU           int     `json:"mtu"`
	PrimaryRack   *string `json:"primary_rack"`
	SecondaryRack *string `json:"secondary_rack"`
	DHCPOn        bool    `json:"dhcp_on"`
	ExternalDHCP  *string `json:"external_dhcp"`
	RelayVLAN     *int    `json:"relay_vlan"`
	Space         string  `json:"space"`
	ResourceURI   string  `json:"resource_uri"`
}

// theVLAN is the one VLAN: rackd answers DHCP on its subnets.
func theVLAN() vlanJSON {
	return vlanJSON{ID: vlanID, Name: vlanName, VID: 0, Fabric: fabricName, FabricID: fabricID, MTU: defaultMTU,
		DHCPOn: true, Space: undefinedName, ResourceURI: uri("vlans", strconv.Itoa(vlanID))}
}

type fabricJSON struct {
	ID          int        `json:"id"`
	Name        string     `json:"name"`
	ClassType   *string    `json:"class_type"`
	VLANs       []vlanJSON `json:"vlans"`
	ResourceURI string     `json:"resource_uri"`
}

func theFabric() fabricJSON {
	return fabricJSON{ID: fabricID, Name: fabricName, VLANs: []vlanJSON{theVLAN()}, ResourceURI: uri("fabrics", strconv.Itoa(fabricID))}
}

// subnetJSON is a subnet as MAAS shows one. rackd manages every subnet it
// knows (DHCP, addresses, DNS): managed, allow_dns; it has no proxy and no
// active discovery (it probes an address before handing it out, no more).
type subnetJSON struct {
	ID                        int      `json:"id"`
	Name                      string   `json:"name"`
	Description               string   `json:"description"`
	VLAN                      vlanJSON `json:"vlan"`
	Space                     string   `json:"space"`
	CIDR                      string   `json:"cidr"`
	GatewayIP                 *string  `json:"gateway_ip"`
	DNSServers                []string `json:"dns_servers"`
	RDNSMode                  int      `json:"rdns_mode"`
	ActiveDiscovery           bool     `json:"active_discovery"`
	AllowDNS                  bool     `json:"allow_dns"`
	AllowProxy                bool     `json:"allow_proxy"`
	Managed                   bool     `json:"managed"`
	DisabledBootArchitectures []string `json:"disabled_boot_architectures"`
	ResourceURI               string   `json:"resource_uri"`
}

// rdnsEnabled is MAAS's rdns_mode 1: rackd answers the subnet's reverse
// zone.
const rdnsEnabled = 1

func subnetID(sn store.Subnet) int { return stableID("subnet", sn.CIDR.Masked().String()) }

func subnetView(sn store.Subnet) subnetJSON {
	cidr := sn.CIDR.Masked().String()
	out := subnetJSON{ID: subnetID(sn), Name: cidr, VLAN: theVLAN(), Space: undefinedName, CIDR: cidr,
		DNSServers: []string{}, RDNSMode: rdnsEnabled, AllowDNS: true, Managed: true,
		DisabledBootArchitectures: []string{}, ResourceURI: uri("subnets", strconv.Itoa(subnetID(sn)))}
	if sn.Gateway.IsValid() {
		g := sn.Gateway.String()
		out.GatewayIP = &g
	}
	for _, d := range sn.DNSServers {
		out.DNSServers = append(out.DNSServers, d.String())
	}
	return out
}

type spaceJSON struct {
	ID          int          `json:"id"`
	Name        string       `json:"name"`
	Description string       `json:"description"`
	VLANs       []vlanJSON   `json:"vlans"`
	Subnets     []subnetJSON `json:"subnets"`
	ResourceURI string       `json:"resource_uri"`
}

// undefinedSpace is MAAS's placeholder for the subnets of no space: all of
// rackd's.
func undefinedSpace(subnets []store.Subnet) spaceJSON {
	out := spaceJSON{ID: undefinedID, Name: undefinedName,
		Description: "Backward compatibility object to ensure objects not associated with a space can be found.",
		VLANs:       []vlanJSON{theVLAN()}, Subnets: make([]subnetJSON, 0, len(subnets)), ResourceURI: uri("spaces", strconv.Itoa(undefinedID))}
	for _, sn := range subnets {
		out.Subnets = append(out.Subnets, subnetView(sn))
	}
	return out
}

// subnets is the store's subnets by CIDR.
func (s *Server) subnets() ([]store.Subnet, error) {
	subnets, err := s.store.Subnets()
	if err != nil {
		return nil, err
	}
	subnets = slices.Clone(subnets)
	slices.SortFunc(subnets, func(a, b store.Subnet) int {
		return cmp.Or(a.CIDR.Addr().Compare(b.CIDR.Addr()), cmp.Compare(a.CIDR.Bits(), b.CIDR.Bits()))
	})
	return subnets, nil
}

// subnetSpec is what a MAAS subnet specifier asks for: a subnet's id, or
// its CIDR (which is its name).
type subnetSpec struct {
	id    int
	hasID bool
	cidr  netip.Prefix
}

// parseSubnetSpec reads a subnet specifier: an id, a CIDR, or "id:",
// "cidr:" or "name:" and one of those.
func parseSubnetSpec(spec string) (subnetSpec, bool) {
	spec = strings.TrimSpace(spec)
	kind, val := "", spec
	for _, k := range []string{"id:", "cidr:", "name:"} {
		if v, ok := strings.CutPrefix(spec, k); ok {
			kind, val = k, v
		}
	}
	if kind != "cidr:" && kind != "name:" {
		if n, err := strconv.Atoi(val); err == nil {
			return subnetSpec{id: n, hasID: true}, true
		}
	}
	if kind != "id:" {
		if p, err := netip.ParsePrefix(val); err == nil {
			return subnetSpec{cidr: p.Masked()}, true
		}
	}
	return subnetSpec{}, false
}

// findSubnet is the subnet a MAAS subnet specifier names.
func (s *Server) findSubnet(spec string) (store.Subnet, error) {
	subnets, err := s.subnets()
	if err != nil {
		return store.Subnet{}, err
	}
	if sp, ok := parseSubnetSpec(spec); ok {
		for _, sn := range subnets {
			if sp.hasID && subnetID(sn) == sp.id || !sp.hasID && sn.CIDR.Masked() == sp.cidr {
				return sn, nil
			}
		}
	}
	return store.Subnet{}, errorf(http.StatusNotFound, "No Subnet matches the given query: %q", truncate(spec, 64))
}

func fabricsRead(s *Server, c *call) (any, error) { return []fabricJSON{theFabric()}, nil }

// isFabric reports whether a fabric specifier names the one fabric.
func isFabric(spec string) bool {
	spec = strings.TrimPrefix(strings.TrimPrefix(spec, "id:"), "name:")
	return spec == strconv.Itoa(fabricID) || spec == fabricName
}

func fabricRead(s *Server, c *call) (any, error) {
	if !isFabric(c.path("id")) {
		return nil, errorf(http.StatusNotFound, "No Fabric matches the given query: rackd has one fabric, %s (id %d)", fabricName, fabricID)
	}
	return theFabric(), nil
}

func vlansRead(s *Server, c *call) (any, error) {
	if !isFabric(c.path("fabric_id")) {
		return nil, errorf(http.StatusNotFound, "No Fabric matches the given query: rackd has one fabric, %s (id %d)", fabricName, fabricID)
	}
	return []vlanJSON{theVLAN()}, nil
}

func vlanRead(s *Server, c *call) (any, error) {
	if !isFabric(c.path("fabric_id")) || strings.TrimPrefix(c.path("vid"), "vid:") != "0" {
		return nil, errorf(http.StatusNotFound, "No VLAN matches the given query: rackd has one VLAN, untagged (vid 0) on %s", fabricName)
	}
	return theVLAN(), nil
}

func vlanByIDRead(s *Server, c *call) (any, error) {
	if strings.TrimPrefix(c.path("vlan_id"), "id:") != strconv.Itoa(vlanID) {
		return nil, errorf(http.StatusNotFound, "No VLAN matches the given query: rackd has one VLAN, id %d", vlanID)
	}
	return theVLAN(), nil
}

func spacesRead(s *Server, c *call) (any, error) {
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	return []spaceJSON{undefinedSpace(subnets)}, nil
}

func spaceRead(s *Server, c *call) (any, error) {
	if id := c.path("id"); id != strconv.Itoa(undefinedID) && id != undefinedName {
		return nil, errorf(http.StatusNotFound, "No Space matches the given query: rackd has no spaces (every subnet is in %q, id %d)", undefinedName, undefinedID)
	}
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	return undefinedSpace(subnets), nil
}

func subnetsRead(s *Server, c *call) (any, error) {
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	out := make([]subnetJSON, len(subnets))
	for i, sn := range subnets {
		out[i] = subnetView(sn)
	}
	return out, nil
}

func subnetRead(s *Server, c *call) (any, error) {
	sn, err := s.findSubnet(c.path("id"))
	if err != nil {
		return nil, err
	}
	return subnetView(sn), nil
}

// ipRangeJSON is one of a subnet's ranges as MAAS shows an IP range: its
// dynamic ranges (DHCP's pool) and reserved ranges (never handed out).
type ipRangeJSON struct {
	ID          int        `json:"id"`
	Type        string     `json:"type"`
	StartIP     string     `json:"start_ip"`
	EndIP       string     `json:"end_ip"`
	Comment     string     `json:"comment"`
	User        *userJSON  `json:"user"`
	Subnet      subnetJSON `json:"subnet"`
	ResourceURI string     `json:"resource_uri"`
}

// userJSON is a user as MAAS shows one nested in another object.
type userJSON struct {
	Username    string `json:"username"`
	Email       string `json:"email"`
	IsLocal     bool   `json:"is_local"`
	IsSuperuser bool   `json:"is_superuser"`
	ResourceURI string `json:"resource_uri"`
}

func nestedUser(name string) *userJSON {
	if name == "" {
		return nil
	}
	return &userJSON{Username: name, IsLocal: true, ResourceURI: uri("users", name)}
}

func ipRanges(subnets []store.Subnet) []ipRangeJSON {
	out := []ipRangeJSON{}
	for _, sn := range subnets {
		view := subnetView(sn)
		add := func(typ string, r store.Range) {
			id := stableID("iprange", r.Start.String())
			out = append(out, ipRangeJSON{ID: id, Type: typ, StartIP: r.Start.String(), EndIP: r.End.String(),
				Subnet: view, ResourceURI: uri("ipranges", strconv.Itoa(id))})
		}
		for _, r := range sn.DynamicRanges {
			add("dynamic", r)
		}
		for _, r := range sn.ReservedRanges {
			add("reserved", r)
		}
	}
	return out
}

func ipRangesRead(s *Server, c *call) (any, error) {
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	return ipRanges(subnets), nil
}

func ipRangeRead(s *Server, c *call) (any, error) {
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	want := c.path("id")
	for _, r := range ipRanges(subnets) {
		if strconv.Itoa(r.ID) == want {
			return r, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "No IPRange matches the given query: %q", truncate(want, 32))
}

// staticRoutesRead is MAAS's static-routes/: rackd has none (Juju asks).
func staticRoutesRead(s *Server, c *call) (any, error) { return []any{}, nil }

// ifaceName is the name MAAS's API gives a machine's interface: ethN, N
// the MAC's place in the machine's MACs (the first is its boot interface).
func ifaceName(m store.Machine, mac string) string {
	for i, x := range m.MACs {
		if strings.EqualFold(x, mac) {
			return "eth" + strconv.Itoa(i)
		}
	}
	return ""
}
