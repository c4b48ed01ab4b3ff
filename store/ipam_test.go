package store_test

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

// The address-management tests share a small world: two managed /24s on
// one domain, a few MACs, a clock that only moves when told.

var bg = context.Background()

func addr(s string) netip.Addr    { return netip.MustParseAddr(s) }
func pfx(s string) netip.Prefix   { return netip.MustParsePrefix(s) }
func rng(a, b string) store.Range { return store.Range{Start: addr(a), End: addr(b)} }
func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = addr(s)
	}
	return out
}

var (
	labNet  = pfx("10.0.0.0/24")
	lab2Net = pfx("10.0.1.0/24")
	link    = addr("10.0.0.1") // the interface (or relay) lab is served on
	link2   = addr("10.0.1.1")

	// MACs of unknown DHCP clients and of an unmanaged switch.
	macA  = "52:54:00:aa:00:01"
	macB  = "52:54:00:aa:00:02"
	macC  = "52:54:00:aa:00:03"
	macSw = "52:54:00:5e:00:01"
	// MACs of managed machines.
	macWeb1  = "52:54:00:00:01:01"
	macWeb1b = "52:54:00:00:01:02"
	macWeb2  = "52:54:00:00:02:01"
)

// lab is the main test subnet: gateway .1, DNS .2, dynamic .100-.199,
// reserved .200-.209.
func lab() store.Subnet {
	return store.Subnet{
		CIDR: labNet, Gateway: addr("10.0.0.1"), DNSServers: addrs("10.0.0.2"),
		Domain: "rack.example", LeaseSeconds: 3600,
		DynamicRanges:  []store.Range{rng("10.0.0.100", "10.0.0.199")},
		ReservedRanges: []store.Range{rng("10.0.0.200", "10.0.0.209")},
	}
}

// lab2 is a second subnet on the same domain, served through a relay.
func lab2() store.Subnet {
	return store.Subnet{
		CIDR: lab2Net, Gateway: addr("10.0.1.1"), Domain: "rack.example", LeaseSeconds: 7200,
		DynamicRanges: []store.Range{rng("10.0.1.100", "10.0.1.199")},
	}
}

// fakeClock is a store clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// newIPAM opens a test store with a fake clock and the given subnets.
func newIPAM(t testing.TB, subnets []store.Subnet, opts ...func(*store.Options)) (*store.Store, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: t0}
	s := storetest.New(t, append([]func(*store.Options){func(o *store.Options) { o.Now = clk.Now }}, opts...)...)
	for _, sn := range subnets {
		mustSubnet(t, s, sn)
	}
	return s, clk
}

func mustSubnet(t testing.TB, s *store.Store, sn store.Subnet) store.Subnet {
	t.Helper()
	got, err := s.CreateSubnet(bg, storetest.Admin, sn)
	if err != nil {
		t.Fatalf("CreateSubnet(%s): %v", sn.CIDR, err)
	}
	return got
}

func mustOffer(t testing.TB, s *store.Store, req store.LeaseRequest) store.Grant {
	t.Helper()
	g, err := s.DHCPOffer(bg, req)
	if err != nil {
		t.Fatalf("DHCPOffer(%s on %s, asks %s): %v", req.MAC, req.Link, req.IP, err)
	}
	return g
}

func mustAck(t testing.TB, s *store.Store, req store.LeaseRequest) store.Grant {
	t.Helper()
	g, err := s.DHCPAck(bg, req)
	if err != nil {
		t.Fatalf("DHCPAck(%s on %s, asks %s): %v", req.MAC, req.Link, req.IP, err)
	}
	return g
}

// lease offers and acks an address for mac on lnk (the requested one when
// ip is set) and returns the bound address.
func lease(t testing.TB, s *store.Store, mac string, lnk netip.Addr, ip string) netip.Addr {
	t.Helper()
	req := store.LeaseRequest{MAC: mac, Link: lnk}
	if ip != "" {
		req.IP = addr(ip)
	}
	g := mustOffer(t, s, req)
	if ip != "" && g.Address.IP != addr(ip) {
		t.Fatalf("%s asked for %s, was offered %s", mac, ip, g.Address.IP)
	}
	req.IP = g.Address.IP
	return mustAck(t, s, req).Address.IP
}

// machineWith creates a READY machine with the given interfaces.
func machineWith(t testing.TB, s *store.Store, hostname string, macs ...string) store.Machine {
	t.Helper()
	return create(t, s, store.NewMachine{Hostname: hostname, State: store.StateReady, MACs: macs})
}

func mustAssign(t testing.TB, s *store.Store, req store.AssignRequest) store.Address {
	t.Helper()
	a, err := s.AssignMachineIP(bg, storetest.Admin, req)
	if err != nil {
		t.Fatalf("AssignMachineIP(%s %s %s): %v", req.Machine, req.MAC, req.IP, err)
	}
	return a
}

func mustReserve(t testing.TB, s *store.Store, actor store.Actor, req store.ReserveRequest) store.Address {
	t.Helper()
	a, err := s.Reserve(bg, actor, req)
	if err != nil {
		t.Fatalf("Reserve(%s %s): %v", req.IP, req.Subnet, err)
	}
	return a
}

func mustQuarantine(t testing.TB, s *store.Store, ip string) {
	t.Helper()
	if err := s.Quarantine(bg, addr(ip), "52:54:00:ee:ee:ee", "answered an ARP probe"); err != nil {
		t.Fatalf("Quarantine(%s): %v", ip, err)
	}
}

// addressMap lists every live address record by IP.
func addressMap(t testing.TB, s *store.Store) map[netip.Addr]store.Address {
	t.Helper()
	as, err := s.Addresses(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]store.Address{}
	for _, a := range as {
		if _, dup := out[a.IP]; dup {
			t.Fatalf("address %s listed twice", a.IP)
		}
		out[a.IP] = a
	}
	return out
}

func leaseMap(t testing.TB, s *store.Store) map[netip.Addr]string {
	t.Helper()
	ls, err := s.Leases()
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]string{}
	for _, l := range ls {
		if l.Kind != store.KindDynamic {
			t.Fatalf("Leases lists a %s address: %+v", l.Kind, l)
		}
		out[l.IP] = l.MAC
	}
	return out
}

// unchanged fails the test when the live address records differ from before.
func unchanged(t testing.TB, s *store.Store, before map[netip.Addr]store.Address) {
	t.Helper()
	if after := addressMap(t, s); !reflect.DeepEqual(before, after) {
		t.Fatalf("a refusal changed the addresses:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestCreateSubnetInvalid(t *testing.T) {
	tests := map[string]struct {
		actor   store.Actor
		change  func(*store.Subnet)
		code    store.Code
		message string
	}{
		"no CIDR":       {storetest.Admin, func(sn *store.Subnet) { sn.CIDR = netip.Prefix{} }, store.CodeInvalid, "needs a CIDR"},
		"host bits set": {storetest.Admin, func(sn *store.Subnet) { sn.CIDR = pfx("10.0.0.7/24") }, store.CodeInvalid, "did you mean 10.0.0.0/24"},
		"IPv4 written as IPv6": {storetest.Admin, func(sn *store.Subnet) {
			sn.CIDR = pfx("::ffff:10.0.0.0/120")
			sn.Gateway = netip.Addr{}
			sn.DynamicRanges, sn.ReservedRanges = nil, nil
		}, store.CodeInvalid, "write IPv4 subnets as IPv4"},
		"gateway outside":           {storetest.Admin, func(sn *store.Subnet) { sn.Gateway = addr("10.0.1.1") }, store.CodeInvalid, "gateway 10.0.1.1 is not in"},
		"gateway of other family":   {storetest.Admin, func(sn *store.Subnet) { sn.Gateway = addr("2001:db8::1") }, store.CodeInvalid, "gateway"},
		"invalid DNS server":        {storetest.Admin, func(sn *store.Subnet) { sn.DNSServers = []netip.Addr{{}} }, store.CodeInvalid, "DNS server"},
		"dynamic range outside":     {storetest.Admin, func(sn *store.Subnet) { sn.DynamicRanges = []store.Range{rng("10.0.1.10", "10.0.1.20")} }, store.CodeInvalid, "range start 10.0.1.10 is not in"},
		"range end outside":         {storetest.Admin, func(sn *store.Subnet) { sn.DynamicRanges = []store.Range{rng("10.0.0.250", "10.0.1.5")} }, store.CodeInvalid, "range end 10.0.1.5"},
		"reserved range outside":    {storetest.Admin, func(sn *store.Subnet) { sn.ReservedRanges = []store.Range{rng("10.0.2.1", "10.0.2.9")} }, store.CodeInvalid, "not in"},
		"range reversed":            {storetest.Admin, func(sn *store.Subnet) { sn.DynamicRanges = []store.Range{rng("10.0.0.50", "10.0.0.40")} }, store.CodeInvalid, "ends before it starts"},
		"range without end":         {storetest.Admin, func(sn *store.Subnet) { sn.DynamicRanges = []store.Range{{Start: addr("10.0.0.50")}} }, store.CodeInvalid, "start and end"},
		"range of other family":     {storetest.Admin, func(sn *store.Subnet) { sn.DynamicRanges = []store.Range{rng("2001:db8::1", "2001:db8::9")} }, store.CodeInvalid, "not in"},
		"dynamic overlaps reserved": {storetest.Admin, func(sn *store.Subnet) { sn.ReservedRanges = []store.Range{rng("10.0.0.190", "10.0.0.209")} }, store.CodeInvalid, "overlap"},
		"dynamic ranges overlap":    {storetest.Admin, func(sn *store.Subnet) { sn.DynamicRanges = append(sn.DynamicRanges, rng("10.0.0.199", "10.0.0.199")) }, store.CodeInvalid, "overlap"},
		"reserved ranges overlap":   {storetest.Admin, func(sn *store.Subnet) { sn.ReservedRanges = append(sn.ReservedRanges, rng("10.0.0.20", "10.0.0.200")) }, store.CodeInvalid, "overlap"},
		"gateway in dynamic range":  {storetest.Admin, func(sn *store.Subnet) { sn.Gateway = addr("10.0.0.150") }, store.CodeInvalid, "lies in the dynamic range"},
		"domain with underscore":    {storetest.Admin, func(sn *store.Subnet) { sn.Domain = "rack_1.example" }, store.CodeInvalid, "invalid domain"},
		"domain with empty label":   {storetest.Admin, func(sn *store.Subnet) { sn.Domain = "rack..example" }, store.CodeInvalid, "invalid domain"},
		"domain leading dash":       {storetest.Admin, func(sn *store.Subnet) { sn.Domain = "-rack.example" }, store.CodeInvalid, "invalid domain"},
		"domain label of 64":        {storetest.Admin, func(sn *store.Subnet) { sn.Domain = strings.Repeat("a", 64) + ".example" }, store.CodeInvalid, "invalid domain"},
		"domain of 254":             {storetest.Admin, func(sn *store.Subnet) { sn.Domain = strings.Repeat(strings.Repeat("a", 62)+".", 4) + "aa" }, store.CodeInvalid, "invalid domain"},
		"lease too short":           {storetest.Admin, func(sn *store.Subnet) { sn.LeaseSeconds = 59 }, store.CodeInvalid, "lease_seconds 59"},
		"lease negative":            {storetest.Admin, func(sn *store.Subnet) { sn.LeaseSeconds = -1 }, store.CodeInvalid, "lease_seconds"},
		"lease over a year":         {storetest.Admin, func(sn *store.Subnet) { sn.LeaseSeconds = 365*86400 + 1 }, store.CodeInvalid, "lease_seconds"},
		"not an admin":              {alice, func(sn *store.Subnet) {}, store.CodeForbidden, "only an admin"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, nil)
			sn := lab()
			tc.change(&sn)
			_, err := s.CreateSubnet(bg, tc.actor, sn)
			wantCode(t, err, tc.code)
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("message %q does not say %q", err, tc.message)
			}
			if got, err := s.Subnets(); err != nil || len(got) != 0 {
				t.Fatalf("a refused subnet was stored: %v %v", got, err)
			}
		})
	}
}

func TestCreateSubnetValid(t *testing.T) {
	tests := map[string]struct {
		change func(*store.Subnet)
		check  func(t *testing.T, got store.Subnet)
	}{
		"as given": {func(*store.Subnet) {}, func(t *testing.T, got store.Subnet) {
			want := lab()
			want.Created = t0
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		}},
		"domain normalised": {func(sn *store.Subnet) { sn.Domain = " Rack.Example. " }, func(t *testing.T, got store.Subnet) {
			if got.Domain != "rack.example" {
				t.Errorf("domain %q, want rack.example", got.Domain)
			}
		}},
		"no domain": {func(sn *store.Subnet) { sn.Domain = "" }, func(t *testing.T, got store.Subnet) {
			if got.Domain != "" {
				t.Errorf("domain %q", got.Domain)
			}
		}},
		"default lease": {func(sn *store.Subnet) { sn.LeaseSeconds = 0 }, func(t *testing.T, got store.Subnet) {
			if got.LeaseSeconds != 3600 {
				t.Errorf("lease %d, want 3600", got.LeaseSeconds)
			}
		}},
		"shortest lease": {func(sn *store.Subnet) { sn.LeaseSeconds = 60 }, nil},
		"longest lease":  {func(sn *store.Subnet) { sn.LeaseSeconds = 365 * 86400 }, nil},
		"no gateway, no ranges": {func(sn *store.Subnet) {
			sn.Gateway, sn.DNSServers, sn.DynamicRanges, sn.ReservedRanges = netip.Addr{}, nil, nil, nil
		}, nil},
		"gateway in reserved range": {func(sn *store.Subnet) { sn.Gateway = addr("10.0.0.205") }, nil},
		"DNS server elsewhere":      {func(sn *store.Subnet) { sn.DNSServers = addrs("192.0.2.53", "2001:db8::53") }, nil},
		"adjacent ranges":           {func(sn *store.Subnet) { sn.ReservedRanges = []store.Range{rng("10.0.0.200", "10.0.0.255")} }, nil},
		"IPv6": {func(sn *store.Subnet) {
			*sn = store.Subnet{CIDR: pfx("2001:db8:1::/64"), Gateway: addr("2001:db8:1::1"), DNSServers: addrs("2001:db8:1::53"),
				Domain: "v6.example", DynamicRanges: []store.Range{rng("2001:db8:1::100", "2001:db8:1::1ff")}}
		}, func(t *testing.T, got store.Subnet) {
			if got.CIDR != pfx("2001:db8:1::/64") || got.LeaseSeconds != 3600 {
				t.Errorf("got %+v", got)
			}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, nil)
			sn := lab()
			tc.change(&sn)
			got := mustSubnet(t, s, sn)
			if tc.check != nil {
				tc.check(t, got)
			}
			list, err := s.Subnets()
			if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], got) {
				t.Fatalf("Subnets() = %+v, %v; want [%+v]", list, err, got)
			}
			inside := got.CIDR.Addr().Next()
			if found, err := s.SubnetFor(inside); err != nil || found.CIDR != got.CIDR {
				t.Errorf("SubnetFor(%s) = %s, %v", inside, found.CIDR, err)
			}
		})
	}
}

func TestCreateSubnetOverlap(t *testing.T) {
	tests := map[string]struct {
		cidr string
		code store.Code
	}{
		"same":             {"10.0.0.0/24", store.CodeConflict},
		"containing":       {"10.0.0.0/16", store.CodeConflict},
		"contained":        {"10.0.0.128/25", store.CodeConflict},
		"everything":       {"0.0.0.0/0", store.CodeConflict},
		"next door":        {"10.0.1.0/24", ""},
		"IPv6 beside IPv4": {"2001:db8::/32", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, []store.Subnet{lab()})
			_, err := s.CreateSubnet(bg, storetest.Admin, store.Subnet{CIDR: pfx(tc.cidr)})
			if tc.code == "" {
				if err != nil {
					t.Fatalf("CreateSubnet(%s): %v", tc.cidr, err)
				}
			} else {
				wantCode(t, err, tc.code)
				if !strings.Contains(err.Error(), "10.0.0.0/24") {
					t.Errorf("message %q does not name the subnet it overlaps", err)
				}
			}
			list, _ := s.Subnets()
			want := 1
			if tc.code == "" {
				want = 2
			}
			if len(list) != want {
				t.Errorf("%d subnets stored, want %d", len(list), want)
			}
		})
	}
}

func TestSubnetFor(t *testing.T) {
	s, _ := newIPAM(t, []store.Subnet{lab(), lab2()})
	tests := map[string]struct {
		ip   string
		want netip.Prefix
		code store.Code
	}{
		"network address":  {"10.0.0.0", labNet, ""},
		"inside":           {"10.0.0.77", labNet, ""},
		"broadcast":        {"10.0.0.255", labNet, ""},
		"second subnet":    {"10.0.1.5", lab2Net, ""},
		"IPv4-mapped":      {"::ffff:10.0.1.5", lab2Net, ""},
		"unmanaged":        {"10.0.2.1", netip.Prefix{}, store.CodeNoSubnet},
		"IPv6 not managed": {"2001:db8::1", netip.Prefix{}, store.CodeNoSubnet},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sn, err := s.SubnetFor(addr(tc.ip))
			if tc.code != "" {
				wantCode(t, err, tc.code)
				return
			}
			if err != nil || sn.CIDR != tc.want {
				t.Fatalf("SubnetFor(%s) = %s, %v; want %s", tc.ip, sn.CIDR, err, tc.want)
			}
		})
	}
}

// TestNeverOfferedUnusable: the network and broadcast addresses and the
// subnet's own DNS server are never handed out, even inside a dynamic range.
// (A gateway inside a dynamic range is refused by CreateSubnet.)
func TestNeverOfferedUnusable(t *testing.T) {
	tiny := store.Subnet{CIDR: pfx("10.0.8.0/29"), DNSServers: addrs("10.0.8.3"),
		DynamicRanges: []store.Range{rng("10.0.8.0", "10.0.8.7")}}
	lnk := addr("10.0.8.1")
	for _, bad := range []string{"10.0.8.0", "10.0.8.7", "10.0.8.3"} {
		t.Run("asks for "+bad, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, []store.Subnet{tiny})
			g := mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: lnk, IP: addr(bad)})
			if g.Address.IP == addr(bad) {
				t.Errorf("offered %s", bad)
			}
			_, err := s.DHCPAck(bg, store.LeaseRequest{MAC: macA, Link: lnk, IP: addr(bad)})
			wantCode(t, err, store.CodeNak)
		})
	}
	t.Run("whole pool", func(t *testing.T) {
		t.Parallel()
		s, _ := newIPAM(t, []store.Subnet{tiny})
		var got []string
		for i := range 5 {
			g := mustOffer(t, s, store.LeaseRequest{MAC: mac(0x100 + i), Link: lnk})
			got = append(got, g.Address.IP.String())
		}
		slices.Sort(got)
		if want := []string{"10.0.8.1", "10.0.8.2", "10.0.8.4", "10.0.8.5", "10.0.8.6"}; !slices.Equal(got, want) {
			t.Errorf("offered %v, want %v", got, want)
		}
		_, err := s.DHCPOffer(bg, store.LeaseRequest{MAC: mac(0x200), Link: lnk})
		wantCode(t, err, store.CodeExhausted)
	})
}

// TestOfferIPv6: the model holds IPv6 subnets and hands out their addresses.
func TestOfferIPv6(t *testing.T) {
	v6 := store.Subnet{CIDR: pfx("2001:db8:1::/64"), Gateway: addr("2001:db8:1::1"),
		DynamicRanges: []store.Range{rng("2001:db8:1::ffff", "2001:db8:1::1:1")}}
	s, _ := newIPAM(t, []store.Subnet{v6})
	lnk := addr("2001:db8:1::1")
	seen := map[netip.Addr]bool{}
	for i := range 3 {
		got := lease(t, s, mac(0x300+i), lnk, "")
		if !v6.DynamicRanges[0].Contains(got) || seen[got] {
			t.Fatalf("lease %d: %s (seen before: %v)", i, got, seen[got])
		}
		seen[got] = true
	}
	_, err := s.DHCPOffer(bg, store.LeaseRequest{MAC: mac(0x3ff), Link: lnk})
	wantCode(t, err, store.CodeExhausted)
}
