//go:build !linux

package dhcp

import "errors"

// ListenInterface opens the server socket for the named interface. It needs
// SO_BINDTODEVICE and so works on Linux only.
func ListenInterface(ifname string, port int) (Conn, error) {
	return Conn{}, errors.New("dhcp: serving an interface needs Linux")
}
