//go:build !linux

package tftp

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
)

// Off Linux there is no destination address per request, no interface MTU
// and no segmentation offload: replies come from the system's choice of
// address, blocks are capped at an Ethernet MTU's worth, windows are sent
// one datagram at a time.

func setPktInfo(*net.UDPConn) error { return errors.New("not supported on this platform") }

func parsePktInfo([]byte) (netip.Addr, int) { return netip.Addr{}, 0 }

type mtuCache struct{ conn *net.UDPConn }

func newMTUCache() *mtuCache { return &mtuCache{} }

func (c *mtuCache) blockCap(int, bool) int { return 1468 }

const (
	gsoMaxSegments = 1
	gsoMaxBytes    = 65507
)

var gsoOK atomic.Bool

func gsoControl(int) []byte { return nil }

func gsoRefused(error) gsoRefusal { return gsoNever }
