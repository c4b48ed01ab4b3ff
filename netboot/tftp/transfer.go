package tftp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/pin/tftp/v3/netascii"

	"rackd/netboot/files"
)

// readBuffer is the read-ahead between the file and the blocks: one read(2)
// per 64 KiB rather than one per block.
const readBuffer = 64 << 10

// transfer is one request being answered, on its own connected socket (its
// TID): the kernel then drops packets from any other address or port, and
// sends without a route lookup per packet.
type transfer struct {
	s      *Server
	req    request
	client netip.AddrPort
	start  time.Time // the request arrived at the server socket

	conn   *net.UDPConn
	rc     syscall.RawConn
	maxBlk int // blksize cap from the interface's MTU

	file     files.File
	size     int64
	rendered bool

	blksize, window int
	timeout         time.Duration
	tsize           string // as acknowledged, "" when not asked
	answered        bool   // the first packet went out
	datagrams       int    // sent, retransmissions included
	gso             bool   // send windows as one UDP GSO datagram
	oob             []byte // the GSO control message
	rbuf            []byte
	bytes           int64 // file bytes read into blocks

	// The window: its packets in a ring, their lengths, and the block
	// numbers (absolute, from 1) of the oldest unacknowledged, the next
	// to read, the next to send, and the last (0: not read yet).
	r                         io.Reader
	slab                      []byte
	lens                      []int
	pktLen                    int
	una, next, sendFrom, last uint64
	w                         *waiter
	oack                      []byte // until ACK 0 comes back
}

// dial opens the transfer's socket, from the address the request was sent
// to (so the client hears the server it asked), connected to the client.
func (t *transfer) dial(dst netip.Addr, ifindex int) error {
	raddr := net.UDPAddrFromAddrPort(t.client)
	var laddr *net.UDPAddr
	if dst.IsValid() && !dst.IsUnspecified() && !dst.IsMulticast() && dst != netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		laddr = &net.UDPAddr{IP: dst.AsSlice()}
		if dst.Is6() && dst.IsLinkLocalUnicast() {
			laddr.Zone = strconv.Itoa(ifindex)
		}
	}
	conn, err := net.DialUDP("udp", laddr, raddr)
	if err != nil && laddr != nil {
		// A directed broadcast, an address gone since: let the
		// system choose.
		conn, err = net.DialUDP("udp", nil, raddr)
	}
	if err != nil {
		return err
	}
	t.conn = conn
	t.rc, err = conn.SyscallConn()
	if err != nil {
		return err
	}
	t.maxBlk = t.s.mtu.blockCap(ifindex, t.client.Addr().Is4())
	t.rbuf = make([]byte, 516)
	return nil
}

func (t *transfer) close() {
	if t.conn != nil {
		_ = t.conn.Close()
	}
	if t.file != nil {
		_ = t.file.Close()
	}
}

// write sends one packet, and notes the first answer to a config request.
func (t *transfer) write(p []byte) error {
	t.sentFirst()
	_, err := t.conn.Write(p)
	t.datagrams++
	return err
}

// sentFirst is called as the first packet of the answer is handed to the
// kernel: for a rendered config, the end of config_answer_seconds. Before
// the send call, not after: the call also runs the kernel's transmit work,
// which on a veth pair (the benchmark's) includes delivering whatever other
// packets wait in the CPU's backlog, up to net.core.netdev_budget_usecs
// (2 ms) of other transfers' traffic, and that is not this answer's latency.
func (t *transfer) sentFirst() {
	if !t.answered {
		t.answered = true
		if t.rendered {
			t.s.m.configAnswer.Observe(time.Since(t.start).Seconds())
		}
	}
}

// fail sends err to the client as an ERROR packet and counts its outcome.
func (t *transfer) fail(err error) {
	var ce *clientError
	if !errors.As(err, &ce) {
		ce = &clientError{code: errCodeUndefined, msg: "Error", outcome: outcomeError, err: err}
	}
	if ce.code != 0 || ce.msg != "" {
		_ = t.write(errorPacket(ce.code, ce.wire()))
	}
	t.s.m.outcome(ce.outcome)
	lvl := slog.LevelDebug
	if ce.outcome == outcomeError {
		lvl = slog.LevelWarn
	}
	t.s.log.Log(context.Background(), lvl, "tftp: transfer failed", "client", t.client.String(), "file", t.req.filename,
		"outcome", ce.outcome, "err", ce.Error(), "duration", time.Since(t.start))
}

// negotiate picks the options' values and returns the OACK to send, or nil
// when no option is acknowledged (the transfer then starts with DATA 1).
func (t *transfer) negotiate() []byte {
	cfg := t.s.cfg
	r := t.req
	t.blksize, t.window, t.timeout = defBlockSize, 1, cfg.Timeout
	oack := []byte{0, opOACK}
	if r.blksize > 0 {
		// RFC 2348: the server may answer a smaller size, which the
		// client must then use.
		t.blksize = min(r.blksize, t.maxBlk)
		if cfg.MaxBlockSize > 0 {
			t.blksize = min(t.blksize, cfg.MaxBlockSize)
		}
		oack = appendOption(oack, "blksize", int64(t.blksize))
	}
	if r.tsize && r.mode == "octet" {
		// In netascii the size on the wire differs from the file's;
		// RFC 2349 lets a server leave tsize out, as it is then.
		t.tsize = strconv.FormatInt(t.size, 10)
		oack = appendOption(oack, "tsize", t.size)
	}
	if r.timeout > 0 {
		t.timeout = time.Duration(r.timeout) * time.Second
		oack = appendOption(oack, "timeout", int64(r.timeout))
	}
	if r.windowsize > 0 && cfg.MaxWindowSize > 1 {
		// A window is held in memory until acknowledged: at most
		// maxWindowBytes of it per transfer (16 blocks of 64 KiB).
		t.window = min(r.windowsize, cfg.MaxWindowSize, max(1, maxWindowBytes/t.blksize))
		oack = appendOption(oack, "windowsize", int64(t.window))
	}
	if len(oack) == 2 {
		return nil
	}
	return oack
}

// begin negotiates and sends the first packet of the answer: the OACK, or
// the first window of data. It runs on the server's read loop for small
// files (configs), so that the answer does not wait behind the goroutines
// of running transfers for a turn on a CPU (see Server.begin).
func (t *transfer) begin() error {
	oack := t.negotiate()
	var src io.Reader = t.file
	if t.req.mode == "netascii" {
		src = netascii.ToReader(src)
	}
	buf := readBuffer
	if t.size < int64(buf) && t.req.mode == "octet" {
		buf = int(t.size) + 1 // bufio's minimum is 16
	}
	t.r = bufio.NewReaderSize(src, buf)
	t.pktLen = 4 + t.blksize
	t.slab = make([]byte, t.window*t.pktLen) // the window's packets, a ring
	t.lens = make([]int, t.window)
	if t.window > 1 && gsoOK.Load() {
		t.gso, t.oob = true, gsoControl(t.pktLen)
	}
	// Block numbers are counted from 1 without limit here; on the wire
	// they are the low 16 bits, rolling over from 65535 to 0 as
	// tftp-hpa, atftp and curl expect.
	t.una, t.next, t.sendFrom = 1, 1, 1
	t.w = t.newWaiter()
	if oack != nil {
		// RFC 2347: the client acknowledges the OACK with ACK 0.
		t.oack = oack
		if err := t.write(oack); err != nil {
			return sendError(err)
		}
		t.w.sent()
		return nil
	}
	return t.pump()
}

// finish runs the transfer from its first packet to its end.
func (t *transfer) finish() error {
	if t.oack != nil {
		tries := 1
		for {
			k, err := t.w.ack(0, 0)
			if err == errRetransmit {
				if tries >= t.s.cfg.Retries {
					return errTimeout
				}
				tries++
				if err := t.write(t.oack); err != nil {
					return sendError(err)
				}
				t.w.sent()
				continue
			}
			if err != nil {
				return err
			}
			if k == 0 {
				break
			}
		}
		t.oack = nil
		if err := t.pump(); err != nil {
			return err
		}
	}
	return t.data()
}

// end counts the outcome of a transfer that ran: err nil is success.
func (t *transfer) end(err error) {
	t.s.m.bytes.Add(float64(t.bytes))
	if err != nil {
		t.fail(err)
		return
	}
	t.s.m.outcome(outcomeOK)
	d := time.Since(t.start)
	t.s.m.duration.Observe(d.Seconds())
	t.s.log.Debug("tftp: sent", "client", t.client.String(), "file", t.req.filename,
		"duration", d, "blksize", t.blksize, "tsize", t.tsize, "windowsize", t.window,
		"datagrams", t.datagrams)
}

// pump reads blocks into the free slots of the window and sends every
// block of the window not sent yet.
func (t *transfer) pump() error {
	win := uint64(t.window)
	for t.last == 0 && t.next < t.una+win {
		i := int((t.next - 1) % win)
		p := t.slab[i*t.pktLen : (i+1)*t.pktLen]
		n, err := io.ReadFull(t.r, p[4:])
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			t.last = t.next
		case err != nil:
			return &clientError{code: errCodeUndefined, msg: "Error reading file", outcome: outcomeError, err: err}
		}
		binary.BigEndian.PutUint16(p, opDATA)
		binary.BigEndian.PutUint16(p[2:], uint16(t.next))
		t.lens[i] = 4 + n
		t.bytes += int64(n)
		t.next++
	}
	if t.sendFrom < t.next {
		if err := t.sendBlocks(t.sendFrom, t.next); err != nil {
			return sendError(err)
		}
		t.w.sent()
		t.sendFrom = t.next
	}
	return nil
}

// data waits for ACKs and sends the file on, window by window (RFC 7440;
// a window of 1 is RFC 1350's lock step), until the last block is
// acknowledged.
func (t *transfer) data() error {
	tries := 0
	// resent: the blocks from una on were sent again since una last
	// moved. A client that lost a block ACKs the one before it, and
	// firmware (EDK2) does so for every later block of the window that
	// arrives out of order: answering each of those ACKs with the window
	// again would multiply every loss (the windowed Sorcerer's
	// Apprentice). One resend per position answers them all; if that is
	// lost too, the timeout resends.
	resent := false
	for {
		k, err := t.w.ack(t.una-1, t.next-1)
		switch {
		case err == errRetransmit:
			tries++
			if tries >= t.s.cfg.Retries {
				return errTimeout
			}
			t.sendFrom, resent = t.una, true
		case err != nil:
			return err
		case k >= t.una:
			t.una, tries, resent = k+1, 0, false
			if t.last != 0 && t.una > t.last {
				return nil
			}
			if k+1 < t.next {
				// The client has a gap (RFC 7440 section 4):
				// go on from the block after the one it
				// acknowledged.
				t.sendFrom, resent = t.una, true
			}
		case t.window == 1 || resent:
			// A duplicate ACK in lock step, or one already
			// answered: never answered by a resend, or every later
			// block goes out twice (RFC 1123 4.2.3.1, the
			// Sorcerer's Apprentice).
			continue
		default:
			// The block before the window again: the client
			// lost the window's first block.
			t.sendFrom, resent = t.una, true
		}
		// Shutdown grace over: abort between blocks, when the client
		// waits for the next one and has no ACK on its way to a
		// socket about to close (whose ICMP answer would reach the
		// client's socket as an error before the ERROR packet is
		// read).
		select {
		case <-t.s.stop:
			return shutdownError
		default:
		}
		if err := t.pump(); err != nil {
			return err
		}
	}
}

// slot is block b's packet in the ring.
func (t *transfer) slot(b uint64) []byte {
	i := int((b - 1) % uint64(t.window))
	return t.slab[i*t.pktLen : i*t.pktLen+t.lens[i]]
}

// sendBlocks sends blocks [from, to) of the ring.
func (t *transfer) sendBlocks(from, to uint64) error {
	slab, pktLen, lens := t.slab, t.pktLen, t.lens
	win := uint64(len(lens))
	for from < to {
		if !t.gso || to-from == 1 {
			if err := t.write(t.slot(from)); err != nil {
				return err
			}
			from++
			continue
		}
		// As many as are contiguous in the ring, fit one GSO
		// datagram (64 KiB, 64 segments), and are full size but the
		// last.
		i := (from - 1) % win
		n := min(to-from, win-i, uint64(gsoMaxSegments), uint64(gsoMaxBytes/pktLen))
		for k := uint64(0); k+1 < n; k++ {
			if lens[i+k] != pktLen { // only the file's last block is short
				n = k + 1
				break
			}
		}
		if n <= 1 { // one block, or blocks too large to pack two
			if err := t.write(t.slot(from)); err != nil {
				return err
			}
			from++
			continue
		}
		end := int(i+n-1)*pktLen + lens[i+n-1]
		t.sentFirst()
		if _, _, err := t.conn.WriteMsgUDP(slab[int(i)*pktLen:end], t.oob, nil); err != nil {
			switch gsoRefused(err) {
			case gsoNever:
				// The kernel cannot segment: send one by one
				// from now on, everywhere.
				gsoOK.Store(false)
			case gsoNotHere:
				// This route cannot (an MTU smaller than
				// the one cached, say): one by one here.
			default:
				return err
			}
			t.gso = false
			continue
		}
		t.datagrams += int(n)
		from += n
	}
	return nil
}

// gsoRefusal is what a failed segmented send says about segmentation.
type gsoRefusal int

const (
	gsoOther   gsoRefusal = iota // not about segmentation
	gsoNotHere                   // not on this route
	gsoNever                     // not in this kernel
)

// maxWindowBytes bounds the memory of one transfer's window.
const maxWindowBytes = 1 << 20

// stopWait is how long a transfer woken by the end of the shutdown grace
// still waits for the ACK of what it sent.
const stopWait = 200 * time.Millisecond

var (
	errTimeout = &clientError{code: errCodeUndefined, msg: "Timeout: no acknowledgement", outcome: outcomeTimeout}
	// errRetransmit: the retransmission timeout passed without progress.
	errRetransmit = errors.New("tftp: retransmit")
)

func sendError(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		// The client's port is closed: it has gone.
		return &clientError{outcome: outcomeAborted, err: err}
	}
	return &clientError{outcome: outcomeError, err: err}
}

// waiter reads ACKs for a transfer with a retransmission timer. The read
// deadline is moved lazily (at most once a quarter of the timeout), not once
// per block: a deadline that passes early is re-armed for the rest.
type waiter struct {
	t        *transfer
	lastSend time.Time
	armed    time.Time
	stopping bool // woken by the end of the shutdown grace
}

func (t *transfer) newWaiter() *waiter { return &waiter{t: t} }

func (w *waiter) sent() {
	w.lastSend = time.Now()
}

// ack waits for an ACK of a block in [lo, hi] (absolute numbers, matched on
// their low 16 bits) and returns it. It returns errRetransmit when the
// timeout passes, a *clientError when the client ends the transfer or the
// server is stopping.
func (w *waiter) ack(lo, hi uint64) (uint64, error) {
	t := w.t
	for {
		due := w.lastSend.Add(t.timeout)
		if w.stopping {
			due = w.armed
		} else if w.armed.IsZero() || due.Sub(w.armed) > t.timeout/4 || w.armed.After(due) {
			if err := t.conn.SetReadDeadline(due); err != nil {
				return 0, &clientError{outcome: outcomeError, err: err}
			}
			w.armed = due
		}
		n, err := w.read()
		if err != nil {
			select {
			case <-t.s.stop:
				if w.stopping {
					return 0, shutdownError
				}
				// Give the ACK on its way a moment, so that
				// the abort happens between blocks.
				w.stopping = true
				w.armed = time.Now().Add(stopWait)
				if err := t.conn.SetReadDeadline(w.armed); err != nil {
					return 0, shutdownError
				}
				continue
			default:
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if time.Now().Before(due) {
					w.armed = time.Time{} // woken early: re-arm for the rest
					continue
				}
				return 0, errRetransmit
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				return 0, &clientError{outcome: outcomeAborted, err: err}
			}
			return 0, &clientError{outcome: outcomeError, err: err}
		}
		p := t.rbuf[:n]
		if n < 4 {
			continue
		}
		switch binary.BigEndian.Uint16(p) {
		case opACK:
			// The block in [lo, hi] whose low 16 bits were acked.
			k := lo + uint64(binary.BigEndian.Uint16(p[2:])-uint16(lo))
			if k <= hi {
				return k, nil
			}
		case opERROR:
			code, msg := parseError(p)
			// Firmware ends a transfer on purpose after reading
			// tsize from the OACK of a probe request.
			return 0, &clientError{outcome: outcomeAborted,
				err: errors.New("client sent error " + strconv.Itoa(int(code)) + ": " + msg)}
		}
		// Anything else from the client is ignored.
	}
}

// read reads one datagram into rbuf, waiting for the socket to become
// readable. (It always tries the socket first: the poller forgets a
// readiness that came before the read began, so skipping that first try
// could sleep through an ACK already there.)
func (w *waiter) read() (int, error) {
	var n int
	var rerr error
	err := w.t.rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), w.t.rbuf)
		return rerr != syscall.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}
