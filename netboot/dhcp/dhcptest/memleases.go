// Package dhcptest provides an in-memory dhcp.Leases for tests and
// benchmarks of the DHCP server without rackd's store: dynamic ranges
// only, no durability, every call recorded.
package dhcptest

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"rackd/netboot/dhcp"
)

// Subnet is one subnet MemLeases serves.
type Subnet struct {
	// Prefix is the subnet; a request whose link lies in it is served
	// from it.
	Prefix    netip.Prefix
	Router    netip.Addr
	DNS       []netip.Addr
	Domain    string
	LeaseTime time.Duration
	// Start and End bound the dynamic range, both included.
	Start, End netip.Addr
}

// Call is one recorded call to MemLeases.
type Call struct {
	Op  string // "offer", "ack", "release", "decline", "conflict", "subnet"
	Req dhcp.Request
	MAC net.HardwareAddr // release, decline, conflict
	IP  netip.Addr       // release, decline, conflict; the result of offer and ack
	Err error
}

// MemLeases is a dhcp.Leases in memory. Each MAC keeps the address it was
// offered or given, in the subnet of the request's link; other addresses
// come from the dynamic range (the requested one if free, else the next
// free one after the last handed out, starting at Start) and are marked for
// an ARP probe (Lease.Probe). Declined and conflicting addresses are never
// handed out again. It is safe for concurrent use.
type MemLeases struct {
	// Hostnames, if set, gives known machines' names (option 12) by MAC
	// string.
	Hostnames map[string]string
	// Fail, if set, is called first by every method; an error it returns
	// is returned as is (to test failures and NAKs).
	Fail func(op string, req dhcp.Request) error
	// NoCalls turns off the recording of calls, for benchmarks.
	NoCalls bool

	mu          sync.Mutex
	subnets     []Subnet
	byMAC       map[string]netip.Addr
	owner       map[netip.Addr]string
	bound       map[netip.Addr]bool // acknowledged, not only offered
	quarantined map[netip.Addr]bool
	cursor      map[netip.Prefix]netip.Addr // where the search for a free address resumes
	calls       []Call
}

var _ dhcp.Leases = (*MemLeases)(nil)

// New returns a MemLeases serving subnets.
func New(subnets ...Subnet) *MemLeases {
	return &MemLeases{
		subnets:     subnets,
		byMAC:       map[string]netip.Addr{},
		owner:       map[netip.Addr]string{},
		bound:       map[netip.Addr]bool{},
		quarantined: map[netip.Addr]bool{},
		cursor:      map[netip.Prefix]netip.Addr{},
	}
}

// Calls returns the calls so far.
func (m *MemLeases) Calls() []Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// CallsOf returns the calls of one operation.
func (m *MemLeases) CallsOf(op string) []Call {
	var out []Call
	for _, c := range m.Calls() {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// Bound returns the address acknowledged to mac, if any.
func (m *MemLeases) Bound(mac net.HardwareAddr) (netip.Addr, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ip, ok := m.byMAC[mac.String()]
	return ip, ok && m.bound[ip]
}

// Quarantined reports whether ip was declined or found in use.
func (m *MemLeases) Quarantined(ip netip.Addr) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.quarantined[ip]
}

func (m *MemLeases) record(c Call) {
	if !m.NoCalls {
		m.calls = append(m.calls, c)
	}
}

func (m *MemLeases) subnet(link netip.Addr) (Subnet, bool) {
	for _, s := range m.subnets {
		if s.Prefix.Contains(link) {
			return s, true
		}
	}
	return Subnet{}, false
}

func (m *MemLeases) lease(s Subnet, ip netip.Addr, mac net.HardwareAddr) dhcp.Lease {
	l := dhcp.Lease{
		IP: ip, Subnet: s.Prefix, Router: s.Router, DNS: s.DNS,
		Domain: s.Domain, LeaseTime: s.LeaseTime,
	}
	if mac != nil {
		l.Hostname = m.Hostnames[mac.String()]
	}
	return l
}

func inRange(s Subnet, ip netip.Addr) bool {
	return ip.IsValid() && s.Start.Compare(ip) <= 0 && ip.Compare(s.End) <= 0
}

func (m *MemLeases) free(ip netip.Addr, mac string) bool {
	o, taken := m.owner[ip]
	return !m.quarantined[ip] && (!taken || o == mac)
}

// Offer implements dhcp.Leases.
func (m *MemLeases) Offer(ctx context.Context, req dhcp.Request) (dhcp.Lease, error) {
	if m.Fail != nil {
		if err := m.Fail("offer", req); err != nil {
			return dhcp.Lease{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.offer(req)
	m.record(Call{Op: "offer", Req: req, IP: l.IP, Err: err})
	return l, err
}

func (m *MemLeases) offer(req dhcp.Request) (dhcp.Lease, error) {
	s, ok := m.subnet(req.Link)
	if !ok {
		return dhcp.Lease{}, dhcp.ErrNoSubnet
	}
	mac := req.MAC.String()
	if ip, ok := m.byMAC[mac]; ok && s.Prefix.Contains(ip) && !m.quarantined[ip] {
		return m.lease(s, ip, req.MAC), nil // the client's own address: no probe
	}
	pick := netip.Addr{}
	if inRange(s, req.IP) && m.free(req.IP, mac) {
		pick = req.IP
	} else {
		pick = m.search(s, mac)
	}
	if !pick.IsValid() {
		return dhcp.Lease{}, dhcp.ErrExhausted
	}
	m.take(pick, mac)
	l := m.lease(s, pick, req.MAC)
	l.Probe = true
	return l, nil
}

// search finds a free address in the range, resuming after the last one
// handed out and wrapping around once, so that handing out a whole range
// costs linear time rather than quadratic.
func (m *MemLeases) search(s Subnet, mac string) netip.Addr {
	start, ok := m.cursor[s.Prefix]
	if !ok || !inRange(s, start) {
		start = s.Start
	}
	ip := start
	for {
		if m.free(ip, mac) {
			if next := ip.Next(); inRange(s, next) {
				m.cursor[s.Prefix] = next
			} else {
				m.cursor[s.Prefix] = s.Start
			}
			return ip
		}
		ip = ip.Next()
		if !inRange(s, ip) {
			ip = s.Start
		}
		if ip == start {
			return netip.Addr{}
		}
	}
}

func (m *MemLeases) take(ip netip.Addr, mac string) {
	if old, ok := m.byMAC[mac]; ok && old != ip {
		delete(m.owner, old)
		delete(m.bound, old)
	}
	m.byMAC[mac] = ip
	m.owner[ip] = mac
}

// Ack implements dhcp.Leases: the requested address is given if it lies in
// the link's dynamic range and nobody else holds it; otherwise a NAK.
func (m *MemLeases) Ack(ctx context.Context, req dhcp.Request) (dhcp.Lease, error) {
	if m.Fail != nil {
		if err := m.Fail("ack", req); err != nil {
			return dhcp.Lease{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.ack(req)
	m.record(Call{Op: "ack", Req: req, IP: l.IP, Err: err})
	return l, err
}

func (m *MemLeases) ack(req dhcp.Request) (dhcp.Lease, error) {
	s, ok := m.subnet(req.Link)
	if !ok {
		return dhcp.Lease{}, dhcp.ErrNoSubnet
	}
	mac := req.MAC.String()
	switch {
	case !s.Prefix.Contains(req.IP):
		return dhcp.Lease{}, &dhcp.NakError{Reason: "wrong network"}
	case !inRange(s, req.IP):
		return dhcp.Lease{}, &dhcp.NakError{Reason: "address not in a dynamic range"}
	case !m.free(req.IP, mac):
		return dhcp.Lease{}, &dhcp.NakError{Reason: "address in use"}
	}
	m.take(req.IP, mac)
	m.bound[req.IP] = true
	return m.lease(s, req.IP, req.MAC), nil
}

// Release implements dhcp.Leases.
func (m *MemLeases) Release(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error {
	if m.Fail != nil {
		if err := m.Fail("release", dhcp.Request{MAC: mac, IP: ip}); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record(Call{Op: "release", MAC: mac, IP: ip})
	if m.owner[ip] == mac.String() {
		delete(m.owner, ip)
		delete(m.bound, ip)
		delete(m.byMAC, mac.String())
	}
	return nil
}

// Decline implements dhcp.Leases.
func (m *MemLeases) Decline(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error {
	if m.Fail != nil {
		if err := m.Fail("decline", dhcp.Request{MAC: mac, IP: ip}); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record(Call{Op: "decline", MAC: mac, IP: ip})
	m.quarantine(ip)
	return nil
}

// Conflict implements dhcp.Leases.
func (m *MemLeases) Conflict(ctx context.Context, ip netip.Addr, by net.HardwareAddr) error {
	if m.Fail != nil {
		if err := m.Fail("conflict", dhcp.Request{MAC: by, IP: ip}); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.record(Call{Op: "conflict", MAC: by, IP: ip})
	m.quarantine(ip)
	return nil
}

func (m *MemLeases) quarantine(ip netip.Addr) {
	if mac, ok := m.owner[ip]; ok {
		delete(m.byMAC, mac)
		delete(m.owner, ip)
		delete(m.bound, ip)
	}
	m.quarantined[ip] = true
}

// Subnet implements dhcp.Leases.
func (m *MemLeases) Subnet(ctx context.Context, link netip.Addr) (dhcp.Lease, error) {
	if m.Fail != nil {
		if err := m.Fail("subnet", dhcp.Request{Link: link}); err != nil {
			return dhcp.Lease{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.subnet(link)
	var err error
	if !ok {
		err = dhcp.ErrNoSubnet
	}
	m.record(Call{Op: "subnet", Req: dhcp.Request{Link: link}, Err: err})
	if err != nil {
		return dhcp.Lease{}, err
	}
	return m.lease(s, netip.Addr{}, nil), nil
}
