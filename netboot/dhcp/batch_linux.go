package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
)

// Batched system calls: recvmmsg(2) reads every datagram queued on the
// socket (up to a batch) in one call, and sendmmsg(2) sends the replies to a
// batch in one. At a few packets a second each call returns one datagram,
// as read(2) would; under load, when the reader falls behind, it takes
// what queued meanwhile at the cost of one system call and one wake-up.

// batchSize is how many datagrams one call reads or writes at most.
const batchSize = 16

// mmsghdr is struct mmsghdr of recvmmsg(2) (Go pads it as C does).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// recvBatch is a reader's buffers for recvMany: batchSize buffers of
// maxPacket bytes, and what the last call read into them.
type recvBatch struct {
	bufs [batchSize][]byte
	iovs [batchSize]unix.Iovec
	msgs [batchSize]mmsghdr
	// n is the datagrams read by the last call; lens their sizes, and
	// trunc whether one was larger than its buffer (MSG_TRUNC).
	n     int
	lens  [batchSize]int
	trunc [batchSize]bool
}

func newRecvBatch() *recvBatch {
	b := &recvBatch{}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, maxPacket)
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(maxPacket)
		b.msgs[i].hdr.Iov = &b.iovs[i]
		b.msgs[i].hdr.SetIovlen(1)
	}
	return b
}

// packet is the i-th datagram of the last call.
func (b *recvBatch) packet(i int) []byte { return b.bufs[i][:b.lens[i]] }

// recvMany blocks until at least one datagram is queued, then reads as many
// as are queued, up to batchSize (MSG_WAITFORONE).
func (s *udpSocket) recvMany(b *recvBatch) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for {
		if s.closed.Load() {
			return s.opError("read", net.ErrClosed)
		}
		for i := range b.msgs {
			b.msgs[i].len = 0
			b.msgs[i].hdr.Flags = 0
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&b.msgs[0])),
			batchSize, unix.MSG_WAITFORONE, 0, 0)
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return s.opError("read", errno)
		case s.closed.Load():
			return s.opError("read", net.ErrClosed) // woken by Close
		}
		b.n = int(n)
		for i := range b.n {
			b.lens[i] = int(b.msgs[i].len)
			b.trunc[i] = b.msgs[i].hdr.Flags&unix.MSG_TRUNC != 0
		}
		return nil
	}
}

// sendBatch is replies waiting to be sent with sendMany: each encoded in
// its own reused buffer, with its destination.
type sendBatch struct {
	n     int
	pkts  [batchSize][]byte
	dsts  [batchSize]*net.UDPAddr
	names [batchSize]unix.RawSockaddrInet4
	iovs  [batchSize]unix.Iovec
	msgs  [batchSize]mmsghdr
}

// full reports whether another reply would not fit.
func (b *sendBatch) full() bool { return b.n == batchSize }

// add queues reply, encoded into the batch's own buffer, for dst, an IPv4
// UDP address.
func (b *sendBatch) add(reply *dhcpv4.DHCPv4, dst *net.UDPAddr) error {
	ip4 := dst.IP.To4()
	if ip4 == nil {
		return fmt.Errorf("dhcp: reply address %v is not IPv4", dst)
	}
	i := b.n
	b.pkts[i] = appendReply(b.pkts[i][:0], reply)
	name := &b.names[i]
	name.Family = unix.AF_INET
	p := (*[2]byte)(unsafe.Pointer(&name.Port))
	p[0], p[1] = byte(dst.Port>>8), byte(dst.Port)
	copy(name.Addr[:], ip4)
	b.dsts[i] = dst
	b.n++
	return nil
}

// sendMany sends the queued replies, in as few calls as the kernel takes
// them, and empties b. It returns the first error; the replies from the
// failing one on are not sent.
func (s *udpSocket) sendMany(b *sendBatch) error {
	defer func() { b.n = 0 }()
	for i := range b.n {
		b.iovs[i].Base = unsafe.SliceData(b.pkts[i])
		b.iovs[i].SetLen(len(b.pkts[i]))
		b.msgs[i] = mmsghdr{}
		b.msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.msgs[i].hdr.Namelen = unix.SizeofSockaddrInet4
		b.msgs[i].hdr.Iov = &b.iovs[i]
		b.msgs[i].hdr.SetIovlen(1)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for sent := 0; sent < b.n; {
		if s.closed.Load() {
			return s.opError("write", net.ErrClosed)
		}
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&b.msgs[sent])),
			uintptr(b.n-sent), 0, 0, 0)
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return s.opError("write", errno)
		case n == 0:
			return s.opError("write", errors.New("sendmmsg sent nothing"))
		}
		sent += int(n)
	}
	return nil
}

// pause blocks the calling thread for d (nanosleep(2)): a reader that
// waits for requests to queue keeps its thread and processor, as it does
// in its blocking reads, rather than parking in the runtime.
func (s *udpSocket) pause(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// batchSocket reads and writes datagrams in batches (udpSocket).
type batchSocket interface {
	pause(d time.Duration)
	recvMany(b *recvBatch) error
	sendMany(b *sendBatch) error
}

// readBatched is read for a socket that reads and writes in batches: the
// replies the reader sends itself to the datagrams of one read go out in
// one write. It reports false, having done nothing, for other sockets.
func (s *Server) readBatched(ctx context.Context, c Conn) (bool, error) {
	bs, ok := c.PC.(batchSocket)
	if !ok {
		return false, nil
	}
	in := newRecvBatch()
	out := &outbox{s: s, c: c, sock: bs}
	var y yielder
	co := coalescer{d: s.cfg.ReadCoalesce}
	for {
		if err := bs.recvMany(in); err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			return true, fmt.Errorf("dhcp: read on %s %v: %w", c.In.Name, c.In.Addr, err)
		}
		at := time.Now()
		y.maybe(at)
		for i := range in.n {
			if in.trunc[i] {
				s.m.received.WithLabelValues(typeInvalid).Inc()
				s.m.drop(reasonMalformed)
				s.log.Debug("dhcp: datagram larger than the largest UDP payload", "interface", c.In.Name)
				continue
			}
			s.packet(ctx, c, in.packet(i), at, out)
		}
		out.flush(ctx)
		if d := co.next(at, in.n); d > 0 {
			bs.pause(d)
		}
	}
}

// coalescer decides how long a reader waits before its next read, so that
// at a steady rate of requests each read takes several of them: a read,
// the answers' send and the wake-up in between are then shared, where at
// a few thousand requests a second each would otherwise cost one request
// alone (the kernel wakes a blocked reader for every datagram). It waits
// only while requests keep coming (the last read followed the one before
// within busyGap) and only when the read did not fill its batch (more is
// queued then: read it at once). A lone request is answered at once.
type coalescer struct {
	d    time.Duration // 0 or less: never wait
	last time.Time     // when the previous read returned
}

// busyGap is how close two reads must follow each other for requests to
// count as coming steadily: below a few hundred a second a reader gains
// little from waiting.
const busyGap = 4 * time.Millisecond

// next is how long to wait after a read that returned n datagrams at at.
func (c *coalescer) next(at time.Time, n int) time.Duration {
	prev := c.last
	c.last = at
	if c.d <= 0 || n >= batchSize || prev.IsZero() || at.Sub(prev) > busyGap {
		return 0
	}
	return c.d
}

// outbox collects the replies a reader sends itself while it serves one
// batch of datagrams, or the ACKs of one group (ackGroup).
type outbox struct {
	s *Server
	c Conn
	// sock sends a batch in one call; nil: c.PC sends them one by one.
	sock batchSocket
	b    sendBatch
}

// newOutbox returns an outbox for c: sent in batches if its socket can, one
// by one otherwise.
func newOutbox(s *Server, c Conn) *outbox {
	o := &outbox{s: s, c: c}
	o.sock, _ = c.PC.(batchSocket)
	return o
}

// add queues reply for dst, sending what is queued first when the batch is
// full.
func (o *outbox) add(ctx context.Context, reply *dhcpv4.DHCPv4, dst *net.UDPAddr) error {
	if o.b.full() {
		o.flush(ctx)
	}
	return o.b.add(reply, dst)
}

// flush sends what is queued. The replies were counted as sent when
// queued; a failure to send them is logged.
func (o *outbox) flush(ctx context.Context) {
	if o.b.n == 0 {
		return
	}
	n := o.b.n
	var err error
	if o.sock != nil {
		err = o.sock.sendMany(&o.b)
	} else {
		for i := range n {
			if _, err = o.c.PC.WriteTo(o.b.pkts[i], o.b.dsts[i]); err != nil {
				break
			}
		}
		o.b.n = 0
	}
	if err != nil && ctx.Err() == nil {
		o.s.log.Warn("dhcp: send replies", "interface", o.c.In.Name, "replies", n, "err", err)
	}
}
