package dhcp

import (
	"fmt"
	"net"
	"net/netip"
)

// interfaceAddr is the interface's first IPv4 address.
func interfaceAddr(ifi *net.Interface) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dhcp: addresses of %s: %w", ifi.Name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("dhcp: %s has no IPv4 address to serve with", ifi.Name)
}
