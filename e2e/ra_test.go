package e2e

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rackd/internal/netnstest"
)

// startRAs sends an IPv6 router advertisement on the bridge every second
// until the test ends. iPXE configures IPv6 alongside DHCPv4 and, on a link
// without routers, waits about 12 s for an advertisement before it goes
// on; an advertisement (no default router, no DHCPv6, one ULA prefix) ends
// that wait at once. Sending fails harmlessly until the bridge has a
// link-local address (it gets one when its first port comes up).
func startRAs(t *testing.T, ns *netnstest.NS, br string) {
	t.Helper()
	var fd int
	var ifi *net.Interface
	err := ns.Do(func() error {
		var err error
		if ifi, err = net.InterfaceByName(br); err != nil {
			return err
		}
		// The socket is made inside the namespace and stays there.
		if fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6); err != nil {
			return err
		}
		// Neighbour discovery messages must arrive with hop limit
		// 255 (RFC 4861 section 6.1.2), or receivers drop them.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255); err != nil {
			return err
		}
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifi.Index)
	})
	if err != nil {
		t.Fatalf("router advertisements on %s: %v", br, err)
	}
	ra := routerAdvertisement(ifi.HardwareAddr, labULA.Masked().Addr().As16())
	to := &unix.SockaddrInet6{Addr: [16]byte{0xff, 0x02, 15: 1}, ZoneId: uint32(ifi.Index)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			// The kernel fills in the ICMPv6 checksum of raw
			// ICMPv6 sockets.
			_ = unix.Sendto(fd, ra, 0, to)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		unix.Close(fd)
	})
}

// routerAdvertisement is an ICMPv6 router advertisement (RFC 4861 section
// 4.2) with router lifetime 0 (not a default router), neither managed nor
// other-config flag (no DHCPv6), the source link-layer address and one
// on-link, autonomous /64 prefix.
func routerAdvertisement(mac net.HardwareAddr, prefix [16]byte) []byte {
	b := make([]byte, 16, 16+8+32)
	b[0] = 134 // type: router advertisement; code, checksum 0
	b[4] = 64  // current hop limit
	// flags 0, router lifetime 0, reachable time 0, retrans timer 0
	if len(mac) == 6 {
		b = append(b, 1, 1) // source link-layer address, 8 bytes
		b = append(b, mac...)
	}
	p := make([]byte, 32)
	p[0], p[1] = 3, 4 // prefix information, 32 bytes
	p[2] = 64         // prefix length
	p[3] = 0xc0       // on-link, autonomous
	binary.BigEndian.PutUint32(p[4:], 3600)
	binary.BigEndian.PutUint32(p[8:], 1800)
	copy(p[16:], prefix[:])
	return append(b, p...)
}
