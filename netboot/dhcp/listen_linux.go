package dhcp

import (
	"fmt"
	"net"
	"net/netip"
)

// ListenInterface opens the server socket for the named interface:
// 0.0.0.0:port bound to the device (SO_BINDTODEVICE), so that it receives
// the broadcasts of directly attached clients on that link only and its
// broadcast replies leave by it. Sockets of different devices share the
// port without SO_REUSEADDR. The interface's first IPv4 address becomes the
// Conn's Interface.Addr. The socket belongs to the calling thread's network
// namespace.
func ListenInterface(ifname string, port int) (Conn, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return Conn{}, fmt.Errorf("dhcp: %w", err)
	}
	addr, err := interfaceAddr(ifi)
	if err != nil {
		return Conn{}, err
	}
	pc, err := listenUDP(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), ifname)
	if err != nil {
		return Conn{}, fmt.Errorf("dhcp: listen on %s: %w", ifname, err)
	}
	return Conn{PC: pc, In: Interface{Name: ifname, Addr: addr}}, nil
}

// ListenAddr opens a plain UDP socket on addr:port (listen-on-address mode,
// see Config.Addrs). The socket belongs to the calling thread's network
// namespace.
func ListenAddr(addr netip.Addr, port int) (Conn, error) {
	if !addr.Is4() {
		return Conn{}, fmt.Errorf("dhcp: %v is not an IPv4 address", addr)
	}
	pc, err := listenUDP(netip.AddrPortFrom(addr, uint16(port)), "")
	if err != nil {
		return Conn{}, fmt.Errorf("dhcp: listen on %v: %w", addr, err)
	}
	return Conn{PC: pc, In: Interface{Addr: addr}}, nil
}
