package boot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"rackd/internal/netnstest"
)

func TestParseCmdline(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Cmdline
		wantErr string
	}{
		{in: "BOOT_IMAGE=/vmlinuz rackd.slot=a console=ttyS0,115200 panic=10", want: Cmdline{Slot: "a"}},
		{in: "rackd.slot=b rackd.trial=1", want: Cmdline{Slot: "b", Trial: true}},
		{in: "rackd.slot=a rackd.factory_reset=1 rackd.health_window=90s", want: Cmdline{Slot: "a", FactoryReset: true, HealthWindow: 90 * time.Second}},
		{in: "rackd.trial rackd.trial=0", want: Cmdline{}},
		{in: "rackd.modules=e1000e,,igb rackd.slotx=c", want: Cmdline{Modules: []string{"e1000e", "igb"}}},
		{in: "", want: Cmdline{}},
		{in: "rackd.slot=c", wantErr: `rackd.slot="c"`},
		{in: "rackd.slot=", wantErr: "want a or b"},
		{in: "rackd.trial=yes", wantErr: "want 1 or 0"},
		{in: "rackd.health_window=5", wantErr: "positive duration"},
		{in: "rackd.health_window=-1s", wantErr: "positive duration"},
	} {
		got, err := ParseCmdline(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseCmdline(%q): %v, want an error with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseCmdline(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseCmdline(f *testing.F) {
	f.Add("rackd.slot=a rackd.trial=1 rackd.health_window=1m rackd.modules=a,b")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCmdline(s)
		if err != nil {
			return
		}
		if c.Slot != "" && c.Slot != "a" && c.Slot != "b" {
			t.Fatalf("slot %q", c.Slot)
		}
		if c.HealthWindow < 0 {
			t.Fatalf("window %s", c.HealthWindow)
		}
	})
}

func TestConfigDefaults(t *testing.T) {
	c := Defaults()
	if c.Management.Mode != "dhcp" || c.Management.Interface != "" || c.Rack.Address != "10.42.0.1/24" ||
		c.HealthWindow() != 5*time.Minute || c.Log.MaxMB != 8 || c.Log.Keep != 3 {
		t.Fatalf("defaults %+v", c)
	}
	empty, err := ParseConfig(nil)
	if err != nil || fmt.Sprintf("%+v", empty) != fmt.Sprintf("%+v", c) {
		t.Fatalf("an empty file is %+v, %v; want the defaults %+v", empty, err, c)
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantErr string
		check             func(Config) bool
	}{
		{name: "static", in: "[management]\nmode = \"static\"\naddress = \"192.0.2.10/24\"\ngateway = \"192.0.2.1\"\ndns = [\"192.0.2.53\"]\n",
			check: func(c Config) bool {
				return c.Management.Address == "192.0.2.10/24" && c.Management.DNS[0] == "192.0.2.53"
			}},
		{name: "window", in: "[health]\nwindow = \"90s\"\n[log]\nmax_mb = 1\nkeep = 0\n",
			check: func(c Config) bool { return c.HealthWindow() == 90*time.Second && c.Log.MaxMB == 1 && c.Log.Keep == 0 }},
		{name: "rack", in: "[rack]\ninterfaces = [\"eth1\", \"eth2\"]\naddresses = { eth2 = \"10.43.0.1/24\" }\n",
			check: func(c Config) bool { return c.Rack.Addresses["eth2"] == "10.43.0.1/24" }},
		{name: "typo", in: "[managment]\nmode = \"dhcp\"\n", wantErr: "unknown keys managment"},
		{name: "mode", in: "[management]\nmode = \"bootp\"\n", wantErr: `mode "bootp"`},
		{name: "static without address", in: "[management]\nmode = \"static\"\n", wantErr: "needs address"},
		{name: "bad gateway", in: "[management]\ngateway = \"x\"\n", wantErr: "gateway"},
		{name: "bad dns", in: "[management]\ndns = [\"x\"]\n", wantErr: "dns"},
		{name: "bad rack address", in: "[rack]\naddress = \"10.42.0.1\"\n", wantErr: "[rack] address"},
		{name: "both", in: "[management]\ninterface = \"eth0\"\n[rack]\ninterfaces = [\"eth0\"]\n", wantErr: "both the management and a rack"},
		{name: "window zero", in: "[health]\nwindow = \"0s\"\n", wantErr: "positive duration"},
		{name: "max_mb", in: "[log]\nmax_mb = 0\n", wantErr: "max_mb"},
		{name: "syntax", in: "[log\n", wantErr: "appliance.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("%+v, %v", c, err)
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(DefaultConfigTOML))
	f.Add([]byte("[management]\nmode = \"static\"\naddress = \"192.0.2.10/24\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if _, err := netip.ParsePrefix(c.Rack.Address); err != nil {
			t.Fatalf("accepted rack address %q", c.Rack.Address)
		}
		if c.HealthWindow() <= 0 || c.Log.MaxMB < 1 {
			t.Fatalf("accepted %+v", c)
		}
	})
}

func TestAssign(t *testing.T) {
	nics := []string{"enp1s0", "enp2s0", "enp3s0"}
	cfg := func(in string) Config {
		c, err := ParseConfig([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name, cfg string
		nics      []string
		want      Interfaces
		wantErr   string
	}{
		{name: "defaults", nics: nics, want: Interfaces{Management: "enp1s0", Rack: []RackInterface{{"enp2s0", p("10.42.0.1/24")}}}},
		{name: "one nic", nics: nics[:1], want: Interfaces{Management: "enp1s0"}},
		{name: "named", cfg: "[management]\ninterface = \"enp3s0\"\n[rack]\ninterfaces = [\"enp1s0\", \"enp2s0\"]\naddresses = { enp2s0 = \"10.43.0.1/24\" }\n",
			nics: nics, want: Interfaces{Management: "enp3s0", Rack: []RackInterface{{"enp1s0", p("10.42.0.1/24")}, {"enp2s0", p("10.43.0.1/24")}}}},
		{name: "management missing", cfg: "[management]\ninterface = \"eth9\"\n", nics: nics, wantErr: "eth9 is not there"},
		{name: "rack missing", cfg: "[rack]\ninterfaces = [\"eth9\"]\n", nics: nics, wantErr: "eth9 is not there"},
		{name: "no nics", wantErr: "no network interface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cfg(tc.cfg).Assign(tc.nics)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// fakeSys builds a sysfs tree: disks with partitions (name -> PARTNAME
// by number) and NICs (name -> PCI path).
func fakeSys(t *testing.T, disks map[string][]string, nics map[string]string) string {
	t.Helper()
	sys := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(sys, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(filepath.Join(sys, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(sys, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("class/block")
	mk("class/net")
	for disk, parts := range disks {
		dd := "devices/pci0000:00/0000:00:04.0/virtio2/block/" + disk
		mk(dd)
		write(dd+"/uevent", "MAJOR=254\nMINOR=0\nDEVNAME="+disk+"\nDEVTYPE=disk\n")
		link("../../"+dd, "class/block/"+disk)
		for i, name := range parts {
			dev := fmt.Sprintf("%s%d", disk, i+1)
			mk(dd + "/" + dev)
			write(dd+"/"+dev+"/uevent", fmt.Sprintf("MAJOR=254\nMINOR=%d\nDEVNAME=%s\nDEVTYPE=partition\nPARTN=%d\nPARTNAME=%s\n", i+1, dev, i+1, name))
			link("../../"+dd+"/"+dev, "class/block/"+dev)
		}
	}
	for name, bus := range nics {
		nd := "devices/pci0000:00/" + bus + "/net/" + name
		mk(nd)
		write(nd+"/type", "1\n")
		link("../../../"+bus, nd+"/device")
		link("../../"+nd, "class/net/"+name)
	}
	// A virtual interface: no device link.
	mk("devices/virtual/net/lo")
	write("devices/virtual/net/lo/type", "772\n")
	link("../../devices/virtual/net/lo", "class/net/lo")
	return sys
}

var applianceParts = []string{"bios", "esp", "rackd-a", "rackd-b", "rackd-data"}

func TestFindPartitions(t *testing.T) {
	sys := fakeSys(t, map[string][]string{"vda": applianceParts, "sda": {"usb-data"}}, nil)
	parts, err := FindPartitions(sys, "a")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Partition{
		"esp":        {Name: "esp", Dev: "vda2", Number: 2, Disk: "vda"},
		"rackd-a":    {Name: "rackd-a", Dev: "vda3", Number: 3, Disk: "vda"},
		"rackd-b":    {Name: "rackd-b", Dev: "vda4", Number: 4, Disk: "vda"},
		"rackd-data": {Name: "rackd-data", Dev: "vda5", Number: 5, Disk: "vda"},
	}
	if !reflect.DeepEqual(parts, want) {
		t.Fatalf("got %+v\nwant %+v", parts, want)
	}
	if d := parts[PartData]; d.DevPath() != "/dev/vda5" || d.DiskPath() != "/dev/vda" {
		t.Fatalf("paths %s %s", d.DevPath(), d.DiskPath())
	}

	for _, tc := range []struct {
		name  string
		disks map[string][]string
		want  string
	}{
		{"none", map[string][]string{"vda": {"root"}}, "no disk has all of the partitions"},
		{"partial", map[string][]string{"vda": {"esp", "rackd-a"}}, "found: vda:esp, vda:rackd-a"},
		{"two disks", map[string][]string{"vda": applianceParts, "vdb": applianceParts}, "vda, vdb all carry"},
		{"twice on one", map[string][]string{"vda": append(applianceParts, "rackd-a")}, "two partitions named rackd-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FindPartitions(fakeSys(t, tc.disks, nil), "a")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestNICs(t *testing.T) {
	// Named against their PCI order: the order is the bus's.
	sys := fakeSys(t, nil, map[string]string{"eth0": "0000:00:05.0", "eth1": "0000:00:03.0", "enp0s4": "0000:00:04.0"})
	nics, err := NICs(sys)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(Names(nics), ","); got != "eth1,enp0s4,eth0" {
		t.Fatalf("NICs in order %s, want eth1,enp0s4,eth0", got)
	}
}

func TestHasExtFSAndFormat(t *testing.T) {
	mke2fs, e2fsck := netnstest.Tool(t, "mke2fs"), netnstest.Tool(t, "e2fsck")
	img := filepath.Join(t.TempDir(), "data.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	hasFS := func() bool {
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ok, err := HasExtFS(f)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if hasFS() {
		t.Fatal("a blank partition has a file system")
	}
	// The initramfs has no /etc/mke2fs.conf: mke2fs's built-in profile
	// must know ext4.
	t.Setenv("MKE2FS_CONFIG", filepath.Join(t.TempDir(), "none.conf"))
	if err := Format(context.Background(), mke2fs, img); err != nil {
		t.Fatal(err)
	}
	if !hasFS() {
		t.Fatal("no ext4 superblock after Format")
	}
	out, err := exec.Command(e2fsck, "-fn", img).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn: %v\n%s", err, out)
	}
	if out, err := exec.Command(netnstest.Tool(t, "dumpe2fs"), "-h", img).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "Filesystem volume name:   rackd-data") || !strings.Contains(string(out), "extent") {
		t.Fatalf("dumpe2fs -h: %v\n%s", err, out)
	}
	if err := Format(context.Background(), mke2fs, filepath.Join(t.TempDir(), "missing", "x")); err == nil {
		t.Fatal("Format of a missing device succeeded")
	}
}

func TestDataPrepare(t *testing.T) {
	dir := t.TempDir()
	d := Data{Dir: dir}
	esp := t.TempDir()
	seed := filepath.Join(esp, "appliance.toml")
	seedBody := "[health]\nwindow = \"2m\"\n"
	if err := os.WriteFile(seed, []byte(seedBody), 0o644); err != nil {
		t.Fatal(err)
	}
	wrote, err := d.Prepare(seed)
	if err != nil || !wrote {
		t.Fatalf("Prepare: %v, %v", wrote, err)
	}
	c, err := d.LoadConfig()
	if err != nil || c.HealthWindow() != 2*time.Minute {
		t.Fatalf("the seed did not become appliance.toml: %+v, %v", c, err)
	}
	for _, sub := range []string{"etc", "state", "log", "appliance"} {
		if st, err := os.Stat(filepath.Join(dir, sub)); err != nil || !st.IsDir() {
			t.Fatalf("%s: %v", sub, err)
		}
	}
	// A later boot keeps the operator's file, whatever the seed says now.
	if err := os.WriteFile(seed, []byte("[health]\nwindow = \"9m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if wrote, err := d.Prepare(seed); err != nil || wrote {
		t.Fatalf("second Prepare: %v, %v", wrote, err)
	}
	if c, _ := d.LoadConfig(); c.HealthWindow() != 2*time.Minute {
		t.Fatal("second Prepare replaced appliance.toml")
	}

	// No seed: the defaults, commented.
	d2 := Data{Dir: t.TempDir()}
	if _, err := d2.Prepare(filepath.Join(esp, "none.toml")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(d2.Path(ApplianceConfigFile)); string(b) != DefaultConfigTOML {
		t.Fatal("appliance.toml is not the default")
	}
	// A broken seed is refused with its name.
	bad := filepath.Join(esp, "bad.toml")
	os.WriteFile(bad, []byte("[health]\nwindow = \"soon\"\n"), 0o644)
	if _, err := (Data{Dir: t.TempDir()}).Prepare(bad); err == nil || !strings.Contains(err.Error(), "bad.toml") {
		t.Fatalf("broken seed: %v", err)
	}

	wrote, err = d.WriteRackdConfig([]string{"enp2s0"}, "/run/rackd/appliance.json")
	if err != nil || !wrote {
		t.Fatalf("WriteRackdConfig: %v %v", wrote, err)
	}
	var rc struct {
		Listen   string `toml:"listen"`
		StateDir string `toml:"state_dir"`
		DHCP     struct {
			Interfaces []string `toml:"interfaces"`
		} `toml:"dhcp"`
		TFTP struct {
			Listen string `toml:"listen"`
		} `toml:"tftp"`
		Appliance struct {
			Descriptor string `toml:"descriptor"`
		} `toml:"appliance"`
	}
	md, err := toml.DecodeFile(d.Path(RackdConfigFile), &rc)
	if err != nil || len(md.Undecoded()) > 0 {
		t.Fatalf("rackd.toml: %v, undecoded %v", err, md.Undecoded())
	}
	if rc.Listen != "0.0.0.0:5240" || rc.StateDir != filepath.Join(dir, "state") || !reflect.DeepEqual(rc.DHCP.Interfaces, []string{"enp2s0"}) ||
		rc.TFTP.Listen != "0.0.0.0:69" || rc.Appliance.Descriptor != "/run/rackd/appliance.json" {
		t.Fatalf("rackd.toml %+v", rc)
	}
	if wrote, err := d.WriteRackdConfig([]string{"eth9"}, "x"); err != nil || wrote {
		t.Fatalf("second WriteRackdConfig: %v %v", wrote, err)
	}
}

func TestBackoff(t *testing.T) {
	b := DefaultBackoff
	s := time.Second
	for _, tc := range []struct{ prev, uptime, want time.Duration }{
		{0, 0, s},
		{s, 0, 2 * s},
		{2 * s, 10 * s, 4 * s},
		{16 * s, 0, 30 * s},
		{30 * s, 59 * s, 30 * s},
		{30 * s, time.Minute, s},
	} {
		if got := b.Next(tc.prev, tc.uptime); got != tc.want {
			t.Errorf("Next(%s, %s) = %s, want %s", tc.prev, tc.uptime, got, tc.want)
		}
	}
}

func TestTail(t *testing.T) {
	tl := &Tail{Lines: 2}
	fmt.Fprint(tl, "one\ntwo\nthr")
	fmt.Fprint(tl, "ee\nfour")
	if got := tl.String(); got != "three | four" {
		t.Fatalf("tail %q", got)
	}
}

func TestRotatingFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rackd.log")
	r := &RotatingFile{Path: p, Max: 10, Keep: 2}
	for i := range 7 {
		fmt.Fprintf(r, "line %d\n", i) // 7 bytes: one a file
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"rackd.log": "line 6\n", "rackd.log.1": "line 5\n", "rackd.log.2": "line 4\n"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := os.Stat(p + ".3"); err == nil {
		t.Error("rackd.log.3 kept beyond keep = 2")
	}
	// Reopened, it appends to what is there and counts it.
	r = &RotatingFile{Path: p, Max: 16, Keep: 2}
	fmt.Fprint(r, "ab\n")
	fmt.Fprint(r, "0123456789\n")
	r.Close()
	if b, _ := os.ReadFile(p); string(b) != "0123456789\n" {
		t.Fatalf("after reopen: %q", b)
	}
	if b, _ := os.ReadFile(p + ".1"); string(b) != "line 6\nab\n" {
		t.Fatalf("after reopen .1: %q", b)
	}
}

// sh is a supervised program: a shell script.
func sh(script string) func(ctx context.Context) *exec.Cmd {
	return func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, "/bin/sh", "-c", script) }
}

func TestSupervisorRestartsUntilStopCode(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "n")
	// Exits 3 twice, then with the stop code.
	script := fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; echo "run $n"; [ $n -ge 3 ] && exit 100; exit 3`, counter)
	var pauses []time.Duration
	var told []int
	var out strings.Builder
	s := &Supervisor{
		Command: sh(script), Out: &out, Backoff: DefaultBackoff, StopCode: 100,
		Sleep:  func(_ context.Context, d time.Duration) error { pauses = append(pauses, d); return nil },
		OnExit: func(n int) { told = append(told, n) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Run(ctx); !errors.Is(err, ErrStopCode) {
		t.Fatalf("Run: %v, want ErrStopCode", err)
	}
	if !reflect.DeepEqual(pauses, []time.Duration{time.Second, 2 * time.Second}) {
		t.Fatalf("pauses %v, want 1s 2s", pauses)
	}
	// The stop code's exit is not a crash: OnExit hears only the two others.
	if !reflect.DeepEqual(told, []int{1, 2}) {
		t.Fatalf("OnExit told %v, want [1 2]", told)
	}
	if n, last := s.Exits(); n != 3 || last != "exit code 100" {
		t.Fatalf("exits %d %q", n, last)
	}
	if got := out.String(); got != "run 1\nrun 2\nrun 3\n" {
		t.Fatalf("output %q", got)
	}
}

func TestSupervisorStopsWithContext(t *testing.T) {
	started := make(chan struct{})
	var once atomic.Bool
	s := &Supervisor{
		Command: func(ctx context.Context) *exec.Cmd {
			if once.CompareAndSwap(false, true) {
				close(started)
			}
			c := exec.CommandContext(ctx, "/bin/sleep", "60")
			c.WaitDelay = 5 * time.Second
			return c
		},
		Out: &strings.Builder{}, Backoff: DefaultBackoff, StopCode: 100,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestWaitHealthy(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "dhcp interface eth1 not bound", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ctx := context.Background()
	if err := WaitHealthy(ctx, srv.Client(), srv.URL, time.Now(), time.Minute, time.Millisecond); err != nil {
		t.Fatalf("WaitHealthy: %v", err)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d calls, want 3", calls.Load())
	}

	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "dhcp interface eth1 not bound", http.StatusServiceUnavailable)
	}))
	defer never.Close()
	err := WaitHealthy(ctx, never.Client(), never.URL, time.Now(), 50*time.Millisecond, 5*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "503 dhcp interface eth1 not bound") {
		t.Fatalf("WaitHealthy of an unhealthy rackd: %v", err)
	}
	// rackd's own answer: JSON, its status in words.
	rackd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("{\n  \"status\": \"not ready: DHCP interface eth1 not bound\",\n  \"store\": \"ok\",\n  \"not_ready\": [\"DHCP interface eth1 not bound\"]\n}\n"))
	}))
	defer rackd.Close()
	err = Check(ctx, rackd.Client(), rackd.URL)
	if err == nil || err.Error() != "/healthz: 503 not ready: DHCP interface eth1 not bound" {
		t.Fatalf("Check of rackd's 503: %v", err)
	}
}

func TestRackSubnet(t *testing.T) {
	for _, tc := range []struct{ in, cidr, lo, hi, err string }{
		{in: "10.42.0.1/24", cidr: "10.42.0.0/24", lo: "10.42.0.100", hi: "10.42.0.199"},
		{in: "10.42.7.9/16", cidr: "10.42.0.0/16", lo: "10.42.0.100", hi: "10.42.0.199"},
		{in: "192.168.5.1/26", cidr: "192.168.5.0/26", lo: "192.168.5.32", hi: "192.168.5.62"},
		{in: "10.0.0.1/31", err: "want an IPv4 network"},
		{in: "2001:db8::1/64", err: "want an IPv4 network"},
	} {
		cidr, lo, hi, err := RackSubnet(netip.MustParsePrefix(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("RackSubnet(%s): %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || cidr.String() != tc.cidr || lo.String() != tc.lo || hi.String() != tc.hi {
			t.Errorf("RackSubnet(%s) = %s %s-%s, %v", tc.in, cidr, lo, hi, err)
		}
	}
}

func TestImageDirs(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"enlist-amd64", "bootloaders/amd64", "bootloaders/grub-amd64", "empty"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
		if d != "empty" {
			os.WriteFile(filepath.Join(dir, d, "rackd-image.json"), []byte("{}"), 0o644)
		}
	}
	got, err := ImageDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, g := range got {
		r, _ := filepath.Rel(dir, g)
		rel = append(rel, r)
	}
	if strings.Join(rel, " ") != "bootloaders/amd64 bootloaders/grub-amd64 enlist-amd64" {
		t.Fatalf("ImageDirs = %v", rel)
	}
}

func TestWatchdogPet(t *testing.T) {
	boot := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	w := Watchdog{Boot: boot, Window: 5 * time.Minute, Grace: 2 * time.Minute}
	at := func(d time.Duration) time.Time { return boot.Add(d) }
	for _, tc := range []struct {
		now, healthy time.Time
		want         bool
	}{
		{at(time.Minute), time.Time{}, true},       // coming up
		{at(5*time.Minute - 1), time.Time{}, true}, // still in the window
		{at(5 * time.Minute), time.Time{}, false},  // never healthy
		{at(10 * time.Minute), at(9 * time.Minute), true},
		{at(10 * time.Minute), at(8 * time.Minute), true},
		{at(10 * time.Minute), at(7 * time.Minute), false}, // wedged
	} {
		if got := w.Pet(tc.now, tc.healthy); got != tc.want {
			t.Errorf("Pet(%s, healthy %s) = %v, want %v", tc.now.Sub(boot), tc.healthy, got, tc.want)
		}
	}
}

func TestWaitPowerKey(t *testing.T) {
	ev := func(typ, code uint16, value int32) []byte {
		b := make([]byte, 24)
		b[16], b[17] = byte(typ), byte(typ>>8)
		b[18], b[19] = byte(code), byte(code>>8)
		v := uint32(value)
		b[20], b[21], b[22], b[23] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		return b
	}
	var stream []byte
	stream = append(stream, ev(4, 4, 0x66)...) // EV_MSC scan code
	stream = append(stream, ev(1, 30, 1)...)   // KEY_A pressed
	stream = append(stream, ev(1, 116, 0)...)  // power key released
	stream = append(stream, ev(0, 0, 0)...)    // EV_SYN
	if err := WaitPowerKey(bytes.NewReader(stream)); !errors.Is(err, ErrNoPowerKey) {
		t.Fatalf("no press: %v", err)
	}
	stream = append(stream, PowerKeyEvent()...)
	if err := WaitPowerKey(bytes.NewReader(stream)); err != nil {
		t.Fatalf("press: %v", err)
	}
	if err := WaitPowerKey(bytes.NewReader(PowerKeyEvent()[:20])); !errors.Is(err, ErrNoPowerKey) {
		t.Fatalf("short event: %v", err)
	}
}
