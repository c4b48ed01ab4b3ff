package store_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/etcdtest"
	"rackd/store"
	"rackd/store/kv/etcdkv"
	"rackd/store/storetest"
)

// BenchmarkDORA measures the store's half of a DHCP exchange (offer, then a
// durable ack) for distinct clients, from parallel goroutines as the DHCP
// server's workers call it. `go test -bench DORA -benchtime 5000x ./store/`.
func BenchmarkDORA(b *testing.B) { benchDORA(b, storetest.New(b)) }

// BenchmarkDORAOnEtcd is BenchmarkDORA on a store on a real 3-member etcd
// on loopback (internal/etcdtest), with one operation in flight at a time
// and with the default number. Offers run one at a time whatever the
// store's concurrency (they choose and hold an address in one step).
func BenchmarkDORAOnEtcd(b *testing.B) { benchOnEtcd(b, benchDORA) }

// BenchmarkAckOnEtcd is the durable ack alone (a client in INIT-REBOOT
// asking for a free address), as BenchmarkDORAOnEtcd.
func BenchmarkAckOnEtcd(b *testing.B) { benchOnEtcd(b, benchAck) }

func benchOnEtcd(b *testing.B, bench func(*testing.B, *store.Store)) {
	c := etcdtest.Start(b, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	var runs int // each run of a benchmark (b.N grows) on a store of its own
	for _, inflight := range []int{1, 0} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			runs++
			e := etcdkv.New(cli, etcdkv.Options{Prefix: fmt.Sprintf("/bench-%d/", runs)})
			s, err := store.OpenEngine(e, "etcd", store.Options{MaxInFlight: inflight})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			bench(b, s)
		})
	}
}

func benchAck(b *testing.B, s *store.Store) {
	ctx, link := benchSubnet(b, s)
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			mac := fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", i>>24&255, i>>16&255, i>>8&255, i&255)
			ip := netip.AddrFrom4([4]byte{10, 1 + byte(i>>16), byte(i >> 8), byte(i)})
			if _, err := s.DHCPAck(ctx, store.LeaseRequest{MAC: mac, Link: link, IP: ip}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchDORA(b *testing.B, s *store.Store) {
	ctx, link := benchSubnet(b, s)
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			mac := fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", i>>24&255, i>>16&255, i>>8&255, i&255)
			g, err := s.DHCPOffer(ctx, store.LeaseRequest{MAC: mac, Link: link})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.DHCPAck(ctx, store.LeaseRequest{MAC: mac, Link: link, IP: g.Address.IP}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchSubnet makes the benchmarks' subnet, 10.0.0.0/8 served on 10.0.0.1.
func benchSubnet(b *testing.B, s *store.Store) (context.Context, netip.Addr) {
	ctx := context.Background()
	if _, err := s.CreateSubnet(ctx, storetest.Admin, store.Subnet{CIDR: netip.MustParsePrefix("10.0.0.0/8"),
		DynamicRanges: []store.Range{{Start: netip.MustParseAddr("10.1.0.0"), End: netip.MustParseAddr("10.255.255.254")}}}); err != nil {
		b.Fatal(err)
	}
	return ctx, netip.MustParseAddr("10.0.0.1")
}
