package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/etcdtest"
	"rackd/store"
	"rackd/store/kv"
	"rackd/store/kv/etcdkv"
	"rackd/store/storetest"
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
	return openAgentOn(t, etcdkv.New(cli, etcdkv.Options{Prefix: prefix}), opts...)
}

// openAgentOn is openAgent on an engine of the test's.
func openAgentOn(t *testing.T, e store.Engine, opts ...func(*store.Options)) *store.Store {
	t.Helper()
	var o store.Options
	for _, f := range opts {
		f(&o)
	}
	s, err := store.OpenEngine(e, "etcd", o)
	if err != nil {
		t.Fatalf("open the store on etcd: %v", err)
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

// clusterRev is the cluster's revision now: every commit made before the
// call is at or below it.
func clusterRev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(bg, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// caughtUp waits (bounded) until s has applied every change made on the
// cluster so far.
func caughtUp(t *testing.T, cli *clientv3.Client, s *store.Store) {
	t.Helper()
	rev := clusterRev(t, cli)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := s.WaitRevision(ctx, rev); err != nil {
		t.Fatalf("WaitRevision(%d): %v", rev, err)
	}
	if got := s.Revision(); got < rev {
		t.Fatalf("after WaitRevision(%d), Revision() = %d", rev, got)
	}
}

// TestAgentsFollowEachOther: two stores on one prefix, as two agents of a
// cluster. What one commits reaches the other's in-memory state: its
// subnets, its MAC index, the power requests and machine events it is told
// of; a token revoked on one is refused by the other.
func TestAgentsFollowEachOther(t *testing.T) {
	cli := etcdClient(t)
	prefix := freshPrefix()
	clk := &fakeClock{now: t0}
	withClock := func(o *store.Options) { o.Now = clk.Now }
	a := openAgent(t, cli, prefix, withClock)
	b := openAgent(t, cli, prefix, withClock)

	powerB := make(chan string, 16)
	b.OnPowerRequest(func(m string) { powerB <- m })
	var mu sync.Mutex
	eventsA, eventsB := map[string]int{}, map[string]int{}
	count := func(into map[string]int) func(store.Event) {
		return func(e store.Event) {
			mu.Lock()
			defer mu.Unlock()
			into[fmt.Sprintf("%s/%d", e.Machine, e.Seq)]++
		}
	}
	a.OnEvent(count(eventsA))
	b.OnEvent(count(eventsB))

	t.Run("a subnet made on A is served by B", func(t *testing.T) {
		mustSubnet(t, a, lab())
		caughtUp(t, cli, b)
		if g, err := b.DHCPOffer(bg, store.LeaseRequest{MAC: macC, Link: link}); err != nil {
			t.Fatalf("B offers on the subnet A made: %v", err)
		} else if !labNet.Contains(g.Address.IP) {
			t.Fatalf("B offered %s, outside %s", g.Address.IP, labNet)
		}
	})

	t.Run("a lease ACKed on A is known by MAC on B", func(t *testing.T) {
		got := lease(t, a, macA, link, "10.0.0.150")
		caughtUp(t, cli, b)
		g := mustOffer(t, b, store.LeaseRequest{MAC: macA, Link: link})
		if g.Address.IP != got {
			t.Fatalf("B offers %s to %s, which holds %s by A's lease", g.Address.IP, macA, got)
		}
		// An ACK on B for another address moves the lease: never two.
		mustAck(t, b, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.160")})
		caughtUp(t, cli, a)
		for name, s := range map[string]*store.Store{"A": a, "B": b} {
			var mine []netip.Addr
			for ip, mac := range leaseMap(t, s) {
				if mac == macA {
					mine = append(mine, ip)
				}
			}
			if len(mine) != 1 || mine[0] != addr("10.0.0.160") {
				t.Errorf("%s lists the leases of %s as %v, want only 10.0.0.160", name, macA, mine)
			}
		}
		if g := mustOffer(t, a, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP != addr("10.0.0.160") {
			t.Errorf("A offers %s to %s, whose lease B moved to 10.0.0.160", g.Address.IP, macA)
		}
	})

	t.Run("a token revoked on A is refused on B", func(t *testing.T) {
		_, secret, err := a.CreateUser(bg, admin, "carol", false, "")
		if err != nil {
			t.Fatal(err)
		}
		actor, ok, err := b.Authenticate(secret)
		if err != nil || !ok {
			t.Fatalf("B authenticates carol's token: %v %v", ok, err)
		}
		if _, err := a.RevokeToken(bg, admin, actor.Token); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := b.Authenticate(secret); err != nil || ok {
			t.Fatalf("B still authenticates the token A revoked: %v %v", ok, err)
		}
	})

	t.Run("a user removed on A ends the rights B holds", func(t *testing.T) {
		_, secret, err := a.CreateUser(bg, admin, "dave", false, "")
		if err != nil {
			t.Fatal(err)
		}
		caughtUp(t, cli, b)
		actor, ok, err := b.Authenticate(secret)
		if err != nil || !ok {
			t.Fatalf("B authenticates dave's token: %v %v", ok, err)
		}
		right := store.UserRight(actor)
		changed := b.AccessChanged()
		if _, err := b.CheckRight(right); err != nil {
			t.Fatalf("dave's right on B: %v", err)
		}
		if _, err := a.RemoveUser(bg, admin, "dave"); err != nil {
			t.Fatal(err)
		}
		// B learns of it from the watch, not from a commit of its own.
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatal("B's AccessChanged did not fire for the removal A committed")
		}
		if _, err := b.CheckRight(right); !store.RightLost(err) || !strings.Contains(err.Error(), "user dave has been removed") {
			t.Fatalf("dave's right on B after the removal on A: %v", err)
		}
	})

	t.Run("a power request made on A is told to B", func(t *testing.T) {
		m, err := a.CreateMachine(bg, admin, store.NewMachine{Hostname: "pw1", MACs: []string{macWeb1}, State: store.StateReady,
			Power: store.PowerParams{Driver: "fake", Address: "pw1"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.RequestPower(bg, admin, m.ID, store.PowerQuery, "test"); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(30 * time.Second)
		for {
			select {
			case id := <-powerB:
				if id == m.ID {
					return
				}
			case <-timeout:
				t.Fatalf("B was not told of the power request A made for %s", m.ID)
			}
		}
	})

	t.Run("machine events reach both, once each", func(t *testing.T) {
		caughtUp(t, cli, a)
		caughtUp(t, cli, b)
		evs, err := b.Events("pw1", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			t.Fatal("no events of pw1")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			k := fmt.Sprintf("%s/%d", e.Machine, e.Seq)
			if eventsA[k] != 1 || eventsB[k] != 1 {
				t.Errorf("event %s (%s) told %d times to A and %d to B, want once each", k, e.To, eventsA[k], eventsB[k])
			}
		}
	})
}

// TestAgentsRaceForAddresses: two agents ACKing the same addresses to
// different clients at the same time never bind one address to two MACs:
// each address goes to exactly the one whose ACK succeeded.
func TestAgentsRaceForAddresses(t *testing.T) {
	cli := etcdClient(t)
	prefix := freshPrefix()
	a := openAgent(t, cli, prefix)
	b := openAgent(t, cli, prefix)
	mustSubnet(t, a, lab())
	caughtUp(t, cli, b)
	const n = 40
	won := make([][2]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(100 + i)})
		for j, s := range []*store.Store{a, b} {
			mac := fmt.Sprintf("52:54:00:%02x:00:%02x", 0xa0+j, i)
			wg.Go(func() {
				_, err := s.DHCPAck(bg, store.LeaseRequest{MAC: mac, Link: link, IP: ip})
				if err == nil {
					won[i][j] = true
				} else if store.CodeOf(err) != store.CodeNak {
					t.Errorf("ACK of %s to %s: %v", ip, mac, err)
				}
			})
		}
	}
	wg.Wait()
	caughtUp(t, cli, a)
	caughtUp(t, cli, b)
	for name, s := range map[string]*store.Store{"A": a, "B": b} {
		leases := leaseMap(t, s)
		for i := range n {
			ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(100 + i)})
			if won[i][0] == won[i][1] {
				t.Errorf("%s: ACKs by A and B both %v", ip, won[i][0])
				continue
			}
			j := 0
			if won[i][1] {
				j = 1
			}
			if want := fmt.Sprintf("52:54:00:%02x:00:%02x", 0xa0+j, i); leases[ip] != want {
				t.Errorf("%s lists %s leased to %q, want %s (whose ACK succeeded)", name, ip, leases[ip], want)
			}
		}
	}
}

// TestQuorumLost: with two members of three stopped, a write fails with
// ErrUnavailable once CommitTimeout has passed (it does not hang); with
// them back, writes go on and nothing committed before is lost.
func TestQuorumLost(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := newClient(t, c.Endpoints())
	const timeout = 3 * time.Second
	s := openAgent(t, cli, freshPrefix(), func(o *store.Options) { o.CommitTimeout = timeout })
	mustSubnet(t, s, lab())
	mustAck(t, s, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")})

	c.Kill(1)
	c.Kill(2)
	done := make(chan error, 1)
	go func() {
		_, err := s.DHCPAck(bg, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.151")})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a write without a quorum: %v, want ErrUnavailable", err)
		}
		t.Logf("without a quorum: %v", err)
	case <-time.After(10 * timeout):
		t.Fatalf("a write without a quorum did not return within %v", 10*timeout)
	}

	c.Restart(1)
	c.Restart(2)
	// The members elect a leader once back; a write may meet the
	// election (bounded).
	var err error
	for range 10 {
		if _, err = s.DHCPAck(bg, store.LeaseRequest{MAC: macC, Link: link, IP: addr("10.0.0.152")}); !errors.Is(err, store.ErrUnavailable) {
			break
		}
	}
	if err != nil {
		t.Fatalf("a write with the quorum back: %v", err)
	}
	got := leaseMap(t, s)
	if got[addr("10.0.0.150")] != macA || got[addr("10.0.0.152")] != macC {
		t.Errorf("leases after the quorum came back: %v, want 10.0.0.150 for %s and 10.0.0.152 for %s", got, macA, macC)
	}
}

// deafEngine is an etcd engine whose watch the test can stop from
// delivering (the agent stalls: paused, partitioned, slow), then send back
// to the first revision it missed, which the test has compacted away
// meanwhile: etcd then ends the watch with ErrCompacted, as it does for an
// agent that was away too long.
type deafEngine struct {
	*etcdkv.DB
	mu     sync.Mutex
	deaf   bool
	missed int64 // the first revision not delivered
	resume chan struct{}
}

func (w *deafEngine) setDeaf() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deaf = true
}

func (w *deafEngine) Watch(ctx context.Context, from int64, fn func(int64, []etcdkv.Change) error) error {
	for {
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			errc <- w.DB.Watch(wctx, from, func(rev int64, ch []etcdkv.Change) error {
				w.mu.Lock()
				deaf := w.deaf
				if deaf && w.missed == 0 {
					w.missed = rev
				}
				w.mu.Unlock()
				if deaf {
					return nil
				}
				return fn(rev, ch)
			})
		}()
		select {
		case err := <-errc:
			cancel()
			return err
		case <-w.resume:
			cancel()
			<-errc
			w.mu.Lock()
			from, w.deaf = w.missed, false
			w.mu.Unlock()
		}
	}
}

// TestReloadAfterCompaction: an agent whose watch fell behind a compaction
// (etcd no longer has the changes it missed) loads its state again at a new
// revision and serves what the other agent did meanwhile: a subnet it never
// saw made, and a lease it never saw acknowledged.
func TestReloadAfterCompaction(t *testing.T) {
	cli := etcdClient(t)
	prefix := freshPrefix()
	clk := &fakeClock{now: t0}
	withClock := func(o *store.Options) { o.Now = clk.Now }
	a := openAgent(t, cli, prefix, withClock)
	w := &deafEngine{DB: etcdkv.New(cli, etcdkv.Options{Prefix: prefix}), resume: make(chan struct{})}
	b := openAgentOn(t, w, withClock)
	mustSubnet(t, a, lab())
	caughtUp(t, cli, b)

	w.setDeaf()
	mustSubnet(t, a, lab2())
	got := lease(t, a, macA, link, "10.0.0.150")
	if _, err := b.DHCPOffer(bg, store.LeaseRequest{MAC: macB, Link: link2}); err == nil {
		t.Fatal("B offered on a subnet its watch never delivered: the test's deafness does not hold")
	}
	if _, err := cli.Compact(bg, clusterRev(t, cli)); err != nil {
		t.Fatal(err)
	}
	w.resume <- struct{}{}

	caughtUp(t, cli, b)
	if g, err := b.DHCPOffer(bg, store.LeaseRequest{MAC: macB, Link: link2}); err != nil {
		t.Fatalf("B after the reload, on the subnet A made while B was away: %v", err)
	} else if !lab2Net.Contains(g.Address.IP) {
		t.Fatalf("B offered %s, outside %s", g.Address.IP, lab2Net)
	}
	if g := mustOffer(t, b, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP != got {
		t.Fatalf("B offers %s to %s after the reload, want its lease %s", g.Address.IP, macA, got)
	}
}

// TestRevisionWaitsForTheMirror: a store on etcd reports a revision only
// once its reads show that revision's changes. B's engine holds a revision
// back before applying it (to its mirror of the address records, then to
// the store): while A's lease is held back, B's Revision stays below it
// and WaitRevision for it does not return; let through, B offers A's
// client the address A leased it.
func TestRevisionWaitsForTheMirror(t *testing.T) {
	cli := etcdClient(t)
	prefix := freshPrefix()
	clk := &fakeClock{now: t0}
	withClock := func(o *store.Options) { o.Now = clk.Now }
	a := openAgent(t, cli, prefix, withClock)
	var hold atomic.Bool
	held := make(chan int64)
	release := make(chan struct{})
	ctx := t.Context() // done before the cleanups close the stores
	b := openAgentOn(t, etcdkv.New(cli, etcdkv.Options{Prefix: prefix, BeforeApply: func(rev int64) {
		if !hold.Load() {
			return
		}
		select {
		case held <- rev:
		case <-ctx.Done():
			return
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}}), withClock)
	mustSubnet(t, a, lab())
	caughtUp(t, cli, b)

	hold.Store(true)
	got := lease(t, a, macA, link, "10.0.0.150")
	rev := clusterRev(t, cli)
	var first int64
	select {
	case first = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("B's watch was not handed A's lease within 30s")
	}
	hold.Store(false)
	if first > rev {
		t.Fatalf("B held back revision %d, after the cluster's %d", first, rev)
	}
	if g := mustOffer(t, b, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP == got {
		t.Fatalf("B offers %s its lease %s while the revision that made it is held back: the test's hold does not hold", macA, got)
	}
	if r := b.Revision(); r >= first {
		t.Errorf("B reports revision %d while revision %d is held back before its mirror applied it", r, first)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := b.WaitRevision(wctx, rev)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRevision(%d) with revision %d held back before B's mirror: %v, want it to wait (until its deadline)", rev, first, err)
	}
	close(release)

	caughtUp(t, cli, b)
	if g := mustOffer(t, b, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP != got {
		t.Fatalf("B, caught up, offers %s to %s, which holds %s by A's lease", g.Address.IP, macA, got)
	}
}

// TestAgentsAckOneClientAtOnce: two agents acknowledge different
// addresses for one client at once (both transactions read before either
// commits: storetest.Barrier): exactly one is granted, the other is
// refused with CodeNak, and both agents list only the granted lease. Half
// the clients held a lease before, which both acknowledgements move. An
// acknowledgement that comes after the other's commit, not beside it,
// still moves the lease.
func TestAgentsAckOneClientAtOnce(t *testing.T) {
	cli := etcdClient(t)
	prefix := freshPrefix()
	bar := storetest.NewBarrier(t, 2)
	agents := [2]*store.Store{
		openAgentOn(t, bar.Engine(etcdkv.New(cli, etcdkv.Options{Prefix: prefix}))),
		openAgentOn(t, bar.Engine(etcdkv.New(cli, etcdkv.Options{Prefix: prefix}))),
	}
	mustSubnet(t, agents[0], lab())
	caughtUp(t, cli, agents[1])
	wins := [2]int{}
	for i := range 8 {
		mac := fmt.Sprintf("52:54:00:c0:00:%02x", i)
		ips := [2]netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(100 + 3*i)}), netip.AddrFrom4([4]byte{10, 0, 0, byte(101 + 3*i)})}
		if i%2 == 1 {
			mustAck(t, agents[0], store.LeaseRequest{MAC: mac, Link: link, IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(102 + 3*i)})})
			caughtUp(t, cli, agents[1])
		}
		bar.Arm()
		var errs [2]error
		var wg sync.WaitGroup
		for j, s := range agents {
			wg.Go(func() {
				_, errs[j] = s.DHCPAck(bg, store.LeaseRequest{MAC: mac, Link: link, IP: ips[j]})
			})
		}
		wg.Wait()
		if !bar.Met() {
			t.Fatalf("%s: the two acknowledgements did not both read before committing: the test's barrier does not hold", mac)
		}
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("%s: acknowledgements of %s on A and %s on B at once: %v and %v, want exactly one granted", mac, ips[0], ips[1], errs[0], errs[1])
		}
		won := 0
		if errs[1] == nil {
			won = 1
		}
		wins[won]++
		lost := errs[1-won]
		if store.CodeOf(lost) != store.CodeNak || !strings.Contains(lost.Error(), "another acknowledgement") {
			t.Errorf("%s: the acknowledgement that lost: %v (code %q), want CodeNak naming the other acknowledgement", mac, lost, store.CodeOf(lost))
		}
		t.Logf("%s: %s won, the other was refused: %v", mac, ips[won], lost)
		for j, s := range agents {
			caughtUp(t, cli, s)
			var mine []netip.Addr
			for ip, m := range leaseMap(t, s) {
				if m == mac {
					mine = append(mine, ip)
				}
			}
			if len(mine) != 1 || mine[0] != ips[won] {
				t.Errorf("%s: agent %d lists its leases as %v, want only %s", mac, j, mine, ips[won])
			}
		}
		// One after the other, not at once: the later moves the lease.
		g := mustAck(t, agents[1-won], store.LeaseRequest{MAC: mac, Link: link, IP: ips[1-won]})
		if g.Address.IP != ips[1-won] {
			t.Errorf("%s: a later acknowledgement of %s granted %s", mac, ips[1-won], g.Address.IP)
		}
	}
	t.Logf("won by A %d times, by B %d times", wins[0], wins[1])
}

// TestFencedSharedCommit: a paused leader resumes with acknowledgements
// queued under its fence, which has moved meanwhile: another agent leads
// and has leased addresses (among them some the queued requests name),
// and the paused agent's mirror is still behind. The acknowledgements
// share commits, and every one of them is refused with ErrFenced: none is
// granted, none is written.
func TestFencedSharedCommit(t *testing.T) {
	for round := range 4 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { fencedSharedCommit(t, round) })
	}
}

func fencedSharedCommit(t *testing.T, round int) {
	cli := etcdClient(t)
	prefix := freshPrefix()
	var hold atomic.Bool
	release := make(chan struct{})
	ctx := t.Context()
	a := openAgentOn(t, etcdkv.New(cli, etcdkv.Options{Prefix: prefix, BeforeApply: func(rev int64) {
		if !hold.Load() {
			return
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}}))
	b := openAgent(t, cli, prefix)
	mustSubnet(t, a, lab())
	const leader = "/election/dhcp/shared-commit"
	put, err := cli.Put(bg, leader, "agent-a")
	if err != nil {
		t.Fatal(err)
	}
	fctx := kv.WithFence(bg, kv.Fence{Key: leader, CreateRevision: put.Header.Revision})
	mustAck(t, a, store.LeaseRequest{MAC: "52:54:00:f0:00:ff", Link: link, IP: addr("10.0.0.199")})
	caughtUp(t, cli, b)
	caughtUp(t, cli, a)
	hold.Store(true) // a is paused: it learns nothing from here on
	if _, err := cli.Delete(bg, leader); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(bg, leader, "agent-b"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(120 + i)}) }
	mac := func(i int) string { return fmt.Sprintf("52:54:00:f0:00:%02x", i) }
	// The new leader binds some of those addresses to other clients, and
	// one of the queued clients to another address.
	for i := range n {
		switch (i + round) % 4 {
		case 0:
			mustAck(t, b, store.LeaseRequest{MAC: fmt.Sprintf("52:54:00:f1:00:%02x", i), Link: link, IP: ip(i)})
		case 1:
			mustAck(t, b, store.LeaseRequest{MAC: mac(i), Link: link, IP: ip(i + 40)})
		}
	}
	errs := make(chan error, n)
	for i := range n {
		req := store.LeaseRequest{MAC: mac(i), Link: link, IP: ip(i)}
		if err := a.DHCPAckAsync(fctx, req, func(g store.Grant, err error) {
			if err == nil {
				err = fmt.Errorf("granted %s to %s", g.Address.IP, req.MAC)
			}
			errs <- err
		}); err != nil {
			t.Fatal(err)
		}
		if i == n/2 && round%2 == 1 {
			close(release)
		}
	}
	for range n {
		if err := <-errs; !errors.Is(err, store.ErrFenced) {
			t.Errorf("an acknowledgement under a moved fence: %v, want ErrFenced", err)
		}
	}
	if round%2 == 0 {
		close(release)
	}
	caughtUp(t, cli, a)
	for ip, m := range leaseMap(t, a) {
		if strings.HasPrefix(m, "52:54:00:f0:00:0") && ip != addr("10.0.0.199") {
			if i := int(ip.As4()[3]) - 160; i < 0 || m != mac(i) {
				t.Errorf("%s holds %s after the fenced acknowledgements", m, ip)
			}
		}
	}
}
