package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"rackd/enlist"
	"rackd/enlist/inventory"
)

// fakePower records what run asked for instead of rebooting the test
// machine.
type fakePower struct {
	mu  sync.Mutex
	did []string
}

func (p *fakePower) Reboot() error   { return p.record("reboot") }
func (p *fakePower) PowerOff() error { return p.record("poweroff") }
func (p *fakePower) record(s string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.did = append(p.did, s)
	return nil
}

func (p *fakePower) actions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.did...)
}

// fakeNet hands out a lease on the NIC whose name it is told, after fails
// failures.
type fakeNet struct {
	mu    sync.Mutex
	fails int
	calls int
}

func (n *fakeNet) Up(ctx context.Context, nics []inventory.NIC, _ time.Duration) (inventory.NIC, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls++
	if n.calls <= n.fails {
		return inventory.NIC{}, errors.New("fake: no DHCP offer")
	}
	return nics[len(nics)-1], nil
}

// machineFS is a small machine: two NICs, 2 CPUs, 2 GiB, one disk, DMI.
func machineFS(cmdline string) fstest.MapFS {
	return fstest.MapFS{
		"proc/cmdline":                               {Data: []byte(cmdline + "\n")},
		"sys/class/net/lo/address":                   {Data: []byte("00:00:00:00:00:00\n")},
		"sys/class/net/eth0/address":                 {Data: []byte("52:54:00:00:10:01\n")},
		"sys/class/net/eth0/type":                    {Data: []byte("1\n")},
		"sys/class/net/eth0/device/vendor":           {Data: []byte("0x1af4\n")},
		"sys/class/net/eth1/address":                 {Data: []byte("52:54:00:00:10:02\n")},
		"sys/class/net/eth1/type":                    {Data: []byte("1\n")},
		"sys/class/net/eth1/device/vendor":           {Data: []byte("0x8086\n")},
		"sys/devices/system/cpu/online":              {Data: []byte("0-1\n")},
		"sys/devices/system/memory/block_size_bytes": {Data: []byte("8000000\n")},
		"sys/devices/system/memory/memory0/state":    {Data: []byte("online\n")},
		"sys/devices/system/memory/memory1/state":    {Data: []byte("online\n")},
		"proc/meminfo":                               {Data: []byte("MemTotal: 2000000 kB\n")},
		"sys/block/vda/size":                         {Data: []byte("20971520\n")},
		"sys/class/dmi/id/sys_vendor":                {Data: []byte("QEMU\n")},
		"sys/class/dmi/id/product_name":              {Data: []byte("Standard PC\n")},
		"sys/class/dmi/id/product_uuid":              {Data: []byte("5C7A1F2E-0B3D-4E5F-8A9B-0C1D2E3F4A5B\n")},
		"etc/rackd-enlist/modules":                   {Data: []byte("# NICs\nvirtio_net\ne1000 # intel\n\nvirtio_net\n")},
	}
}

// noSleep makes every backoff instant (but still cancellable).
func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

type harness struct {
	out     bytes.Buffer
	power   fakePower
	net     fakeNet
	loaded  []string
	bmcAddr string
}

func (h *harness) system(root fs.FS) system {
	return system{
		stdout: &syncWriter{w: &h.out}, root: root, power: &h.power, net: &h.net,
		modules: func(name string) error {
			h.loaded = append(h.loaded, name)
			if name == "e1000" {
				return errors.New("fake: no such module")
			}
			return nil
		},
		bmc:   func() (string, error) { return h.bmcAddr, nil },
		sleep: noSleep, arch: "amd64",
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// lastLine is the final console line, the one tests watch for.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], enlist.MarkerEnlisted) || strings.HasPrefix(lines[i], enlist.MarkerKnown) ||
			strings.HasPrefix(lines[i], enlist.MarkerAlreadyKnown) || strings.HasPrefix(lines[i], enlist.MarkerFailed) {
			return lines[i]
		}
	}
	return ""
}

func TestRunNoURL(t *testing.T) {
	var h harness
	err := run(t.Context(), nil, h.system(machineFS("console=ttyS0")))
	if err == nil || !strings.Contains(err.Error(), "rackd.url") {
		t.Fatalf("err = %v", err)
	}
	if got := lastLine(h.out.String()); !strings.HasPrefix(got, enlist.MarkerFailed+"no rackd URL") {
		t.Errorf("final line %q", got)
	}
	if len(h.power.actions()) != 0 {
		t.Errorf("acted: %v", h.power.actions())
	}
	for _, bad := range []string{"ftp://x", "http://", "::"} {
		if _, err := rackdURL(bad, ""); err == nil {
			t.Errorf("rackdURL(%q) accepted", bad)
		}
	}
}

func TestRunNoNIC(t *testing.T) {
	var h harness
	root := machineFS("rackd.url=http://127.0.0.1:1")
	for name := range maps.Keys(root) {
		if strings.HasPrefix(name, "sys/class/net/eth") {
			delete(root, name)
		}
	}
	err := run(t.Context(), []string{"-nic-wait", "1ms"}, h.system(root))
	if err == nil || !strings.Contains(err.Error(), "no physical network interface") {
		t.Fatalf("err = %v", err)
	}
}

func TestRunDHCPGivesUp(t *testing.T) {
	var h harness
	h.net.fails = 100
	err := run(t.Context(), []string{"-tries", "3"}, h.system(machineFS("rackd.url=http://127.0.0.1:1")))
	if err == nil || !strings.Contains(err.Error(), "no lease after 3 attempt") || h.net.calls != 3 {
		t.Fatalf("err = %v after %d calls", err, h.net.calls)
	}
}

func TestModuleList(t *testing.T) {
	got := moduleList(machineFS(""), "/etc/rackd-enlist/modules", "quiet rackd.modules=igb,,virtio_net,tg3")
	want := []string{"virtio_net", "e1000", "igb", "tg3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("moduleList = %v, want %v", got, want)
	}
	if got := moduleList(machineFS(""), "/nonexistent", ""); len(got) != 0 {
		t.Errorf("moduleList of a missing file = %v", got)
	}
}

func TestFlags(t *testing.T) {
	var h harness
	if err := run(t.Context(), []string{"-nonsense"}, h.system(machineFS(""))); err == nil {
		t.Error("unknown flag accepted")
	}
	if err := run(t.Context(), []string{"extra"}, h.system(machineFS(""))); err == nil {
		t.Error("stray argument accepted")
	}
}

type failingPower struct{}

func (failingPower) Reboot() error   { return errors.New("fake: EPERM") }
func (failingPower) PowerOff() error { return errors.New("fake: EPERM") }

func TestRunPowerFails(t *testing.T) {
	ln, url := listen(t)
	_, serve := startRackd(t, ln, nil)
	serve()
	var h harness
	sys := h.system(machineFS("rackd.url=" + url))
	sys.power = failingPower{}
	err := run(t.Context(), nil, sys)
	if err == nil || !strings.Contains(err.Error(), "powering off: fake: EPERM") {
		t.Fatalf("err %v", err)
	}
	out := strings.Split(strings.TrimSpace(h.out.String()), "\n")
	if len(out) < 2 || !strings.HasPrefix(out[len(out)-2], enlist.MarkerEnlisted) || !strings.HasPrefix(out[len(out)-1], enlist.MarkerFailed) {
		t.Errorf("console:\n%s", h.out.String())
	}
}

func TestRunNamedInterfaces(t *testing.T) {
	ln, url := listen(t)
	a, serve := startRackd(t, ln, nil)
	serve()
	root := machineFS("rackd.url=" + url)
	root["sys/class/net/veth0/address"] = &fstest.MapFile{Data: []byte("52:54:00:00:10:09\n")} // no device: virtual
	var h harness
	if err := run(t.Context(), []string{"-interfaces", "veth0"}, h.system(root)); err != nil {
		t.Fatal(err)
	}
	id, _ := strings.CutPrefix(lastLine(h.out.String()), enlist.MarkerEnlisted)
	id, _ = strings.CutSuffix(id, ", "+enlist.SuffixPowerOff)
	m, err := a.Store().Machine(id)
	if err != nil || strings.Join(m.MACs, " ") != "52:54:00:00:10:09" {
		t.Fatalf("machine %+v %v\n%s", m, err, h.out.String())
	}
}
