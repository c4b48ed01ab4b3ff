package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

func client(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestCluster: the Go client rackd links (v3.7) works against the etcd
// that Debian ships (3.4) for what a store backend and leader elections
// need: transactions comparing revisions, elections on a leased session;
// the cluster keeps serving with one member dead, refuses writes without
// a quorum, and serves again when the quorum is back, with nothing lost.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	c := Start(t, 3)
	cli := client(t, c.Endpoints())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// A write guarded by the revision it read: the second writer, holding
	// the same revision, is refused.
	put, err := cli.Put(ctx, "/t/lease/10.0.0.5", "aa:bb")
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	rev := put.Header.Revision
	swap := func(val string) bool {
		t.Helper()
		r, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision("/t/lease/10.0.0.5"), "=", rev)).
			Then(clientv3.OpPut("/t/lease/10.0.0.5", val)).
			Commit()
		if err != nil {
			t.Fatalf("txn: %v", err)
		}
		return r.Succeeded
	}
	if !swap("cc:dd") {
		t.Fatal("the first transaction at the revision it read was refused")
	}
	if swap("ee:ff") {
		t.Fatal("a second transaction at a stale revision succeeded")
	}
	// A key that must not exist yet.
	r, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision("/t/lease/10.0.0.5"), "=", 0)).
		Then(clientv3.OpPut("/t/lease/10.0.0.5", "11:22")).
		Commit()
	if err != nil || r.Succeeded {
		t.Fatalf("create of an existing key: succeeded=%v err=%v", r != nil && r.Succeeded, err)
	}

	// An election on a leased session: one leader, and its key is the
	// fence a leader's writes compare.
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	e := concurrency.NewElection(sess, "/t/elect/subnet-1")
	if err := e.Campaign(ctx, "agent-a"); err != nil {
		t.Fatalf("campaign: %v", err)
	}
	leader, err := e.Leader(ctx)
	if err != nil || string(leader.Kvs[0].Value) != "agent-a" {
		t.Fatalf("leader: %v %v", leader, err)
	}
	fenced, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())).
		Then(clientv3.OpPut("/t/fenced", "1")).
		Commit()
	if err != nil || !fenced.Succeeded {
		t.Fatalf("the leader's fenced write: %v %v", fenced, err)
	}

	// One member dead: writes go on. A write caught in the election that
	// follows a dead leader fails with etcd's "request timed out, possibly
	// due to previous leader failure", which etcd's clients are to retry:
	// each write gets 30 s to succeed.
	c.Kill(0)
	for i := range 20 {
		key := fmt.Sprintf("/t/after-kill/%d", i)
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		for {
			_, err = cli.Put(wctx, key, "x")
			if err == nil || wctx.Err() != nil {
				break
			}
			t.Logf("put %d with one member dead, again: %v", i, err)
			time.Sleep(200 * time.Millisecond)
		}
		wcancel()
		if err != nil {
			t.Fatalf("put %d with one member dead, for 30s: %v", i, err)
		}
	}
	// Two dead: no quorum, a write fails (within its deadline).
	c.Kill(1)
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = cli.Put(wctx, "/t/no-quorum", "x")
	wcancel()
	if err == nil {
		t.Fatal("a write succeeded with two of three members dead")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("write without a quorum: %v", err)
	}
	// The quorum back: writes again, and nothing written before is lost.
	c.Restart(0)
	c.Restart(1)
	wctx, wcancel = context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	for {
		if _, err = cli.Put(wctx, "/t/quorum-back", "x"); err == nil {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("no write within 30s of the quorum coming back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := cli.Get(ctx, "/t/after-kill/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	if got.Count != 20 {
		t.Errorf("%d of the 20 writes made with one member dead are there after the restarts", got.Count)
	}
	lease, err := cli.Get(ctx, "/t/lease/10.0.0.5")
	if err != nil || len(lease.Kvs) != 1 || string(lease.Kvs[0].Value) != "cc:dd" {
		t.Errorf("the guarded write after the restarts: %v %v", lease, err)
	}
}

// TestPauseLosesLeadership: a paused member's session expires; another
// campaigner takes the election, and the old leader's fenced write is
// refused when it comes back.
func TestPauseLosesLeadership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	c := Start(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Each agent talks to its own member, as agents beside their
	// appliance's member would.
	a, b := client(t, c.Endpoints()[:1]), client(t, c.Endpoints()[1:2])
	sa, err := concurrency.NewSession(a, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	ea := concurrency.NewElection(sa, "/t/elect/subnet-1")
	if err := ea.Campaign(ctx, "agent-a"); err != nil {
		t.Fatal(err)
	}
	// Member 0 (agent a's only endpoint) pauses: a's keep-alives stop.
	c.Pause(0)
	sb, err := concurrency.NewSession(b, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	eb := concurrency.NewElection(sb, "/t/elect/subnet-1")
	start := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	if err := eb.Campaign(cctx, "agent-b"); err != nil {
		t.Fatalf("b's campaign with a's member paused: %v", err)
	}
	t.Logf("b leads %.1fs after a's member paused", time.Since(start).Seconds())
	c.Resume(0)
	// a's write fenced on its old leadership is refused.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	var r *clientv3.TxnResponse
	for {
		r, err = a.Txn(wctx).
			If(clientv3.Compare(clientv3.CreateRevision(ea.Key()), "=", ea.Rev())).
			Then(clientv3.OpPut("/t/ack", "from-a")).
			Commit()
		if err == nil || wctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("a's fenced write after the pause: %v", err)
	}
	if r.Succeeded {
		t.Fatal("the old leader's fenced write succeeded after another took over")
	}
}
