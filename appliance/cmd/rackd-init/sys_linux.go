package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"

	"rackd/appliance/boot"
	"rackd/appliance/netup"
)

// realSystem is the machine itself, with -mount=false and -reboot=false
// leaving out what a test cannot do.
func realSystem(o options) system { return linuxSystem{o: o} }

type linuxSystem struct{ o options }

func (l linuxSystem) LoadModule(name string) error {
	if l.o.root != "/" {
		return nil // a test root has no modules of its own
	}
	return kmodule.Probe(name, "")
}

// Devices returns the modaliases of the devices the kernel sees now (every
// modalias file under /sys/devices, as udev's coldplug reads them) and the
// running kernel's modules.alias. A test root has neither: every listed
// module counts as one to load, and loading is a no-op there.
func (l linuxSystem) Devices() ([]string, boot.ModuleAliases, error) {
	if l.o.root != "/" {
		return nil, nil, nil
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(filepath.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:]), "modules.alias"))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	aliases, err := boot.ParseModuleAliases(f)
	if err != nil {
		return nil, nil, fmt.Errorf("modules.alias: %w", err)
	}
	var modaliases []string
	// /sys/devices holds each device once (the /sys/bus and /sys/class
	// trees are links into it); WalkDir follows no links.
	err = filepath.WalkDir("/sys/devices", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a device that went away while walking
		}
		if d.Name() == "modalias" && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil {
				if a := strings.TrimSpace(string(b)); a != "" {
					modaliases = append(modaliases, a)
				}
			}
		}
		return nil
	})
	return modaliases, aliases, err
}

func (l linuxSystem) Mount(source, target, fstype string, readOnly bool) error {
	if !l.o.mount {
		return nil
	}
	var flags uintptr = unix.MS_NOATIME
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount(source, target, fstype, flags, "")
}

func (l linuxSystem) Unmount(target string) error {
	if !l.o.mount {
		return nil
	}
	return unix.Unmount(target, 0)
}

// DiskSize is BLKGETSIZE64 of a block device, the size of a file.
func (linuxSystem) DiskSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Mode()&os.ModeDevice == 0 {
		return st.Size(), nil
	}
	var size uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); e != 0 {
		return 0, fmt.Errorf("BLKGETSIZE64 %s: %w", path, e)
	}
	return int64(size), nil
}

// ResizePartition is BLKPG_RESIZE_PARTITION, what resizepart(8) does: the
// kernel takes the new size of one partition while the disk's others are
// mounted (a re-read of the whole table would be refused as busy). An
// image file (tests) has no kernel partitions to tell.
func (linuxSystem) ResizePartition(disk string, number int, start, length int64) error {
	f, err := os.Open(disk)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeDevice == 0 {
		return nil
	}
	p := unix.BlkpgPartition{Start: start, Length: length, Pno: int32(number)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_RESIZE_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); e != 0 {
		return fmt.Errorf("BLKPG_RESIZE_PARTITION %s partition %d: %w", disk, number, e)
	}
	return nil
}

func (linuxSystem) Sync() { unix.Sync() }

func (l linuxSystem) Reboot() error {
	drainConsole()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
}

func (l linuxSystem) PowerOff() error {
	drainConsole()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// drainConsole waits until what was printed has left the console's
// terminals (tcdrain), plus a moment for the UART's own FIFO: the last
// lines before a reboot are the ones an operator (and a test) look for.
func drainConsole() {
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		fd := int(f.Fd())
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			continue
		}
		_ = unix.IoctlSetInt(fd, unix.TCSBRK, 1)
	}
	time.Sleep(100 * time.Millisecond)
}

// entropyReady reports whether the kernel's random number generator is
// seeded: until it is, getrandom(2) blocks, and with it the DHCP client's
// transaction IDs and rackd's first tokens.
func entropyReady() bool {
	_, err := unix.Getrandom(make([]byte, 1), unix.GRND_NONBLOCK)
	return !errors.Is(err, unix.EAGAIN)
}

func staticUp(ifname string, addr netip.Prefix, gw netip.Addr) error {
	return netup.Static(ifname, addr, gw)
}

func writeResolvConf(path string, dns []netip.Addr, domain string) error {
	return netup.WriteResolvConf(path, dns, domain)
}

func addr4(ifname string) netip.Addr { return netup.Addr4(ifname) }

// dhcpUp gets a lease on ifname (retrying until ctx ends), applies it,
// writes resolv.conf, calls ready, and keeps the lease renewed.
func dhcpUp(ctx context.Context, ifname, resolvConf string, say func(string, ...any), ready func()) error {
	var l *netup.Lease
	start := time.Now()
	for {
		attempt, cancel := context.WithTimeout(ctx, 60*time.Second)
		var err error
		l, err = netup.Acquire(attempt, ifname, say)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		say("management interface %s: %v; trying again", ifname, err)
	}
	if err := l.Apply(); err != nil {
		ready()
		return err
	}
	say("management interface %s: %s from DHCP (lease %s, in %s)", ifname, l.Address, l.Duration, time.Since(start).Round(100*time.Millisecond))
	if len(l.DNS) > 0 {
		if err := writeResolvConf(resolvConf, l.DNS, l.Domain); err != nil {
			say("resolv.conf: %v", err)
		}
	}
	ready()
	l.Keep(ctx, say)
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
