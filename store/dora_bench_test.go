package store_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

// BenchmarkDORA measures the store's half of a DHCP exchange (offer, then a
// durable ack) for distinct clients, from parallel goroutines as the DHCP
// server's workers call it. `go test -bench DORA -benchtime 5000x ./store/`.
func BenchmarkDORA(b *testing.B) {
	s := storetest.New(b)
	ctx := context.Background()
	if _, err := s.CreateSubnet(ctx, storetest.Admin, store.Subnet{CIDR: netip.MustParsePrefix("10.0.0.0/8"),
		DynamicRanges: []store.Range{{Start: netip.MustParseAddr("10.1.0.0"), End: netip.MustParseAddr("10.255.255.254")}}}); err != nil {
		b.Fatal(err)
	}
	link := netip.MustParseAddr("10.0.0.1")
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
