package store

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"rackd/store/kv"
)

// TestExpireManyAddresses: a sweep of more expired leases than one etcd
// transaction can delete (each deletion is a write of the record and a
// comparison and a write of its client's lease_macs key, of etcd's 128
// operations a transaction) deletes them all, on a shared engine in
// several transactions, and leaves no client's lease key behind.
func TestExpireManyAddresses(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	s := openTest(t, Options{Now: clock}, true)
	ctx := context.Background()
	if _, err := s.CreateSubnet(ctx, testAdmin, Subnet{CIDR: netip.MustParsePrefix("10.9.0.0/24"), LeaseSeconds: 60,
		DynamicRanges: []Range{{Start: netip.MustParseAddr("10.9.0.10"), End: netip.MustParseAddr("10.9.0.250")}}}); err != nil {
		t.Fatal(err)
	}
	const n = 150
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 9, 0, byte(10 + i)})
		if _, err := s.DHCPAck(ctx, LeaseRequest{MAC: testMAC(i), Link: netip.MustParseAddr("10.9.0.1"), IP: ip}); err != nil {
			t.Fatalf("ACK %s: %v", ip, err)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if got, err := s.ExpireAddresses(ctx); err != nil || got != n {
		t.Fatalf("ExpireAddresses() = %d, %v; want %d", got, err, n)
	}
	left := 0
	if err := s.viewKV(func(tx kv.Tx) error {
		left = tx.Bucket(bucketAddresses).KeyN()
		if b := tx.Bucket(bucketLeaseMACs); b != nil {
			left += b.KeyN()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d address records and lease keys left after the sweep, want none", left)
	}
}
