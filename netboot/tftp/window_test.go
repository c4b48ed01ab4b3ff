package tftp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dataBlock checks that p is DATA block n holding want.
func dataBlock(t *testing.T, p []byte, n uint16, want []byte) {
	t.Helper()
	if len(p) < 4 || binary.BigEndian.Uint16(p) != opDATA || binary.BigEndian.Uint16(p[2:]) != n || !bytes.Equal(p[4:], want) {
		got := p
		if len(got) > 8 {
			got = got[:8]
		}
		t.Fatalf("got %q... (%d bytes), want DATA %d of %d bytes", got, len(p), n, len(want))
	}
}

func ack(t *testing.T, c *net.UDPConn, to *net.UDPAddr, n uint16) {
	t.Helper()
	_, err := c.WriteToUDP([]byte{0, opACK, byte(n >> 8), byte(n)}, to)
	must(t, err)
}

// TestWindow drives RFC 7440 with hand-made packets: the server sends a
// window of blocks per ACK; an ACK inside the window (a client that lost a
// block) makes it go on from the block after; silence makes it resend the
// window after the timeout; the last, short block ends the transfer.
func TestWindow(t *testing.T) {
	fx := newFixture(t)
	content := fx.add(t, "f", 9*512+392) // blocks 1-9 full, 10 short
	block := func(n int) []byte { return content[(n-1)*512 : min(n*512, len(content))] }
	ts := startServer(t, Config{Timeout: 300 * time.Millisecond}, bootSource(t, fx, nil))
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer c.Close()

	p, from := rrq(t, c, ts, "f", "windowsize", "4", "TSIZE", "0")
	if !bytes.Equal(p, []byte("\x00\x06tsize\x005000\x00windowsize\x004\x00")) {
		t.Fatalf("OACK %q", p)
	}
	ack(t, c, from, 0)
	for n := 1; n <= 4; n++ {
		p, _ = recv(t, c, 5*time.Second)
		dataBlock(t, p, uint16(n), block(n))
	}
	// Block 3 "lost": acknowledge 2, and get 3 to 6.
	ack(t, c, from, 2)
	for n := 3; n <= 6; n++ {
		p, _ = recv(t, c, 5*time.Second)
		dataBlock(t, p, uint16(n), block(n))
	}
	// Silence: the window 3-6 again after the timeout.
	start := time.Now()
	for n := 3; n <= 6; n++ {
		p, _ = recv(t, c, 5*time.Second)
		dataBlock(t, p, uint16(n), block(n))
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("window resent after %v, before the 300ms timeout", d)
	}
	ack(t, c, from, 6)
	for n := 7; n <= 10; n++ {
		p, _ = recv(t, c, 5*time.Second)
		dataBlock(t, p, uint16(n), block(n))
	}
	ack(t, c, from, 10)
	ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "ok")
	if n := ts.counter(t, "rackd_tftp_bytes_total"); n != float64(len(content)) {
		t.Errorf("bytes_total %v, want %d", n, len(content))
	}
}

// TestOptions: what the server acknowledges. Option names are matched
// whatever their case (RFC 2347); timeout is echoed (RFC 2349); windowsize
// is capped by MaxWindowSize and not acknowledged at all when it is 1;
// errors carry RFC 1350's codes.
func TestOptions(t *testing.T) {
	fx := newFixture(t)
	fx.add(t, "f", 100_000)
	for _, tc := range []struct {
		cfg  Config
		opts []string
		want string // OACK after the opcode, or ERROR code and message
	}{
		{Config{}, []string{"BLKSIZE", "1000", "Timeout", "3"}, "blksize\x001000\x00timeout\x003\x00"},
		{Config{MaxWindowSize: 8}, []string{"windowsize", "64", "tsize", "0"}, "tsize\x00100000\x00windowsize\x008\x00"},
		{Config{MaxWindowSize: 1}, []string{"windowsize", "64", "blksize", "1468"}, "blksize\x001468\x00"},
		// Nothing the server knows: no OACK, DATA 1 at once.
		{Config{}, []string{"multicast", ""}, "DATA"},
	} {
		ts := startServer(t, tc.cfg, bootSource(t, fx, nil))
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		p, from := rrq(t, c, ts, "f", tc.opts...)
		switch op := binary.BigEndian.Uint16(p); {
		case tc.want == "DATA" && op == opDATA:
		case op == opOACK && string(p[2:]) == tc.want:
		default:
			t.Errorf("%+v %q: %q, want %q", tc.cfg, tc.opts, p, tc.want)
		}
		_, _ = c.WriteToUDP(errorPacket(errCodeOptionRefused, "done"), from)
		c.Close()
	}

	ts := startServer(t, Config{}, bootSource(t, fx, nil))
	for _, tc := range []struct {
		pkt  string
		code uint16
	}{
		{"\x00\x01missing\x00octet\x00", errCodeNotFound},
		{"\x00\x01../f\x00octet\x00", errCodeAccess},
		{"\x00\x02f\x00octet\x00", errCodeAccess},
		{"\x00\x01f\x00mail\x00", errCodeIllegal},
	} {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		_, err = c.WriteToUDP([]byte(tc.pkt), net.UDPAddrFromAddrPort(ts.Addr()))
		must(t, err)
		p, _ := recv(t, c, 5*time.Second)
		if code, _ := parseError(p); binary.BigEndian.Uint16(p) != opERROR || code != tc.code {
			t.Errorf("%q: %q, want ERROR code %d", tc.pkt, p, tc.code)
		}
		c.Close()
	}
}

// TestPeersWindowsize: atftp asks for RFC 7440 windowsize; it gets it (the
// server's log says so) and the file and a config byte for byte, with
// 1468-byte blocks and with 512-byte ones over 32 MiB, where block numbers
// roll over inside windows.
func TestPeersWindowsize(t *testing.T) {
	fx := newFixture(t)
	kernel := fx.add(t, "images/kernel", 5<<20+777)
	big := fx.add(t, "images/big", 33<<20+5)
	ts := startServer(t, Config{}, bootSource(t, fx, testConfigs))
	dir := t.TempDir()
	for i, tc := range []struct {
		remote string
		want   []byte
		opts   []string
	}{
		{"images/kernel", kernel, []string{"blksize 1468", "windowsize 8", "tsize 0"}},
		{"pxelinux.cfg/01-52-54-00-12-34-56", []byte(testConfigs["pxelinux.cfg/01-52-54-00-12-34-56"]), []string{"blksize 1468", "windowsize 8"}},
		{"images/big", big, []string{"windowsize 16"}},
	} {
		out := filepath.Join(dir, fmt.Sprint(i))
		start := time.Now()
		msg, err := atftp(t, ts, tc.remote, out, tc.opts...)
		checkFile(t, "atftp", out, tc.want, msg, err)
		t.Logf("atftp %v: %d bytes in %v", tc.opts, len(tc.want), time.Since(start))
	}
	ts.waitCounter(t, 3, "rackd_tftp_transfers_total", "outcome", "ok")
	for _, want := range []string{"file=images/kernel duration=", "file=images/big duration="} {
		found := false
		for _, line := range strings.Split(ts.logs.String(), "\n") {
			if strings.Contains(line, want) && strings.Contains(line, "windowsize=") && !strings.Contains(line, "windowsize=1 ") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no transfer with a window in the log", want)
		}
	}
}

// TestWindowLargeBlocks: windows of blocks too large for two to share one
// segmented send (loopback allows blksize 65464) go out one by one.
func TestWindowLargeBlocks(t *testing.T) {
	fx := newFixture(t)
	for _, blk := range []int{65464, 30000, 9000} {
		content := fx.add(t, "f", 3*blk+100)
		ts := startServer(t, Config{}, bootSource(t, fx, nil))
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		must(t, c.SetReadBuffer(1<<20))
		p, from := rrq(t, c, ts, "f", "blksize", fmt.Sprint(blk), "windowsize", "64")
		// 64 asked, 1 MiB of window at most per transfer.
		if want := fmt.Sprintf("\x00\x06blksize\x00%d\x00windowsize\x00%d\x00", blk, min(64, (1<<20)/blk)); string(p) != want {
			t.Fatalf("OACK %q, want %q", p, want)
		}
		ack(t, c, from, 0)
		for n := 1; n <= 4; n++ { // the whole file fits the window
			p, _ = recv(t, c, 5*time.Second)
			dataBlock(t, p, uint16(n), content[(n-1)*blk:min(n*blk, len(content))])
		}
		ack(t, c, from, 4)
		ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "ok")
		c.Close()
	}
}

// TestWindowLossOnce: a client that loses a block and, as EDK2's does,
// acknowledges the block before it once for every later block of the window
// that arrives out of order, gets the rest of the window once, not once per
// ACK.
func TestWindowLossOnce(t *testing.T) {
	fx := newFixture(t)
	content := fx.add(t, "f", 7*512+10) // blocks 1-7 full, 8 short
	block := func(n int) []byte { return content[(n-1)*512 : min(n*512, len(content))] }
	ts := startServer(t, Config{Timeout: 2 * time.Second}, bootSource(t, fx, nil))
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(t, err)
	defer c.Close()
	_, from := rrq(t, c, ts, "f", "windowsize", "4")
	ack(t, c, from, 0)
	for n := 1; n <= 4; n++ {
		p, _ := recv(t, c, 5*time.Second)
		dataBlock(t, p, uint16(n), block(n))
	}
	// Block 2 "lost": 3 and 4 came out of order, each acked with 1.
	ack(t, c, from, 1)
	ack(t, c, from, 1)
	for n := 2; n <= 5; n++ {
		p, _ := recv(t, c, 5*time.Second)
		dataBlock(t, p, uint16(n), block(n))
	}
	// Nothing more until the client speaks (the timeout is 2s).
	must(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	if n, _, err := c.ReadFromUDP(make([]byte, 1024)); err == nil {
		t.Fatalf("a second resend for the duplicate ACK: %d bytes", n)
	}
	ack(t, c, from, 5)
	for n := 6; n <= 8; n++ {
		p, _ := recv(t, c, 5*time.Second)
		dataBlock(t, p, uint16(n), block(n))
	}
	ack(t, c, from, 8)
	ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "ok")
}
