package store_test

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

// TestListViews: the bulk reads say of every machine what the one-machine
// reads say.
func TestListViews(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	if _, err := s.CreateSubnet(ctx, admin, store.Subnet{CIDR: netip.MustParsePrefix("10.5.0.0/24"), LeaseSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	var ms []store.Machine
	for _, h := range []string{"a", "b", "c"} {
		ms = append(ms, ready(t, s, h))
	}
	ms = append(ms, create(t, s, store.NewMachine{Hostname: "d", MACs: []string{nextMAC(), nextMAC()}}))
	for _, as := range []store.AssignRequest{{Machine: "d", MAC: ms[3].MACs[1], IP: netip.MustParseAddr("10.5.0.9")},
		{Machine: "a", MAC: ms[0].MACs[0], IP: netip.MustParseAddr("10.5.0.10")}} {
		if _, err := s.AssignMachineIP(ctx, admin, as); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ms {
		m, err := s.Machine(ms[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	powers, err := s.MachinesPower(ms)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := s.MachinesAddresses(ms)
	if err != nil {
		t.Fatal(err)
	}
	withAddrs := 0
	for _, m := range ms {
		ps, err := s.MachinePower(m)
		if err != nil || !reflect.DeepEqual(ps, powers[m.ID]) {
			t.Errorf("%s: power %+v, bulk %+v (%v)", m.Hostname, ps, powers[m.ID], err)
		}
		as, err := s.MachineAddresses(m)
		if err != nil || !reflect.DeepEqual(as, addrs[m.ID]) {
			t.Errorf("%s: addresses %+v, bulk %+v (%v)", m.Hostname, as, addrs[m.ID], err)
		}
		if len(as) > 0 {
			withAddrs++
		}
	}
	if withAddrs < 2 {
		t.Fatalf("only %d machines with addresses: the comparison proves little", withAddrs)
	}
}
