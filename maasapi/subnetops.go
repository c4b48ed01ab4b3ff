package maasapi

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"rackd/store"
)

// A subnet's addresses as MAAS's subnet operations show them: what is in
// use and why (reserved_ip_ranges), what is free (unreserved_ip_ranges),
// both counted (statistics), and each address in use (ip_addresses).

// MAAS's allocation types of an address (StaticIPAddress.alloc_type).
const (
	allocSticky       = 1 // "Static": a machine's own address
	allocUserReserved = 4 // "User reserved": a reservation
	allocDiscovered   = 6 // "Observed": a lease, or an address found in use
)

// allocType is the MAAS allocation type of a rackd address kind.
func allocType(k store.AddrKind) (int, string) {
	switch k {
	case store.KindSticky:
		return allocSticky, "Static"
	case store.KindReserved:
		return allocUserReserved, "User reserved"
	}
	return allocDiscovered, "Observed"
}

// The purposes MAAS gives the ranges in use.
const (
	purposeGateway   = "gateway-ip"
	purposeDNS       = "dns-server"
	purposeReserved  = "reserved"
	purposeDynamic   = "dynamic"
	purposeAssigned  = "assigned-ip"
	purposeNeighbour = "neighbour"
)

// span is an inclusive range of addresses and why it is in use.
type span struct {
	start, end netip.Addr
	purposes   []string
}

// usable is a subnet's first and last addresses that may be handed out:
// for IPv4 all but the network and broadcast addresses (below /31).
func usable(p netip.Prefix) (first, last netip.Addr) {
	p = p.Masked()
	first = p.Addr()
	last = first
	bits := first.BitLen() - p.Bits()
	b := last.AsSlice()
	for i := len(b) - 1; bits > 0; i-- {
		n := min(bits, 8)
		b[i] |= byte(1<<n - 1)
		bits -= n
	}
	last, _ = netip.AddrFromSlice(b)
	if first.Is4() && p.Bits() < 31 {
		first, last = first.Next(), last.Prev()
	}
	return first, last
}

// rangeCount is the number of addresses from a to b (a <= b), saturating
// at MaxInt64.
func rangeCount(a, b netip.Addr) int64 {
	return saturatingDiff(a.As16(), b.As16()) + 1
}

// saturatingDiff is b-a for 16-byte big-endian numbers with a <= b, capped
// below MaxInt64.
func saturatingDiff(a, b [16]byte) int64 {
	var diff [16]byte
	borrow := 0
	for i := 15; i >= 0; i-- {
		d := int(b[i]) - int(a[i]) - borrow
		borrow = 0
		if d < 0 {
			d += 256
			borrow = 1
		}
		diff[i] = byte(d)
	}
	for i := 0; i < 8; i++ {
		if diff[i] != 0 {
			return math.MaxInt64 - 1
		}
	}
	var n uint64
	for i := 8; i < 16; i++ {
		n = n<<8 | uint64(diff[i])
	}
	if n >= math.MaxInt64 {
		return math.MaxInt64 - 1
	}
	return int64(n)
}

// inUse is what of sn is in use and why, merged into spans by address,
// within its usable range.
func inUse(sn store.Subnet, addrs []store.Address) []span {
	first, last := usable(sn.CIDR)
	var raw []span
	add := func(a, b netip.Addr, purpose string) {
		if b.Less(first) || last.Less(a) {
			return
		}
		if a.Less(first) {
			a = first
		}
		if last.Less(b) {
			b = last
		}
		raw = append(raw, span{a, b, []string{purpose}})
	}
	if sn.Gateway.IsValid() {
		add(sn.Gateway, sn.Gateway, purposeGateway)
	}
	for _, d := range sn.DNSServers {
		add(d, d, purposeDNS)
	}
	for _, r := range sn.ReservedRanges {
		add(r.Start, r.End, purposeReserved)
	}
	for _, r := range sn.DynamicRanges {
		add(r.Start, r.End, purposeDynamic)
	}
	for _, a := range addrs {
		switch a.Kind {
		case store.KindSticky, store.KindReserved:
			add(a.IP, a.IP, purposeAssigned)
		case store.KindDiscovered:
			add(a.IP, a.IP, purposeNeighbour)
		case store.KindDynamic:
			// A lease lies in a dynamic range, which is in use already;
			// one outside (a range shrunk since) is still held.
			if !slices.ContainsFunc(sn.DynamicRanges, func(r store.Range) bool { return r.Contains(a.IP) }) {
				add(a.IP, a.IP, purposeAssigned)
			}
		}
	}
	return mergeSpans(raw)
}

// mergeSpans cuts overlapping spans into pieces that each have one set of
// purposes, and joins adjacent pieces with the same set.
func mergeSpans(raw []span) []span {
	type event struct {
		at      netip.Addr
		open    bool
		purpose string
	}
	var evs []event
	for _, s := range raw {
		evs = append(evs, event{s.start, true, s.purposes[0]})
		if n := s.end.Next(); n.IsValid() {
			evs = append(evs, event{n, false, s.purposes[0]})
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
	count := map[string]int{}
	var out []span
	for i := 0; i < len(evs); {
		at := evs[i].at
		for ; i < len(evs) && evs[i].at == at; i++ {
			if evs[i].open {
				count[evs[i].purpose]++
			} else {
				count[evs[i].purpose]--
			}
		}
		var ps []string
		for p, n := range count {
			if n > 0 {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			continue
		}
		slices.Sort(ps)
		end := netip.Addr{}
		if i < len(evs) {
			end = evs[i].at.Prev()
		} else {
			// Open to the end of the address space.
			end = raw[0].end
			for _, s := range raw {
				if end.Less(s.end) {
					end = s.end
				}
			}
		}
		if n := len(out); n > 0 && out[n-1].end.Next() == at && slices.Equal(out[n-1].purposes, ps) {
			out[n-1].end = end
			continue
		}
		out = append(out, span{at, end, ps})
	}
	return out
}

// freeSpans is the complement of used within sn's usable range.
func freeSpans(sn store.Subnet, used []span) []span {
	first, last := usable(sn.CIDR)
	var out []span
	next := first
	for _, u := range used {
		if next.Less(u.start) {
			out = append(out, span{start: next, end: u.start.Prev()})
		}
		if n := u.end.Next(); n.IsValid() {
			next = n
		} else {
			return out
		}
		if last.Less(next) {
			return out
		}
	}
	if !last.Less(next) {
		out = append(out, span{start: next, end: last})
	}
	return out
}

type rangeJSON struct {
	Start        string   `json:"start"`
	End          string   `json:"end"`
	Purpose      []string `json:"purpose,omitempty"`
	NumAddresses int64    `json:"num_addresses"`
}

func spansView(spans []span) []rangeJSON {
	out := make([]rangeJSON, len(spans))
	for i, s := range spans {
		out[i] = rangeJSON{Start: s.start.String(), End: s.end.String(), Purpose: s.purposes, NumAddresses: rangeCount(s.start, s.end)}
	}
	return out
}

// subnetAddresses is sn and its live addresses.
func (s *Server) subnetAddresses(c *call) (store.Subnet, []store.Address, error) {
	sn, err := s.findSubnet(c.path("id"))
	if err != nil {
		return sn, nil, err
	}
	addrs, err := s.store.Addresses(func(a store.Address) bool { return a.Subnet == sn.CIDR })
	return sn, addrs, err
}

func subnetReservedRanges(s *Server, c *call) (any, error) {
	sn, addrs, err := s.subnetAddresses(c)
	if err != nil {
		return nil, err
	}
	return spansView(inUse(sn, addrs)), nil
}

func subnetUnreservedRanges(s *Server, c *call) (any, error) {
	sn, addrs, err := s.subnetAddresses(c)
	if err != nil {
		return nil, err
	}
	free := freeSpans(sn, inUse(sn, addrs))
	for i := range free {
		free[i].purposes = nil
	}
	return spansView(free), nil
}

func subnetStatistics(s *Server, c *call) (any, error) {
	withRanges := c.boolean("include_ranges", false)
	c.boolean("include_suggestions", false)
	if err := c.check(); err != nil {
		return nil, err
	}
	sn, addrs, err := s.subnetAddresses(c)
	if err != nil {
		return nil, err
	}
	used := inUse(sn, addrs)
	free := freeSpans(sn, used)
	first, last := usable(sn.CIDR)
	total := rangeCount(first, last)
	var unavailable, largest int64
	for _, u := range used {
		unavailable = satAdd(unavailable, rangeCount(u.start, u.end))
	}
	for _, f := range free {
		largest = max(largest, rangeCount(f.start, f.end))
	}
	usage := 0.0
	if total > 0 {
		usage = float64(unavailable) / float64(total)
	}
	out := map[string]any{
		"num_available":     total - unavailable,
		"largest_available": largest,
		"num_unavailable":   unavailable,
		"total_addresses":   total,
		"usage":             usage,
		"usage_string":      fmt.Sprintf("%.0f%%", usage*100),
		"available_string":  fmt.Sprintf("%.0f%%", (1-usage)*100),
		"first_address":     first.String(),
		"last_address":      last.String(),
		"ip_version":        map[bool]int{true: 4, false: 6}[first.Is4()],
	}
	if withRanges {
		all := append(spansView(used), spansView(free)...)
		for i := range all {
			if all[i].Purpose == nil {
				all[i].Purpose = []string{"unused"}
			}
		}
		slices.SortFunc(all, func(a, b rangeJSON) int {
			return netip.MustParseAddr(a.Start).Compare(netip.MustParseAddr(b.Start))
		})
		out["ranges"] = all
	}
	return out, nil
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// maasTime is how MAAS's subnet views write a time.
func maasTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("Mon, 02 Jan. 2006 15:04:05")
}

// subnetIPAddresses is MAAS's op=ip_addresses: every address in use in the
// subnet, by address, with its user and the machine it belongs to.
func subnetIPAddresses(s *Server, c *call) (any, error) {
	withUser := c.boolean("with_username", true)
	withSummary := c.boolean("with_summary", true) && c.boolean("with_node_summary", true)
	if err := c.check(); err != nil {
		return nil, err
	}
	sn, addrs, err := s.subnetAddresses(c)
	if err != nil {
		return nil, err
	}
	type nodeSummary struct {
		SystemID    string `json:"system_id"`
		NodeType    int    `json:"node_type"`
		FQDN        string `json:"fqdn"`
		Hostname    string `json:"hostname"`
		IsContainer bool   `json:"is_container"`
		Via         string `json:"via,omitempty"`
	}
	type entry struct {
		IP          string       `json:"ip"`
		AllocType   int          `json:"alloc_type"`
		Created     string       `json:"created"`
		Updated     string       `json:"updated"`
		User        string       `json:"user,omitempty"`
		NodeSummary *nodeSummary `json:"node_summary,omitempty"`
	}
	out := make([]entry, 0, len(addrs))
	machines := map[string]store.Machine{}
	for _, a := range addrs {
		typ, _ := allocType(a.Kind)
		e := entry{IP: a.IP.String(), AllocType: typ, Created: maasTime(a.Created), Updated: maasTime(a.Created)}
		if withUser {
			e.User = a.Owner
		}
		if withSummary && a.MachineID != "" {
			m, ok := machines[a.MachineID]
			if !ok {
				if m, err = s.store.Machine(a.MachineID); err != nil && store.CodeOf(err) != store.CodeNotFound {
					return nil, err
				}
				machines[a.MachineID] = m
			}
			// Another user's held machine is not the caller's to see
			// (store.MayView): its address shows in use, no more.
			if m.ID != "" && store.MayView(c.who, m, m.ID) == nil {
				e.NodeSummary = &nodeSummary{SystemID: m.ID, FQDN: fqdn(m.Hostname, sn.Domain), Hostname: m.Hostname,
					Via: ifaceName(m, a.MAC)}
				if withUser && m.Owner != "" {
					e.User = m.Owner
				}
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int {
		return netip.MustParseAddr(a.IP).Compare(netip.MustParseAddr(b.IP))
	})
	return out, nil
}

// fqdn is host in domain ("host" alone when there is no domain).
func fqdn(host, domain string) string {
	domain = strings.TrimSuffix(domain, ".")
	if domain == "" {
		return host
	}
	return host + "." + domain
}
