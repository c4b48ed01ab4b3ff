package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"rackd/netboot"
	"rackd/netboot/arp"
	"rackd/netboot/dhcp"
)

// newDHCP builds the DHCP server and the ARP probers the configuration
// asks for; nil when DHCP is off.
func (a *Agent) newDHCP(cfg Config) (*dhcp.Server, error) {
	addrs, port, err := cfg.dhcpAddrs()
	if err != nil {
		return nil, err
	}
	if len(cfg.DHCP.Interfaces) == 0 && len(addrs) == 0 {
		return nil, nil
	}
	var prober dhcp.Prober // stays a nil interface when probing is off
	if len(cfg.DHCP.Interfaces) > 0 && cfg.DHCP.ProbeTimeout > 0 {
		set, err := arp.ListenSet(cfg.DHCP.Interfaces, arp.Config{Timeout: time.Duration(cfg.DHCP.ProbeTimeout)})
		if err != nil {
			return nil, fmt.Errorf("arp probing on %v: %w", cfg.DHCP.Interfaces, err)
		}
		a.arp = set
		prober = set
		a.prober = &onLinkProber{set: set, ifaces: cfg.DHCP.Interfaces}
	}
	boot := netboot.BootConfig{HTTPBase: cfg.DHCP.HTTPURL}
	if cfg.DHCP.NextServer != "" {
		boot.TFTPServer = netip.MustParseAddr(cfg.DHCP.NextServer) // validated
	}
	if _, p, err := net.SplitHostPort(cfg.Listen); err == nil {
		boot.HTTPPort, _ = strconv.Atoi(p)
	}
	// HTTP on one address only (not every address, not loopback): that is
	// the one address that answers, whichever interface DHCP heard on.
	if ap, err := netip.ParseAddrPort(cfg.Listen); err == nil && boot.HTTPBase == "" &&
		!ap.Addr().IsUnspecified() && !ap.Addr().IsLoopback() {
		boot.HTTPBase = "http://" + ap.String()
	}
	srv, err := dhcp.New(dhcp.Config{Interfaces: cfg.DHCP.Interfaces, Addrs: addrs, Port: port,
		Workers: cfg.DHCP.Workers, QueueSize: cfg.DHCP.Queue, ReadCoalesce: noneIfZero(cfg.DHCP.ReadCoalesce)},
		dhcpLeases{a.store, a.cluster}, prober, boot, a.log.With("service", "dhcp"), a.metrics.reg)
	if err != nil {
		return nil, err // New closes the probers
	}
	return srv, nil
}

// onLinkProber probes an address on the DHCP interface whose network holds
// it; an address on no such link is not probed.
type onLinkProber struct {
	set    *arp.Set
	ifaces []string
}

func (p *onLinkProber) InUse(ctx context.Context, ip netip.Addr) (string, bool, error) {
	for _, name := range p.ifaces {
		for _, pfx := range linkPrefixes(name) {
			if !pfx.Masked().Contains(ip) {
				continue
			}
			mac, inUse, err := p.set.Probe(ctx, name, ip)
			if err != nil || !inUse {
				return "", false, err
			}
			return mac.String(), true, nil
		}
	}
	return "", false, nil
}

// linkPrefixes are the addresses of interface name with their prefixes
// (none when it is gone).
func linkPrefixes(name string) []netip.Prefix {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, ad := range addrs {
		if n, ok := ad.(*net.IPNet); ok {
			if p, err := netip.ParsePrefix(n.String()); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}
