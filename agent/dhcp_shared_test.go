package agent

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/etcdtest"
	"rackd/netboot"
	"rackd/netboot/dhcp"
	"rackd/store"
	"rackd/store/kv/etcdkv"
	"rackd/store/storetest"
)

// TestDHCPOneClientTwoAgents: the DHCP servers of two agents, each on its
// own store on one etcd prefix, receive at once one client's REQUESTs for
// two different addresses (an INIT-REBOOT client heard by a leader and by
// one deposed that has not noticed yet; storetest.Barrier makes both
// stores' transactions read before either commits). Exactly one server
// ACKs its address; the other answers the client with a DHCPNAK saying
// why (the client starts over with a DISCOVER, RFC 2131 section 3.2), and
// both stores list only the ACKed lease.
func TestDHCPOneClientTwoAgents(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx := t.Context()
	bar := storetest.NewBarrier(t, 2)
	var stores [2]*store.Store
	for i := range stores {
		s, err := store.OpenEngine(bar.Engine(etcdkv.New(cli, etcdkv.Options{Prefix: "/dhcp-one-client/"})), "etcd", store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Check(); err != nil {
				t.Errorf("agent %d's store: invariants broken:\n%v", i, err)
			}
			s.Close()
		})
		stores[i] = s
	}
	sn := store.Subnet{CIDR: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1"), LeaseSeconds: 3600,
		DynamicRanges: []store.Range{{Start: netip.MustParseAddr("10.0.0.100"), End: netip.MustParseAddr("10.0.0.199")}}}
	if _, err := stores[0].CreateSubnet(ctx, storetest.Admin, sn); err != nil {
		t.Fatal(err)
	}
	caughtUp := func(s *store.Store) {
		t.Helper()
		resp, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s.WaitRevision(wctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp(stores[1])

	in := dhcp.Interface{Name: "lab0", Addr: netip.MustParseAddr("10.0.0.1")}
	var conns [2]*chanConn
	for i, s := range stores {
		conns[i] = newChanConn()
		srv, err := dhcp.New(dhcp.Config{}, dhcpLeases{s: s}, nil, netboot.BootConfig{}, nil, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.ServeConns(sctx, []dhcp.Conn{{PC: conns[i], In: in}}) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent %d's DHCP server: %v", i, err)
			}
		})
	}

	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xd0, 0x00, 0x01}
	ips := [2]netip.Addr{netip.MustParseAddr("10.0.0.150"), netip.MustParseAddr("10.0.0.160")}
	bar.Arm()
	for i, ip := range ips {
		req, err := dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip.AsSlice())))
		if err != nil {
			t.Fatal(err)
		}
		conns[i].in <- req.ToBytes()
	}
	var replies [2]*dhcpv4.DHCPv4
	for i, c := range conns {
		select {
		case replies[i] = <-c.out:
		case <-time.After(30 * time.Second):
			t.Fatalf("agent %d did not answer the REQUEST for %s within 30s", i, ips[i])
		}
	}
	if !bar.Met() {
		t.Fatal("the two REQUESTs' transactions did not both read before committing: the test's barrier does not hold")
	}
	acked := -1
	for i, r := range replies {
		switch r.MessageType() {
		case dhcpv4.MessageTypeAck:
			if acked >= 0 {
				t.Fatalf("both agents ACKed %s: %s and %s", mac, ips[acked], ips[i])
			}
			acked = i
			if got, _ := netip.AddrFromSlice(r.YourIPAddr.To4()); got != ips[i] {
				t.Errorf("agent %d ACKed yiaddr %s, want %s", i, got, ips[i])
			}
		case dhcpv4.MessageTypeNak:
			if msg := r.Message(); !strings.Contains(msg, "another acknowledgement") {
				t.Errorf("agent %d's NAK says %q, want the reason (another acknowledgement)", i, msg)
			}
		default:
			t.Errorf("agent %d answered the REQUEST for %s with %s, want an ACK or a NAK", i, ips[i], r.MessageType())
		}
	}
	if acked < 0 {
		t.Fatalf("neither agent ACKed %s: %s and %s", mac, replies[0].MessageType(), replies[1].MessageType())
	}
	t.Logf("agent %d ACKed %s, agent %d NAKed %s: %q", acked, ips[acked], 1-acked, ips[1-acked], replies[1-acked].Message())
	for i, s := range stores {
		caughtUp(s)
		leases, err := s.Leases()
		if err != nil {
			t.Fatal(err)
		}
		var mine []netip.Addr
		for _, l := range leases {
			if l.MAC == mac.String() {
				mine = append(mine, l.IP)
			}
		}
		if len(mine) != 1 || mine[0] != ips[acked] {
			t.Errorf("agent %d lists the leases of %s as %v, want only %s", i, mac, mine, ips[acked])
		}
	}
}

// chanConn is a net.PacketConn fed and drained by the test: the server's
// replies go to addresses off the test's loopback (the client's new
// address, the broadcast address), so they are caught here.
type chanConn struct {
	in     chan []byte
	out    chan *dhcpv4.DHCPv4
	closed chan struct{}
	once   sync.Once
}

func newChanConn() *chanConn {
	return &chanConn{in: make(chan []byte, 4), out: make(chan *dhcpv4.DHCPv4, 4), closed: make(chan struct{})}
}

func (c *chanConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-c.in:
		return copy(b, p), &net.UDPAddr{IP: net.IPv4zero, Port: 68}, nil
	case <-c.closed:
		return 0, nil, net.ErrClosed
	}
}

func (c *chanConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	m, err := dhcpv4.FromBytes(b)
	if err != nil {
		return 0, err
	}
	select {
	case c.out <- m:
	default: // a reply nobody waits for
	}
	return len(b), nil
}

func (c *chanConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *chanConn) LocalAddr() net.Addr              { return &net.UDPAddr{IP: net.IPv4zero, Port: 67} }
func (c *chanConn) SetDeadline(time.Time) error      { return nil }
func (c *chanConn) SetReadDeadline(time.Time) error  { return nil }
func (c *chanConn) SetWriteDeadline(time.Time) error { return nil }
