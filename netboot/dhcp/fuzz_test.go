package dhcp_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"rackd/netboot/dhcp"
	"rackd/netboot/dhcp/dhcptest"
)

// FuzzServeDHCP feeds arbitrary packets to the handler, with in-memory
// leases and a prober that finds every other address in use: it never
// panics, and every reply is well-formed (RFC 2131 table 3) and survives
// its own wire format.
func FuzzServeDHCP(f *testing.F) {
	sid := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverAddr.AsSlice()))
	want50 := dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 0, 100)))
	ciaddr := dhcpv4.WithClientIP(net.IPv4(10, 0, 0, 100))
	seeds := []*dhcpv4.DHCPv4{
		discover(f, mac1),
		discover(f, mac1, pxe(7, "PXEClient:Arch:00007:UNDI:003016"), dhcpv4.WithUserClass("iPXE", false)),
		discover(f, mac1, pxe(16, "HTTPClient:Arch:00016:UNDI:003001"),
			dhcpv4.WithRequestedOptions(dhcpv4.OptionTFTPServerName, dhcpv4.OptionBootfileName)),
		discover(f, mac1, dhcpv4.WithRelay(relayAddr.AsSlice())),
		request(f, mac1, sid, want50),
		request(f, mac1, want50),
		request(f, mac1, ciaddr),
		request(f, mac1, ciaddr, dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease), sid),
		request(f, mac1, want50, dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline), sid),
		request(f, mac1, ciaddr, dhcpv4.WithMessageType(dhcpv4.MessageTypeInform)),
	}
	for _, s := range seeds {
		f.Add(s.ToBytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		leases := dhcptest.New(subnets()...)
		h := dhcp.NewHandler(leases, evenInUse{}, bootCfg, nil)
		reply, err := h.ServeDHCP(context.Background(), req, eth0)
		if reply == nil {
			return
		}
		if err != nil {
			t.Fatalf("reply %v with error %v", reply.Summary(), err)
		}
		checkWellFormed(t, req, reply)
		checkEncoding(t, reply)
		if sid := reply.ServerIdentifier(); !sid.Equal(serverAddr.AsSlice()) {
			t.Fatalf("server identifier %v", sid)
		}
		back, err := dhcpv4.FromBytes(reply.ToBytes())
		if err != nil {
			t.Fatalf("reply does not parse: %v\n%v", err, reply.Summary())
		}
		if back.MessageType() != reply.MessageType() || !back.YourIPAddr.Equal(reply.YourIPAddr) {
			t.Fatalf("reply changed on the wire:\n%v\n%v", reply.Summary(), back.Summary())
		}
	})
}

// evenInUse finds the addresses ending in an even number in use.
type evenInUse struct{}

func (evenInUse) Probe(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, bool, error) {
	if ip.As4()[3]%2 == 0 {
		return net.HardwareAddr{2, 0, 0, 0, 0, 0x42}, true, nil
	}
	return nil, false, nil
}
