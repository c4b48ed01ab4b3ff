package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"rackd/cluster"
	"rackd/netboot/dhcp"
	"rackd/store"
	"rackd/store/kv"
)

// dhcpLeases adapts the store's address management to the DHCP server. With
// several agents on one store (c not nil) it answers only the subnets this
// agent leads (dhcpLead), and every write for them carries the
// leadership's fence.
type dhcpLeases struct {
	s *store.Store
	c *cluster.Node
}

var _ dhcp.Leases = dhcpLeases{}

func leaseRequest(r dhcp.Request) store.LeaseRequest {
	return store.LeaseRequest{MAC: r.MAC.String(), Link: r.Link, IP: r.IP, Hostname: r.Hostname, PXE: r.PXE}
}

// dhcpError turns the store's refusals into the DHCP server's vocabulary.
func (d dhcpLeases) dhcpError(err error) error {
	if errors.Is(err, kv.ErrFenced) {
		// The leadership was lost while the write was on its way (this
		// agent was paused or cut off): the new leader answers. Silence,
		// not a NAK: a NAK from a server that no longer owns the subnet
		// would make a renewing client drop an address the new leader
		// would renew; silent, the client retries and rebinds (RFC 2131
		// section 4.4.5) to whoever answers now.
		d.c.CountFenced(cluster.KindDHCP)
		return fmt.Errorf("%w: %w", dhcp.ErrNotLeader, err)
	}
	return dhcpError(err)
}

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
	ctx, err := dhcpLead(ctx, d, r.Link)
	if err != nil {
		return dhcp.Lease{}, err
	}
	g, err := d.s.DHCPOffer(ctx, leaseRequest(r))
	if err != nil {
		return dhcp.Lease{}, d.dhcpError(err)
	}
	return leaseOf(g), nil
}

func (d dhcpLeases) Ack(ctx context.Context, r dhcp.Request) (dhcp.Lease, error) {
	ctx, err := dhcpLead(ctx, d, r.Link)
	if err != nil {
		return dhcp.Lease{}, err
	}
	g, err := d.s.DHCPAck(ctx, leaseRequest(r))
	if err != nil {
		return dhcp.Lease{}, d.dhcpError(err)
	}
	return leaseOf(g), nil
}

var _ dhcp.AsyncAcker = dhcpLeases{}

// AckAsync implements dhcp.AsyncAcker: the server answers from the commit's
// completion instead of parking a worker on it.
func (d dhcpLeases) AckAsync(ctx context.Context, r dhcp.Request, done func(dhcp.Lease, error)) error {
	ctx, err := dhcpLead(ctx, d, r.Link)
	if err != nil {
		return err
	}
	return d.s.DHCPAckAsync(ctx, leaseRequest(r), func(g store.Grant, err error) {
		if err != nil {
			done(dhcp.Lease{}, d.dhcpError(err))
			return
		}
		done(leaseOf(g), nil)
	})
}

var _ dhcp.GroupAcker = dhcpLeases{}

// OnGroupEnd implements dhcp.GroupAcker: the store answers AckAsync from its
// group commits, and end runs once a commit has answered them all.
func (d dhcpLeases) OnGroupEnd(end func()) { d.s.OnAnswered(end) }

// Release, Decline and Conflict name an address, which selects the subnet
// (and so its leader).

func (d dhcpLeases) Release(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error {
	ctx, err := dhcpLead(ctx, d, ip)
	if err != nil {
		return err
	}
	return d.dhcpError(d.s.DHCPRelease(ctx, mac.String(), ip))
}

func (d dhcpLeases) Decline(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error {
	ctx, err := dhcpLead(ctx, d, ip)
	if err != nil {
		return err
	}
	return d.dhcpError(d.s.DHCPDecline(ctx, mac.String(), ip))
}

func (d dhcpLeases) Conflict(ctx context.Context, ip netip.Addr, by net.HardwareAddr) error {
	ctx, err := dhcpLead(ctx, d, ip)
	if err != nil {
		return err
	}
	return d.dhcpError(d.s.Quarantine(ctx, ip, by.String(), "answered an ARP probe before a DHCP offer"))
}

func (d dhcpLeases) Subnet(ctx context.Context, link netip.Addr) (dhcp.Lease, error) {
	if _, err := dhcpLead(ctx, d, link); err != nil {
		return dhcp.Lease{}, err
	}
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
