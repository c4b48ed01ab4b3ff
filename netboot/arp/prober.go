package arp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// etherTypeARP is ETH_P_ARP, the EtherType the socket is bound to.
const etherTypeARP = 0x0806

// DefaultTimeout is how long Probe waits for an answer by default. RFC 5227
// section 2.1.1 spends seconds (PROBE_NUM probes PROBE_MIN..PROBE_MAX
// apart) because a host configuring itself can afford to; a DHCP server
// answers a client that retransmits after about 4 s (RFC 2131 section
// 4.1), and a host on the same link answers ARP in well under a
// millisecond.
const DefaultTimeout = 200 * time.Millisecond

// DefaultProbes is how many probes Probe sends within its timeout by
// default, so that one lost frame does not hide a squatter.
const DefaultProbes = 2

// ErrClosed is returned by Probe once the Prober is closed.
var ErrClosed = errors.New("arp: prober closed")

// Config tunes a Prober. The zero value gives the defaults.
type Config struct {
	// Timeout is how long to wait for an answer (DefaultTimeout if 0).
	Timeout time.Duration
	// Probes is how many probes to send, evenly spread over Timeout
	// (DefaultProbes if 0).
	Probes int
}

// conn is the part of *packet.Conn a Prober uses; tests hand in a fake.
type conn interface {
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, addr net.Addr) (int, error)
	Close() error
}

// Prober sends ARP probes on one interface and reports which addresses are
// answered. It owns one AF_PACKET socket and one reader goroutine, however
// many probes are in flight: answers are dispatched to the waiting Probe
// calls by sender IP address. It is safe for concurrent use.
type Prober struct {
	c conn
	// mac is the interface's hardware address, read again before every
	// probe by hwaddr (when set): a Linux bridge takes the lowest MAC of
	// its ports whenever one joins, and a probe sent from a MAC the
	// interface no longer owns gets its answers sent where nobody listens.
	mac     atomic.Pointer[net.HardwareAddr]
	hwaddr  func() (net.HardwareAddr, error)
	timeout time.Duration
	probes  int

	mu      sync.Mutex
	waiters map[netip.Addr][]chan net.HardwareAddr

	closing atomic.Bool
	done    chan struct{} // closed when the reader has stopped
}

// Listen opens a Prober on the named interface. The socket belongs to the
// calling thread's network namespace.
func Listen(ifname string, cfg Config) (*Prober, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("arp: %w", err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("arp: %s is not an Ethernet interface", ifname)
	}
	// SOCK_DGRAM: the kernel adds and strips the Ethernet header, so only
	// the ARP packet is handled here.
	c, err := packet.Listen(ifi, packet.Datagram, etherTypeARP, nil)
	if err != nil {
		return nil, fmt.Errorf("arp: listen on %s: %w", ifname, err)
	}
	p := newProber(c, ifi.HardwareAddr, cfg)
	p.hwaddr = func() (net.HardwareAddr, error) { return socketHWAddr(c, ifname) }
	return p, nil
}

// socketHWAddr asks the kernel for the interface's current hardware
// address through the packet socket itself, so that the answer comes from
// the socket's network namespace whatever thread asks.
func socketHWAddr(c *packet.Conn, ifname string) (net.HardwareAddr, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var mac net.HardwareAddr
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		// struct ifreq with ifr_hwaddr (a struct sockaddr: family, then
		// the address bytes), netdevice(7).
		var req struct {
			name   [unix.IFNAMSIZ]byte
			family uint16
			data   [14]byte
			_      [8]byte
		}
		copy(req.name[:unix.IFNAMSIZ-1], ifname)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.SIOCGIFHWADDR, uintptr(unsafe.Pointer(&req))); errno != 0 {
			ioErr = errno
			return
		}
		mac = append(net.HardwareAddr(nil), req.data[:6]...)
	})
	if err != nil {
		return nil, err
	}
	return mac, ioErr
}

func newProber(c conn, mac net.HardwareAddr, cfg Config) *Prober {
	p := &Prober{
		c:       c,
		timeout: cfg.Timeout,
		probes:  cfg.Probes,
		waiters: make(map[netip.Addr][]chan net.HardwareAddr),
		done:    make(chan struct{}),
	}
	p.mac.Store(&mac)
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	if p.probes <= 0 {
		p.probes = DefaultProbes
	}
	go p.read()
	return p
}

// Probe reports whether a host answers for ip within the timeout, and its
// hardware address if so. It returns early with ctx's error if ctx ends, and
// with ErrClosed if the Prober is closed meanwhile.
func (p *Prober) Probe(ctx context.Context, ip netip.Addr) (net.HardwareAddr, bool, error) {
	if p.hwaddr != nil {
		if mac, err := p.hwaddr(); err == nil && len(mac) == 6 {
			p.mac.Store(&mac)
		}
	}
	frame, err := Probe(*p.mac.Load(), ip).Marshal()
	if err != nil {
		return nil, false, fmt.Errorf("arp: probe %v: %w", ip, err)
	}
	ch := make(chan net.HardwareAddr, 1)
	p.mu.Lock()
	p.waiters[ip] = append(p.waiters[ip], ch)
	p.mu.Unlock()
	defer p.forget(ip, ch)

	bcast := &packet.Addr{HardwareAddr: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	send := func() error {
		if _, err := p.c.WriteTo(frame, bcast); err != nil {
			if p.closing.Load() {
				return ErrClosed
			}
			return fmt.Errorf("arp: send probe for %v: %w", ip, err)
		}
		return nil
	}
	if err := send(); err != nil {
		return nil, false, err
	}
	deadline := time.NewTimer(p.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(p.timeout / time.Duration(p.probes))
	defer tick.Stop()
	for sent := 1; ; {
		select {
		case mac := <-ch:
			return mac, true, nil
		case <-deadline.C:
			// A last look: an answer and the deadline may have
			// come together.
			select {
			case mac := <-ch:
				return mac, true, nil
			default:
				return nil, false, nil
			}
		case <-tick.C:
			if sent < p.probes {
				sent++
				if err := send(); err != nil {
					return nil, false, err
				}
			}
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-p.done:
			return nil, false, ErrClosed
		}
	}
}

// Close closes the socket and stops the reader; Probe calls in flight
// return ErrClosed.
func (p *Prober) Close() error {
	if p.closing.Swap(true) {
		<-p.done
		return nil
	}
	err := p.c.Close()
	<-p.done
	return err
}

func (p *Prober) forget(ip netip.Addr, ch chan net.HardwareAddr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.waiters[ip]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(p.waiters, ip)
	} else {
		p.waiters[ip] = ws
	}
}

// read dispatches every ARP packet seen on the link to the probes waiting
// for its sender IP address (RFC 5227 section 2.1.1: a request or a reply
// from the address both mean it is in use). The socket also sees our own
// outgoing probes; their sender IP is 0.0.0.0, and they are skipped along
// with other hosts' probes.
func (p *Prober) read() {
	defer close(p.done)
	buf := make([]byte, 1500)
	backoff := time.Duration(0)
	for {
		n, _, err := p.c.ReadFrom(buf)
		if err != nil {
			if p.closing.Load() {
				return
			}
			// A transient error (the link went down for a moment):
			// retry, slowly, until Close.
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		pkt, err := Parse(buf[:n])
		if err != nil || !pkt.SenderIP.IsValid() || pkt.SenderIP.IsUnspecified() || bytes.Equal(pkt.SenderMAC, *p.mac.Load()) {
			continue
		}
		p.mu.Lock()
		for _, ch := range p.waiters[pkt.SenderIP] {
			select {
			case ch <- pkt.SenderMAC:
			default: // already answered
			}
		}
		p.mu.Unlock()
	}
}

// Set is one Prober per interface, for a server that listens on several. It
// is safe for concurrent use.
type Set struct {
	probers map[string]*Prober
}

// ListenSet opens a Prober on each named interface.
func ListenSet(ifnames []string, cfg Config) (*Set, error) {
	s := &Set{probers: make(map[string]*Prober, len(ifnames))}
	for _, name := range ifnames {
		p, err := Listen(name, cfg)
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
		s.probers[name] = p
	}
	return s, nil
}

// Probe probes ip on the named interface (see Prober.Probe).
func (s *Set) Probe(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, bool, error) {
	p, ok := s.probers[ifname]
	if !ok {
		return nil, false, fmt.Errorf("arp: no prober on interface %q", ifname)
	}
	return p.Probe(ctx, ip)
}

// Close closes every Prober.
func (s *Set) Close() error {
	var errs []error
	for _, p := range s.probers {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
