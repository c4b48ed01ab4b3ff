//go:build linux

package tftp

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setPktInfo asks the kernel to tell, with each request, the address it was
// sent to and the interface it came in on.
func setPktInfo(conn *net.UDPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		// A socket bound to "::" takes IPv4 too: ask for both, and
		// take whichever the socket's family allows.
		e4 := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		e6 := unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		if e4 != nil && e6 != nil {
			serr = errors.Join(e4, e6)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// parsePktInfo reads the destination address and interface index from a
// request's control messages (zero values when there are none).
func parsePktInfo(oob []byte) (netip.Addr, int) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, 0
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&m.Data[0]))
			return netip.AddrFrom4(pi.Spec_dst), int(pi.Ifindex)
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&m.Data[0]))
			return netip.AddrFrom16(pi.Addr).Unmap(), int(pi.Ifindex)
		}
	}
	return netip.Addr{}, 0
}

// mtuCache knows the MTU of the interfaces requests come in on. It asks the
// kernel by ioctl (SIOCGIFNAME, SIOCGIFMTU), which reads one interface,
// rather than with a netlink dump of them all, which fails when interfaces
// come and go during it; and it remembers the answer for a while, so that a
// storm of requests costs no system calls for it.
type mtuCache struct {
	conn *net.UDPConn // any socket, for the ioctls
	mu   sync.Mutex
	m    map[int]mtuEntry
}

type mtuEntry struct {
	mtu int
	at  time.Time
}

// mtuTTL: an MTU changed by an administrator is seen within this long.
const mtuTTL = 30 * time.Second

// fallbackMTU is assumed when the interface is unknown: Ethernet's.
const fallbackMTU = 1500

func newMTUCache() *mtuCache { return &mtuCache{m: map[int]mtuEntry{}} }

// blockCap is the largest blksize that fits one unfragmented datagram on
// interface ifindex: its MTU less the IP and UDP headers and TFTP's own 4.
func (c *mtuCache) blockCap(ifindex int, v4 bool) int {
	hdr := 20 + 8 + 4
	if !v4 {
		hdr = 40 + 8 + 4
	}
	return min(maxBlockSize, max(defBlockSize, c.get(ifindex)-hdr))
}

func (c *mtuCache) get(ifindex int) int {
	if ifindex <= 0 {
		return fallbackMTU
	}
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[ifindex]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < mtuTTL {
		return e.mtu
	}
	mtu, err := c.lookup(ifindex)
	if err != nil {
		if ok {
			return e.mtu // the last known value beats a guess
		}
		return fallbackMTU
	}
	c.mu.Lock()
	c.m[ifindex] = mtuEntry{mtu: mtu, at: now}
	c.mu.Unlock()
	return mtu
}

func (c *mtuCache) lookup(ifindex int) (int, error) {
	if c.conn == nil {
		return 0, errors.New("no socket")
	}
	rc, err := c.conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var mtu int
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			ierr = err
			return
		}
		ifr.SetUint32(uint32(ifindex))
		if ierr = unix.IoctlIfreq(int(fd), unix.SIOCGIFNAME, ifr); ierr != nil {
			return
		}
		byName, err := unix.NewIfreq(ifr.Name())
		if err != nil {
			ierr = err
			return
		}
		if ierr = unix.IoctlIfreq(int(fd), unix.SIOCGIFMTU, byName); ierr != nil {
			return
		}
		mtu = int(byName.Uint32())
	})
	if err != nil {
		return 0, err
	}
	if ierr != nil {
		return 0, ierr
	}
	if mtu < 576 {
		return 0, errors.New("implausible MTU")
	}
	return mtu, nil
}

// UDP generic segmentation offload (UDP_SEGMENT, Linux 4.18): a window of
// blocks goes to the kernel in one sendmsg, which cuts it into one datagram
// per block. Limits: 64 segments, and the whole must fit one IP datagram.
const (
	gsoMaxSegments = 64
	gsoMaxBytes    = 65507 - 8
)

// gsoOK turns false for good the first time the kernel refuses.
var gsoOK atomic.Bool

func init() { gsoOK.Store(true) }

func gsoControl(segment int) []byte {
	b := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = uint16(segment)
	return b
}

// gsoRefused tells a refusal of segmentation from a failed send:
// gsoNever when the kernel lacks it, gsoNotHere when this socket's route
// cannot (a segment larger than its MTU), gsoOther for any other error.
func gsoRefused(err error) gsoRefusal {
	switch {
	case errors.Is(err, syscall.ENOPROTOOPT), errors.Is(err, syscall.EOPNOTSUPP):
		return gsoNever
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EIO), errors.Is(err, syscall.EMSGSIZE):
		return gsoNotHere
	}
	return gsoOther
}
