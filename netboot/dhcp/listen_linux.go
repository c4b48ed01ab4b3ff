package dhcp

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"
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
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			// Before bind(2), which is what makes the per-device
			// port sharing work. Go already sets SO_BROADCAST on
			// UDP sockets.
			serr = syscall.BindToDevice(int(fd), ifname)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
	if err != nil {
		return Conn{}, fmt.Errorf("dhcp: listen on %s: %w", ifname, err)
	}
	return Conn{PC: pc, In: Interface{Name: ifname, Addr: addr}}, nil
}
