package dhcp_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"rackd/netboot"
	"rackd/netboot/dhcp"
	"rackd/netboot/dhcp/dhcptest"
)

var (
	serverAddr = netip.MustParseAddr("10.0.0.1")
	relayAddr  = netip.MustParseAddr("10.1.0.1")
	eth0       = dhcp.Interface{Name: "eth0", Addr: serverAddr}
	mac1       = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 0x01}
	mac2       = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 0x02}
	bootCfg    = netboot.BootConfig{TFTPServer: serverAddr, HTTPBase: "http://10.0.0.1:5240"}
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func subnets() []dhcptest.Subnet {
	return []dhcptest.Subnet{{
		Prefix: netip.MustParsePrefix("10.0.0.0/24"), Router: ip("10.0.0.1"),
		DNS: []netip.Addr{ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::53")}, Domain: "rack.test",
		LeaseTime: time.Hour, Start: ip("10.0.0.100"), End: ip("10.0.0.199"),
	}, {
		Prefix: netip.MustParsePrefix("10.1.0.0/24"), Router: ip("10.1.0.1"),
		DNS: []netip.Addr{ip("10.0.0.1")}, Domain: "far.test",
		LeaseTime: 10 * time.Minute, Start: ip("10.1.0.100"), End: ip("10.1.0.102"),
	}}
}

// fakeProber reports the addresses in inUse as answered; it records what it
// was asked.
type fakeProber struct {
	mu    sync.Mutex
	inUse map[netip.Addr]net.HardwareAddr
	all   bool // every address is in use
	err   error
	asked []netip.Addr
}

func (p *fakeProber) Probe(ctx context.Context, ifname string, a netip.Addr) (net.HardwareAddr, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, a)
	if p.err != nil {
		return nil, false, p.err
	}
	if p.all {
		return net.HardwareAddr{2, 0, 0, 0, 0, 9}, true, nil
	}
	mac, ok := p.inUse[a]
	return mac, ok, nil
}

func (p *fakeProber) Asked() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.asked)
}

func discover(t testing.TB, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.NewDiscovery(mac, mods...)
	if err != nil {
		t.Fatal(err)
	}
	return wire(t, m)
}

// wire passes a packet through its wire format, as the server sees it.
func wire(t testing.TB, m *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	t.Helper()
	out, err := dhcpv4.FromBytes(m.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func pxe(arch uint16, vendor string) dhcpv4.Modifier {
	return func(m *dhcpv4.DHCPv4) {
		m.UpdateOption(dhcpv4.OptClientArch(iana.Arch(arch)))
		m.UpdateOption(dhcpv4.OptClassIdentifier(vendor))
	}
}

// serve runs one request through a handler and returns the reply, which
// must also survive the wire, encoded by the server as by the library.
func serve(t *testing.T, h *dhcp.Handler, req *dhcpv4.DHCPv4, in dhcp.Interface) (*dhcpv4.DHCPv4, error) {
	t.Helper()
	reply, err := h.ServeDHCP(context.Background(), req, in)
	if reply != nil {
		checkWellFormed(t, req, reply)
		checkEncoding(t, reply)
		reply = wire(t, reply)
	}
	return reply, err
}

// checkEncoding checks that the server's encoding of reply is the
// library's, byte for byte.
func checkEncoding(t testing.TB, reply *dhcpv4.DHCPv4) {
	t.Helper()
	if got, want := dhcp.EncodeReply(reply), reply.ToBytes(); !slices.Equal(got, want) {
		t.Fatalf("server encodes\n%x\nlibrary encodes\n%x\nfor %v", got, want, reply.Summary())
	}
}

// checkWellFormed checks what every reply must satisfy (RFC 2131 table 3).
func checkWellFormed(t testing.TB, req, reply *dhcpv4.DHCPv4) {
	t.Helper()
	if reply.OpCode != dhcpv4.OpcodeBootReply || reply.TransactionID != req.TransactionID ||
		!slices.Equal(reply.ClientHWAddr, req.ClientHWAddr) || reply.HopCount != 0 {
		t.Fatalf("reply header does not match request:\n%v\n%v", req.Summary(), reply.Summary())
	}
	if reply.ServerIdentifier() == nil {
		t.Fatalf("reply without server identifier: %v", reply.Summary())
	}
	if !reply.GatewayIPAddr.Equal(req.GatewayIPAddr) && !(reply.GatewayIPAddr.Equal(net.IPv4zero) && req.GatewayIPAddr == nil) {
		t.Fatalf("giaddr %v, request had %v", reply.GatewayIPAddr, req.GatewayIPAddr)
	}
	switch reply.MessageType() {
	case dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeAck:
		if reply.YourIPAddr.IsUnspecified() != (req.MessageType() == dhcpv4.MessageTypeInform) {
			t.Fatalf("yiaddr %v in reply to %v", reply.YourIPAddr, req.MessageType())
		}
		if reply.Options.Has(dhcpv4.OptionIPAddressLeaseTime) == (req.MessageType() == dhcpv4.MessageTypeInform) {
			t.Fatalf("lease time presence wrong in reply to %v", req.MessageType())
		}
	case dhcpv4.MessageTypeNak:
		for code := range reply.Options {
			switch code {
			case dhcpv4.OptionDHCPMessageType.Code(), dhcpv4.OptionServerIdentifier.Code(), dhcpv4.OptionMessage.Code(),
				dhcpv4.OptionClientIdentifier.Code(), dhcpv4.OptionRelayAgentInformation.Code():
			default:
				t.Fatalf("NAK carries option %d", code)
			}
		}
		if !reply.YourIPAddr.IsUnspecified() || !reply.ServerIPAddr.IsUnspecified() || !reply.ClientIPAddr.IsUnspecified() {
			t.Fatalf("NAK with addresses: %v", reply.Summary())
		}
	default:
		t.Fatalf("unexpected reply type %v", reply.MessageType())
	}
}

func newHandler(leases *dhcptest.MemLeases, prober dhcp.Prober) *dhcp.Handler {
	if prober == nil {
		return dhcp.NewHandler(leases, nil, bootCfg, nil)
	}
	return dhcp.NewHandler(leases, prober, bootCfg, nil)
}

func TestDiscoverOffer(t *testing.T) {
	leases := dhcptest.New(subnets()...)
	prober := &fakeProber{}
	h := newHandler(leases, prober)
	req := discover(t, mac1, dhcpv4.WithBroadcast(true), dhcpv4.WithOption(dhcpv4.OptHostName("node1")))
	reply, err := serve(t, h, req, eth0)
	if err != nil {
		t.Fatal(err)
	}
	if reply.MessageType() != dhcpv4.MessageTypeOffer || !reply.YourIPAddr.Equal(net.ParseIP("10.0.0.100")) {
		t.Fatalf("got %v", reply.Summary())
	}
	if !reply.IsBroadcast() {
		t.Error("broadcast flag not copied")
	}
	checkOptions(t, reply, "255.255.255.0", "10.0.0.1", []string{"10.0.0.1", "10.0.0.2"}, "rack.test", time.Hour)
	if reply.BootFileName != "" || reply.Options.Has(dhcpv4.OptionClassIdentifier) || !reply.ServerIPAddr.IsUnspecified() {
		t.Errorf("boot fields for a non-PXE client: %v", reply.Summary())
	}
	if got := prober.Asked(); !slices.Equal(got, []netip.Addr{ip("10.0.0.100")}) {
		t.Errorf("probed %v", got)
	}
	offers := leases.CallsOf("offer")
	if len(offers) != 1 || offers[0].Req.Link != serverAddr || offers[0].Req.Hostname != "node1" || offers[0].Req.PXE {
		t.Errorf("Offer called with %+v", offers)
	}
}

func checkOptions(t *testing.T, reply *dhcpv4.DHCPv4, mask, router string, dns []string, domain string, lease time.Duration) {
	t.Helper()
	if got := net.IP(reply.SubnetMask()).String(); got != mask {
		t.Errorf("mask %s, want %s", got, mask)
	}
	if r := reply.Router(); len(r) != 1 || r[0].String() != router {
		t.Errorf("router %v, want %s", r, router)
	}
	var gotDNS []string
	for _, a := range reply.DNS() {
		gotDNS = append(gotDNS, a.String())
	}
	if !slices.Equal(gotDNS, dns) {
		t.Errorf("dns %v, want %v", gotDNS, dns)
	}
	if got := reply.DomainName(); got != domain {
		t.Errorf("domain %q, want %q", got, domain)
	}
	if got := reply.IPAddressLeaseTime(0); got != lease {
		t.Errorf("lease time %v, want %v", got, lease)
	}
	if got := reply.IPAddressRenewalTime(0); got != lease/2 {
		t.Errorf("T1 %v, want %v", got, lease/2)
	}
	if got := reply.IPAddressRebindingTime(0); got != lease*7/8 {
		t.Errorf("T2 %v, want %v", got, lease*7/8)
	}
	if sid := reply.ServerIdentifier(); !sid.Equal(net.ParseIP("10.0.0.1")) {
		t.Errorf("server id %v", sid)
	}
}

func TestPXE(t *testing.T) {
	withPRL := dhcpv4.WithRequestedOptions(dhcpv4.OptionTFTPServerName, dhcpv4.OptionBootfileName)
	tests := []struct {
		name    string
		mods    []dhcpv4.Modifier
		file    string
		vendor  string
		opt43   bool
		asked   bool // options 66 and 67 asked for
		longCfg bool
	}{
		{name: "bios", mods: []dhcpv4.Modifier{pxe(0, "PXEClient:Arch:00000:UNDI:002001")}, file: "pxelinux.0", vendor: "PXEClient", opt43: true},
		{name: "efi x64", mods: []dhcpv4.Modifier{pxe(7, "PXEClient:Arch:00007:UNDI:003016")}, file: "bootx64.efi", vendor: "PXEClient", opt43: true},
		{name: "efi bc", mods: []dhcpv4.Modifier{pxe(9, "PXEClient:Arch:00009:UNDI:003016")}, file: "bootx64.efi", vendor: "PXEClient", opt43: true},
		{name: "efi arm64", mods: []dhcpv4.Modifier{pxe(11, "PXEClient:Arch:00011:UNDI:003016")}, file: "grubaa64.efi", vendor: "PXEClient", opt43: true},
		{name: "http x64", mods: []dhcpv4.Modifier{pxe(16, "HTTPClient:Arch:00016:UNDI:003001")}, file: "http://10.0.0.1:5240/boot/bootx64.efi", vendor: "HTTPClient"},
		{name: "http arm64", mods: []dhcpv4.Modifier{pxe(19, "HTTPClient:Arch:00019:UNDI:003001")}, file: "http://10.0.0.1:5240/boot/grubaa64.efi", vendor: "HTTPClient"},
		{name: "ipxe", mods: []dhcpv4.Modifier{pxe(7, "PXEClient:Arch:00007:UNDI:003010"), dhcpv4.WithUserClass("iPXE", false)},
			file: "http://10.0.0.1:5240/boot/ipxe?mac=52:54:00:00:00:01", vendor: "PXEClient", opt43: true},
		{name: "asked 66 and 67", mods: []dhcpv4.Modifier{pxe(0, "PXEClient:Arch:00000:UNDI:002001"), withPRL},
			file: "pxelinux.0", vendor: "PXEClient", opt43: true, asked: true},
		{name: "ia32 gets no boot", mods: []dhcpv4.Modifier{pxe(6, "PXEClient:Arch:00006:UNDI:003016")}},
		{name: "long url goes to option 67", mods: []dhcpv4.Modifier{pxe(16, "HTTPClient:Arch:00016:UNDI:003001")},
			file: "http://rackd.example/" + strings.Repeat("x", 120) + "/boot/bootx64.efi", vendor: "HTTPClient", longCfg: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := bootCfg
			if tt.longCfg {
				cfg.HTTPBase = "http://rackd.example/" + strings.Repeat("x", 120)
			}
			leases := dhcptest.New(subnets()...)
			h := dhcp.NewHandler(leases, nil, cfg, nil)
			offer, err := serve(t, h, discover(t, mac1, tt.mods...), eth0)
			if err != nil {
				t.Fatal(err)
			}
			// Every client here says PXEClient or HTTPClient.
			if !leases.CallsOf("offer")[0].Req.PXE {
				t.Error("Request.PXE not set for a network-boot client")
			}
			// The same boot fields in the OFFER and the ACK.
			req, err := dhcpv4.NewRequestFromOffer(offer, tt.mods...)
			if err != nil {
				t.Fatal(err)
			}
			ack, err := serve(t, h, wire(t, req), eth0)
			if err != nil {
				t.Fatal(err)
			}
			for _, reply := range []*dhcpv4.DHCPv4{offer, ack} {
				file := reply.BootFileName
				if tt.longCfg {
					file = reply.BootFileNameOption()
					if reply.BootFileName != "" {
						t.Errorf("file field holds a truncated %q", reply.BootFileName)
					}
				}
				if file != tt.file || reply.ClassIdentifier() != tt.vendor {
					t.Errorf("%v: file %q vendor %q; want %q %q", reply.MessageType(), file, reply.ClassIdentifier(), tt.file, tt.vendor)
				}
				wantSiaddr := net.IPv4zero
				if tt.file != "" {
					wantSiaddr = net.ParseIP("10.0.0.1")
				}
				if !reply.ServerIPAddr.Equal(wantSiaddr) {
					t.Errorf("siaddr %v, want %v", reply.ServerIPAddr, wantSiaddr)
				}
				if got := reply.Options.Get(dhcpv4.OptionVendorSpecificInformation); (got != nil) != tt.opt43 ||
					(got != nil && string(got) != "\x06\x01\x08\xff") {
					t.Errorf("option 43 = %x", got)
				}
				if reply.Options.Has(dhcpv4.OptionTFTPServerName) != tt.asked ||
					(reply.Options.Has(dhcpv4.OptionBootfileName) != (tt.asked || tt.longCfg)) {
					t.Errorf("options 66/67 present %v/%v, asked %v", reply.Options.Has(dhcpv4.OptionTFTPServerName),
						reply.Options.Has(dhcpv4.OptionBootfileName), tt.asked)
				}
				if tt.asked && (reply.TFTPServerName() != "10.0.0.1" || reply.BootFileNameOption() != tt.file) {
					t.Errorf("66 %q 67 %q", reply.TFTPServerName(), reply.BootFileNameOption())
				}
			}
		})
	}
}

func TestRelayedDiscover(t *testing.T) {
	leases := dhcptest.New(subnets()...)
	prober := &fakeProber{all: true}
	h := newHandler(leases, prober)
	req := discover(t, mac1, dhcpv4.WithRelay(relayAddr.AsSlice()))
	reply, err := serve(t, h, req, eth0)
	if err != nil {
		t.Fatal(err)
	}
	if !reply.YourIPAddr.Equal(net.ParseIP("10.1.0.100")) || !reply.GatewayIPAddr.Equal(relayAddr.AsSlice()) {
		t.Fatalf("got %v", reply.Summary())
	}
	checkOptions(t, reply, "255.255.255.0", "10.1.0.1", []string{"10.0.0.1"}, "far.test", 10*time.Minute)
	if len(prober.Asked()) != 0 {
		t.Errorf("a relayed client's address was ARP-probed: %v", prober.Asked())
	}
	if c := leases.CallsOf("offer"); c[0].Req.Link != relayAddr {
		t.Errorf("link %v, want the relay's", c[0].Req.Link)
	}
}

func TestProbeConflict(t *testing.T) {
	squatter := net.HardwareAddr{2, 0, 0, 0, 0, 0x55}
	t.Run("retry", func(t *testing.T) {
		leases := dhcptest.New(subnets()...)
		prober := &fakeProber{inUse: map[netip.Addr]net.HardwareAddr{ip("10.0.0.100"): squatter, ip("10.0.0.101"): squatter}}
		reply, err := serve(t, newHandler(leases, prober), discover(t, mac1), eth0)
		if err != nil {
			t.Fatal(err)
		}
		if !reply.YourIPAddr.Equal(net.ParseIP("10.0.0.102")) {
			t.Fatalf("offered %v, want the first free address", reply.YourIPAddr)
		}
		conflicts := leases.CallsOf("conflict")
		if len(conflicts) != 2 || conflicts[0].IP != ip("10.0.0.100") || conflicts[1].IP != ip("10.0.0.101") ||
			conflicts[0].MAC.String() != squatter.String() {
			t.Fatalf("conflicts %+v", conflicts)
		}
		if !leases.Quarantined(ip("10.0.0.100")) {
			t.Fatal("squatted address not quarantined")
		}
	})
	t.Run("bounded", func(t *testing.T) {
		leases := dhcptest.New(subnets()...)
		prober := &fakeProber{all: true}
		_, err := serve(t, newHandler(leases, prober), discover(t, mac1), eth0)
		if !errors.Is(err, dhcp.ErrExhausted) {
			t.Fatalf("err = %v, want ErrExhausted", err)
		}
		if n := len(prober.Asked()); n != dhcp.DefaultOfferAttempts {
			t.Fatalf("%d probes, want %d", n, dhcp.DefaultOfferAttempts)
		}
	})
	t.Run("probe error offers anyway", func(t *testing.T) {
		leases := dhcptest.New(subnets()...)
		prober := &fakeProber{err: errors.New("socket gone")}
		reply, err := serve(t, newHandler(leases, prober), discover(t, mac1), eth0)
		if err != nil || reply == nil {
			t.Fatalf("reply %v, err %v", reply, err)
		}
	})
	t.Run("known address is not probed", func(t *testing.T) {
		leases := dhcptest.New(subnets()...)
		prober := &fakeProber{}
		h := newHandler(leases, prober)
		for range 2 {
			if _, err := serve(t, h, discover(t, mac1), eth0); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(prober.Asked()); n != 1 {
			t.Fatalf("%d probes for one client asking twice, want 1", n)
		}
	})
	t.Run("listen-on-address mode does not probe", func(t *testing.T) {
		leases := dhcptest.New(subnets()...)
		prober := &fakeProber{all: true}
		if _, err := serve(t, newHandler(leases, prober), discover(t, mac1), dhcp.Interface{Addr: serverAddr}); err != nil {
			t.Fatal(err)
		}
		if n := len(prober.Asked()); n != 0 {
			t.Fatalf("%d probes without an interface", n)
		}
	})
}

// dora runs DISCOVER and REQUEST for mac and returns the ACK.
func dora(t *testing.T, h *dhcp.Handler, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	offer, err := serve(t, h, discover(t, mac, mods...), eth0)
	if err != nil {
		t.Fatal(err)
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, mods...)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := serve(t, h, wire(t, req), eth0)
	if err != nil {
		t.Fatal(err)
	}
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(offer.YourIPAddr) {
		t.Fatalf("offer %v then %v", offer.Summary(), ack.Summary())
	}
	return ack
}

func request(t testing.TB, mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest)}, mods...)...)
	if err != nil {
		t.Fatal(err)
	}
	return wire(t, m)
}

func TestRequest(t *testing.T) {
	leases := dhcptest.New(subnets()...)
	leases.Hostnames = map[string]string{mac1.String(): "node1"}
	h := newHandler(leases, nil)
	ack := dora(t, h, mac1)
	checkOptions(t, ack, "255.255.255.0", "10.0.0.1", []string{"10.0.0.1", "10.0.0.2"}, "rack.test", time.Hour)
	if ack.HostName() != "node1" {
		t.Errorf("hostname %q", ack.HostName())
	}
	if got, ok := leases.Bound(mac1); !ok || got != ip("10.0.0.100") {
		t.Fatalf("bound %v %v", got, ok)
	}
	sid := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverAddr.AsSlice()))
	other := dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 254)))
	want50 := func(s string) dhcpv4.Modifier { return dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(s))) }

	tests := []struct {
		name   string
		req    *dhcpv4.DHCPv4
		in     dhcp.Interface
		want   dhcpv4.MessageType // MessageTypeNone: no reply
		err    error
		yiaddr string
		bcast  bool // NAK with the broadcast bit
	}{
		{name: "selecting another server", req: request(t, mac2, other, want50("10.0.0.101")), in: eth0, err: dhcp.ErrOtherServer},
		{name: "selecting without option 50", req: request(t, mac2, sid), in: eth0, err: dhcp.ErrMalformed},
		{name: "selecting an address held by another", req: request(t, mac2, sid, want50("10.0.0.100")), in: eth0, want: dhcpv4.MessageTypeNak},
		{name: "init-reboot", req: request(t, mac2, want50("10.0.0.150")), in: eth0, want: dhcpv4.MessageTypeAck, yiaddr: "10.0.0.150"},
		{name: "init-reboot wrong network", req: request(t, mac2, want50("192.168.1.5")), in: eth0, want: dhcpv4.MessageTypeNak},
		{name: "init-reboot wrong network relayed", req: request(t, mac2, want50("10.0.0.150"), dhcpv4.WithRelay(relayAddr.AsSlice())),
			in: eth0, want: dhcpv4.MessageTypeNak, bcast: true},
		{name: "init-reboot unknown link", req: request(t, mac2, want50("10.9.0.5"), dhcpv4.WithRelay(net.IPv4(10, 9, 0, 1))),
			in: eth0, err: dhcp.ErrNoSubnet},
		{name: "renewing", req: request(t, mac1, dhcpv4.WithClientIP(net.ParseIP("10.0.0.100"))), in: eth0,
			want: dhcpv4.MessageTypeAck, yiaddr: "10.0.0.100"},
		{name: "rebinding another's address", req: request(t, mac2, dhcpv4.WithClientIP(net.ParseIP("10.0.0.100")), dhcpv4.WithBroadcast(true)),
			in: eth0, want: dhcpv4.MessageTypeNak, bcast: true}, // the client's flag, copied
		{name: "no address at all", req: request(t, mac2), in: eth0, err: dhcp.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, err := serve(t, h, tt.req, tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if tt.want == dhcpv4.MessageTypeNone {
				if reply != nil {
					t.Fatalf("unexpected reply %v", reply.Summary())
				}
				return
			}
			if reply == nil || reply.MessageType() != tt.want {
				t.Fatalf("reply %v, want %v", reply, tt.want)
			}
			if tt.yiaddr != "" && !reply.YourIPAddr.Equal(net.ParseIP(tt.yiaddr)) {
				t.Errorf("yiaddr %v, want %s", reply.YourIPAddr, tt.yiaddr)
			}
			if !reply.ClientIPAddr.Equal(tt.req.ClientIPAddr) && tt.want == dhcpv4.MessageTypeAck {
				t.Errorf("ciaddr %v not copied from %v", reply.ClientIPAddr, tt.req.ClientIPAddr)
			}
			if tt.want == dhcpv4.MessageTypeNak {
				if reply.Message() == "" {
					t.Error("NAK without a message")
				}
				if reply.IsBroadcast() != tt.bcast {
					t.Errorf("NAK broadcast bit %v, want %v", reply.IsBroadcast(), tt.bcast)
				}
			}
		})
	}
}

func TestReleaseDecline(t *testing.T) {
	leases := dhcptest.New(subnets()...)
	h := newHandler(leases, nil)
	ack := dora(t, h, mac1)

	rel, err := dhcpv4.NewReleaseFromACK(ack)
	if err != nil {
		t.Fatal(err)
	}
	relOther, _ := dhcpv4.NewReleaseFromACK(ack, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 254))))
	if reply, err := serve(t, h, wire(t, relOther), eth0); reply != nil || !errors.Is(err, dhcp.ErrOtherServer) {
		t.Fatalf("release to another server: %v, %v", reply, err)
	}
	if _, ok := leases.Bound(mac1); !ok {
		t.Fatal("lease released by a release meant for another server")
	}
	if reply, err := serve(t, h, wire(t, rel), eth0); reply != nil || err != nil {
		t.Fatalf("release: %v, %v", reply, err)
	}
	if _, ok := leases.Bound(mac1); ok {
		t.Fatal("lease still bound after release")
	}
	if c := leases.CallsOf("release"); len(c) != 1 || c[0].IP != ip("10.0.0.100") || c[0].MAC.String() != mac1.String() {
		t.Fatalf("release calls %+v", c)
	}
	noCiaddr := request(t, mac1, dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease))
	if _, err := serve(t, h, noCiaddr, eth0); !errors.Is(err, dhcp.ErrMalformed) {
		t.Fatalf("release without ciaddr: %v", err)
	}

	ack = dora(t, h, mac2)
	dec := request(t, mac2, dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ack.YourIPAddr)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverAddr.AsSlice())))
	if reply, err := serve(t, h, dec, eth0); reply != nil || err != nil {
		t.Fatalf("decline: %v, %v", reply, err)
	}
	declined := addrOf(ack.YourIPAddr)
	if !leases.Quarantined(declined) {
		t.Fatal("declined address not quarantined")
	}
	offer, err := serve(t, h, discover(t, mac2), eth0)
	if err != nil {
		t.Fatal(err)
	}
	if addrOf(offer.YourIPAddr) == declined {
		t.Fatal("declined address offered again")
	}
	decNoIP := request(t, mac2, dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline))
	if _, err := serve(t, h, decNoIP, eth0); !errors.Is(err, dhcp.ErrMalformed) {
		t.Fatalf("decline without option 50: %v", err)
	}
}

func addrOf(a net.IP) netip.Addr {
	out, _ := netip.AddrFromSlice(a.To4())
	return out
}

func TestInform(t *testing.T) {
	leases := dhcptest.New(subnets()...)
	h := newHandler(leases, nil)
	m, err := dhcpv4.NewInform(mac1, net.ParseIP("10.0.0.42"))
	if err != nil {
		t.Fatal(err)
	}
	reply, err := serve(t, h, wire(t, m), eth0)
	if err != nil {
		t.Fatal(err)
	}
	if reply.MessageType() != dhcpv4.MessageTypeAck || !reply.YourIPAddr.IsUnspecified() ||
		!reply.ClientIPAddr.Equal(net.ParseIP("10.0.0.42")) {
		t.Fatalf("got %v", reply.Summary())
	}
	for _, code := range []dhcpv4.OptionCode{dhcpv4.OptionIPAddressLeaseTime, dhcpv4.OptionRenewTimeValue, dhcpv4.OptionRebindingTimeValue} {
		if reply.Options.Has(code) {
			t.Errorf("INFORM ACK carries %v", code)
		}
	}
	if reply.DomainName() != "rack.test" || len(reply.Router()) != 1 || len(reply.DNS()) != 2 {
		t.Errorf("options missing: %v", reply.Summary())
	}
	if len(leases.CallsOf("offer"))+len(leases.CallsOf("ack")) != 0 {
		t.Error("INFORM touched a lease")
	}
}

func TestDrops(t *testing.T) {
	boom := errors.New("store on fire")
	tests := []struct {
		name   string
		req    func(t *testing.T) *dhcpv4.DHCPv4
		in     dhcp.Interface
		leases func() *dhcptest.MemLeases
		err    error
	}{
		{name: "reply opcode", req: func(t *testing.T) *dhcpv4.DHCPv4 {
			m := discover(t, mac1)
			m.OpCode = dhcpv4.OpcodeBootReply
			return m
		}, err: dhcp.ErrMalformed},
		{name: "not ethernet", req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return discover(t, mac1, dhcpv4.WithHWType(iana.HWTypeInfiniband))
		}, err: dhcp.ErrMalformed},
		{name: "short chaddr", req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return discover(t, net.HardwareAddr{1, 2, 3})
		}, err: dhcp.ErrMalformed},
		{name: "no message type", req: func(t *testing.T) *dhcpv4.DHCPv4 {
			m := discover(t, mac1)
			m.Options.Del(dhcpv4.OptionDHCPMessageType)
			return m
		}, err: dhcp.ErrMalformed},
		{name: "offer from another server", req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return discover(t, mac1, dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer))
		}, err: dhcp.ErrMalformed},
		{name: "unknown link", req: func(t *testing.T) *dhcpv4.DHCPv4 { return discover(t, mac1) },
			in: dhcp.Interface{Name: "eth1", Addr: ip("192.168.7.1")}, err: dhcp.ErrNoSubnet},
		{name: "inform unknown link", req: func(t *testing.T) *dhcpv4.DHCPv4 {
			m, _ := dhcpv4.NewInform(mac1, net.ParseIP("192.168.7.5"))
			return wire(t, m)
		}, in: dhcp.Interface{Name: "eth1", Addr: ip("192.168.7.1")}, err: dhcp.ErrNoSubnet},
		{name: "exhausted", req: func(t *testing.T) *dhcpv4.DHCPv4 {
			return discover(t, mac1, dhcpv4.WithRelay(relayAddr.AsSlice()))
		}, leases: func() *dhcptest.MemLeases {
			l := dhcptest.New(subnets()...)
			for i := range 3 {
				l.Offer(context.Background(), dhcp.Request{MAC: net.HardwareAddr{2, 2, 2, 2, 2, byte(i)}, Link: relayAddr})
			}
			return l
		}, err: dhcp.ErrExhausted},
		{name: "store failure", req: func(t *testing.T) *dhcpv4.DHCPv4 { return discover(t, mac1) },
			leases: func() *dhcptest.MemLeases {
				l := dhcptest.New(subnets()...)
				l.Fail = func(string, dhcp.Request) error { return boom }
				return l
			}, err: boom},
		{name: "interface without address", req: func(t *testing.T) *dhcpv4.DHCPv4 { return discover(t, mac1) },
			in: dhcp.Interface{Name: "eth9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leases := dhcptest.New(subnets()...)
			if tt.leases != nil {
				leases = tt.leases()
			}
			in := tt.in
			if in == (dhcp.Interface{}) {
				in = eth0
			}
			reply, err := serve(t, newHandler(leases, nil), tt.req(t), in)
			if reply != nil || err == nil || (tt.err != nil && !errors.Is(err, tt.err)) {
				t.Fatalf("reply %v, err %v; want no reply and %v", reply, err, tt.err)
			}
		})
	}
}

// TestEchoedOptions: the client identifier (RFC 6842) and relay agent
// information (RFC 3046) come back, the latter last on the wire.
func TestEchoedOptions(t *testing.T) {
	h := newHandler(dhcptest.New(subnets()...), nil)
	rai := dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(1), []byte("port7")))
	req := discover(t, mac1, dhcpv4.WithRelay(relayAddr.AsSlice()),
		dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte{1, 0x52, 0x54, 0, 0, 0, 1})), dhcpv4.WithOption(rai))
	reply, err := h.ServeDHCP(context.Background(), req, eth0)
	if err != nil {
		t.Fatal(err)
	}
	if string(reply.Options.Get(dhcpv4.OptionClientIdentifier)) != string([]byte{1, 0x52, 0x54, 0, 0, 0, 1}) {
		t.Error("client identifier not echoed")
	}
	checkEncoding(t, reply)
	b := dhcp.EncodeReply(reply)
	raiBytes := rai.Value.ToBytes()
	i := strings.Index(string(b), string(append([]byte{82, byte(len(raiBytes))}, raiBytes...)))
	if i < 0 || b[i+2+len(raiBytes)] != 255 {
		t.Errorf("option 82 not echoed last: %x", b[240:])
	}
}
