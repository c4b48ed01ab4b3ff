package dhcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestRecvManySendMany: one call reads every datagram queued (up to a
// batch), whole and in order, and says which were larger than the buffer;
// one call sends a batch of replies, each to its own destination; Close
// wakes a blocked read.
func TestRecvManySendMany(t *testing.T) {
	s, err := listenUDP(netip.MustParseAddrPort("127.0.0.1:0"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	peer, err := net.DialUDP("udp4", nil, s.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	const queued = batchSize + 3
	for i := range queued {
		if _, err := peer.Write(fmt.Appendf(nil, "datagram %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	b := newRecvBatch()
	var got []string
	for len(got) < queued {
		if err := s.recvMany(b); err != nil {
			t.Fatal(err)
		}
		if b.n < 1 || b.n > batchSize {
			t.Fatalf("one call read %d datagrams, want 1..%d", b.n, batchSize)
		}
		for i := range b.n {
			if b.trunc[i] {
				t.Errorf("datagram %q reported truncated", b.packet(i))
			}
			got = append(got, string(b.packet(i)))
		}
	}
	for i, g := range got {
		if want := fmt.Sprintf("datagram %d", i); g != want {
			t.Fatalf("datagram %d read as %q, want %q", i, g, want)
		}
	}

	// Two receivers, replies to both in one batch, each its own.
	var peers [2]*net.UDPConn
	for i := range peers {
		if peers[i], err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			t.Fatal(err)
		}
		defer peers[i].Close()
	}
	var sb sendBatch
	for i := range 4 {
		reply := &dhcpv4.DHCPv4{OpCode: dhcpv4.OpcodeBootReply, HWType: 1, ClientHWAddr: net.HardwareAddr{2, 0, 0, 0, 0, byte(i)},
			TransactionID: dhcpv4.TransactionID{byte(i)}, Options: dhcpv4.Options{}}
		if err := sb.add(reply, peers[i%2].LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sb.add(&dhcpv4.DHCPv4{}, &net.UDPAddr{IP: net.ParseIP("::1"), Port: 67}); err == nil {
		t.Error("an IPv6 destination was queued")
	}
	if err := s.sendMany(&sb); err != nil {
		t.Fatal(err)
	}
	if sb.n != 0 {
		t.Errorf("%d replies still queued after sendMany", sb.n)
	}
	buf := make([]byte, maxPacket)
	for i := range 4 {
		p := peers[i%2]
		p.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := p.Read(buf)
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		m, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if m.TransactionID[0] != byte(i) || m.ClientHWAddr[5] != byte(i) {
			t.Errorf("reply %d reached peer %d as xid %v chaddr %v", i, i%2, m.TransactionID, m.ClientHWAddr)
		}
	}

	// A datagram larger than the buffer is reported, not cut silently.
	small := newRecvBatch()
	small.iovs[0].SetLen(8)
	if _, err := peer.Write([]byte("longer than eight bytes")); err != nil {
		t.Fatal(err)
	}
	if err := s.recvMany(small); err != nil {
		t.Fatal(err)
	}
	if !small.trunc[0] {
		t.Errorf("a 23-byte datagram read into 8 bytes not reported truncated (read %q)", small.packet(0))
	}

	woke := make(chan error, 1)
	go func() { woke <- s.recvMany(b) }()
	time.Sleep(50 * time.Millisecond) // let it block
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked recvMany ended with %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake a blocked recvMany")
	}
	if err := s.sendMany(&sb); err != nil {
		t.Errorf("sendMany of nothing after Close: %v", err)
	}
}

// TestCoalescer: a reader waits before its next read only while requests
// keep coming and its last read did not fill its batch.
func TestCoalescer(t *testing.T) {
	const d = time.Millisecond
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name  string
		d     time.Duration
		reads []time.Duration // when each read returned, after t0
		ns    []int           // what each read returned
		want  []time.Duration // the wait after each
	}{
		{"a lone request is answered and read after at once", d, []time.Duration{0}, []int{1}, []time.Duration{0}},
		{"steady requests: wait after each read", d,
			[]time.Duration{0, 250 * time.Microsecond, 1500 * time.Microsecond, 2800 * time.Microsecond},
			[]int{1, 1, 4, 5}, []time.Duration{0, d, d, d}},
		{"a full batch: more is queued, read at once", d,
			[]time.Duration{0, 100 * time.Microsecond}, []int{1, batchSize}, []time.Duration{0, 0}},
		{"a quiet spell ends the waits", d,
			[]time.Duration{0, time.Millisecond, time.Second, time.Second + time.Millisecond},
			[]int{1, 1, 1, 1}, []time.Duration{0, d, 0, d}},
		{"switched off", -1, []time.Duration{0, 100 * time.Microsecond}, []int{1, 1}, []time.Duration{0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			co := coalescer{d: c.d}
			for i, at := range c.reads {
				if got := co.next(t0.Add(at), c.ns[i]); got != c.want[i] {
					t.Errorf("read %d (%d datagrams at +%v): wait %v, want %v", i, c.ns[i], at, got, c.want[i])
				}
			}
		})
	}
}
