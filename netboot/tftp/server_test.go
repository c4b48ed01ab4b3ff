package tftp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"rackd/netboot/files"
)

func TestConfig(t *testing.T) {
	src := files.NewOverlay(nil, nil)
	for _, bad := range []Config{
		{MaxTransfers: -1}, {QueueTimeout: -time.Second}, {MaxBlockSize: 100}, {MaxBlockSize: 70000},
	} {
		if _, err := New(bad, src, nil, nil); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
	if _, err := New(Config{}, nil, nil, nil); err == nil {
		t.Error("New without a source accepted")
	}
	s, err := New(Config{}, src, nil, nil)
	must(t, err)
	if err := s.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "no listen address") {
		t.Errorf("Serve without Listen: %v", err)
	}
	c := s.cfg
	if c.MaxTransfers != DefaultMaxTransfers || c.QueueTimeout != DefaultQueueTimeout ||
		c.SmallFileSize != DefaultSmallFileSize || c.Timeout != DefaultTimeout {
		t.Errorf("defaults: %+v", c)
	}
}

// libClient fetches name with pin/tftp's own client, asking for tsize and
// blksize, and returns the content and the tsize the server announced.
func libClient(t *testing.T, ts *testServer, name string, blksize int) ([]byte, int64, error) {
	t.Helper()
	c, err := tftp.NewClient(net.JoinHostPort(ts.host, ts.port))
	must(t, err)
	c.SetTimeout(2 * time.Second)
	c.RequestTSize(true)
	if blksize > 0 {
		c.SetBlockSize(blksize)
	}
	wt, err := c.Receive(name, "octet")
	if err != nil {
		return nil, 0, err
	}
	size, _ := wt.(tftp.IncomingTransfer).Size()
	var buf bytes.Buffer
	_, err = wt.WriteTo(&buf)
	return buf.Bytes(), size, err
}

// TestTSize: tsize (RFC 2349) is answered from File.Size for tree files and
// for rendered configs, which are not Seekers the library could measure.
func TestTSize(t *testing.T) {
	fx := newFixture(t)
	kernel := fx.add(t, "images/kernel", 200_000)
	ts := startServer(t, Config{}, bootSource(t, fx, testConfigs))
	for name, want := range map[string][]byte{
		"images/kernel":                   kernel,
		"grub/grub.cfg-52:54:00:12:34:56": []byte(testConfigs["grub/grub.cfg-52:54:00:12:34:56"]),
	} {
		for _, blk := range []int{0, 1468, 8192} {
			got, size, err := libClient(t, ts, name, blk)
			if err != nil || !bytes.Equal(got, want) || size != int64(len(want)) {
				t.Errorf("%s blksize %d: %d bytes, tsize %d, %v; want %d", name, blk, len(got), size, err, len(want))
			}
		}
	}
	if _, _, err := libClient(t, ts, "missing", 0); err == nil || !strings.Contains(err.Error(), "File not found") {
		t.Errorf("missing: %v", err)
	}
}

// TestBlockSizeCap: MaxBlockSize caps what a client asks for (RFC 2348: the
// server answers with a smaller value, which the client must accept), or
// else the interface's MTU does (loopback's 65536 allows RFC 2348's
// largest). The MTU comes from a cache filled by ioctl, not a netlink dump
// per request, so the answer is the same every time, even while other
// tests' namespaces come and go.
func TestBlockSizeCap(t *testing.T) {
	fx := newFixture(t)
	fx.add(t, "f", 10_000)
	for _, tc := range []struct {
		max  int
		ask  string
		want string
	}{
		{1024, "4096", "1024"},
		{1024, "600", "600"},
		{0, "65464", "65464"},
		{0, "9000", "9000"},
	} {
		ts := startServer(t, Config{MaxBlockSize: tc.max}, bootSource(t, fx, nil))
		for range 20 {
			conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			must(t, err)
			pkt, from := rrq(t, conn, ts, "f", "blksize", tc.ask)
			_, _ = conn.WriteToUDP(append([]byte{0, 5, 0, 0}, "done\x00"...), from)
			conn.Close()
			if op := binary.BigEndian.Uint16(pkt); op != 6 || !bytes.Equal(pkt[2:], []byte("blksize\x00"+tc.want+"\x00")) {
				t.Fatalf("max %d, asked %s: %q, want OACK blksize %s", tc.max, tc.ask, pkt, tc.want)
			}
		}
	}
}

// rrq sends a read request from conn and returns the first answer and the
// address it came from (the transfer's TID, RFC 1350 section 4).
func rrq(t *testing.T, conn *net.UDPConn, ts *testServer, name string, opts ...string) ([]byte, *net.UDPAddr) {
	t.Helper()
	sendRRQ(t, conn, ts, name, opts...)
	return recv(t, conn, 5*time.Second)
}

func sendRRQ(t *testing.T, conn *net.UDPConn, ts *testServer, name string, opts ...string) {
	t.Helper()
	p := []byte{0, 1}
	p = append(p, name...)
	p = append(p, 0)
	p = append(p, "octet"...)
	p = append(p, 0)
	for _, o := range opts {
		p = append(p, o...)
		p = append(p, 0)
	}
	_, err := conn.WriteToUDP(p, net.UDPAddrFromAddrPort(ts.Addr()))
	must(t, err)
}

func recv(t *testing.T, conn *net.UDPConn, timeout time.Duration) ([]byte, *net.UDPAddr) {
	t.Helper()
	buf := make([]byte, 65536)
	must(t, conn.SetReadDeadline(time.Now().Add(timeout)))
	n, from, err := conn.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return buf[:n], from
}

// TestQueue drives the slot logic with hand-made packets: a client that
// never acknowledges holds the only slot; a second client queues, repeats
// its request (ignored as a retransmission) and is answered "busy" when
// its wait is over; a third finds the queue full; a small config is sent
// at once regardless.
func TestQueue(t *testing.T) {
	fx := newFixture(t)
	fx.add(t, "images/big", 1<<20)
	ts := startServer(t, Config{
		// The hog holds its slot for at least 2 timeouts (2s), well
		// past the waiter's QueueTimeout, even on a loaded machine.
		MaxTransfers: 1, MaxQueued: 1, QueueTimeout: 700 * time.Millisecond,
		Timeout: time.Second, Retries: 1, ShutdownGrace: time.Second,
	}, bootSource(t, fx, testConfigs))
	udp := func() *net.UDPConn {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	hog := udp()
	if p, _ := rrq(t, hog, ts, "images/big"); binary.BigEndian.Uint16(p) != 3 {
		t.Fatalf("hog: %q, want DATA", p)
	}
	// The hog has the slot and never ACKs.

	waiter := udp()
	sendRRQ(t, waiter, ts, "images/big")
	time.Sleep(50 * time.Millisecond)
	sendRRQ(t, waiter, ts, "images/big") // the client's retransmission
	ts.waitCounter(t, 1, "rackd_tftp_retransmitted_requests_total")
	ts.waitCounter(t, 1, "rackd_tftp_transfers_queued")

	full := udp()
	if p, _ := rrq(t, full, ts, "images/big"); binary.BigEndian.Uint16(p) != 5 || !bytes.Contains(p, []byte("busy")) {
		t.Errorf("queue full: %q, want ERROR busy", p)
	}

	// A config skips the queue: the hog holds the only slot.
	cfg := udp()
	p, from := rrq(t, cfg, ts, "pxelinux.cfg/01-52-54-00-12-34-56")
	if binary.BigEndian.Uint16(p) != 3 || !bytes.HasSuffix(p, []byte("images/kernel\n")) {
		t.Errorf("config while the slot is taken: %q", p)
	}
	_, _ = cfg.WriteToUDP([]byte{0, 4, 0, 1}, from)

	start := time.Now()
	p, _ = recv(t, waiter, 5*time.Second)
	if binary.BigEndian.Uint16(p) != 5 || !bytes.Contains(p, []byte("busy")) {
		t.Errorf("queued past QueueTimeout: %q, want ERROR busy", p)
	}
	t.Logf("waiter answered busy %v after the config was sent", time.Since(start))
	// Only one answer for the two requests.
	must(t, waiter.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	if n, _, err := waiter.ReadFromUDP(make([]byte, 1024)); err == nil {
		t.Errorf("a second answer to a retransmitted request: %d bytes", n)
	}
	ts.waitCounter(t, 2, "rackd_tftp_transfers_total", "outcome", "busy")
	ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "timeout") // the hog
	ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "ok")      // the config
	if n := ts.counter(t, "rackd_tftp_transfers_in_flight"); n != 0 {
		t.Errorf("in flight after all ended: %v", n)
	}
}

// TestMalformedAndAbort: a packet that is no request is counted, and a
// client ending a transfer with an ERROR (firmware does after a tsize
// probe) is "aborted".
func TestMalformedAndAbort(t *testing.T) {
	fx := newFixture(t)
	fx.add(t, "images/big", 1<<20)
	ts := startServer(t, Config{}, bootSource(t, fx, nil))
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer c.Close()
	_, err = c.WriteToUDP([]byte{0, 4, 0, 1}, net.UDPAddrFromAddrPort(ts.Addr())) // an ACK to port 69
	must(t, err)
	ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "malformed")

	p, from := rrq(t, c, ts, "images/big", "tsize", "0")
	if binary.BigEndian.Uint16(p) != 6 || !bytes.Contains(p, []byte("tsize\x001048576\x00")) {
		t.Fatalf("OACK %q", p)
	}
	// RFC 2347: a client refuses an OACK with ERROR code 8.
	_, err = c.WriteToUDP(append([]byte{0, 5, 0, 8}, "probe done\x00"...), from)
	must(t, err)
	ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "aborted")
}

// TestMetricsLint checks the exposition with the client library's linter
// (promtool check metrics' rules), and that every series exists from the
// start, every outcome included.
func TestMetricsLint(t *testing.T) {
	ts := startServer(t, Config{}, files.NewOverlay(nil, nil))
	mfs, err := ts.reg.Gather()
	must(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	must(t, err)
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
	}
	want := map[string]int{
		"rackd_tftp_transfers_total": len(outcomes), "rackd_tftp_transfer_duration_seconds": 1,
		"rackd_tftp_bytes_total": 1, "rackd_tftp_transfers_in_flight": 1, "rackd_tftp_transfers_queued": 1,
		"rackd_tftp_retransmitted_requests_total": 1, "rackd_tftp_queue_wait_seconds": 1,
		"rackd_tftp_config_answer_seconds": 1,
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d series, want %d", name, got[name], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("families: %v", got)
	}
}

// TestServeTwice: a Server serves once.
func TestServeTwice(t *testing.T) {
	ts := startServer(t, Config{}, files.NewOverlay(nil, nil))
	if err := ts.Serve(context.Background()); !errors.Is(err, ErrServing) {
		t.Errorf("second Serve: %v", err)
	}
}

// addrRenderer renders, for every name, the server address its context
// carries (files.LocalAddr).
type addrRenderer struct{}

func (addrRenderer) Render(ctx context.Context, name string) ([]byte, bool, error) {
	a, ok := files.LocalAddr(ctx)
	if !ok {
		return []byte("none"), true, nil
	}
	return []byte(a.String()), true, nil
}

// TestLocalAddr: the Source is told which of the server's addresses the
// request reached, for configs that point the client back at it.
func TestLocalAddr(t *testing.T) {
	ts := startServer(t, Config{}, files.NewOverlay(addrRenderer{}, nil))
	got, _, err := libClient(t, ts, "pxelinux.cfg/default", 0)
	if err != nil || string(got) != ts.host {
		t.Fatalf("config rendered for %q (%v), want the server address %s", got, err, ts.host)
	}
}
