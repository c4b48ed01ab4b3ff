package store

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// DNS answers come straight from the store, so a change (a new machine
// address, a reservation) is visible to the very next query.

// ReverseZone is the in-addr.arpa / ip6.arpa zone that holds the PTR records
// of p: the enclosing octet (IPv4) or nibble (IPv6) boundary.
func ReverseZone(p netip.Prefix) string {
	a := p.Masked().Addr()
	if a.Is4() {
		b := a.As4()
		n := p.Bits() / 8
		parts := []string{}
		for i := n - 1; i >= 0; i-- {
			parts = append(parts, fmt.Sprint(b[i]))
		}
		return strings.Join(append(parts, "in-addr.arpa."), ".")
	}
	b := a.As16()
	n := p.Bits() / 4
	parts := []string{}
	for i := n - 1; i >= 0; i-- {
		nib := b[i/2]
		if i%2 == 0 {
			nib >>= 4
		}
		parts = append(parts, fmt.Sprintf("%x", nib&0xf))
	}
	return strings.Join(append(parts, "ip6.arpa."), ".")
}

// DNSZones lists the zones rackd is authoritative for: each managed
// subnet's domain and reverse zone. Names are lower case with a trailing
// dot.
func (s *Store) DNSZones() ([]string, error) {
	subnets, err := s.Subnets()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, sn := range subnets {
		for _, z := range []string{sn.Domain + ".", ReverseZone(sn.CIDR)} {
			if z != "." && !seen[z] {
				seen[z] = true
				out = append(out, z)
			}
		}
	}
	return out, nil
}

// DNSForward returns the addresses of a fully qualified name: a machine's
// sticky addresses in subnets of that domain, or a named reservation's.
func (s *Store) DNSForward(name string) ([]netip.Addr, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	var out []netip.Addr
	err := s.view(func(t *Tx) error {
		subnets, err := t.subnets()
		if err != nil {
			return err
		}
		domains := map[netip.Prefix]string{}
		for _, sn := range subnets {
			domains[sn.CIDR] = sn.Domain
		}
		machineIDs := map[string]string{} // host -> machine id, "" for none
		return t.tx.Bucket(bucketAddresses).ForEach(func(_, v []byte) error {
			var a Address
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			d := domains[a.Subnet]
			if d == "" || !a.live(t.now) {
				return nil
			}
			host, ok := strings.CutSuffix(name, "."+d)
			if !ok || host == "" {
				return nil
			}
			switch a.Kind {
			case KindReserved:
				if a.Hostname == host {
					out = append(out, a.IP)
				}
			case KindSticky:
				// The host part depends on the subnet's domain: look it up
				// per host, not once per query.
				id, seen := machineIDs[host]
				if !seen {
					id = string(t.getRaw(bucketHostnames, []byte(host)))
					machineIDs[host] = id
				}
				if id != "" && a.MachineID == id {
					out = append(out, a.IP)
				}
			}
			return nil
		})
	})
	return out, err
}

// DNSReverse returns the fully qualified name of ip ("" when it has none).
func (s *Store) DNSReverse(ip netip.Addr) (string, error) {
	name := ""
	err := s.view(func(t *Tx) error {
		a, found, err := t.address(ip.Unmap())
		if err != nil || !found || !a.live(t.now) {
			return err
		}
		sn, err := t.subnetFor(a.IP)
		if err != nil || sn.Domain == "" {
			return nil
		}
		host := ""
		switch a.Kind {
		case KindReserved:
			host = a.Hostname
		case KindSticky:
			if m, err := t.machine(a.MachineID); err == nil {
				host = m.Hostname
			}
		}
		if host != "" {
			name = host + "." + sn.Domain + "."
		}
		return nil
	})
	return name, err
}
