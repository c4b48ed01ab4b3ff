//go:build !linux

package dhcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// ListenInterface opens the server socket for the named interface. It needs
// SO_BINDTODEVICE and so works on Linux only.
func ListenInterface(ifname string, port int) (Conn, error) {
	return Conn{}, errors.New("dhcp: serving an interface needs Linux")
}

// ListenAddr opens a plain UDP socket on addr:port (listen-on-address mode,
// see Config.Addrs).
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
