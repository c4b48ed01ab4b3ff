package dhcp

import (
	"fmt"
	"net"
	"net/netip"
)

// ListenAddr opens a plain UDP socket on addr:port (listen-on-address mode,
// see Config.Addrs). The socket belongs to the calling thread's network
// namespace.
func ListenAddr(addr netip.Addr, port int) (Conn, error) {
	if !addr.Is4() {
		return Conn{}, fmt.Errorf("dhcp: %v is not an IPv4 address", addr)
	}
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
	if err != nil {
		return Conn{}, fmt.Errorf("dhcp: listen on %v: %w", addr, err)
	}
	return Conn{PC: pc, In: Interface{Addr: addr}}, nil
}

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
