package maasapi

import (
	"fmt"
	"math"
	"net/netip"
	"testing"

	"rackd/store"
)

func TestUsable(t *testing.T) {
	for _, tc := range []struct{ cidr, first, last string }{
		{"10.0.0.0/24", "10.0.0.1", "10.0.0.254"},
		{"10.0.0.7/30", "10.0.0.5", "10.0.0.6"},
		{"10.0.0.0/31", "10.0.0.0", "10.0.0.1"},
		{"10.0.0.9/32", "10.0.0.9", "10.0.0.9"},
		{"10.1.0.0/12", "10.0.0.1", "10.15.255.254"},
		{"2001:db8::/64", "2001:db8::", "2001:db8::ffff:ffff:ffff:ffff"},
	} {
		f, l := usable(netip.MustParsePrefix(tc.cidr))
		if f.String() != tc.first || l.String() != tc.last {
			t.Errorf("usable(%s) = %s - %s, want %s - %s", tc.cidr, f, l, tc.first, tc.last)
		}
	}
}

func TestRangeCount(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		n    int64
	}{
		{"10.0.0.1", "10.0.0.1", 1},
		{"10.0.0.1", "10.0.0.254", 254},
		{"10.0.0.255", "10.0.1.0", 2},
		{"2001:db8::", "2001:db8::ffff", 65536},
		{"2001:db8::", "2001:db8::ffff:ffff:ffff:ffff", math.MaxInt64},
	} {
		if n := rangeCount(netip.MustParseAddr(tc.a), netip.MustParseAddr(tc.b)); n != tc.n {
			t.Errorf("rangeCount(%s, %s) = %d, want %d", tc.a, tc.b, n, tc.n)
		}
	}
}

func TestInUseAndFree(t *testing.T) {
	a := netip.MustParseAddr
	sn := store.Subnet{CIDR: netip.MustParsePrefix("10.0.0.0/24"), Gateway: a("10.0.0.1"),
		DNSServers:     []netip.Addr{a("10.0.0.1"), a("192.0.2.53")},
		DynamicRanges:  []store.Range{{Start: a("10.0.0.100"), End: a("10.0.0.199")}},
		ReservedRanges: []store.Range{{Start: a("10.0.0.2"), End: a("10.0.0.9")}, {Start: a("10.0.0.195"), End: a("10.0.0.210")}}}
	addrs := []store.Address{
		{IP: a("10.0.0.10"), Kind: store.KindSticky},
		{IP: a("10.0.0.11"), Kind: store.KindReserved},
		{IP: a("10.0.0.150"), Kind: store.KindDynamic},
		{IP: a("10.0.0.20"), Kind: store.KindDynamic}, // outside the dynamic range
		{IP: a("10.0.0.30"), Kind: store.KindDiscovered},
	}
	used := inUse(sn, addrs)
	got := fmt.Sprint(spansView(used))
	want := fmt.Sprint([]rangeJSON{
		{"10.0.0.1", "10.0.0.1", []string{"dns-server", "gateway-ip"}, 1},
		{"10.0.0.2", "10.0.0.9", []string{"reserved"}, 8},
		{"10.0.0.10", "10.0.0.11", []string{"assigned-ip"}, 2},
		{"10.0.0.20", "10.0.0.20", []string{"assigned-ip"}, 1},
		{"10.0.0.30", "10.0.0.30", []string{"neighbour"}, 1},
		{"10.0.0.100", "10.0.0.194", []string{"dynamic"}, 95},
		{"10.0.0.195", "10.0.0.199", []string{"dynamic", "reserved"}, 5},
		{"10.0.0.200", "10.0.0.210", []string{"reserved"}, 11},
	})
	if got != want {
		t.Errorf("in use:\n got %s\nwant %s", got, want)
	}
	free := fmt.Sprint(spansView(freeSpans(sn, used)))
	wantFree := fmt.Sprint([]rangeJSON{
		{"10.0.0.12", "10.0.0.19", nil, 8},
		{"10.0.0.21", "10.0.0.29", nil, 9},
		{"10.0.0.31", "10.0.0.99", nil, 69},
		{"10.0.0.211", "10.0.0.254", nil, 44},
	})
	if free != wantFree {
		t.Errorf("free:\n got %s\nwant %s", free, wantFree)
	}
	// Nothing in use: all of it is free; all of it in use: nothing is.
	empty := store.Subnet{CIDR: netip.MustParsePrefix("10.1.0.0/30")}
	if f := fmt.Sprint(spansView(freeSpans(empty, inUse(empty, nil)))); f != fmt.Sprint([]rangeJSON{{"10.1.0.1", "10.1.0.2", nil, 2}}) {
		t.Errorf("free of an empty /30: %s", f)
	}
	full := store.Subnet{CIDR: empty.CIDR, ReservedRanges: []store.Range{{Start: a("10.1.0.0"), End: a("10.1.0.3")}}}
	if u, f := inUse(full, nil), freeSpans(full, inUse(full, nil)); len(f) != 0 || fmt.Sprint(spansView(u)) != fmt.Sprint([]rangeJSON{{"10.1.0.1", "10.1.0.2", []string{"reserved"}, 2}}) {
		t.Errorf("a reserved /30: in use %v, free %v", spansView(u), spansView(f))
	}
	// The top of the address space.
	top := store.Subnet{CIDR: netip.MustParsePrefix("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120"), ReservedRanges: []store.Range{{Start: a("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0"), End: a("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}}}
	if u, f := inUse(top, nil), freeSpans(top, inUse(top, nil)); len(u) != 1 || len(f) != 1 || f[0].end != a("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffef") {
		t.Errorf("top: in use %v, free %v", spansView(u), spansView(f))
	}
}
