package dhcp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// Leases is what the DHCP server needs from rackd's address management. The
// agent adapts the store to it; tests use a fake. Every method is safe for
// concurrent use. Implementations decide who gets what (sticky address,
// reservation, existing lease, dynamic address); the server only speaks the
// protocol.
type Leases interface {
	// Offer picks the address to offer (DHCPDISCOVER). Nothing durable is
	// written; the address is held for the client for a short while.
	Offer(ctx context.Context, req Request) (Lease, error)
	// Ack binds the address (DHCPREQUEST in SELECTING, INIT-REBOOT, RENEWING
	// or REBINDING state). It returns only once the lease is durable. A
	// *NakError means the client must be told no.
	Ack(ctx context.Context, req Request) (Lease, error)
	// Release ends the client's lease on ip (DHCPRELEASE).
	Release(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error
	// Decline quarantines ip, which the client found in use (DHCPDECLINE).
	Decline(ctx context.Context, mac net.HardwareAddr, ip netip.Addr) error
	// Conflict records that an ARP probe found ip in use by someone unknown:
	// it is quarantined and never offered until a human or a timeout frees it.
	Conflict(ctx context.Context, ip netip.Addr, by net.HardwareAddr) error
	// Subnet returns the options of the subnet that serves link, for
	// DHCPINFORM (no address is assigned).
	Subnet(ctx context.Context, link netip.Addr) (Lease, error)
}

// AsyncAcker is implemented by Leases that can bind an address without the
// caller waiting for the durable commit: the server then answers a
// DHCPREQUEST from the commit's completion instead of parking a worker on
// it. done is called once, from another goroutine, when the lease is durable
// or refused (a *NakError as for Ack); it must be quick and must not block.
// An error from AckAsync means the request was not taken and done will not
// be called.
type AsyncAcker interface {
	AckAsync(ctx context.Context, req Request, done func(Lease, error)) error
}

// GroupAcker is an AsyncAcker that completes requests in groups (those one
// durable commit holds): it calls done for each request of a group in turn,
// from one goroutine, one group at a time, and then the function given to
// OnGroupEnd. The server holds the ACKs of a group and sends them together
// once it ends: one system call for a batch of them rather than one each,
// and no ACK leaves before its lease is durable. OnGroupEnd replaces the
// function given before.
type GroupAcker interface {
	AsyncAcker
	OnGroupEnd(end func())
}

// Request is one client's ask.
type Request struct {
	MAC net.HardwareAddr
	// Link selects the subnet: the relay's address (giaddr) when relayed,
	// else the address of the interface the request came in on.
	Link netip.Addr
	// IP is the address the client asks for: option 50 (requested IP
	// address) or, when renewing, ciaddr. Invalid when absent.
	IP       netip.Addr
	Hostname string
	// PXE says the client is a network-boot firmware or loader (option 60
	// PXEClient/HTTPClient, or user class iPXE); it gets the short PXE lease.
	PXE bool
}

// Lease is an address and the options that go with it.
type Lease struct {
	IP        netip.Addr
	Subnet    netip.Prefix
	Router    netip.Addr // invalid: no option 3
	DNS       []netip.Addr
	Domain    string
	Hostname  string // a known machine's or reservation's name, for option 12
	LeaseTime time.Duration
	// Probe says the address is newly chosen from a dynamic range and must
	// be ARP-probed on-link before it is offered (a known machine's own
	// address and an address the client already held need no probe).
	Probe bool
}

// NakError is a refusal the client must hear as DHCPNAK (wrong subnet,
// address taken by someone else).
type NakError struct{ Reason string }

func (e *NakError) Error() string { return "nak: " + e.Reason }

// ErrNoSubnet means no managed subnet serves the link: the request is
// ignored (another server may own that network).
var ErrNoSubnet = errors.New("dhcp: no managed subnet for this link")

// ErrNotLeader means another server answers this subnet: several agents
// hear the link and one at a time leads it. The request is ignored.
var ErrNotLeader = errors.New("dhcp: another server answers this subnet")

// ErrExhausted means the subnet has no free address to offer.
var ErrExhausted = errors.New("dhcp: no free address in the dynamic ranges")
