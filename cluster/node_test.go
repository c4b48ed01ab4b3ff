package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/cluster"
	"rackd/internal/etcdtest"
)

// The agents' default: a member paused while it leads etcd costs an etcd
// election (1-2 s here, more under load), which the other nodes'
// keepalives must outlast, or they lose their own sessions too (3 s did
// not, on two loaded cores).
const ttl = cluster.DefaultSessionTTL

// failover bounds the test's waits for a leadership to move to another
// node. Quiet, that takes the lease's TTL and about 2 s for etcd to expire
// it and the others to see it; on a loaded machine etcd's own election and
// lease expiry take several times that (a clean-clone make test saw
// heartbeats overdue by seconds and no leader 7 s after a member paused).
// The bound is a liveness bound, not the product's figure: how fast a
// failover is, is measured by make bench-etcd (failover_s).
const failover = 60 * time.Second

func client(t *testing.T, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		// A paused member must not hold a node's requests for long: the
		// keepalive finds it dead.
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// node is a running Node and how to stop it.
type node struct {
	*cluster.Node
	stop func()

	mu    sync.Mutex
	ready []cluster.Leadership
}

func startNode(t *testing.T, cli *clientv3.Client, name, prefix string, subnets []netip.Prefix) *node {
	t.Helper()
	nd := &node{}
	n, err := cluster.New(cli, cluster.Config{Name: name, AdvertiseURL: "http://" + name + ":5240", Version: "test",
		Prefix: prefix, SessionTTL: ttl, PowerShards: 4, Power: true,
		Ready: func(ctx context.Context, l cluster.Leadership) error {
			nd.mu.Lock()
			nd.ready = append(nd.ready, l)
			nd.mu.Unlock()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	n.SetSubnets(subnets)
	nd.Node = n
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.Run(ctx); err != nil {
			t.Errorf("%s: Run: %v", name, err)
		}
	}()
	var once sync.Once
	nd.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(nd.stop)
	return nd
}

// leaders returns, for every election, which of nodes lead it.
func leaders(nodes []*node) map[string][]int {
	out := map[string][]int{}
	for i, n := range nodes {
		if n == nil {
			continue
		}
		for _, l := range n.Leading() {
			k := string(l.Kind) + " " + l.Key
			out[k] = append(out[k], i)
		}
	}
	return out
}

// waitOneLeader waits (up to within) until each of elections has exactly
// one leader among nodes, and returns it.
func waitOneLeader(t *testing.T, nodes []*node, elections []string, within time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ls := leaders(nodes)
		got := map[string]int{}
		for _, e := range elections {
			if len(ls[e]) == 1 {
				got[e] = ls[e][0]
			}
		}
		if len(got) == len(elections) {
			for e, who := range ls {
				if len(who) > 1 {
					t.Fatalf("%s has %d leaders: nodes %v", e, len(who), who)
				}
			}
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %v, not one leader each: %v", within, ls)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memberID is the ID of the etcd member at url.
func memberID(t *testing.T, cli *clientv3.Client, url string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, url)
	if err != nil {
		t.Fatalf("status of etcd member %s: %v", url, err)
	}
	return st.Header.MemberId
}

// waitEtcdLeader waits until a member other than the paused one (index
// paused, ID pausedID) reports a leader that is not the paused member.
func waitEtcdLeader(t *testing.T, cli *clientv3.Client, c *etcdtest.Cluster, paused int, pausedID uint64) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		for i := range len(c.Endpoints()) {
			if i == paused {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, c.Member(i).ClientURL)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader != pausedID {
				t.Logf("etcd has a leader %v after its member %d paused", time.Since(start).Round(time.Millisecond), paused)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd elected no leader among the members left within 30s of pausing member %d", paused)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holds reports whether l's fence holds: a write compared on it commits.
func holds(t *testing.T, cli *clientv3.Client, l cluster.Leadership) bool {
	t.Helper()
	var err error
	// The client may be on a paused member: another try goes to another.
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var r *clientv3.TxnResponse
		r, err = cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(l.LeaderKey), "=", l.Revision)).
			Then(clientv3.OpPut("/test/fenced-write", l.LeaderKey)).
			Commit()
		cancel()
		if err == nil {
			return r.Succeeded
		}
	}
	t.Fatalf("fenced write: %v", err)
	return false
}

// TestLeadership: three nodes on a 3-member etcd, each talking to its own
// member, campaign for two subnets and four power shards: each has one
// leader, and the leaderships even out among the nodes. A leader that stops hands over within the TTL and 2 s, its fence
// stops holding; a leader whose etcd member is paused (as a paused or
// partitioned agent is: it cannot keep its lease) loses its leaderships to
// the others within that bound, its fences stop holding, and once its
// member is back it joins again.
func TestLeadership(t *testing.T) {
	c := etcdtest.Start(t, 3)
	check := client(t, c.Endpoints()...)
	const prefix = "/rackd/"
	subnets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.1.0/24")}
	elections := []string{"dhcp 10.0.0.0/24", "dhcp 10.0.1.0/24"}
	for i := range 4 {
		elections = append(elections, "power "+strconv.Itoa(i))
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = startNode(t, client(t, c.Member(i).ClientURL), fmt.Sprintf("agent%d", i), prefix, subnets)
	}
	waitOneLeader(t, nodes, elections, 30*time.Second)
	// The first node to start won everything; the others take their
	// share over: at most one subnet and two shards each.
	deadline := time.Now().Add(60 * time.Second)
	for {
		even := true
		for _, n := range nodes {
			count := map[cluster.Kind]int{}
			for _, l := range n.Leading() {
				count[l.Kind]++
			}
			even = even && count[cluster.KindDHCP] <= 1 && count[cluster.KindPower] <= 2
		}
		if even {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaderships not evened out: %v", leaders(nodes))
		}
		time.Sleep(100 * time.Millisecond)
	}
	lead := waitOneLeader(t, nodes, elections, failover)

	// Status says the same, and every member answers.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A handover in flight shows one candidate fewer for a moment: look
	// again until it settles.
	var st cluster.State
	for range 50 {
		var err error
		if st, err = cluster.Status(ctx, check, prefix); err != nil {
			t.Fatal(err)
		}
		settled := true
		for _, l := range append(append([]cluster.Leader{}, st.DHCP...), st.Power...) {
			settled = settled && l.Candidates == 3
		}
		if settled {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(st.Agents) != 3 || len(st.DHCP) != 2 || len(st.Power) != 4 || len(st.Endpoints) != 3 {
		t.Fatalf("status: %d agents, %d subnets, %d shards, %d endpoints; want 3, 2, 4, 3: %+v", len(st.Agents), len(st.DHCP), len(st.Power), len(st.Endpoints), st)
	}
	for _, l := range append(append([]cluster.Leader{}, st.DHCP...), st.Power...) {
		kind := "dhcp "
		if len(l.Key) < 3 {
			kind = "power "
		}
		if want := nodes[lead[kind+l.Key]].Name(); l.Agent != want || l.Candidates != 3 {
			t.Errorf("status: %s%s led by %q among %d; the nodes say %q among 3", kind, l.Key, l.Agent, l.Candidates, want)
		}
	}
	etcdLeaders := 0
	for _, ep := range st.Endpoints {
		if ep.Err != "" || ep.RaftIndex == 0 || ep.DBSize == 0 {
			t.Errorf("status of endpoint %s: %+v", ep.URL, ep)
		}
		if ep.Leader {
			etcdLeaders++
		}
	}
	if etcdLeaders != 1 {
		t.Errorf("status: %d etcd leaders among the endpoints, want 1: %+v", etcdLeaders, st.Endpoints)
	}

	// Every leadership was made ready before it was held.
	for i, n := range nodes {
		for _, l := range n.Leading() {
			n.mu.Lock()
			seen := false
			for _, r := range n.ready {
				seen = seen || r == l
			}
			n.mu.Unlock()
			if !seen {
				t.Errorf("node %d holds %+v without Ready", i, l)
			}
		}
	}

	// The leader of the first subnet stops: another leads, the old fence
	// no longer holds.
	first := lead["dhcp 10.0.0.0/24"]
	old, ok := nodes[first].DHCP(subnets[0])
	if !ok || !old.Fenced() || !holds(t, check, old) {
		t.Fatalf("node %d leads 10.0.0.0/24 (%v) but its fence %+v does not hold", first, ok, old)
	}
	nodes[first].stop()
	stopped := nodes[first]
	nodes[first] = nil
	lead = waitOneLeader(t, nodes, elections, failover)
	if holds(t, check, old) {
		t.Fatalf("the fence of a stopped leader still holds: %+v", old)
	}
	if _, ok := stopped.DHCP(subnets[0]); ok {
		t.Fatal("a stopped node still says it leads")
	}

	// The new leader of the second subnet loses its etcd member: the
	// other node leads everything within the bound.
	second := lead["dhcp 10.0.1.0/24"]
	old, _ = nodes[second].DHCP(subnets[1])
	pausedID := memberID(t, check, c.Member(second).ClientURL)
	c.Pause(second)
	paused := nodes[second]
	nodes[second] = nil
	// If the paused member led etcd, nothing commits until the others
	// elect a leader (their election timeout, longer on a loaded
	// machine), and the new leader renews every lease by its TTL: the
	// bound starts when etcd has a leader again.
	waitEtcdLeader(t, check, c, second, pausedID)
	// The remaining node's elections only: the paused one cannot say.
	lead = waitOneLeader(t, nodes, elections, failover)
	if holds(t, check, old) {
		t.Fatalf("the fence of a leader that lost its session still holds: %+v", old)
	}
	c.Resume(second)
	// Back: it sees that it lost its session, drops what it held, joins
	// again and waits as a candidate.
	nodes[second] = paused
	deadline = time.Now().Add(30 * time.Second)
	for {
		st, err := cluster.Status(ctx, check, prefix)
		if err != nil {
			t.Fatal(err)
		}
		ls := leaders(nodes)
		dup := false
		for _, who := range ls {
			dup = dup || len(who) > 1
		}
		if len(st.Agents) == 2 && st.DHCP[0].Candidates == 2 && st.DHCP[1].Candidates == 2 && !dup {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed node did not rejoin as a candidate: %+v; nodes lead %v", st, ls)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitOneLeader(t, nodes, elections, failover)
}

// TestNilNode: an agent alone on its store leads everything, unfenced.
func TestNilNode(t *testing.T) {
	var n *cluster.Node
	l, ok := n.DHCP(netip.MustParsePrefix("10.0.0.7/24"))
	if !ok || l.Fenced() || l.Key != "10.0.0.0/24" {
		t.Fatalf("nil node: DHCP = %+v, %v", l, ok)
	}
	if l, ok := n.Power("m-1"); !ok || l.Fenced() {
		t.Fatalf("nil node: Power = %+v, %v", l, ok)
	}
}

// TestShard: machines spread over the shards, and a machine's shard
// depends only on its ID.
func TestShard(t *testing.T) {
	seen := map[int]int{}
	for i := range 1000 {
		s := cluster.Shard(fmt.Sprintf("m-%d", i), 16)
		if s < 0 || s >= 16 {
			t.Fatalf("shard %d of 16", s)
		}
		seen[s]++
	}
	if len(seen) != 16 {
		t.Fatalf("1000 machines over %d of 16 shards", len(seen))
	}
	if cluster.Shard("m-1", 16) != cluster.Shard("m-1", 16) || cluster.Shard("x", 1) != 0 {
		t.Fatal("shard not a function of the ID")
	}
}
