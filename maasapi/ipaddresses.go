package maasapi

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"rackd/store"
)

// ipaddresses/: a user's reservations, rackd's IPAM reservations (the
// store's Reserve and Unreserve, as POST /api/v1/ips/reservations): an
// address reserved here is never handed out by DHCP nor given to a machine
// until its owner releases it.

// ipAddressJSON is an address as MAAS's ipaddresses/ shows one.
type ipAddressJSON struct {
	AllocType     int        `json:"alloc_type"`
	AllocTypeName string     `json:"alloc_type_name"`
	Created       string     `json:"created"`
	IP            string     `json:"ip"`
	Owner         *userJSON  `json:"owner"`
	InterfaceSet  []any      `json:"interface_set"`
	Subnet        subnetJSON `json:"subnet"`
	ResourceURI   string     `json:"resource_uri"`
}

// isoTime is how MAAS's API writes a time in most objects (Django's JSON
// encoder: ISO 8601 to the millisecond).
func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000")
}

func (s *Server) ipAddressView(a store.Address, subnets []store.Subnet) ipAddressJSON {
	typ, name := allocType(a.Kind)
	out := ipAddressJSON{AllocType: typ, AllocTypeName: name, Created: isoTime(a.Created), IP: a.IP.String(),
		Owner: nestedUser(a.Owner), InterfaceSet: []any{}, ResourceURI: uri("ipaddresses")}
	for _, sn := range subnets {
		if sn.CIDR == a.Subnet {
			out.Subnet = subnetView(sn)
		}
	}
	return out
}

// ipAddressesRead is the caller's reservations; an admin's all=true is every
// address in use, owner=NAME another user's reservations.
func ipAddressesRead(s *Server, c *call) (any, error) {
	all := c.boolean("all", false)
	owner := c.str("owner")
	ipStr := c.str("ip")
	var ip netip.Addr
	if ipStr != "" {
		var err error
		if ip, err = netip.ParseAddr(strings.TrimSpace(ipStr)); err != nil {
			c.fail("ip", "Parameter 'ip' must contain an IP address.")
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if (all || owner != "") && !c.who.Admin {
		return nil, errorf(http.StatusForbidden, "Listing all IP addresses, or another user's, requires admin privileges.")
	}
	if owner == "" {
		owner = c.who.Name
	}
	addrs, err := s.store.Addresses(func(a store.Address) bool {
		if ip.IsValid() && a.IP != ip.Unmap() {
			return false
		}
		return all || a.Kind == store.KindReserved && a.Owner == owner
	})
	if err != nil {
		return nil, err
	}
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	out := make([]ipAddressJSON, len(addrs))
	for i, a := range addrs {
		out[i] = s.ipAddressView(a, subnets)
	}
	return out, nil
}

// ipAddressesReserve reserves an address for the caller: the one asked for
// (ip, or MAAS's older ip_address), or the subnet's next free one; with a
// mac, DHCP answers that device with it; with a hostname, DNS names it in
// the subnet's domain.
func ipAddressesReserve(s *Server, c *call) (any, error) {
	req := store.ReserveRequest{MAC: c.str("mac"), Hostname: c.str("hostname")}
	ipStr := c.str("ip")
	if ipStr == "" {
		ipStr = c.str("ip_address")
	}
	subnetSpec := c.str("subnet")
	if ipStr != "" {
		ip, err := netip.ParseAddr(strings.TrimSpace(ipStr))
		if err != nil || ip.Zone() != "" {
			c.fail("ip_address", "Enter a valid IPv4 or IPv6 address.")
		}
		req.IP = ip.Unmap()
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if ipStr == "" && subnetSpec == "" {
		return nil, errorf(http.StatusBadRequest, "Must supply either the 'subnet' or the 'ip' parameter.")
	}
	subnets, err := s.subnets()
	if err != nil {
		return nil, err
	}
	var sn store.Subnet
	if req.IP.IsValid() {
		found := false
		for _, x := range subnets {
			if x.CIDR.Contains(req.IP) {
				sn, found = x, true
			}
		}
		if !found {
			return nil, errorf(http.StatusBadRequest, "No known subnet for IP address: %s.", req.IP)
		}
	} else {
		if sn, err = s.findSubnet(subnetSpec); err != nil {
			return nil, errorf(http.StatusBadRequest, "Unable to identify subnet: %s.", truncate(subnetSpec, 64))
		}
	}
	req.Subnet = sn.CIDR
	// MAAS takes "host.domain": the domain must be the subnet's, where
	// rackd names the reservation.
	if host, domain, ok := strings.Cut(req.Hostname, "."); ok {
		if !strings.EqualFold(strings.TrimSuffix(domain, "."), strings.TrimSuffix(sn.Domain, ".")) {
			return nil, errorf(http.StatusBadRequest, "hostname %q: rackd names a reservation in its subnet's domain (%q for %s)",
				truncate(req.Hostname, 64), sn.Domain, sn.CIDR)
		}
		req.Hostname = host
	}
	a, err := s.store.Reserve(c.ctx(), c.who, req)
	if err != nil {
		return nil, err
	}
	s.log.Info("address reserved through the MAAS API", "ip", a.IP, "mac", a.MAC, "hostname", a.Hostname, "by", c.who.Name)
	return s.ipAddressView(a, subnets), nil
}

// ipAddressesRelease releases one of the caller's reservations (an admin's
// force=true: anyone's).
func ipAddressesRelease(s *Server, c *call) (any, error) {
	ipStr := c.str("ip")
	force := c.boolean("force", false)
	discovered := c.boolean("discovered", false)
	var ip netip.Addr
	if ipStr == "" {
		c.fail("ip", "This field is required.")
	} else {
		var err error
		if ip, err = netip.ParseAddr(strings.TrimSpace(ipStr)); err != nil || ip.Zone() != "" {
			c.fail("ip", "Enter a valid IPv4 or IPv6 address.")
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if force && !c.who.Admin {
		return nil, errorf(http.StatusForbidden, "Force-releasing an IP address requires admin privileges.")
	}
	if discovered {
		return nil, errorf(http.StatusBadRequest, "discovered=true: rackd releases reservations only (a discovered address frees itself when its quarantine ends)")
	}
	who := c.who
	if !force {
		// Without force, MAAS releases only the caller's own, admin or
		// not: the store lets an admin release anyone's.
		who.Admin = false
	}
	a, err := s.store.Unreserve(c.ctx(), who, ip)
	if err != nil {
		switch store.CodeOf(err) {
		case store.CodeNotFound, store.CodeForbidden:
			// MAAS's answer: a 400, not a 403 (which Juju would take
			// for a bad credential).
			return nil, errorf(http.StatusBadRequest, "IP address %s does not exist, is not the correct type of address, or does not belong to the requesting user (%s).", ip, err)
		}
		return nil, err
	}
	s.log.Info("reservation released through the MAAS API", "ip", a.IP, "by", c.who.Name)
	return emptyAnswer, nil
}
