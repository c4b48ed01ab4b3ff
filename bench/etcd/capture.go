package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ack is one DHCPACK seen on the client's bridge.
type ack struct {
	at     time.Time
	mac    string
	ip     string
	server string // its server identifier: which agent sent it
}

// capture records every DHCPACK on an interface of a namespace, from a
// packet socket: the clients' view, independent of what any server says it
// sent, from which duplicates (one address acknowledged to two MACs) and
// the failover gap are counted.
type capture struct {
	fd   int
	mu   sync.Mutex
	acks []ack
	// packets counts every packet read, replies those from port 67 (what
	// the error of a run that saw no ACK says).
	packets, replies int
	done             chan struct{} // closed by stop
	gone             chan struct{} // closed by the reader once it closed fd
}

// startCapture opens the packet socket inside ns (a socket's namespace is
// fixed at creation) and reads until stop.
func startCapture(ns, ifname string) (*capture, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		fd, err := openPacket(ifname)
		if serr := netns.Set(orig); serr != nil {
			// The thread stays locked and dies with this goroutine.
			if fd >= 0 {
				unix.Close(fd)
			}
			ch <- result{-1, fmt.Errorf("leave namespace %s: %w", ns, serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	c := &capture{fd: r.fd, done: make(chan struct{}), gone: make(chan struct{})}
	go c.read()
	return c, nil
}

func openPacket(ifname string) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, err
	}
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("packet socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	// A receive timeout lets read notice stop.
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind packet socket to %s: %w", ifname, err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *capture) read() {
	defer close(c.gone)
	defer unix.Close(c.fd)
	buf := make([]byte, 65536)
	for {
		select {
		case <-c.done:
			return
		default:
		}
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			continue // the timeout, or an interrupted call
		}
		a, reply, ok := parseAck(buf[:n])
		c.mu.Lock()
		c.packets++
		if reply {
			c.replies++
		}
		if ok {
			a.at = time.Now()
			c.acks = append(c.acks, a)
		}
		c.mu.Unlock()
	}
}

// parseAck reads an IPv4/UDP packet from port 67 (a server's reply)
// holding a DHCPACK (ok).
func parseAck(p []byte) (_ ack, reply, ok bool) {
	if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_UDP {
		return ack{}, false, false
	}
	ihl := int(p[0]&15) * 4
	// From a server's port 67: to the client's 68, or to a relay's 67
	// (perfdhcp puts its address in giaddr even when it broadcasts).
	if len(p) < ihl+8 || binary.BigEndian.Uint16(p[ihl:]) != 67 {
		return ack{}, false, false
	}
	m, err := dhcpv4.FromBytes(p[ihl+8:])
	if err != nil || m.MessageType() != dhcpv4.MessageTypeAck {
		return ack{}, true, false
	}
	server := ""
	if id := m.ServerIdentifier(); id != nil {
		server = id.String()
	}
	return ack{mac: m.ClientHWAddr.String(), ip: m.YourIPAddr.String(), server: server}, true, true
}

// counts is how many packets and replies the capture read so far.
func (c *capture) counts() (packets, replies int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.packets, c.replies
}

// stop ends the capture and returns what it saw.
func (c *capture) stop() []ack {
	close(c.done)
	<-c.gone // within the socket's receive timeout
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ack(nil), c.acks...)
}

// snapshot is what the capture saw so far.
func (c *capture) snapshot() []ack {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ack(nil), c.acks...)
}
