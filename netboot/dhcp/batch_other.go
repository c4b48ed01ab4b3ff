//go:build !linux

package dhcp

import (
	"context"
	"errors"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// readBatched serves batched sockets, which only Linux has: elsewhere it
// reports false and read serves the socket a datagram at a time.
func (s *Server) readBatched(context.Context, Conn) (bool, error) { return false, nil }

// outbox is never used where there are no batched sockets.
type outbox struct{}

// newOutbox has no outbox to give: replies are sent at once.
func newOutbox(*Server, Conn) *outbox { return nil }

func (o *outbox) flush(context.Context) {}

func (o *outbox) add(context.Context, *dhcpv4.DHCPv4, *net.UDPAddr) error {
	return errors.New("dhcp: no batched sockets on this system")
}
