//go:build linux

// Package netup brings the appliance's interfaces up: the management
// interface by DHCP (keeping its lease renewed) or statically, the rack
// interfaces with their static addresses, and resolv.conf.
package netup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"rackd/internal/atomicfile"
)

// Lease is a DHCP lease on an interface.
type Lease struct {
	Interface string
	Address   netip.Prefix
	Router    netip.Addr // invalid when the server gave none
	DNS       []netip.Addr
	Domain    string
	// Duration is the lease time; Renew is when to renew it (T1).
	Duration, Renew time.Duration
	Obtained        time.Time

	raw *nclient4.Lease
}

// Up sets the link up.
func Up(ifname string) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifname, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", ifname, err)
	}
	return nil
}

// Acquire sets ifname up and gets a lease on it, retrying until ctx ends;
// logf (nil: silent) hears of each round that got no lease.
func Acquire(ctx context.Context, ifname string, logf func(string, ...any)) (*Lease, error) {
	if err := Up(ifname); err != nil {
		return nil, err
	}
	// A link just set up drops what is sent until its carrier is seen
	// (the kernel's link watch runs up to a second later): the first
	// DISCOVER would be lost and the next one only sent a timeout later.
	waitCarrier(ctx, ifname, 10*time.Second)
	c, err := nclient4.New(ifname, nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(3))
	if err != nil {
		return nil, fmt.Errorf("DHCP client on %s: %w", ifname, err)
	}
	defer c.Close()
	var last error
	start := time.Now()
	for {
		raw, err := c.Request(ctx)
		if err == nil {
			return leaseOf(ifname, raw)
		}
		if logf != nil && ctx.Err() == nil {
			logf("DHCP on %s: no lease after %s: %v", ifname, time.Since(start).Round(time.Second), err)
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("DHCP on %s: no lease: %w", ifname, errors.Join(ctx.Err(), last))
		case <-time.After(2 * time.Second):
		}
	}
}

// waitCarrier waits up to max for ifname's carrier (IFF_LOWER_UP).
func waitCarrier(ctx context.Context, ifname string, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		if l, err := netlink.LinkByName(ifname); err == nil && l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
			return
		}
		if sleep(ctx, 50*time.Millisecond) != nil {
			return
		}
	}
}

func leaseOf(ifname string, raw *nclient4.Lease) (*Lease, error) {
	ack := raw.ACK
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok || !ip.IsValid() || ip.IsUnspecified() {
		return nil, fmt.Errorf("DHCP on %s: the ACK has no address", ifname)
	}
	mask := ack.SubnetMask()
	if mask == nil {
		mask = ip4DefaultMask(ip)
	}
	ones, _ := mask.Size()
	l := &Lease{Interface: ifname, Address: netip.PrefixFrom(ip, ones), Obtained: raw.CreationTime, raw: raw}
	if rs := ack.Router(); len(rs) > 0 {
		if r, ok := netip.AddrFromSlice(rs[0].To4()); ok {
			l.Router = r
		}
	}
	for _, d := range ack.DNS() {
		if a, ok := netip.AddrFromSlice(d.To4()); ok {
			l.DNS = append(l.DNS, a)
		}
	}
	l.Domain = ack.DomainName()
	l.Duration = ack.IPAddressLeaseTime(time.Hour)
	l.Renew = ack.IPAddressRenewalTime(l.Duration / 2)
	if l.Renew <= 0 || l.Renew > l.Duration {
		l.Renew = l.Duration / 2
	}
	return l, nil
}

func ip4DefaultMask(ip netip.Addr) net.IPMask { return net.IP(ip.AsSlice()).DefaultMask() }

// Apply configures the lease: its address (with the lease's lifetime, so
// that the kernel drops it if renewals stop), and the default route via
// its router.
func (l *Lease) Apply() error {
	lft := int(min(l.Duration/time.Second, 1<<31-1))
	if err := SetAddress(l.Interface, l.Address, lft); err != nil {
		return err
	}
	if l.Router.IsValid() {
		return DefaultRoute(l.Interface, l.Router)
	}
	return nil
}

// SetAddress adds (or refreshes) addr on ifname; lifetime 0 is forever.
func SetAddress(ifname string, addr netip.Prefix, lifetime int) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifname, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}}
	if lifetime > 0 {
		a.ValidLft, a.PreferedLft = lifetime, lifetime
	}
	if err := netlink.AddrReplace(link, a); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, ifname, err)
	}
	return nil
}

// DefaultRoute points the default route at gw through ifname.
func DefaultRoute(ifname string, gw netip.Addr) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifname, err)
	}
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice(), Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("default route via %s on %s: %w", gw, ifname, err)
	}
	return nil
}

// Static sets ifname up with addr and, when valid, a default route via gw.
func Static(ifname string, addr netip.Prefix, gw netip.Addr) error {
	if err := Up(ifname); err != nil {
		return err
	}
	if err := SetAddress(ifname, addr, 0); err != nil {
		return err
	}
	if gw.IsValid() {
		return DefaultRoute(ifname, gw)
	}
	return nil
}

// Keep renews the lease at its renewal time until ctx ends, applying each
// renewal; when a renewal fails it retries, and once the lease has run out
// it asks for a new one. logf reports what happened.
func (l *Lease) Keep(ctx context.Context, logf func(string, ...any)) {
	cur := l
	for {
		wait := time.Until(cur.Obtained.Add(cur.Renew))
		if err := sleep(ctx, wait); err != nil {
			return
		}
		next, err := renew(ctx, cur)
		if err == nil {
			if err := next.Apply(); err != nil {
				logf("DHCP on %s: renewed %s, but: %v", cur.Interface, next.Address, err)
			}
			cur = next
			continue
		}
		logf("DHCP on %s: renew: %v", cur.Interface, err)
		if time.Now().After(cur.Obtained.Add(cur.Duration)) {
			fresh, err := Acquire(ctx, cur.Interface, logf)
			if err != nil {
				return
			}
			if err := fresh.Apply(); err != nil {
				logf("DHCP on %s: %v", cur.Interface, err)
			}
			logf("DHCP on %s: new lease %s", cur.Interface, fresh.Address)
			cur = fresh
			continue
		}
		// Try again halfway to the lease's end (at least a few seconds on).
		left := time.Until(cur.Obtained.Add(cur.Duration))
		cur = &Lease{Interface: cur.Interface, Address: cur.Address, Router: cur.Router, DNS: cur.DNS, Domain: cur.Domain,
			Duration: cur.Duration, Renew: time.Since(cur.Obtained) + max(left/2, 5*time.Second), Obtained: cur.Obtained, raw: cur.raw}
	}
}

func renew(ctx context.Context, l *Lease) (*Lease, error) {
	c, err := nclient4.New(l.Interface, nclient4.WithTimeout(4*time.Second), nclient4.WithRetry(2))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	raw, err := c.Renew(ctx, l.raw)
	if err != nil {
		return nil, err
	}
	return leaseOf(l.Interface, raw)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ResolvConf is resolv.conf's text for these servers and search domain.
func ResolvConf(dns []netip.Addr, domain string) string {
	var b strings.Builder
	b.WriteString("# written by rackd-init\n")
	if domain != "" {
		fmt.Fprintf(&b, "search %s\n", domain)
	}
	for _, d := range dns {
		fmt.Fprintf(&b, "nameserver %s\n", d)
	}
	return b.String()
}

// WriteResolvConf writes path (/etc/resolv.conf) atomically.
func WriteResolvConf(path string, dns []netip.Addr, domain string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(ResolvConf(dns, domain)), atomicfile.Options{Perm: 0o644})
}

// Loopback sets lo up (u-root's init does, but a test root may not).
func Loopback() error {
	if err := Up("lo"); err != nil && !errors.Is(err, unix.ENODEV) {
		return err
	}
	return nil
}

// Addr4 is ifname's first IPv4 address (invalid when none).
func Addr4(ifname string) netip.Addr {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return netip.Addr{}
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}
	}
	a, _ := netip.AddrFromSlice(addrs[0].IP.To4())
	return a
}
