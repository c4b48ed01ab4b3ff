package dhcp

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUDPSocket: the blocking socket receives whole datagrams (with and
// without their source), sends replies, and Close wakes a blocked read,
// after which every call reports net.ErrClosed.
func TestUDPSocket(t *testing.T) {
	s, err := listenUDP(netip.MustParseAddrPort("127.0.0.1:0"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	local := s.LocalAddr().(*net.UDPAddr)
	if local.Port == 0 || !local.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("local address %v", local)
	}
	peer, err := net.DialUDP("udp4", nil, local)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	send := func(msg string) {
		t.Helper()
		if _, err := peer.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, maxPacket)
	send("first")
	if n, err := s.recv(buf); err != nil || string(buf[:n]) != "first" {
		t.Fatalf("recv = %q, %v", buf[:n], err)
	}
	send("second datagram")
	n, from, err := s.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "second datagram" || from.String() != peer.LocalAddr().String() {
		t.Fatalf("ReadFrom = %q from %v, %v; want it from %v", buf[:n], from, err, peer.LocalAddr())
	}
	if _, err := s.WriteTo([]byte("reply"), peer.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := peer.Read(buf); err != nil || string(buf[:n]) != "reply" {
		t.Fatalf("reply: %q, %v", buf[:n], err)
	}
	if _, err := s.WriteTo([]byte("x"), &net.IPAddr{IP: net.IPv4(127, 0, 0, 1)}); err == nil {
		t.Error("WriteTo accepted a non-UDP address")
	}

	woke := make(chan error, 1)
	go func() {
		_, err := s.recv(buf)
		woke <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it block
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-woke:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked read ended with %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake a blocked read")
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.recv(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("recv after Close: %v", err)
	}
	if _, err := s.WriteTo([]byte("x"), peer.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteTo after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestUDPSocketKernelDrops: datagrams the kernel could not queue are
// counted (the smallest receive buffer overflows at once).
func TestUDPSocketKernelDrops(t *testing.T) {
	s, err := listenUDP(netip.MustParseAddrPort("127.0.0.1:0"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Shrink the buffer the socket got to the kernel's minimum.
	if err := setRcvBuf(s, 0); err != nil {
		t.Fatal(err)
	}
	peer, err := net.DialUDP("udp4", nil, s.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	msg := make([]byte, 1400)
	for range 200 {
		peer.Write(msg)
	}
	if d := s.kernelDrops(); d == 0 {
		t.Fatal("200 datagrams into a minimal, unread buffer, and no drop counted")
	}
}

// setRcvBuf sets the socket's receive buffer.
func setRcvBuf(s *udpSocket, n int) error {
	return unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
}
