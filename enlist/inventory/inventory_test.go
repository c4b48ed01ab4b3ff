package inventory

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"rackd/enlist"
)

func TestCollectQEMU(t *testing.T) {
	inv, warnings, err := Collect(os.DirFS("testdata/qemu"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	want := enlist.Inventory{
		// lo, the bridge (no device), InfiniBand (type 32) and the USB
		// gadget with a random MAC are not the machine's NICs.
		MACs:     []string{"52:54:00:12:34:56", "52:54:00:ab:cd:ef"},
		Arch:     "amd64",
		CPUCount: 4,    // sys/devices/system/cpu/online wins over cpuinfo's 6
		MemoryMB: 1024, // 8 online blocks of 128 MiB, not MemTotal's 978
		Disks: []enlist.Disk{
			{Name: "nvme0n1", SizeBytes: 1953525168 * 512, Model: "INTEL SSDPE2KX010T8"},
			{Name: "sda", SizeBytes: 3907029168 * 512, Model: "Samsung SSD 870", Serial: "S5Y1NX0R123456"},
			{Name: "vda", SizeBytes: 20971520 * 512},
		},
		DMI: enlist.DMI{Vendor: "QEMU", Product: "Standard PC (i440FX + PIIX, 1996)",
			UUID: "5c7a1f2e-0b3d-4e5f-8a9b-0c1d2e3f4a5b"},
	}
	if !reflect.DeepEqual(inv, want) {
		t.Errorf("inventory:\n got %+v\nwant %+v", inv, want)
	}
	if err := inv.Validate(); err != nil {
		t.Errorf("collected inventory does not validate: %v", err)
	}
}

func TestCollectBare(t *testing.T) {
	// No cpu/online, no memory blocks, no /sys/block, no DMI: fallbacks and
	// warnings, but the machine still enlists by its MAC.
	inv, warnings, err := Collect(os.DirFS("testdata/bare"), "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if inv.CPUCount != 2 || inv.MemoryMB != 2000 || !reflect.DeepEqual(inv.MACs, []string{"52:54:00:00:00:07"}) {
		t.Errorf("got %+v", inv)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0].Error(), "disks") {
		t.Errorf("warnings = %v, want one about disks", warnings)
	}
	if inv.DMI != (enlist.DMI{}) {
		t.Errorf("DMI = %+v, want empty", inv.DMI)
	}
}

func TestCollectNoNIC(t *testing.T) {
	_, _, err := Collect(os.DirFS("testdata/nonic"), "amd64")
	if err == nil || !strings.Contains(err.Error(), "no physical network interface") {
		t.Fatalf("err = %v", err)
	}
	_, _, err = Collect(fstest.MapFS{}, "amd64")
	if err == nil {
		t.Fatal("an empty tree gave no error")
	}
}

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		bad  bool
	}{
		{"0", 1, false}, {"0-3", 4, false}, {"0-3,8,10-11\n", 7, false}, {"", 0, false},
		{"3-1", 0, true}, {"a", 0, true}, {"0-", 0, true}, {"-1", 0, true}, {"0-99999999", 0, true},
		{"0,,1", 0, true},
	} {
		got, err := ParseCPUList(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseCPUList(%q) = %d, %v; want %d, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		bad  bool
	}{
		{"MemTotal:       24684092 kB\nMemFree: 1 kB\n", 24105, false},
		{"MemFree: 1 kB\nMemTotal: 1024 kB", 1, false},
		{"MemTotal: 12 MB\n", 0, true},
		{"MemTotal: x kB\n", 0, true},
		{"MemTotal: 99999999999999999999 kB\n", 0, true},
		{"", 0, true},
	} {
		got, err := ParseMeminfo([]byte(tc.in))
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseMeminfo(%q) = %d, %v; want %d, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestParseCmdline(t *testing.T) {
	line := `BOOT_IMAGE=/vmlinuz console=ttyS0 rackd.url=http://10.0.0.1:5240 quiet msg="a b=c" rackd.url=http://x:1` + "\n"
	if v, ok := ParseCmdline(line, "rackd.url"); !ok || v != "http://x:1" {
		t.Errorf("rackd.url = %q, %v (the last one wins)", v, ok)
	}
	if v, ok := ParseCmdline(line, "msg"); !ok || v != "a b=c" {
		t.Errorf("msg = %q, %v", v, ok)
	}
	if v, ok := ParseCmdline(line, "quiet"); !ok || v != "" {
		t.Errorf("quiet = %q, %v", v, ok)
	}
	if _, ok := ParseCmdline(line, "rackd"); ok {
		t.Error("rackd found")
	}
}

func TestPrintable(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := printable(long)
	if len(got) > enlist.MaxTextLen || !strings.HasPrefix(long, got) {
		t.Errorf("printable(long) = %q (%d bytes)", got, len(got))
	}
	if got := printable("a\x00b\x1fc\xffd "); got != "abcd" {
		t.Errorf("printable = %q", got)
	}
}

func TestParseMAC(t *testing.T) {
	for in, want := range map[string]string{
		"52:54:00:AB:cd:ef": "52:54:00:ab:cd:ef", "00:00:00:00:00:00": "", "ff:ff:ff:ff:ff:ff": "",
		"01:00:5e:00:00:01": "", "52:54:00": "", "x": "",
	} {
		got, ok := ParseMAC(in)
		if got != want || ok != (want != "") {
			t.Errorf("ParseMAC(%q) = %q, %v", in, got, ok)
		}
	}
}

func TestParseBMCAddress(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
		bad  bool
	}{
		{[]byte{0, 0x11, 10, 0, 0, 13}, "10.0.0.13", false},
		{[]byte{0, 0x11, 0, 0, 0, 0}, "", false},
		{[]byte{0xc1, 0x11, 10, 0, 0, 13}, "", true},
		{[]byte{0, 0x11, 10}, "", true},
	} {
		got, err := ParseBMCAddress(tc.in)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("ParseBMCAddress(%v) = %q, %v", tc.in, got, err)
		}
	}
}

func TestBootMAC(t *testing.T) {
	for in, want := range map[string]string{
		"console=ttyS0 BOOTIF=01-52-54-00-12-34-56": "52:54:00:12:34:56",
		"BOOTIF=52:54:00:12:34:56":                  "52:54:00:12:34:56",
		"BOOTIF=01-52-54-00":                        "",
		"quiet":                                     "",
	} {
		if got := BootMAC(in); got != want {
			t.Errorf("BootMAC(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNamedNICs(t *testing.T) {
	fsys := os.DirFS("testdata/qemu")
	got, err := NamedNICs(fsys, []string{"br0", "missing", "ens3", "lo"})
	if err != nil {
		t.Fatal(err)
	}
	// br0 is virtual but named; lo has no usable MAC; missing is skipped.
	want := []NIC{{"br0", "52:54:00:99:99:99"}, {"ens3", "52:54:00:12:34:56"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NamedNICs = %v, want %v", got, want)
	}
	for _, bad := range []string{"../x", "", ".."} {
		if _, err := NamedNICs(fsys, []string{bad}); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	inv, _, err := CollectNICs(fsys, "amd64", want)
	if err != nil || !reflect.DeepEqual(inv.MACs, []string{"52:54:00:99:99:99", "52:54:00:12:34:56"}) {
		t.Errorf("CollectNICs: %v %v", inv.MACs, err)
	}
}
