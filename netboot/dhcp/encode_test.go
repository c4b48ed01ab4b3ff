package dhcp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"rackd/netboot"
)

// checkSameWire fails unless appendReply writes m as the library's ToBytes
// does, after a prefix as well as into an empty buffer.
func checkSameWire(t testing.TB, m *dhcpv4.DHCPv4) {
	t.Helper()
	want := m.ToBytes()
	if got := appendReply(nil, m); !bytes.Equal(got, want) {
		t.Fatalf("appendReply writes\n%x\nToBytes writes\n%x\nfor %v", got, want, m.Summary())
	}
	prefix := []byte("prefix")
	if got := appendReply(prefix, m); !bytes.Equal(got[:len(prefix)], []byte("prefix")) || !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("appendReply after a prefix writes\n%x\nToBytes writes\n%x", got, want)
	}
}

// TestEncodeHandlerReplies: every kind of reply the handler builds is
// encoded as the library would: offers and acks, plain and relayed, naks,
// informs, the PXE, iPXE and HTTP boot fields, echoed client identifier and
// relay agent information, boot file names too long for the file field (up
// to several instances of option 67) and odd leases.
func TestEncodeHandlerReplies(t *testing.T) {
	clientID := dhcpv4.OptClientIdentifier([]byte{1, 0x52, 0x54, 0, 0x12, 0x34, 0x56})
	rai := dhcpv4.OptRelayAgentInfo(
		dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(1), []byte("rack7/port42")),
		dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(2), bytes.Repeat([]byte{0xab}, 200)))
	pxe := func(arch iana.Arch, vendor string) dhcpv4.Modifier {
		return func(m *dhcpv4.DHCPv4) {
			m.UpdateOption(dhcpv4.OptClientArch(arch))
			m.UpdateOption(dhcpv4.OptClassIdentifier(vendor))
		}
	}
	ipxe := dhcpv4.WithUserClass("iPXE", false)
	ask := dhcpv4.WithRequestedOptions(dhcpv4.OptionTFTPServerName, dhcpv4.OptionBootfileName)
	relay := dhcpv4.WithRelay(net.IPv4(10, 1, 0, 1))
	sid := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(benchIn.Addr.AsSlice()))
	want := dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(benchLease.IP.AsSlice()))
	hostname := dhcpv4.WithOption(dhcpv4.OptHostName("client-one"))

	odd := benchLease
	odd.Router = netip.Addr{}
	odd.DNS = []netip.Addr{netip.MustParseAddr("fd00::53")} // no option 6
	odd.Hostname = "node-7.rack.test"
	odd.LeaseTime = 0 // the default
	odd.Subnet = netip.PrefixFrom(netip.MustParseAddr("10.1.0.0"), 33)
	long := benchLease
	long.LeaseTime = 1 << 62
	long.Domain = strings.Repeat("sub.", 80) + "rack.test" // 329 bytes: two instances
	long.Subnet = netip.MustParsePrefix("10.0.0.0/8")
	zero := benchLease
	zero.Subnet = netip.MustParsePrefix("0.0.0.0/0")
	zero.DNS = nil
	zero.Domain = ""

	base := netboot.BootConfig{HTTPPort: 5240}
	longBase := netboot.BootConfig{TFTPServer: netip.MustParseAddr("10.0.0.9"), HTTPBase: "http://boot.rack.test/" + strings.Repeat("x", 100)}
	hugeBase := netboot.BootConfig{HTTPBase: "http://boot.rack.test/" + strings.Repeat("y", 600)}

	for _, c := range []struct {
		name   string
		lease  Lease
		ackErr error
		boot   netboot.BootConfig
		mt     dhcpv4.MessageType
		mods   []dhcpv4.Modifier
	}{
		{name: "offer", mt: dhcpv4.MessageTypeDiscover},
		{name: "offer relayed", mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{relay}},
		{name: "offer echoes", mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{relay, dhcpv4.WithOption(clientID), dhcpv4.WithOption(rai)}},
		{name: "offer hostname", mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{hostname}},
		{name: "offer odd lease", lease: odd, mt: dhcpv4.MessageTypeDiscover},
		{name: "offer long domain", lease: long, mt: dhcpv4.MessageTypeDiscover},
		{name: "offer /0 no dns", lease: zero, mt: dhcpv4.MessageTypeDiscover},
		{name: "offer pxe bios", mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{pxe(iana.INTEL_X86PC, "PXEClient:Arch:00000:UNDI:002001")}},
		{name: "offer pxe efi asks 66 67", mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{pxe(iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016"), ask}},
		{name: "offer pxe arm64 next server", boot: longBase, mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{pxe(iana.EFI_ARM64, "PXEClient:Arch:00011:UNDI:003016"), ask}},
		{name: "offer ipxe", mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{pxe(iana.EFI_X86_64, "PXEClient:Arch:00007:UNDI:003016"), ipxe}},
		{name: "offer ipxe long file", boot: longBase, mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{ipxe}},
		{name: "offer ipxe huge file", boot: hugeBase, mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{ipxe, relay, dhcpv4.WithOption(rai)}},
		{name: "offer http boot", mt: dhcpv4.MessageTypeDiscover, mods: []dhcpv4.Modifier{pxe(iana.EFI_X86_64_HTTP, "HTTPClient:Arch:00016:UNDI:003001"), ask}},
		{name: "ack selecting", mt: dhcpv4.MessageTypeRequest, mods: []dhcpv4.Modifier{sid, want, dhcpv4.WithOption(clientID)}},
		{name: "ack relayed pxe", mt: dhcpv4.MessageTypeRequest, mods: []dhcpv4.Modifier{relay, sid, want, dhcpv4.WithOption(rai), pxe(iana.INTEL_X86PC, "PXEClient"), ask}},
		{name: "ack renewing", mt: dhcpv4.MessageTypeRequest, mods: []dhcpv4.Modifier{dhcpv4.WithClientIP(benchLease.IP.AsSlice())}},
		{name: "nak", ackErr: &NakError{Reason: "address taken"}, mt: dhcpv4.MessageTypeRequest, mods: []dhcpv4.Modifier{want, dhcpv4.WithOption(clientID)}},
		{name: "nak relayed", ackErr: &NakError{Reason: strings.Repeat("no ", 100)}, mt: dhcpv4.MessageTypeRequest, mods: []dhcpv4.Modifier{relay, want, dhcpv4.WithOption(rai)}},
		{name: "nak wrong address", lease: odd, mt: dhcpv4.MessageTypeRequest, mods: []dhcpv4.Modifier{want}},
		{name: "inform", mt: dhcpv4.MessageTypeInform, mods: []dhcpv4.Modifier{dhcpv4.WithClientIP(net.IPv4(10, 1, 0, 77))}},
		{name: "inform pxe", mt: dhcpv4.MessageTypeInform, mods: []dhcpv4.Modifier{dhcpv4.WithClientIP(net.IPv4(10, 1, 0, 77)), pxe(iana.EFI_BC, "PXEClient"), ask}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lease := c.lease
			if !lease.IP.IsValid() {
				lease = benchLease
			}
			if c.name == "nak wrong address" {
				lease.IP = netip.MustParseAddr("10.1.0.200")
			}
			mods := append([]dhcpv4.Modifier{dhcpv4.WithMessageType(c.mt)}, c.mods...)
			req, err := dhcpv4.NewDiscovery(benchMAC, mods...)
			if err != nil {
				t.Fatal(err)
			}
			if req, err = dhcpv4.FromBytes(req.ToBytes()); err != nil {
				t.Fatal(err)
			}
			boot := c.boot
			if boot == (netboot.BootConfig{}) {
				boot = base
			}
			h := NewHandler(fixedLeases{l: lease, ackErr: c.ackErr}, nil, boot, nil)
			if c.name == "nak wrong address" {
				h = NewHandler(fakeWrongIP{fixedLeases{l: lease}}, nil, boot, nil)
			}
			reply, err := h.ServeDHCP(context.Background(), req, benchIn)
			if err != nil || reply == nil {
				t.Fatalf("no reply: %v", err)
			}
			wantType := map[dhcpv4.MessageType]dhcpv4.MessageType{dhcpv4.MessageTypeDiscover: dhcpv4.MessageTypeOffer,
				dhcpv4.MessageTypeRequest: dhcpv4.MessageTypeAck, dhcpv4.MessageTypeInform: dhcpv4.MessageTypeAck}[c.mt]
			if c.ackErr != nil || c.name == "nak wrong address" {
				wantType = dhcpv4.MessageTypeNak
			}
			if got := reply.MessageType(); got != wantType {
				t.Fatalf("reply is a %v, want %v", got, wantType)
			}
			checkSameWire(t, reply)
		})
	}
}

// fakeWrongIP acks another address than the one asked for.
type fakeWrongIP struct{ fixedLeases }

func (f fakeWrongIP) Ack(context.Context, Request) (Lease, error) { return f.l, nil }

// TestEncodeEdges: what the handler never builds but the encoder must still
// write as the library does: nil and 16-byte addresses, names filling or
// overflowing sname and file, a hardware address longer than chaddr, pad and
// end in the option map, empty values, and options over 255 bytes, option
// 82 among them.
func TestEncodeEdges(t *testing.T) {
	full := &dhcpv4.DHCPv4{
		OpCode: dhcpv4.OpcodeBootReply, HWType: iana.HWTypeEthernet, HopCount: 3,
		TransactionID: dhcpv4.TransactionID{1, 2, 3, 4}, NumSeconds: 0xbeef, Flags: 0x8001,
		ClientIPAddr: net.IPv4(1, 2, 3, 4), YourIPAddr: net.IPv4(5, 6, 7, 8).To4(),
		ServerIPAddr: net.IPv4zero, GatewayIPAddr: nil,
		ClientHWAddr:   net.HardwareAddr(bytes.Repeat([]byte{0xee}, 20)),
		ServerHostName: strings.Repeat("s", 64), BootFileName: strings.Repeat("f", 128),
		Options: dhcpv4.Options{
			0: {1, 2}, 255: {3}, 1: {}, 3: nil, 250: bytes.Repeat([]byte{7}, 600),
			82: bytes.Repeat([]byte{8}, 256), 128: {9}, 64: {10}, 63: {11}, 127: {12}, 192: {13}, 191: {14},
		},
	}
	every := &dhcpv4.DHCPv4{Options: dhcpv4.Options{}} // over maxSortedOptions: the bitmap
	for code := range 256 {
		every.Options[uint8(code)] = bytes.Repeat([]byte{byte(code)}, code%7)
	}
	for _, m := range []*dhcpv4.DHCPv4{
		every,
		{},
		{Options: dhcpv4.Options{}},
		{Options: dhcpv4.Options{82: {1}}},
		{ServerHostName: strings.Repeat("s", 63), BootFileName: strings.Repeat("f", 127), ClientHWAddr: net.HardwareAddr{1, 2, 3, 4, 5, 6}},
		full,
	} {
		checkSameWire(t, m)
	}
}

// FuzzEncodeReply builds replies from fuzz input (header fields, names, and
// option sets with values of up to 1 KiB) and checks that appendReply writes
// each as the library's ToBytes does.
func FuzzEncodeReply(f *testing.F) {
	d, r := benchRequests(f)
	for _, req := range []*dhcpv4.DHCPv4{d, r} {
		f.Add(req.ToBytes())
	}
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{82, 255, 3}, 40))
	f.Add(bytes.Repeat([]byte{0xff}, 700))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := replyFromFuzz(data)
		checkSameWire(t, m)
	})
}

// replyFromFuzz turns arbitrary bytes into a reply: the first 44 fill the
// header, then each option is a code, a length in 4-byte units (up to
// 1020 bytes) and its value, cut short where the input ends.
func replyFromFuzz(data []byte) *dhcpv4.DHCPv4 {
	next := func(n int) []byte {
		n = min(n, len(data))
		v := data[:n:n]
		data = data[n:]
		return v
	}
	pad := func(b []byte, n int) []byte { return append(append([]byte(nil), b...), make([]byte, n-len(b))...) }
	h := pad(next(44), 44)
	ip := func(b []byte) net.IP {
		switch b[0] % 4 {
		case 0:
			return nil
		case 1:
			return net.IP(b[:4:4])
		default:
			return net.IPv4(b[0], b[1], b[2], b[3]) // 16 bytes
		}
	}
	m := &dhcpv4.DHCPv4{
		OpCode: dhcpv4.OpcodeType(h[0]), HWType: iana.HWType(h[1]), HopCount: h[2],
		TransactionID: dhcpv4.TransactionID(h[3:7]),
		NumSeconds:    uint16(h[7])<<8 | uint16(h[8]), Flags: uint16(h[9])<<8 | uint16(h[10]),
		ClientIPAddr: ip(h[11:15]), YourIPAddr: ip(h[15:19]), ServerIPAddr: ip(h[19:23]), GatewayIPAddr: ip(h[23:27]),
		ClientHWAddr:   net.HardwareAddr(next(int(h[27]) % 24)),
		ServerHostName: string(next(int(h[28]) % 80)), BootFileName: string(next(int(h[29]) % 150)),
		Options: dhcpv4.Options{},
	}
	for len(data) > 0 {
		o := pad(next(2), 2)
		v := next(int(o[1]) * 4)
		if o[1] == 0 && len(data)%2 == 0 {
			v = nil
		}
		m.Options[o[0]] = v
	}
	return m
}
