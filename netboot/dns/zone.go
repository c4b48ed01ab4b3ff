package dns

import (
	"context"
	"net/netip"
)

// Zone is what the DNS server needs from rackd's address management: the
// managed domains and reverse zones, and the names and addresses in them. The
// agent adapts the store to it (so a change is visible at once); tests use a
// fake. Names are fully qualified, lower case, with the trailing dot
// ("node1.rack.example.").
//
// The server synthesises each zone's SOA and NS records, and the addresses
// of its NS name (Config.NS, else "ns.<zone>") when Forward has none; the
// Zone only holds the names of machines and reservations. Names are best
// one label below the managed domain: a name with no address but names
// below it (an empty non-terminal) is answered NXDOMAIN, as the Zone cannot
// say that something lies below.
type Zone interface {
	// Authority tells whether rackd is authoritative for name, and for which
	// zone (the managed domain, or the in-addr.arpa / ip6.arpa zone of a
	// managed subnet). Outside every managed zone the server answers REFUSED.
	Authority(ctx context.Context, name string) (zone string, ok bool, err error)
	// Forward returns the addresses of name (A and AAAA together; the
	// server filters by query type). No address and no error means the name
	// does not exist (NXDOMAIN) if it is also not a zone apex.
	Forward(ctx context.Context, name string) ([]netip.Addr, error)
	// Reverse returns the name that ip belongs to ("" when none: NXDOMAIN).
	Reverse(ctx context.Context, ip netip.Addr) (string, error)
}
