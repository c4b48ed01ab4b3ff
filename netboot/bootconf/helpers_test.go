package bootconf

import (
	"context"
	"strings"
	"sync"
)

// fakeSource is an in-memory Source whose machines tests change between
// renders, counting the calls so tests can see that nothing is cached.
type fakeSource struct {
	mu           sync.Mutex
	machines     map[string]MachineInfo  // by MAC
	envs         map[string]Environments // by arch
	machineErr   error
	envErr       error
	machineCalls int
	envCalls     int
}

func (f *fakeSource) Machine(_ context.Context, mac string) (MachineInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machineCalls++
	if f.machineErr != nil {
		return MachineInfo{}, false, f.machineErr
	}
	m, ok := f.machines[mac]
	return m, ok, nil
}

func (f *fakeSource) Environments(_ context.Context, arch string) (Environments, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.envCalls++
	if f.envErr != nil {
		return Environments{}, f.envErr
	}
	return f.envs[arch], nil
}

// setState moves a machine to another state, as the store would.
func (f *fakeSource) setState(mac, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.machines[mac]
	m.State = state
	f.machines[mac] = m
}

func (f *fakeSource) calls() (machine, env int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.machineCalls, f.envCalls
}

// The MACs of the fixture's machines.
const (
	macCommissioning = "52:54:00:00:00:01"
	macDeploying     = "52:54:00:00:00:02"
	macDeployed      = "52:54:00:00:00:03"
	macNoImage       = "52:54:00:00:00:04" // DEPLOYING an image that is not imported
	macRescue        = "52:54:00:00:00:05" // DEPLOYING an image whose cmdline passes arguments to init
	macDisk          = "52:54:00:00:00:06" // DEPLOYING a zstd-compressed disk image
	macUnknown       = "52:54:00:00:00:99"
)

const testBase = "http://10.0.0.1:5240"

func testEnvironments(arch string) Environments {
	dir := "images/"
	return Environments{
		Enlist: Environment{
			Kernel:  dir + "enlist-" + arch + "/vmlinuz",
			Initrds: []string{dir + "enlist-" + arch + "/initramfs.cpio.gz"},
			Args:    []string{"console=ttyS0,115200n8", "quiet"},
		},
		Commission: Environment{
			Kernel:  dir + "commission-" + arch + "/vmlinuz",
			Initrds: []string{dir + "commission-" + arch + "/microcode.cpio", dir + "commission-" + arch + "/initramfs.cpio.gz"},
			Args:    []string{"console=tty0", "console=ttyS0,115200n8"},
		},
		Deploy: map[string]Environment{
			"ubuntu-24.04": {
				Kernel:  dir + "ubuntu-24.04-" + arch + "/vmlinuz",
				Initrds: []string{dir + "ubuntu-24.04-" + arch + "/initrd.img"},
				Args:    []string{"ro", "ip=dhcp"},
			},
			// An image's cmdline may end with "--" and arguments for
			// init, which therefore come after rackd's arguments.
			"debian-13-rescue": {
				Kernel:  dir + "debian-13-rescue-" + arch + "/vmlinuz",
				Initrds: []string{dir + "debian-13-rescue-" + arch + "/initrd.img"},
				Args:    []string{"console=ttyS0", "--", "systemd.unit=rescue.target"},
			},
			// A compressed disk image, written by the commissioning
			// environment in deploy mode.
			"debian-12-zst": {
				Kernel:  dir + "commission-" + arch + "/vmlinuz",
				Initrds: []string{dir + "commission-" + arch + "/initramfs.cpio.gz"},
				Args:    []string{"console=ttyS0,115200n8"},
				Disk: &DiskImage{Path: dir + strings.Repeat("ab", 32), SHA256: strings.Repeat("ab", 32), Size: 351272960,
					Format: FormatZstd, RawSize: 2147483648, RawSHA256: strings.Repeat("cd", 32)},
			},
		},
	}
}

// newFixture returns a source with one machine per interesting state and,
// when imported is set, environments for amd64 and arm64.
func newFixture(imported bool) *fakeSource {
	f := &fakeSource{
		machines: map[string]MachineInfo{
			macCommissioning: {ID: "m-0001", Hostname: "node1", State: "COMMISSIONING", Arch: "amd64"},
			macDeploying:     {ID: "m-0002", Hostname: "web1", State: "DEPLOYING", Arch: "amd64", Image: "ubuntu-24.04"},
			macDeployed:      {ID: "m-0003", Hostname: "db1", State: "DEPLOYED", Arch: "amd64", Image: "ubuntu-24.04"},
			macNoImage:       {ID: "m-0004", Hostname: "web2", State: "DEPLOYING", Arch: "arm64", Image: "debian-13"},
			macRescue:        {ID: "m-0005", Hostname: "web3", State: "DEPLOYING", Arch: "amd64", Image: "debian-13-rescue"},
			macDisk:          {ID: "m-0006", Hostname: "web4", State: "DEPLOYING", Arch: "amd64", Image: "debian-12-zst"},
		},
		envs: map[string]Environments{},
	}
	if imported {
		f.envs["amd64"] = testEnvironments("amd64")
		f.envs["arm64"] = testEnvironments("arm64")
	}
	return f
}
