package dhcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpSocket is the server's UDP socket, read and written with blocking
// system calls, outside Go's network poller.
//
// Why: at the rates a rack's DHCP traffic comes in (a packet every few
// hundred microseconds, not a continuous stream), Go's poller pays per
// packet a read that finds nothing, a park, an epoll_wait that wakes, often
// a thread wake-up, and then the read that returns the packet. A thread
// blocked in recvfrom(2) is woken by the kernel with the packet: one system
// call. The bench-dhcp profile showed the poller as the largest cost of a
// DORA after the durable commit. The server has one reader per socket, so
// one blocked thread each.
//
// Close shuts the socket down, which wakes a blocked read, and closes the
// descriptor only once no call is using it (so a reader can never read a
// reused descriptor number).
type udpSocket struct {
	fd     int
	local  *net.UDPAddr
	mu     sync.RWMutex // read-held across each system call; Close takes it to close fd
	closed atomic.Bool
	// lastDrops is the kernel's drop count last read, kept past Close.
	lastDrops atomic.Uint64
}

// listenUDP opens a blocking UDP socket on addr, bound to device if not
// empty (SO_BINDTODEVICE, before bind(2), which is what makes per-device
// port sharing work), with SO_BROADCAST set, in the calling thread's network
// namespace.
func listenUDP(addr netip.AddrPort, device string) (*udpSocket, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	fail := func(what string, err error) (*udpSocket, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
		return fail("SO_BROADCAST", err)
	}
	// A receive buffer for a PXE storm while the reader is busy or not
	// scheduled: 4 MiB past the system's cap when rackd may (it runs as
	// root), else what the cap allows. What still overflows is counted
	// (kernelDrops).
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
	}
	if device != "" {
		if err := unix.BindToDevice(fd, device); err != nil {
			return fail("SO_BINDTODEVICE "+device, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}); err != nil {
		return fail("bind "+addr.String(), err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	return &udpSocket{fd: fd, local: udpAddr(sa)}, nil
}

const rcvBuf = 4 << 20

// kernelDrops is how many datagrams the kernel dropped for this socket
// (SO_MEMINFO's SK_MEMINFO_DROPS), 0 when it cannot tell.
func (s *udpSocket) kernelDrops() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return s.lastDrops.Load()
	}
	var info [unix.SK_MEMINFO_VARS]uint32
	size := uint32(unsafe.Sizeof(info))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return s.lastDrops.Load()
	}
	d := uint64(info[unix.SK_MEMINFO_DROPS])
	s.lastDrops.Store(d)
	return d
}

func udpAddr(sa unix.Sockaddr) *net.UDPAddr {
	if in4, ok := sa.(*unix.SockaddrInet4); ok {
		return &net.UDPAddr{IP: net.IP(in4.Addr[:]).To16(), Port: in4.Port}
	}
	return nil
}

func (s *udpSocket) opError(op string, err error) error {
	if s.closed.Load() {
		err = net.ErrClosed
	}
	return &net.OpError{Op: op, Net: "udp4", Addr: s.local, Err: err}
}

// recv reads one datagram into b (the server needs no source address: RFC
// 2131 says where replies go from the packet itself).
func (s *udpSocket) recv(b []byte) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for {
		if s.closed.Load() {
			return 0, s.opError("read", net.ErrClosed)
		}
		n, err := unix.Read(s.fd, b)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, s.opError("read", err)
		case n == 0 && s.closed.Load():
			return 0, s.opError("read", net.ErrClosed) // woken by Close
		}
		return n, nil
	}
}

// ReadFrom implements net.PacketConn.
func (s *udpSocket) ReadFrom(b []byte) (int, net.Addr, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for {
		if s.closed.Load() {
			return 0, nil, s.opError("read", net.ErrClosed)
		}
		n, from, err := unix.Recvfrom(s.fd, b, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, nil, s.opError("read", err)
		case n == 0 && s.closed.Load():
			return 0, nil, s.opError("read", net.ErrClosed)
		}
		return n, udpAddr(from), nil
	}
}

// WriteTo implements net.PacketConn for IPv4 UDP addresses.
func (s *udpSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, s.opError("write", fmt.Errorf("address %v is not UDP", addr))
	}
	ip4 := ua.IP.To4()
	if ip4 == nil {
		return 0, s.opError("write", fmt.Errorf("address %v is not IPv4", addr))
	}
	sa := &unix.SockaddrInet4{Port: ua.Port}
	copy(sa.Addr[:], ip4)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, s.opError("write", net.ErrClosed)
	}
	for {
		err := unix.Sendto(s.fd, b, 0, sa)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, s.opError("write", err)
		}
		return len(b), nil
	}
}

// Close wakes a blocked read and closes the socket once no call uses it.
func (s *udpSocket) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	// An unconnected UDP socket reports ENOTCONN but is shut down all the
	// same, and its blocked readers return.
	_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
	s.mu.Lock()
	defer s.mu.Unlock()
	return unix.Close(s.fd)
}

// LocalAddr implements net.PacketConn.
func (s *udpSocket) LocalAddr() net.Addr { return s.local }

var errNoDeadlines = errors.New("dhcp: the server socket has no deadlines; Close stops it")

// SetDeadline, SetReadDeadline and SetWriteDeadline are not supported: the
// server stops its readers by closing the socket.
func (s *udpSocket) SetDeadline(time.Time) error      { return errNoDeadlines }
func (s *udpSocket) SetReadDeadline(time.Time) error  { return errNoDeadlines }
func (s *udpSocket) SetWriteDeadline(time.Time) error { return errNoDeadlines }
