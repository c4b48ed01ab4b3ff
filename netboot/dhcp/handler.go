package dhcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"rackd/netboot"
)

// Interface is where a request came in: what the server knows about the
// link besides the packet.
type Interface struct {
	// Name is the receiving network interface; it is where ARP probes go.
	// Empty in listen-on-address mode, where nothing is probed.
	Name string
	// Addr is the server's IPv4 address there: the server identifier
	// (option 54) of every reply and, for requests that were not relayed,
	// the address that selects the subnet.
	Addr netip.Addr
}

// Prober finds out whether an address is in use on a link before it is
// offered (netboot/arp.Set implements it).
type Prober interface {
	// Probe reports whether some host answers for ip on the interface
	// named ifname, and its hardware address.
	Probe(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, bool, error)
}

// Reasons a request gets no reply, besides ErrNoSubnet, ErrExhausted and
// ErrNotLeader from Leases. ServeDHCP returns them wrapped; the server counts them as
// drops, not errors.
var (
	// ErrMalformed is a request that breaks RFC 2131: not a BOOTREQUEST,
	// not Ethernet, no or an unknown message type, or missing the fields
	// its message type needs.
	ErrMalformed = errors.New("dhcp: malformed request")
	// ErrOtherServer is a request whose server identifier (option 54)
	// names another server: the client chose that server's offer (RFC
	// 2131 section 4.3.2).
	ErrOtherServer = errors.New("dhcp: request for another server")
)

// DefaultOfferAttempts bounds how many addresses a DHCPDISCOVER may try
// when ARP probes keep finding them in use.
const DefaultOfferAttempts = 3

// defaultLeaseTime stands in when Leases returns a lease without a time:
// option 51 is mandatory in DHCPOFFER and DHCPACK (RFC 2131 table 3).
const defaultLeaseTime = time.Hour

// pxeVendorOptions is option 43 for PXEClient replies: sub-option 6,
// PXE_DISCOVERY_CONTROL, with bit 3 set: "boot the file named in this
// offer", so the firmware skips boot server discovery (PXE 2.1 section
// 2.4.1.4), then the end tag. Some ROMs ignore an offer echoing PXEClient
// without it.
const pxeVendorOptions = "\x06\x01\x08\xff"

// Handler answers DHCPv4 requests (RFC 2131) from what Leases decides and
// netboot.ChooseBoot picks. It owns the decision; the Server owns the
// sockets and sends the reply where RFC 2131 section 4.1 says. It is safe
// for concurrent use.
type Handler struct {
	leases Leases
	prober Prober
	boot   netboot.BootConfig
	// boots remembers bootFor per interface address (copy on write,
	// under bootsMu): building the HTTP base URL allocates.
	boots         atomic.Pointer[map[netip.Addr]netboot.BootConfig]
	bootsMu       sync.Mutex
	log           *slog.Logger
	offerAttempts int
	m             *metrics // nil when used alone (tests)
}

// NewHandler returns a Handler. prober may be nil: nothing is probed. log may
// be nil: nothing is logged.
func NewHandler(leases Leases, prober Prober, boot netboot.BootConfig, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{leases: leases, prober: prober, boot: boot, log: log, offerAttempts: DefaultOfferAttempts}
}

// ServeDHCP answers one request that arrived on in. A nil reply means none
// is due: RELEASE and DECLINE, or a request that is dropped, in which case
// the error says why (ErrMalformed, ErrOtherServer, ErrNoSubnet,
// ErrExhausted, wrapped) or what failed.
func (h *Handler) ServeDHCP(ctx context.Context, req *dhcpv4.DHCPv4, in Interface) (*dhcpv4.DHCPv4, error) {
	return h.serve(ctx, req, in, true)
}

// errWouldBlock is serve's answer, with mayBlock false, to a request whose
// handling has to wait: on a durable commit or an ARP probe.
var errWouldBlock = errors.New("dhcp: request must wait; hand it to a worker")

// needsProbe is errWouldBlock for a DHCPDISCOVER whose offer is chosen but
// must be probed first: the worker goes on from that offer (resume).
type needsProbe struct{ lease Lease }

func (e *needsProbe) Error() string { return errWouldBlock.Error() }
func (e *needsProbe) Unwrap() error { return errWouldBlock }

// resume finishes, where waiting is allowed, a request that serve without
// mayBlock handed over with err.
func (h *Handler) resume(ctx context.Context, req *dhcpv4.DHCPv4, in Interface, err error) (*dhcpv4.DHCPv4, error) {
	if np, ok := err.(*needsProbe); ok {
		return h.discover(ctx, req, in, true, &np.lease)
	}
	return h.serve(ctx, req, in, true)
}

// serve is ServeDHCP. With mayBlock false it answers only what needs no
// wait (an offer that needs no probe, an INFORM) and returns errWouldBlock
// for the rest, so that a socket's reader can answer those itself.
func (h *Handler) serve(ctx context.Context, req *dhcpv4.DHCPv4, in Interface, mayBlock bool) (*dhcpv4.DHCPv4, error) {
	if err := check(req, in); err != nil {
		return nil, err
	}
	mt := messageType(req)
	if !mayBlock && mt != dhcpv4.MessageTypeDiscover && mt != dhcpv4.MessageTypeInform {
		return nil, errWouldBlock
	}
	switch mt {
	case dhcpv4.MessageTypeDiscover:
		return h.discover(ctx, req, in, mayBlock, nil)
	case dhcpv4.MessageTypeRequest:
		return h.request(ctx, req, in)
	case dhcpv4.MessageTypeRelease:
		return nil, h.release(ctx, req, in)
	case dhcpv4.MessageTypeDecline:
		return nil, h.decline(ctx, req, in)
	case dhcpv4.MessageTypeInform:
		return h.inform(ctx, req, in)
	default:
		return nil, fmt.Errorf("%w: message type %v", ErrMalformed, mt)
	}
}

// check refuses what no message type is served for.
func check(req *dhcpv4.DHCPv4, in Interface) error {
	if !in.Addr.Is4() {
		return fmt.Errorf("dhcp: interface %q has no IPv4 address", in.Name)
	}
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return fmt.Errorf("%w: op %v", ErrMalformed, req.OpCode)
	}
	// Leases are keyed by MAC, so only Ethernet is served (InfiniBand
	// clients, RFC 4390, carry no chaddr).
	if req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6 {
		return fmt.Errorf("%w: hardware type %v, length %d", ErrMalformed, req.HWType, len(req.ClientHWAddr))
	}
	return nil
}

// requestAsync is request for Leases that bind asynchronously: finish gets
// the reply, or why there is none, once the lease is durable. When it
// returns an error, finish is not called.
func (h *Handler) requestAsync(ctx context.Context, req *dhcpv4.DHCPv4, in Interface, a AsyncAcker, finish func(*dhcpv4.DHCPv4, error)) error {
	if err := check(req, in); err != nil {
		return err
	}
	r, client, err := h.requestOf(req, in)
	if err != nil {
		return err
	}
	return a.AckAsync(ctx, r, func(lease Lease, err error) {
		finish(h.acked(req, in, client, r, lease, err))
	})
}

// discover answers DHCPDISCOVER with DHCPOFFER (RFC 2131 section 4.3.1).
// A newly chosen dynamic address is ARP-probed first when the client is on
// one of our links; one that answers is reported to Leases as a conflict,
// and another is asked for, a bounded number of times. Without mayBlock, an
// offer that needs a probe returns errWouldBlock (the address stays held for
// the client) wrapped in a *needsProbe, and resume goes on from that offer
// (first).
func (h *Handler) discover(ctx context.Context, req *dhcpv4.DHCPv4, in Interface, mayBlock bool, first *Lease) (*dhcpv4.DHCPv4, error) {
	r, client := h.newRequest(req, in)
	r.IP = optAddr(req, dhcpv4.OptionRequestedIPAddress) // a hint only (section 4.3.1)
	relayed := isSet(req.GatewayIPAddr)
	var lease Lease
	for attempt := 1; ; attempt++ {
		var err error
		if attempt == 1 && first != nil {
			lease = *first
		} else {
			lease, err = h.leases.Offer(ctx, r)
		}
		if err != nil {
			return nil, fmt.Errorf("dhcp: offer for %v: %w", r.MAC, err)
		}
		if !lease.IP.Is4() {
			return nil, fmt.Errorf("dhcp: offer for %v: leases returned %v, not an IPv4 address", r.MAC, lease.IP)
		}
		// A relayed client is on a link beyond a router, where our
		// ARP cannot reach.
		if !lease.Probe || relayed || h.prober == nil || in.Name == "" {
			break
		}
		if !mayBlock {
			return nil, &needsProbe{lease: lease}
		}
		mac, inUse, err := h.prober.Probe(ctx, in.Name, lease.IP)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			// A broken probe must not take DHCP down with it: offer
			// unprobed, as a server without probing would.
			h.log.Warn("arp probe failed, offering unprobed", "interface", in.Name, "ip", lease.IP, "err", err)
			break
		}
		if !inUse {
			break
		}
		h.m.conflict()
		h.log.Warn("address in use by an unknown host, quarantined", "ip", lease.IP, "by", mac.String(), "interface", in.Name)
		if err := h.leases.Conflict(ctx, lease.IP, mac); err != nil {
			return nil, fmt.Errorf("dhcp: record conflict on %v: %w", lease.IP, err)
		}
		if attempt >= h.offerAttempts {
			return nil, fmt.Errorf("%w: %d probed addresses in use", ErrExhausted, attempt)
		}
	}
	reply := newReply(req, dhcpv4.MessageTypeOffer, in.Addr)
	reply.msg.YourIPAddr = reply.ip4(lease.IP)
	addLease(reply, lease, true)
	h.addBoot(reply, req, client, in)
	return &reply.msg, nil
}

// request answers DHCPREQUEST (RFC 2131 section 4.3.2). The client's state
// shows in the fields it sets:
//   - SELECTING: server identifier and requested IP (option 50); ciaddr 0.
//   - INIT-REBOOT: requested IP, no server identifier, ciaddr 0.
//   - RENEWING (unicast) and REBINDING (broadcast): ciaddr, neither option.
func (h *Handler) request(ctx context.Context, req *dhcpv4.DHCPv4, in Interface) (*dhcpv4.DHCPv4, error) {
	r, client, err := h.requestOf(req, in)
	if err != nil {
		return nil, err
	}
	lease, err := h.leases.Ack(ctx, r)
	return h.acked(req, in, client, r, lease, err)
}

// requestOf reads what a DHCPREQUEST asks for.
func (h *Handler) requestOf(req *dhcpv4.DHCPv4, in Interface) (Request, netboot.Client, error) {
	r, client := h.newRequest(req, in)
	sid := optAddr(req, dhcpv4.OptionServerIdentifier)
	requested := optAddr(req, dhcpv4.OptionRequestedIPAddress)
	ciaddr := addr4(req.ClientIPAddr)
	switch {
	case sid.IsValid():
		if sid != in.Addr {
			return r, client, fmt.Errorf("%w: %v", ErrOtherServer, sid)
		}
		if !set(requested) {
			return r, client, fmt.Errorf("%w: SELECTING request without requested address", ErrMalformed)
		}
		r.IP = requested
	case set(ciaddr):
		r.IP = ciaddr
	case set(requested):
		r.IP = requested
	default:
		return r, client, fmt.Errorf("%w: request names no address", ErrMalformed)
	}
	return r, client, nil
}

// acked builds the answer to a DHCPREQUEST from what Leases said.
func (h *Handler) acked(req *dhcpv4.DHCPv4, in Interface, client netboot.Client, r Request, lease Lease, err error) (*dhcpv4.DHCPv4, error) {
	var nak *NakError
	if err != nil && errors.As(err, &nak) { // As costs an allocation
		return h.nak(req, in, nak.Reason), nil
	}
	if err != nil {
		// Among them ErrNoSubnet: section 4.3.2 wants silence from a
		// server that has no record of an INIT-REBOOT client's network.
		return nil, fmt.Errorf("dhcp: ack for %v: %w", r.MAC, err)
	}
	if lease.IP != r.IP {
		// The client can only use the address it asked for.
		return h.nak(req, in, "requested address not available"), nil
	}
	reply := newReply(req, dhcpv4.MessageTypeAck, in.Addr)
	reply.msg.ClientIPAddr = req.ClientIPAddr
	reply.msg.YourIPAddr = reply.ip4(lease.IP)
	addLease(reply, lease, true)
	h.addBoot(reply, req, client, in)
	return &reply.msg, nil
}

// nak builds a DHCPNAK: only the message type, server identifier and a
// message (option 56) may be in it (RFC 2131 table 3). Through a relay the
// broadcast bit is set, for the client may not have a usable address
// (section 4.3.2).
func (h *Handler) nak(req *dhcpv4.DHCPv4, in Interface, reason string) *dhcpv4.DHCPv4 {
	reply := newReply(req, dhcpv4.MessageTypeNak, in.Addr)
	reply.str(dhcpv4.OptionMessage, reason)
	if isSet(req.GatewayIPAddr) {
		reply.msg.SetBroadcast()
	}
	return &reply.msg
}

// release handles DHCPRELEASE (RFC 2131 section 4.3.4): the address is in
// ciaddr; nothing is sent back.
func (h *Handler) release(ctx context.Context, req *dhcpv4.DHCPv4, in Interface) error {
	if err := checkServerID(req, in); err != nil {
		return err
	}
	ip := addr4(req.ClientIPAddr)
	if !set(ip) {
		return fmt.Errorf("%w: release without ciaddr", ErrMalformed)
	}
	if err := h.leases.Release(ctx, req.ClientHWAddr, ip); err != nil {
		return fmt.Errorf("dhcp: release %v: %w", ip, err)
	}
	return nil
}

// decline handles DHCPDECLINE (RFC 2131 section 4.3.3): the client found
// the address (option 50) in use; it is quarantined, nothing is sent back.
func (h *Handler) decline(ctx context.Context, req *dhcpv4.DHCPv4, in Interface) error {
	if err := checkServerID(req, in); err != nil {
		return err
	}
	ip := optAddr(req, dhcpv4.OptionRequestedIPAddress)
	if !set(ip) {
		return fmt.Errorf("%w: decline without requested address", ErrMalformed)
	}
	h.log.Warn("client declined an address in use", "mac", req.ClientHWAddr.String(), "ip", ip)
	if err := h.leases.Decline(ctx, req.ClientHWAddr, ip); err != nil {
		return fmt.Errorf("dhcp: decline %v: %w", ip, err)
	}
	return nil
}

// inform answers DHCPINFORM (RFC 2131 section 4.3.5): a client that already
// has an address wants the subnet's options. The DHCPACK carries no lease
// time and no yiaddr.
func (h *Handler) inform(ctx context.Context, req *dhcpv4.DHCPv4, in Interface) (*dhcpv4.DHCPv4, error) {
	r, client := h.newRequest(req, in)
	lease, err := h.leases.Subnet(ctx, r.Link)
	if err != nil {
		return nil, fmt.Errorf("dhcp: inform on %v: %w", r.Link, err)
	}
	lease.Hostname = "" // a subnet has no host name to hand out
	reply := newReply(req, dhcpv4.MessageTypeAck, in.Addr)
	reply.msg.ClientIPAddr = req.ClientIPAddr
	addLease(reply, lease, false)
	h.addBoot(reply, req, client, in)
	return &reply.msg, nil
}

// newRequest gathers what Leases needs to know about the client.
func (h *Handler) newRequest(req *dhcpv4.DHCPv4, in Interface) (Request, netboot.Client) {
	client := netboot.ParseClient(req)
	link := in.Addr
	if isSet(req.GatewayIPAddr) {
		// RFC 2131 section 4.3.1: the relay's address on the client's
		// link selects the subnet.
		link = addr4(req.GatewayIPAddr)
	}
	return Request{
		MAC:      client.MAC,
		Link:     link,
		Hostname: req.HostName(),
		PXE:      client.NetBoot(),
	}, client
}

// addBoot adds the boot fields of a network-booting client: siaddr, the
// file field, option 60 echoed, option 43 for PXE, and options 66 and 67
// when the client asked for them (option 55), or 67 when the file name does
// not fit the 128-byte file field (RFC 2132 section 9.5).
func (h *Handler) addBoot(reply *draft, req *dhcpv4.DHCPv4, client netboot.Client, in Interface) {
	boot, ok := netboot.ChooseBoot(client, h.bootFor(in))
	if !ok {
		return
	}
	if boot.NextServer.Is4() {
		reply.msg.ServerIPAddr = reply.ip4(boot.NextServer)
	}
	// The field is NUL-terminated: 127 usable bytes.
	if len(boot.File) < 128 {
		reply.msg.BootFileName = boot.File
	}
	reply.str(dhcpv4.OptionClassIdentifier, boot.VendorClass)
	if boot.VendorClass == netboot.VendorPXE {
		reply.str(dhcpv4.OptionVendorSpecificInformation, pxeVendorOptions)
	}
	// Option 55 is a list of option codes, a byte each (RFC 2132 section
	// 9.8).
	asked := req.Options[dhcpv4.OptionParameterRequestList.Code()]
	if bytes.IndexByte(asked, dhcpv4.OptionTFTPServerName.Code()) >= 0 && boot.NextServer.Is4() {
		n := len(reply.buf)
		reply.buf = boot.NextServer.AppendTo(reply.buf)
		reply.msg.Options[dhcpv4.OptionTFTPServerName.Code()] = reply.buf[n:len(reply.buf):len(reply.buf)]
	}
	if bytes.IndexByte(asked, dhcpv4.OptionBootfileName.Code()) >= 0 || len(boot.File) >= 128 {
		reply.str(dhcpv4.OptionBootfileName, boot.File)
	}
}

// newReply starts a reply to req as RFC 2131 table 3 lays it out: hops 0,
// xid, flags, giaddr and chaddr copied, the other addresses zero; message
// type and server identifier. It echoes the client identifier (RFC 6842
// section 3) and the relay agent information (RFC 3046 section 2.2, which
// the encoder puts last as section 2.1 wants). It is built by hand rather
// than with dhcpv4.NewReplyFromRequest, which draws a random transaction ID
// from crypto/rand only to overwrite it, and its options are set through the
// draft rather than the library's constructors (see encode.go).
func newReply(req *dhcpv4.DHCPv4, mt dhcpv4.MessageType, serverID netip.Addr) *draft {
	reply := &draft{msg: dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeBootReply,
		HWType:        req.HWType,
		TransactionID: req.TransactionID,
		Flags:         req.Flags,
		ClientIPAddr:  net.IPv4zero,
		YourIPAddr:    net.IPv4zero,
		ServerIPAddr:  net.IPv4zero,
		GatewayIPAddr: ip4OrZero(req.GatewayIPAddr),
		ClientHWAddr:  req.ClientHWAddr,
		Options:       optionMaps.Get().(dhcpv4.Options),
	}}
	reply.buf = reply.arena[:0]
	reply.bytes(dhcpv4.OptionDHCPMessageType, []byte{byte(mt)})
	reply.addr(dhcpv4.OptionServerIdentifier, serverID)
	for _, code := range [...]dhcpv4.OptionCode{dhcpv4.OptionClientIdentifier, dhcpv4.OptionRelayAgentInformation} {
		if v := req.Options[code.Code()]; v != nil {
			reply.msg.Options[code.Code()] = v // shared with the request, as OptGeneric would
		}
	}
	return reply
}

// addLease adds a lease's configuration options (RFC 2132): subnet mask
// (1), router (3), DNS servers (6), domain (15), host name (12) and, with
// times, lease time (51), T1 (58) and T2 (59). T1 and T2 are the defaults
// of RFC 2131 section 4.4.5: 0.5 and 0.875 of the lease.
func addLease(reply *draft, l Lease, times bool) {
	if l.Subnet.Addr().Is4() {
		if bits := l.Subnet.Bits(); bits >= 0 && bits <= 32 {
			var mask [4]byte
			binary.BigEndian.PutUint32(mask[:], ^uint32(0)<<(32-bits))
			reply.bytes(dhcpv4.OptionSubnetMask, mask[:])
		} else {
			reply.msg.Options[dhcpv4.OptionSubnetMask.Code()] = nil // net.CIDRMask's nil
		}
	}
	if l.Router.Is4() {
		reply.addr(dhcpv4.OptionRouter, l.Router)
	}
	n := len(reply.buf)
	for _, a := range l.DNS {
		if a.Is4() {
			a4 := a.As4()
			reply.buf = append(reply.buf, a4[:]...)
		}
	}
	if len(reply.buf) > n {
		reply.msg.Options[dhcpv4.OptionDomainNameServer.Code()] = reply.buf[n:len(reply.buf):len(reply.buf)]
	}
	if l.Domain != "" {
		reply.str(dhcpv4.OptionDomainName, l.Domain)
	}
	if l.Hostname != "" {
		reply.str(dhcpv4.OptionHostName, l.Hostname)
	}
	if !times {
		return
	}
	lt := l.LeaseTime
	if lt <= 0 {
		lt = defaultLeaseTime
	}
	lt = min(lt.Truncate(time.Second), dhcpv4.MaxLeaseTime)
	reply.seconds(dhcpv4.OptionIPAddressLeaseTime, lt)
	reply.seconds(dhcpv4.OptionRenewTimeValue, lt/2)
	reply.seconds(dhcpv4.OptionRebindingTimeValue, lt*7/8)
}

// checkServerID drops a RELEASE or DECLINE meant for another server; both
// must carry the identifier (RFC 2131 table 5), but a missing one is
// tolerated, as the client may be confused but is still ours to listen to.
func checkServerID(req *dhcpv4.DHCPv4, in Interface) error {
	if sid := optAddr(req, dhcpv4.OptionServerIdentifier); sid.IsValid() && sid != in.Addr {
		return fmt.Errorf("%w: %v", ErrOtherServer, sid)
	}
	return nil
}

// messageType is m.MessageType() without its allocations: option 53 is
// one byte, anything else is no message type.
func messageType(m *dhcpv4.DHCPv4) dhcpv4.MessageType {
	if v := m.Options[dhcpv4.OptionDHCPMessageType.Code()]; len(v) == 1 {
		return dhcpv4.MessageType(v[0])
	}
	return dhcpv4.MessageTypeNone
}

// optAddr is an address option as dhcpv4.GetIP reads it (exactly 4 bytes,
// else none: the zero Addr), without its two allocations.
func optAddr(m *dhcpv4.DHCPv4, code dhcpv4.OptionCode) netip.Addr {
	if v := m.Options[code.Code()]; len(v) == net.IPv4len {
		return netip.AddrFrom4([4]byte(v))
	}
	return netip.Addr{}
}

// addr4 converts a packet's IPv4 address; anything else is the zero Addr.
func addr4(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip.To4())
	if !ok {
		return netip.Addr{}
	}
	return a
}

// isSet reports whether ip is an IPv4 address other than 0.0.0.0.
func isSet(ip net.IP) bool { return set(addr4(ip)) }

// set reports whether a is an IPv4 address other than 0.0.0.0.
func set(a netip.Addr) bool { return a.Is4() && !a.IsUnspecified() }

func ip4OrZero(ip net.IP) net.IP {
	if ip4 := ip.To4(); ip4 != nil {
		return ip4
	}
	return net.IPv4zero
}

// maxBootsCached bounds the interface addresses Handler.bootFor remembers;
// beyond it, the configuration is built per request.
const maxBootsCached = 64

// bootFor is bootFor(h.boot, in), remembered for in.Addr.
func (h *Handler) bootFor(in Interface) netboot.BootConfig {
	old := h.boots.Load()
	if old != nil {
		if cfg, ok := (*old)[in.Addr]; ok {
			return cfg
		}
	}
	cfg := bootFor(h.boot, in)
	h.bootsMu.Lock()
	defer h.bootsMu.Unlock()
	old = h.boots.Load()
	if old == nil || len(*old) < maxBootsCached {
		m := make(map[netip.Addr]netboot.BootConfig, 1)
		if old != nil {
			maps.Copy(m, *old)
		}
		m[in.Addr] = cfg
		h.boots.Store(&m)
	}
	return cfg
}

// bootFor fills what the configuration left to the receiving interface: the
// TFTP server and the HTTP base default to this interface's address, which
// is the one the client (or its relay) reached.
func bootFor(cfg netboot.BootConfig, in Interface) netboot.BootConfig {
	if !in.Addr.Is4() {
		return cfg
	}
	if !cfg.TFTPServer.IsValid() {
		cfg.TFTPServer = in.Addr
	}
	if cfg.HTTPBase == "" && cfg.HTTPPort != 0 {
		cfg.HTTPBase = "http://" + netip.AddrPortFrom(in.Addr, uint16(cfg.HTTPPort)).String()
	}
	return cfg
}
