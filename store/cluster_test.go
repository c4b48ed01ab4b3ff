package store_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/etcdtest"
	"rackd/store"
	"rackd/store/kv"
	"rackd/store/kv/etcdkv"
)

// These tests run stores on a real etcd (internal/etcdtest), several
// agents on one prefix where they say so.

var prefixN atomic.Int64

// etcdClient starts a one-member cluster and returns a client of it.
func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c := etcdtest.Start(t, 1)
	return newClient(t, c.Endpoints())
}

func newClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freshPrefix is a key prefix no other store of the test binary uses.
func freshPrefix() string { return fmt.Sprintf("/agents-%d/", prefixN.Add(1)) }

// openAgent opens a store on prefix of cli's cluster, as one agent of
// several would; it checks the invariants and closes at the test's end.
func openAgent(t *testing.T, cli *clientv3.Client, prefix string, opts ...func(*store.Options)) *store.Store {
	t.Helper()
	var o store.Options
	for _, f := range opts {
		f(&o)
	}
	s, err := store.OpenEngine(etcdkv.New(cli, etcdkv.Options{Prefix: prefix}), "etcd", o)
	if err != nil {
		t.Fatalf("open the store on etcd %s: %v", prefix, err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("invariants broken at the end of the test:\n%v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// TestFencedWrites: a write made with a fence commits while the fence key
// is the one it names and is refused with ErrFenced, writing nothing, once
// the key is deleted or made again by another.
func TestFencedWrites(t *testing.T) {
	cli := etcdClient(t)
	clk := &fakeClock{now: t0}
	s := openAgent(t, cli, freshPrefix(), func(o *store.Options) { o.Now = clk.Now })
	mustSubnet(t, s, lab())
	const leader = "/election/dhcp/leader"
	put, err := cli.Put(bg, leader, "agent-a")
	if err != nil {
		t.Fatal(err)
	}
	fctx := kv.WithFence(bg, kv.Fence{Key: leader, CreateRevision: put.Header.Revision})

	if _, err := s.DHCPAck(fctx, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}); err != nil {
		t.Fatalf("fenced DHCPAck while the fence holds: %v", err)
	}
	async := make(chan error, 1)
	if err := s.DHCPAckAsync(fctx, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.151")},
		func(_ store.Grant, err error) { async <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-async; err != nil {
		t.Fatalf("fenced DHCPAckAsync while the fence holds: %v", err)
	}

	if _, err := cli.Delete(bg, leader); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DHCPAck(fctx, store.LeaseRequest{MAC: macC, Link: link, IP: addr("10.0.0.152")}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fenced DHCPAck after the fence key was deleted: %v, want ErrFenced", err)
	}
	if _, err := cli.Put(bg, leader, "agent-b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DHCPAckAsync(fctx, store.LeaseRequest{MAC: macC, Link: link, IP: addr("10.0.0.152")},
		func(_ store.Grant, err error) { async <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-async; !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fenced DHCPAckAsync after another made the fence key: %v, want ErrFenced", err)
	}
	if _, err := s.CreateSubnet(fctx, admin, lab2()); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fenced CreateSubnet after the fence was lost: %v, want ErrFenced", err)
	}
	want := map[string]string{"10.0.0.150": macA, "10.0.0.151": macB}
	got := leaseMap(t, s)
	if len(got) != len(want) {
		t.Errorf("leases %v, want only %v", got, want)
	}
	for ip, mac := range want {
		if got[addr(ip)] != mac {
			t.Errorf("lease of %s is %q, want %s", ip, got[addr(ip)], mac)
		}
	}
	if sns, err := s.Subnets(); err != nil || len(sns) != 1 {
		t.Errorf("subnets after the refused fenced CreateSubnet: %v, %v; want lab alone", sns, err)
	}
	// The same operation without a fence is not refused.
	if _, err := s.DHCPAck(bg, store.LeaseRequest{MAC: macC, Link: link, IP: addr("10.0.0.152")}); err != nil {
		t.Fatalf("unfenced DHCPAck: %v", err)
	}
}
