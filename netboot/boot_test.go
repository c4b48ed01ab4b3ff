package netboot

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var (
	testMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	testCfg = BootConfig{
		TFTPServer: netip.MustParseAddr("10.0.0.1"),
		HTTPBase:   "http://10.0.0.1:5240",
	}
	tftp = netip.MustParseAddr("10.0.0.1")
)

func arch(a Arch) Client {
	return Client{MAC: testMAC, Arch: a, HasArch: true, VendorClass: "PXEClient:Arch:00000:UNDI:002001"}
}

func TestChooseBoot(t *testing.T) {
	ipxe := func(c Client) Client { c.UserClass = []string{UserClassIPXE}; return c }
	httpVC := func(c Client) Client { c.VendorClass = "HTTPClient:Arch:00016:UNDI:003001"; return c }
	noHTTP := BootConfig{TFTPServer: tftp}
	tests := []struct {
		name string
		c    Client
		cfg  BootConfig
		want Boot
		ok   bool
	}{
		{"bios", arch(ArchBIOS), testCfg, Boot{tftp, "pxelinux.0", VendorPXE}, true},
		{"efi x64", arch(ArchEFIX64), testCfg, Boot{tftp, "bootx64.efi", VendorPXE}, true},
		{"efi bc", arch(ArchEFIBC), testCfg, Boot{tftp, "bootx64.efi", VendorPXE}, true},
		{"efi arm64", arch(ArchEFIARM64), testCfg, Boot{tftp, "grubaa64.efi", VendorPXE}, true},
		{"efi ia32 has no loader", arch(ArchEFIIA32), testCfg, Boot{}, false},
		{"http x64", httpVC(arch(ArchEFIX64HTTP)), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/bootx64.efi", VendorHTTP}, true},
		{"http arm64", httpVC(arch(ArchEFIARM64HTTP)), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/grubaa64.efi", VendorHTTP}, true},
		// The firmware only accepts HTTPClient; echo it even if the
		// request's vendor class was odd.
		{"http arch with PXE vendor class", arch(ArchEFIX64HTTP), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/bootx64.efi", VendorHTTP}, true},
		{"http without base", arch(ArchEFIX64HTTP), noHTTP, Boot{}, false},
		{"ipxe bios", ipxe(arch(ArchBIOS)), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/ipxe?mac=52:54:00:12:34:56", VendorPXE}, true},
		{"ipxe efi", ipxe(arch(ArchEFIX64)), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/ipxe?mac=52:54:00:12:34:56", VendorPXE}, true},
		{"ipxe unknown arch", ipxe(arch(4242)), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/ipxe?mac=52:54:00:12:34:56", VendorPXE}, true},
		{"ipxe without arch", ipxe(Client{MAC: testMAC}), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/ipxe?mac=52:54:00:12:34:56", VendorPXE}, true},
		{"ipxe http boot echoes HTTPClient", ipxe(httpVC(arch(ArchEFIX64HTTP))), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/ipxe?mac=52:54:00:12:34:56", VendorHTTP}, true},
		{"ipxe among user classes", func() Client { c := arch(ArchBIOS); c.UserClass = []string{"foo", "iPXE"}; return c }(), testCfg,
			Boot{tftp, "http://10.0.0.1:5240/boot/ipxe?mac=52:54:00:12:34:56", VendorPXE}, true},
		{"ipxe without base falls back to nothing", ipxe(arch(ArchBIOS)), noHTTP, Boot{}, false},
		{"ipxe without mac", ipxe(Client{}), testCfg, Boot{}, false},
		{"user class ipxe is case-sensitive", func() Client { c := arch(ArchBIOS); c.UserClass = []string{"ipxe"}; return c }(), testCfg,
			Boot{tftp, "pxelinux.0", VendorPXE}, true},
		{"no arch", Client{MAC: testMAC, VendorClass: "PXEClient"}, testCfg, Boot{}, false},
		{"plain os client", Client{MAC: testMAC, VendorClass: "MSFT 5.0"}, testCfg, Boot{}, false},
		{"unknown arch", arch(4242), testCfg, Boot{}, false},
		{"no next-server", arch(ArchBIOS), BootConfig{}, Boot{File: "pxelinux.0", VendorClass: VendorPXE}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ChooseBoot(tt.c, tt.cfg)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ChooseBoot = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestChooseBootEveryArch walks the whole option 93 value space: only the
// listed architectures boot, and each gets a file of its own kind.
func TestChooseBootEveryArch(t *testing.T) {
	want := map[Arch]string{
		ArchBIOS:         "pxelinux.0",
		ArchEFIX64:       "bootx64.efi",
		ArchEFIBC:        "bootx64.efi",
		ArchEFIARM64:     "grubaa64.efi",
		ArchEFIX64HTTP:   "http://10.0.0.1:5240/boot/bootx64.efi",
		ArchEFIARM64HTTP: "http://10.0.0.1:5240/boot/grubaa64.efi",
	}
	for a := 0; a <= 0xffff; a++ {
		b, ok := ChooseBoot(arch(Arch(a)), testCfg)
		w, known := want[Arch(a)]
		if ok != known || b.File != w {
			t.Fatalf("arch %d: got %+v, %v; want file %q", a, b, ok, w)
		}
		if ok && (b.VendorClass == VendorHTTP) != strings.HasPrefix(b.File, "http://") {
			t.Fatalf("arch %d: vendor class %q with file %q", a, b.VendorClass, b.File)
		}
	}
}

func TestClientNetBoot(t *testing.T) {
	tests := []struct {
		c    Client
		want bool
	}{
		{Client{VendorClass: "PXEClient:Arch:00007:UNDI:003016"}, true},
		{Client{VendorClass: "HTTPClient:Arch:00016:UNDI:003001"}, true},
		{Client{UserClass: []string{"iPXE"}}, true},
		{Client{VendorClass: "MSFT 5.0"}, false},
		{Client{VendorClass: "udhcp 1.36.1"}, false},
		{Client{}, false},
		// Option 93 alone does not make a netboot client: the vendor
		// class does.
		{Client{Arch: ArchEFIX64, HasArch: true}, false},
	}
	for _, tt := range tests {
		if got := tt.c.NetBoot(); got != tt.want {
			t.Errorf("%+v.NetBoot() = %v, want %v", tt.c, got, tt.want)
		}
	}
}

func TestParseClient(t *testing.T) {
	build := func(opts ...dhcpv4.Option) *dhcpv4.DHCPv4 {
		m, err := dhcpv4.NewDiscovery(testMAC)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range opts {
			m.UpdateOption(o)
		}
		return m
	}
	gen := dhcpv4.OptGeneric
	tests := []struct {
		name string
		m    *dhcpv4.DHCPv4
		want Client
	}{
		{"bare", build(), Client{MAC: testMAC}},
		{"option 93", build(gen(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7})),
			Client{MAC: testMAC, Arch: 7, HasArch: true}},
		{"option 93 list takes the first", build(gen(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 16, 0, 7})),
			Client{MAC: testMAC, Arch: 16, HasArch: true}},
		{"option 93 odd length", build(gen(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7, 1})),
			Client{MAC: testMAC}},
		{"option 93 empty", build(gen(dhcpv4.OptionClientSystemArchitectureType, nil)),
			Client{MAC: testMAC}},
		{"vendor class", build(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
			Client{MAC: testMAC, Arch: 0, HasArch: true, VendorClass: "PXEClient:Arch:00000:UNDI:002001"}},
		{"option 93 wins over vendor class",
			build(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001"), gen(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 11})),
			Client{MAC: testMAC, Arch: 11, HasArch: true, VendorClass: "PXEClient:Arch:00000:UNDI:002001"}},
		{"vendor class bad arch", build(dhcpv4.OptClassIdentifier("PXEClient:Arch:0000x")),
			Client{MAC: testMAC, VendorClass: "PXEClient:Arch:0000x"}},
		{"vendor class arch too big", build(dhcpv4.OptClassIdentifier("PXEClient:Arch:99999")),
			Client{MAC: testMAC, VendorClass: "PXEClient:Arch:99999"}},
		{"http vendor class", build(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016:UNDI:003001")),
			Client{MAC: testMAC, Arch: 16, HasArch: true, VendorClass: "HTTPClient:Arch:00016:UNDI:003001"}},
		{"ipxe raw user class", build(dhcpv4.OptUserClass("iPXE")),
			Client{MAC: testMAC, UserClass: []string{"iPXE"}}},
		{"rfc 3004 user classes", build(dhcpv4.OptRFC3004UserClass([]string{"a", "iPXE"})),
			Client{MAC: testMAC, UserClass: []string{"a", "iPXE"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Through the wire format, as a server sees it.
			m, err := dhcpv4.FromBytes(tt.m.ToBytes())
			if err != nil {
				t.Fatal(err)
			}
			if got := ParseClient(m); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseClient = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseClient feeds arbitrary packets through the parser and the
// decision: neither panics, and a decision is always well-formed.
func FuzzParseClient(f *testing.F) {
	for _, seed := range []*dhcpv4.DHCPv4{
		mustDiscovery(f),
		mustDiscovery(f, dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016"),
			dhcpv4.OptGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7})),
		mustDiscovery(f, dhcpv4.OptUserClass("iPXE")),
		mustDiscovery(f, dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016")),
	} {
		f.Add(seed.ToBytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		c := ParseClient(m)
		boot, ok := ChooseBoot(c, testCfg)
		if !ok {
			if boot != (Boot{}) {
				t.Fatalf("no boot but %+v", boot)
			}
			return
		}
		if boot.File == "" || (boot.VendorClass != VendorPXE && boot.VendorClass != VendorHTTP) || boot.NextServer != tftp {
			t.Fatalf("malformed boot %+v for %+v", boot, c)
		}
		if c.IPXE() && !strings.HasPrefix(boot.File, testCfg.HTTPBase+"/boot/ipxe?mac=") {
			t.Fatalf("iPXE client got %q", boot.File)
		}
	})
}

func mustDiscovery(tb testing.TB, opts ...dhcpv4.Option) *dhcpv4.DHCPv4 {
	m, err := dhcpv4.NewDiscovery(testMAC)
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range opts {
		m.UpdateOption(o)
	}
	return m
}
