package lab

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// runRA sends an IPv6 router advertisement on an interface every second
// until ctx ends (rackd-lab ra --interface BR --prefix P/64): iPXE
// configures IPv6 alongside DHCPv4 and, on a link without routers, waits
// about 12 s for an advertisement before it goes on; an advertisement (no
// default router, no DHCPv6, one ULA prefix) ends that wait at once.
func runRA(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ra", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ifname := fs.String("interface", "", "the interface to advertise on")
	prefix := fs.String("prefix", "", "the on-link /64 to advertise")
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	p, err := netip.ParsePrefix(*prefix)
	if *ifname == "" || err != nil || p.Bits() != 64 || !p.Addr().Is6() {
		return usageError("want --interface NAME and --prefix an IPv6 /64")
	}
	fmt.Fprintf(stdout, "rackd-lab ra: advertising %s on %s every second\n", p.Masked(), *ifname)
	return Advertise(ctx, *ifname, p)
}

// Advertise sends a router advertisement of prefix (RouterAdvertisement)
// on ifname every second until ctx ends. The socket is made in the calling
// thread's network namespace and stays there. Sending fails harmlessly
// until the interface has a link-local address (a bridge gets one when its
// first port comes up).
func Advertise(ctx context.Context, ifname string, prefix netip.Prefix) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return err
	}
	fd, err := OpenRASocket(ifi)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ra := RouterAdvertisement(ifi.HardwareAddr, prefix.Masked().Addr().As16())
	to := &unix.SockaddrInet6{Addr: [16]byte{0xff, 0x02, 15: 1}, ZoneId: uint32(ifi.Index)}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		// The kernel fills in the ICMPv6 checksum of raw ICMPv6 sockets.
		_ = unix.Sendto(fd, ra, 0, to)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// OpenRASocket opens a raw ICMPv6 socket that sends router advertisements
// out of ifi, in the calling thread's network namespace.
func OpenRASocket(ifi *net.Interface) (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return -1, fmt.Errorf("raw ICMPv6 socket: %w", err)
	}
	// Neighbour discovery messages must arrive with hop limit 255 (RFC
	// 4861 section 6.1.2), or receivers drop them.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifi.Index); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// RouterAdvertisement is an ICMPv6 router advertisement (RFC 4861 section
// 4.2) with router lifetime 0 (not a default router), neither managed nor
// other-config flag (no DHCPv6), the source link-layer address and one
// on-link, autonomous /64 prefix.
func RouterAdvertisement(mac net.HardwareAddr, prefix [16]byte) []byte {
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
