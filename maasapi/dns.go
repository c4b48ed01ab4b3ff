package maasapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"rackd/store"
)

// Domains and DNS records as rackd's DNS answers them: a domain is a
// subnet's domain (the first subnet's, by address, is MAAS's default), and
// its names are its machines' (a machine's sticky addresses in the
// domain's subnets) and its named reservations'. MAAS's dnsresources/ lists
// the names made by hand, rackd's named reservations; all=true adds the
// machines'.

type domainJSON struct {
	ID                  int    `json:"id"`
	Name                string `json:"name"`
	TTL                 *int   `json:"ttl"`
	Authoritative       bool   `json:"authoritative"`
	ResourceRecordCount int    `json:"resource_record_count"`
	IsDefault           bool   `json:"is_default"`
	ResourceURI         string `json:"resource_uri"`
}

type dnsResourceJSON struct {
	ID              int             `json:"id"`
	FQDN            string          `json:"fqdn"`
	AddressTTL      *int            `json:"address_ttl"`
	IPAddresses     []ipAddressJSON `json:"ip_addresses"`
	ResourceRecords []any           `json:"resource_records"`
	ResourceURI     string          `json:"resource_uri"`
}

// dnsNames is every name rackd's DNS answers, by FQDN, with its
// addresses; machine reports whether a name is a machine's.
type dnsName struct {
	fqdn, domain string
	machine      bool
	addrs        []store.Address
}

func (s *Server) dnsNames() ([]store.Subnet, []*dnsName, error) {
	subnets, err := s.subnets()
	if err != nil {
		return nil, nil, err
	}
	domainOf := map[string]string{}
	for _, sn := range subnets {
		domainOf[sn.CIDR.String()] = strings.TrimSuffix(sn.Domain, ".")
	}
	addrs, err := s.store.Addresses(func(a store.Address) bool {
		return domainOf[a.Subnet.String()] != "" &&
			(a.Kind == store.KindSticky || a.Kind == store.KindReserved && a.Hostname != "")
	})
	if err != nil {
		return nil, nil, err
	}
	hostOf := map[string]string{}
	if slices.ContainsFunc(addrs, func(a store.Address) bool { return a.Kind == store.KindSticky }) {
		ms, err := s.store.ListMachines(store.Filter{})
		if err != nil {
			return nil, nil, err
		}
		for _, m := range ms {
			hostOf[m.ID] = m.Hostname
		}
	}
	byName := map[string]*dnsName{}
	var out []*dnsName
	for _, a := range addrs {
		d := domainOf[a.Subnet.String()]
		host, machine := a.Hostname, false
		if a.Kind == store.KindSticky {
			host, machine = hostOf[a.MachineID], true
		}
		if host == "" {
			continue
		}
		name := fqdn(host, d)
		n := byName[name]
		if n == nil {
			n = &dnsName{fqdn: name, domain: d, machine: machine}
			byName[name] = n
			out = append(out, n)
		}
		n.addrs = append(n.addrs, a)
	}
	slices.SortFunc(out, func(a, b *dnsName) int { return strings.Compare(a.fqdn, b.fqdn) })
	return subnets, out, nil
}

func (s *Server) domains() ([]domainJSON, error) {
	subnets, names, err := s.dnsNames()
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	for _, n := range names {
		count[n.domain]++
	}
	var out []domainJSON
	seen := map[string]bool{}
	for _, sn := range subnets {
		d := strings.TrimSuffix(sn.Domain, ".")
		if d == "" || seen[d] {
			continue
		}
		seen[d] = true
		id := stableID("domain", d)
		out = append(out, domainJSON{ID: id, Name: d, Authoritative: true, ResourceRecordCount: count[d],
			IsDefault: len(out) == 0, ResourceURI: uri("domains", strconv.Itoa(id))})
	}
	if out == nil {
		// No subnet has a domain: machines show MAAS's own default.
		out = []domainJSON{domainOf("")}
	}
	return out, nil
}

func domainsRead(s *Server, c *call) (any, error) { return s.domains() }

func domainRead(s *Server, c *call) (any, error) {
	ds, err := s.domains()
	if err != nil {
		return nil, err
	}
	want := strings.TrimPrefix(c.path("id"), "name:")
	want = strings.TrimPrefix(want, "id:")
	for _, d := range ds {
		if strconv.Itoa(d.ID) == want || d.Name == want {
			return d, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "No Domain matches the given query: %q", truncate(c.path("id"), 64))
}

func (s *Server) dnsResources(all bool) ([]dnsResourceJSON, []*dnsName, error) {
	subnets, names, err := s.dnsNames()
	if err != nil {
		return nil, nil, err
	}
	out := []dnsResourceJSON{}
	var kept []*dnsName
	for _, n := range names {
		if n.machine && !all {
			continue
		}
		id := stableID("dnsresource", n.fqdn)
		r := dnsResourceJSON{ID: id, FQDN: n.fqdn, IPAddresses: make([]ipAddressJSON, len(n.addrs)),
			ResourceRecords: []any{}, ResourceURI: uri("dnsresources", strconv.Itoa(id))}
		for i, a := range n.addrs {
			r.IPAddresses[i] = s.ipAddressView(a, subnets)
		}
		out = append(out, r)
		kept = append(kept, n)
	}
	return out, kept, nil
}

// dnsResourcesRead lists the names, filtered as MAAS filters them: domain,
// name (the host part), fqdn, rrtype (rackd's names are A and AAAA
// records).
func dnsResourcesRead(s *Server, c *call) (any, error) {
	all := c.boolean("all", false)
	domain, name, fq, rrtype := c.str("domain"), c.str("name"), c.str("fqdn"), strings.ToUpper(c.str("rrtype"))
	if err := c.check(); err != nil {
		return nil, err
	}
	rs, names, err := s.dnsResources(all)
	if err != nil {
		return nil, err
	}
	out := []dnsResourceJSON{}
	for i, r := range rs {
		n := names[i]
		host := strings.TrimSuffix(n.fqdn, "."+n.domain)
		switch {
		case domain != "" && strings.TrimSuffix(domain, ".") != n.domain:
		case name != "" && name != host:
		case fq != "" && strings.TrimSuffix(fq, ".") != n.fqdn:
		case rrtype != "" && rrtype != "A" && rrtype != "AAAA":
		default:
			out = append(out, r)
		}
	}
	return out, nil
}

func dnsResourceRead(s *Server, c *call) (any, error) {
	rs, _, err := s.dnsResources(true)
	if err != nil {
		return nil, err
	}
	want := strings.TrimPrefix(c.path("id"), "id:")
	for _, r := range rs {
		if strconv.Itoa(r.ID) == want || r.FQDN == want {
			return r, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "No DNSResource matches the given query: %q", truncate(c.path("id"), 64))
}
