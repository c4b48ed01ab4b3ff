package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/dhclient"
	"github.com/u-root/u-root/pkg/ipmi"
	"github.com/u-root/u-root/pkg/kmodule"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"rackd/enlist/bmc"
	"rackd/enlist/deploy"
	"rackd/enlist/inventory"
)

// realSystem is the machine itself.
func realSystem() system {
	return system{
		stdout:   os.Stdout,
		root:     os.DirFS("/"),
		power:    rebooter{},
		net:      dhcpNet{},
		modules:  func(name string) error { return kmodule.Probe(name, "") },
		bmc:      bmcAddress,
		bmcSetup: bmcSetup,
		openDisk: func(name string) (disk, error) {
			if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
				return nil, fmt.Errorf("disk name %q", name)
			}
			return deploy.OpenDisk("/dev/" + name)
		},
	}
}

// rebooter is the reboot system call, after a sync so that nothing written
// is lost (the initramfs has nothing to lose, but a debugging shell might).
type rebooter struct{}

func (rebooter) Reboot() error {
	unix.Sync()
	drainConsole()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
}

func (rebooter) PowerOff() error {
	unix.Sync()
	drainConsole()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// drainConsole waits until what was printed has left the console's
// terminals (tcdrain), plus a moment for the UART's own FIFO: rebooting
// straight after the last progress line could cut it off the serial
// console, the line the operator (and the VM tests) look for.
func drainConsole() {
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		fd := int(f.Fd())
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			continue // not a terminal: nothing to drain
		}
		_ = unix.IoctlSetInt(fd, unix.TCSBRK, 1) // tcdrain(3)
	}
	time.Sleep(100 * time.Millisecond)
}

// dhcpNet is u-root's DHCP client on every physical interface at once; the
// first lease wins and the other attempts are cancelled.
type dhcpNet struct{}

func (dhcpNet) Up(ctx context.Context, nics []inventory.NIC, timeout time.Duration) (inventory.NIC, error) {
	var links []netlink.Link
	byName := map[string]inventory.NIC{}
	for _, n := range nics {
		l, err := netlink.LinkByName(n.Name)
		if err != nil {
			continue
		}
		links = append(links, l)
		byName[n.Name] = n
	}
	if len(links) == 0 {
		return inventory.NIC{}, errors.New("none of the interfaces is known to netlink")
	}
	// dhclient logs every packet exchange through the standard logger; the
	// console gets our own lines instead.
	log.SetOutput(io.Discard)
	defer log.SetOutput(os.Stderr)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg := dhclient.Config{Timeout: 5 * time.Second, Retries: 2}
	var errs []error
	for r := range dhclient.SendRequests(ctx, links, true, false, cfg, 10*time.Second) {
		name := r.Interface.Attrs().Name
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, r.Err))
			continue
		}
		if err := r.Lease.Configure(); err != nil {
			errs = append(errs, fmt.Errorf("%s: configure lease: %w", name, err))
			continue
		}
		cancel() // the others may stop now
		return byName[name], nil
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no interface came up"))
	}
	return inventory.NIC{}, errors.Join(errs...)
}

// bmcAddress asks the BMC over the in-band IPMI device (ipmi_si and
// ipmi_devintf loaded) for the IP address of LAN channel 1.
func bmcAddress() (string, error) {
	if _, err := os.Stat("/dev/ipmi0"); err != nil {
		return "", errors.New("no /dev/ipmi0")
	}
	dev, err := ipmi.Open(0)
	if err != nil {
		return "", err
	}
	defer dev.Close()
	const lanChannel, paramIPAddress = 1, 3
	resp, err := dev.GetLanConfig(lanChannel, paramIPAddress)
	if err != nil {
		return "", err
	}
	return inventory.ParseBMCAddress(resp)
}

// bmcSetup creates or updates rackd's user on the BMC through /dev/ipmi0
// (package bmc says what it does).
func bmcSetup() (bmc.Result, error) {
	if _, err := os.Stat("/dev/ipmi0"); err != nil {
		return bmc.Result{}, errors.New("no in-band IPMI: no /dev/ipmi0 (no BMC, or the ipmi_si and ipmi_devintf modules did not load)")
	}
	dev, err := ipmi.Open(0)
	if err != nil {
		return bmc.Result{}, fmt.Errorf("open /dev/ipmi0: %w", err)
	}
	defer dev.Close()
	return bmc.Setup(devConn{dev}, bmc.Options{})
}

// devConn is bmc.Conn over u-root's in-band IPMI device: RawCmd's answer
// starts with the completion code, which u-root turns into an error when
// it is not zero.
type devConn struct{ dev *ipmi.IPMI }

func (c devConn) Raw(netfn, cmd byte, data []byte) ([]byte, error) {
	resp, err := c.dev.RawCmd(append([]byte{netfn, cmd}, data...))
	var cc ipmi.CompletionError
	if errors.As(err, &cc) {
		return nil, &bmc.CompletionError{NetFn: netfn, Cmd: cmd, Code: byte(cc)}
	}
	if err != nil {
		return nil, err
	}
	if len(resp) == 0 {
		return nil, fmt.Errorf("ipmi: netfn %#02x command %#02x: empty answer", netfn, cmd)
	}
	return resp[1:], nil
}
