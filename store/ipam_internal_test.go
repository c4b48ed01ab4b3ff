package store

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// Outstanding offers are swept once each time their number doubles, not on
// every offer past a size: a storm of offers that are all still held must
// not make each DHCPDISCOVER walk them all. Expired offers go at a sweep;
// live ones stay.
func TestHoldSweepsWhenDoubled(t *testing.T) {
	st := newIPAMState(IPAMOptions{OfferHold: time.Minute})
	sn := netip.MustParsePrefix("10.0.0.0/8")
	t0 := time.Unix(1_700_000_000, 0)
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	mac := func(i int) string { return fmt.Sprintf("02:00:00:%02x:%02x:%02x", byte(i>>16), byte(i>>8), byte(i)) }

	const n = 50_000
	for i := range n {
		st.hold(ip(i), mac(i), sn, t0)
	}
	if len(st.offers) != n {
		t.Fatalf("%d offers held, want %d (none has expired)", len(st.offers), n)
	}
	// 4096 -> 8194 -> 16390 -> 32782: a sweep at each doubling.
	if st.sweeps > 4 {
		t.Errorf("%d sweeps for %d live offers, want at most 4 (one per doubling)", st.sweeps, n)
	}

	// A minute later the first n have expired: holding more sweeps them
	// out (at the next doubling), and keeps the new ones.
	t1 := t0.Add(time.Minute)
	for i := n; i < 3*n; i++ {
		st.hold(ip(i), mac(i), sn, t1)
	}
	if len(st.offers) > 2*n {
		t.Errorf("%d offers held after the first %d expired, want at most %d", len(st.offers), n, 2*n)
	}
	for i := n; i < 3*n; i++ {
		if got, ok := st.heldFor(mac(i), sn, t1); !ok || got != ip(i) {
			t.Fatalf("live offer %d: held %v %v, want %v", i, got, ok, ip(i))
		}
	}
}
