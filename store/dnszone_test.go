package store_test

import (
	"net/netip"
	"slices"
	"testing"

	"rackd/store"
)

func TestReverseZone(t *testing.T) {
	tests := map[string]struct {
		prefix, want string
	}{
		"/24":                {"10.1.2.0/24", "2.1.10.in-addr.arpa."},
		"/16":                {"10.1.0.0/16", "1.10.in-addr.arpa."},
		"/20 to the octet":   {"10.1.16.0/20", "1.10.in-addr.arpa."},
		"/25 to the octet":   {"10.1.2.128/25", "2.1.10.in-addr.arpa."},
		"/8":                 {"10.0.0.0/8", "10.in-addr.arpa."},
		"/32":                {"192.0.2.7/32", "7.2.0.192.in-addr.arpa."},
		"host bits ignored":  {"10.1.2.77/24", "2.1.10.in-addr.arpa."},
		"IPv6 /64":           {"2001:db8:1:2::/64", "2.0.0.0.1.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."},
		"IPv6 /48":           {"2001:db8:abcd::/48", "d.c.b.a.8.b.d.0.1.0.0.2.ip6.arpa."},
		"IPv6 /56 nibble":    {"2001:db8:abcd:1200::/56", "2.1.d.c.b.a.8.b.d.0.1.0.0.2.ip6.arpa."},
		"IPv6 /62 to nibble": {"2001:db8:abcd:12fc::/62", "f.2.1.d.c.b.a.8.b.d.0.1.0.0.2.ip6.arpa."},
		"IPv6 /40":           {"2001:db8:ab00::/40", "b.a.8.b.d.0.1.0.0.2.ip6.arpa."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := store.ReverseZone(pfx(tc.prefix)); got != tc.want {
				t.Errorf("ReverseZone(%s) = %q, want %q", tc.prefix, got, tc.want)
			}
		})
	}
}

func TestDNSZones(t *testing.T) {
	tests := map[string]struct {
		subnets []store.Subnet
		want    []string
	}{
		"none": {nil, nil},
		"one":  {[]store.Subnet{lab()}, []string{"rack.example.", "0.0.10.in-addr.arpa."}},
		"two on one domain": {[]store.Subnet{lab(), lab2()},
			[]string{"rack.example.", "0.0.10.in-addr.arpa.", "1.0.10.in-addr.arpa."}},
		"no domain": {[]store.Subnet{{CIDR: pfx("10.0.3.0/24")}}, []string{"3.0.10.in-addr.arpa."}},
		"two /25 in one reverse zone": {[]store.Subnet{{CIDR: pfx("10.0.4.0/25"), Domain: "a.example"}, {CIDR: pfx("10.0.4.128/25"), Domain: "b.example"}},
			[]string{"a.example.", "b.example.", "4.0.10.in-addr.arpa."}},
		"IPv6": {[]store.Subnet{{CIDR: pfx("2001:db8:1::/64"), Domain: "Six.Example."}},
			[]string{"six.example.", "0.0.0.0.1.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, tc.subnets)
			got, err := s.DNSZones()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("DNSZones() = %q, want %q", got, want)
			}
		})
	}
}

// dnsRack: lab and lab2 on rack.example, an IPv6 subnet on rack.example, a
// subnet without a domain; web1 with two aliases on its first interface, an
// IPv6 address and one in the domainless subnet; web2 with no address; a
// named and an unnamed reservation; a named dynamic lease.
func dnsRack(t *testing.T) *store.Store {
	t.Helper()
	v6 := store.Subnet{CIDR: pfx("2001:db8:1::/64"), Domain: "rack.example"}
	bare := store.Subnet{CIDR: pfx("10.0.3.0/24")}
	s, _ := webRack(t, []store.Subnet{lab(), lab2(), v6, bare})
	for _, req := range []store.AssignRequest{
		{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")},
		{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.11"), Alias: true},
		{Machine: "web1", MAC: macWeb1b, IP: addr("2001:db8:1::10")},
		{Machine: "web1", MAC: macWeb1, IP: addr("10.0.3.10")},
	} {
		mustAssign(t, s, req)
	}
	mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macSw, Hostname: "sw1"})
	mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.31")})
	mustAck(t, s, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150"), Hostname: "laptop"})
	return s
}

func TestDNSForward(t *testing.T) {
	s := dnsRack(t)
	tests := map[string]struct {
		name string
		want []string
	}{
		"machine, all its addresses": {"web1.rack.example.", []string{"10.0.0.10", "10.0.0.11", "2001:db8:1::10"}},
		"no trailing dot":            {"web1.rack.example", []string{"10.0.0.10", "10.0.0.11", "2001:db8:1::10"}},
		"any case":                   {"WEB1.Rack.Example.", []string{"10.0.0.10", "10.0.0.11", "2001:db8:1::10"}},
		"named reservation":          {"sw1.rack.example.", []string{"10.0.0.30"}},
		"machine without addresses":  {"web2.rack.example.", nil},
		"unknown name":               {"nobody.rack.example.", nil},
		"a dynamic lease's hostname": {"laptop.rack.example.", nil},
		"another domain":             {"web1.other.example.", nil},
		"a suffix of the domain":     {"web1.example.", nil},
		"the domain itself":          {"rack.example.", nil},
		"empty host label":           {".rack.example.", nil},
		"bare hostname":              {"web1", nil},
		"empty":                      {"", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := s.DNSForward(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			var strs []string
			for _, ip := range got {
				strs = append(strs, ip.String())
			}
			slices.Sort(strs)
			if !slices.Equal(strs, tc.want) {
				t.Errorf("DNSForward(%q) = %v, want %v", tc.name, strs, tc.want)
			}
		})
	}
}

// TestDNSForwardNestedDomains: with one subnet's domain inside another's,
// a machine's address is named only in its own subnet's domain.
func TestDNSForwardNestedDomains(t *testing.T) {
	outer := lab2()
	outer.Domain = "example"
	s, _ := webRack(t, []store.Subnet{lab(), outer}) // lab is rack.example
	mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
	mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.1.10")})
	mustAssign(t, s, store.AssignRequest{Machine: "web2", MAC: macWeb2, IP: addr("10.0.1.20")})
	tests := map[string]struct {
		name string
		want []netip.Addr
	}{
		"inner domain":    {"web1.rack.example.", addrs("10.0.0.10")},
		"outer domain":    {"web1.example.", addrs("10.0.1.10")},
		"other machine":   {"web2.example.", addrs("10.0.1.20")},
		"not in inner":    {"web2.rack.example.", nil},
		"host with a dot": {"web1.rack.example.example.", nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := s.DNSForward(tc.name)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("DNSForward(%q) = %v, %v; want %v", tc.name, got, err, tc.want)
			}
		})
	}
}

func TestDNSReverse(t *testing.T) {
	s := dnsRack(t)
	tests := map[string]struct {
		ip, want string
	}{
		"sticky":                  {"10.0.0.10", "web1.rack.example."},
		"alias":                   {"10.0.0.11", "web1.rack.example."},
		"IPv4-mapped":             {"::ffff:10.0.0.10", "web1.rack.example."},
		"IPv6 sticky":             {"2001:db8:1::10", "web1.rack.example."},
		"named reservation":       {"10.0.0.30", "sw1.rack.example."},
		"unnamed reservation":     {"10.0.0.31", ""},
		"dynamic lease":           {"10.0.0.150", ""},
		"free address":            {"10.0.0.77", ""},
		"subnet without a domain": {"10.0.3.10", ""},
		"unmanaged address":       {"192.0.2.1", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := s.DNSReverse(addr(tc.ip))
			if err != nil || got != tc.want {
				t.Errorf("DNSReverse(%s) = %q, %v; want %q", tc.ip, got, err, tc.want)
			}
		})
	}
}

// TestDNSFollowsChanges: answers come from the store, so a change shows at
// once.
func TestDNSFollowsChanges(t *testing.T) {
	s, _ := webRack(t, []store.Subnet{lab()})
	mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
	mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.12")}) // override
	tests := map[string]struct {
		check func() (any, error)
		want  any
	}{
		"forward": {func() (any, error) { return s.DNSForward("web1.rack.example.") }, addrs("10.0.0.12")},
		"old PTR": {func() (any, error) { return s.DNSReverse(addr("10.0.0.10")) }, ""},
		"new PTR": {func() (any, error) { return s.DNSReverse(addr("10.0.0.12")) }, "web1.rack.example."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.check()
			if err != nil {
				t.Fatal(err)
			}
			if g, ok := got.([]netip.Addr); ok {
				if !slices.Equal(g, tc.want.([]netip.Addr)) {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			} else if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
