package agent

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"rackd/netboot/dhcp"
	"rackd/store"
)

// dhcpLeases adapts the store's address management to the DHCP server.
type dhcpLeases struct{ s *store.Store }

var _ dhcp.Leases = dhcpLeases{}

func leaseRequest(r dhcp.Request) store.LeaseRequest {
	return store.LeaseRequest{MAC: r.MAC.String(), Link: r.Link, IP: r.IP, Hostname: r.Hostname, PXE: r.PXE}
}

// dhcpError turns the store's refusals into the DHCP server's vocabulary.
func dhcpError(err error) error {
	switch store.CodeOf(err) {
	case "":
		return err
	case store.CodeNak:
		return &dhcp.NakError{Reason: err.Error()}
	case store.CodeNoSubnet:
		return dhcp.ErrNoSubnet
	case store.CodeExhausted:
		return dhcp.ErrExhausted
	}
	return err
}

func leaseOf(g store.Grant) dhcp.Lease {
	return dhcp.Lease{IP: g.Address.IP, Subnet: g.Subnet.CIDR, Router: g.Subnet.Gateway, DNS: g.Subnet.DNSServers,
		Domain: g.Subnet.Domain, Hostname: g.Name, LeaseTime: g.LeaseTime, Probe: g.Probe}
}

func (d dhcpLeases) Offer(ctx context.Context, r dhcp.Request) (dhcp.Lease, error) {
	g, err := d.s.DHCPOffer(ctx, leaseRequest(r))
	if err != nil {
		return dhcp.Lease{}, dhcpError(err)
	}
	return leaseOf(g), nil
}

func (d dhcpLeases) Ack(ctx context.Context, r dhcp.Request) (dhcp.Lease, error) {
	g, err := d.s.DHCPAck(ctx, leaseRequest(r))
	if err != nil {
		return dhcp.Lease{}, dhcpError(err)
	}
	return leaseOf(g), nil
}

var _ dhcp.AsyncAcker = dhcpLeases{}

// AckAsync implements dhcp.AsyncAcker: the server answers from the commit's
// completion instead of parking a worker on it.
func (d dhcpLeases) AckAsync(ctx context.Context, r dhcp.Request, done func(dhcp.Lease, error)) error {
	return d.s.DHCPAckAsync(ctx, leaseRequest(r), func(g store.Grant, err error) {
		if err != nil {
			done(dhcp.Lease{}, dhcpError(err))
			return
		}
		done(leaseOf(g), nil)
	})
}

var _ dhcp.GroupAcker = dhcpLeases{}

// OnGroupEnd implements dhcp.GroupAcker: the store answers AckAsync from its
// group commits, and end runs once a commit has answered them all.
func (d dhcpLeases) OnGroupEnd(end func()) { d.s.OnAnswered(end) }

func (d dhcpLeases) Release(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error {
	return d.s.DHCPRelease(ctx, mac.String(), ip)
}

func (d dhcpLeases) Decline(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error {
	return dhcpError(d.s.DHCPDecline(ctx, mac.String(), ip))
}

func (d dhcpLeases) Conflict(ctx context.Context, ip netip.Addr, by net.HardwareAddr) error {
	return dhcpError(d.s.Quarantine(ctx, ip, by.String(), "answered an ARP probe before a DHCP offer"))
}

func (d dhcpLeases) Subnet(ctx context.Context, link netip.Addr) (dhcp.Lease, error) {
	sn, err := d.s.SubnetFor(link)
	if err != nil {
		return dhcp.Lease{}, dhcpError(err)
	}
	return dhcp.Lease{Subnet: sn.CIDR, Router: sn.Gateway, DNS: sn.DNSServers, Domain: sn.Domain}, nil
}

// dnsZone adapts the store to the DNS server: every answer is read from the
// store at query time.
type dnsZone struct{ s *store.Store }

func (z dnsZone) Authority(ctx context.Context, name string) (string, bool, error) {
	zones, err := z.s.DNSZones()
	if err != nil {
		return "", false, err
	}
	name = strings.ToLower(name)
	best := ""
	for _, zone := range zones {
		if (name == zone || strings.HasSuffix(name, "."+zone)) && len(zone) > len(best) {
			best = zone
		}
	}
	return best, best != "", nil
}

func (z dnsZone) Forward(ctx context.Context, name string) ([]netip.Addr, error) {
	return z.s.DNSForward(name)
}

func (z dnsZone) Reverse(ctx context.Context, ip netip.Addr) (string, error) {
	return z.s.DNSReverse(ip)
}
