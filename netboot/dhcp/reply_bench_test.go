package dhcp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"

	"rackd/netboot"
)

// fixedLeases answers every Offer and Ack with the same lease (or Ack with
// ackErr), so that the benchmarks below measure the handler's reply, not an
// address manager.
type fixedLeases struct {
	l      Lease
	ackErr error
}

func (f fixedLeases) Offer(context.Context, Request) (Lease, error) { return f.l, nil }
func (f fixedLeases) Ack(_ context.Context, r Request) (Lease, error) {
	if f.ackErr != nil {
		return Lease{}, f.ackErr
	}
	l := f.l
	l.IP = r.IP
	return l, nil
}
func (fixedLeases) Release(context.Context, net.HardwareAddr, netip.Addr) error { return nil }
func (fixedLeases) Decline(context.Context, net.HardwareAddr, netip.Addr) error { return nil }
func (fixedLeases) Conflict(context.Context, netip.Addr, net.HardwareAddr) error {
	return nil
}
func (f fixedLeases) Subnet(context.Context, netip.Addr) (Lease, error) { return f.l, nil }

var (
	benchIn    = Interface{Name: "eth0", Addr: netip.MustParseAddr("10.0.0.1")}
	benchMAC   = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	benchRelay = net.IPv4(10, 1, 0, 1).To4()
	benchLease = Lease{
		IP:        netip.MustParseAddr("10.1.0.123"),
		Subnet:    netip.MustParsePrefix("10.1.0.0/16"),
		Router:    netip.MustParseAddr("10.1.0.1"),
		DNS:       []netip.Addr{netip.MustParseAddr("10.0.0.53"), netip.MustParseAddr("10.0.0.54")},
		Domain:    "rack.test",
		LeaseTime: time.Hour,
	}
)

// benchRequests are a relayed DISCOVER and REQUEST as perfdhcp sends them
// in make bench-dhcp: message type, client identifier, parameter request
// list, and for the REQUEST the server identifier and requested address.
func benchRequests(tb testing.TB) (discover, request *dhcpv4.DHCPv4) {
	tb.Helper()
	clientID := append([]byte{1}, benchMAC...)
	d, err := dhcpv4.NewDiscovery(benchMAC,
		dhcpv4.WithRelay(benchRelay),
		dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientIdentifier, clientID)),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionDomainName, dhcpv4.OptionBroadcastAddress))
	if err != nil {
		tb.Fatal(err)
	}
	r, err := dhcpv4.NewDiscovery(benchMAC,
		dhcpv4.WithRelay(benchRelay),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientIdentifier, clientID)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(benchIn.Addr.AsSlice())),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(benchLease.IP.AsSlice())),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionDomainName, dhcpv4.OptionBroadcastAddress))
	if err != nil {
		tb.Fatal(err)
	}
	// As the server sees them: through the wire format.
	for _, p := range []**dhcpv4.DHCPv4{&d, &r} {
		if *p, err = dhcpv4.FromBytes((*p).ToBytes()); err != nil {
			tb.Fatal(err)
		}
	}
	return d, r
}

// BenchmarkReply is the handler building a DHCPOFFER or DHCPACK and its
// encoding for the wire, as the server does per request (leases answer at
// once; the address manager is measured elsewhere).
func BenchmarkReply(b *testing.B) {
	d, r := benchRequests(b)
	pxeD, err := dhcpv4.FromBytes(d.ToBytes())
	if err != nil {
		b.Fatal(err)
	}
	pxeD.UpdateOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016"))
	pxeD.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7}))
	h := NewHandler(fixedLeases{l: benchLease}, nil, netboot.BootConfig{HTTPPort: 5240}, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		req  *dhcpv4.DHCPv4
	}{{"offer", d}, {"ack", r}, {"offer-pxe", pxeD}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				reply, err := h.serve(ctx, c.req, benchIn, true)
				if err != nil {
					b.Fatal(err)
				}
				if err := send(discardConn{}, reply, benchDst); err != nil {
					b.Fatal(err)
				}
				recycle(reply)
			}
		})
	}
}

// discardConn is a socket that sends nothing.
type discardConn struct{ net.PacketConn }

func (discardConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	if len(b) < bootpMinLen {
		return 0, fmt.Errorf("short reply: %d bytes", len(b))
	}
	return len(b), nil
}

var benchDst = &net.UDPAddr{IP: benchRelay, Port: dhcpv4.ServerPort}

// BenchmarkParse is the parsing of a request as the server's reader does
// it, and as the library does it.
func BenchmarkParse(b *testing.B) {
	d, r := benchRequests(b)
	for _, p := range []struct {
		name  string
		parse func([]byte) (*dhcpv4.DHCPv4, error)
	}{{"server", parseRequest}, {"library", dhcpv4.FromBytes}} {
		for _, c := range []struct {
			name string
			pkt  []byte
		}{{"discover", d.ToBytes()}, {"request", r.ToBytes()}} {
			b.Run(c.name+"/"+p.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.parse(c.pkt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// loopConn hands the server the same request n times, discards the replies,
// and ends the serving when the last reply is sent.
type loopConn struct {
	net.PacketConn
	pkt    []byte
	n      int
	sent   int
	stop   context.CancelFunc
	closed chan struct{}
	once   sync.Once
}

func (c *loopConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if c.n == 0 {
		<-c.closed
		return 0, nil, net.ErrClosed
	}
	c.n--
	return copy(b, c.pkt), benchDst, nil
}

func (c *loopConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	if c.sent++; c.n == 0 {
		c.stop()
	}
	return len(b), nil
}

func (c *loopConn) Close() error        { c.once.Do(func() { close(c.closed) }); return nil }
func (c *loopConn) LocalAddr() net.Addr { return benchDst }

// BenchmarkServeDiscover is the server answering a relayed DISCOVER: read,
// parse, count, handle, encode and send, without the kernel.
func BenchmarkServeDiscover(b *testing.B) {
	d, _ := benchRequests(b)
	b.ReportAllocs()
	srv, err := New(Config{Workers: 1}, fixedLeases{l: benchLease}, nil, netboot.BootConfig{HTTPPort: 5240}, nil, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &loopConn{pkt: d.ToBytes(), n: b.N, stop: cancel, closed: make(chan struct{})}
	b.ResetTimer()
	if err := srv.ServeConns(ctx, []Conn{{PC: c, In: benchIn}}); err != nil {
		b.Fatal(err)
	}
	if c.sent != b.N {
		b.Fatalf("%d replies to %d requests", c.sent, b.N)
	}
}

// BenchmarkEncode is the encoding of an ACK alone: the server's (a map of
// a reply's size is sorted as it is read; a larger one through a bitmap)
// and the library's.
func BenchmarkEncode(b *testing.B) {
	_, r := benchRequests(b)
	h := NewHandler(fixedLeases{l: benchLease}, nil, netboot.BootConfig{}, nil)
	reply, err := h.ServeDHCP(context.Background(), r, benchIn)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 576)
	for _, c := range []struct {
		name string
		enc  func() []byte
	}{
		{"sorted", func() []byte { return appendReply(buf[:0], reply) }},
		{"bitmap", func() []byte { return appendOptionsBitmap(buf[:0], reply.Options) }},
		{"sorted-options", func() []byte { return appendOptionsSorted(buf[:0], reply.Options) }},
		{"library", reply.ToBytes},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.enc()
			}
		})
	}
}
