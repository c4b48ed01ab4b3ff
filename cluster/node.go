// Package cluster decides, among several rackd agents sharing one store on
// etcd, who does what only one may do at a time: answer a subnet's DHCP,
// drive a shard of the BMCs.
//
// A Node is one agent's membership: an etcd session (a lease kept alive,
// TTL Config.SessionTTL), the agent's registration on that lease
// (<prefix>cluster/agents/<name>), and one election (concurrency.Election)
// per subnet (<prefix>cluster/elect/dhcp/<subnet, / as _>) and per power
// shard (<prefix>cluster/elect/power/<shard>). A machine's shard is
// fnv32a(machine ID) mod Config.PowerShards.
//
// A leadership won is the agent's key in the election and that key's
// create revision: the fence (kv.Fence) its writes carry, which etcd checks
// in the write's own transaction, so that a leader that lost its
// leadership without knowing it (paused, partitioned) cannot commit. A
// leadership is lost when the session ends (the lease expired or was
// revoked) or the key goes; a lost session is made again and every
// campaign starts over on the new one.
//
// A nil *Node stands for an agent alone on its store (a bbolt file): it
// leads everything, and its leaderships carry no fence.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Defaults of Config.
const (
	DefaultSessionTTL  = 5 * time.Second
	DefaultPowerShards = 16
)

// Kind is what a leadership is over.
type Kind string

// The kinds of leadership.
const (
	// KindDHCP is a subnet's DHCP: its key is the subnet, "10.0.0.0/24".
	KindDHCP Kind = "dhcp"
	// KindPower is a shard of the machines' BMCs: its key is the shard's
	// number, "0" to PowerShards-1.
	KindPower Kind = "power"
)

// Config configures a Node.
type Config struct {
	// Name is the agent's name in the cluster (default: the host's name).
	// Two agents must not share one.
	Name string
	// AdvertiseURL is the agent's API URL as its peers reach it.
	AdvertiseURL string
	// Version is the agent's build, shown by Status.
	Version string
	// Prefix is rackd's key prefix in etcd ("/rackd/" when empty); the
	// cluster's keys are under <Prefix>cluster/.
	Prefix string
	// SessionTTL is the session lease's TTL, in whole seconds (default 5
	// s): how long a dead agent keeps its leaderships.
	SessionTTL time.Duration
	// PowerShards is how many shards the BMCs are spread over (default
	// 16). Every agent of a cluster must use the same number.
	PowerShards int
	// Power says the node campaigns for every power shard (an agent that
	// drives BMCs).
	Power bool
	// Ready is called when a leadership is won, before it counts as held:
	// the agent makes its store catch up with the leadership's revision
	// there, so that it acts on everything its predecessor committed. An
	// error gives the leadership up, and the node campaigns again. nil:
	// held at once.
	Ready func(ctx context.Context, l Leadership) error
	// OnChange is told of every leadership held (after Ready) or lost. It
	// is called from the campaign's goroutine and must not block.
	OnChange func(l Leadership, held bool)
	// Log is where the node says what it won and lost (nil: nowhere).
	Log *slog.Logger
	// Registerer takes the node's metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// Leadership is one election this agent leads.
type Leadership struct {
	Kind Kind
	// Key is the subnet ("10.0.0.0/24") or the shard ("7").
	Key string
	// LeaderKey is the etcd key of this agent's campaign, and Revision its
	// create revision: while that key exists at that revision, nobody
	// else leads. Both empty for a nil Node's leaderships (no fence).
	LeaderKey string
	Revision  int64
}

// Fenced reports whether the leadership has a fence (a cluster's, not a
// lone agent's).
func (l Leadership) Fenced() bool { return l.LeaderKey != "" }

// Node is one agent's membership of the cluster. Create it with New, run
// it with Run.
type Node struct {
	cli *clientv3.Client
	cfg Config
	log *slog.Logger
	m   *metrics

	mu      sync.Mutex
	held    map[string]Leadership    // by elections' names (name)
	handoff map[string]chan struct{} // closed: give that leadership up (balance)
	subnets []netip.Prefix           // the DHCP campaigns wanted
	changed chan struct{}            // a 1-slot kick: subnets changed
	started time.Time
}

// New returns a node on cli; Run starts it.
func New(cli *clientv3.Client, cfg Config) (*Node, error) {
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("cluster: no name given and no host name: %w", err)
		}
		cfg.Name = h
	}
	if strings.ContainsAny(cfg.Name, "/ ") {
		return nil, fmt.Errorf("cluster: name %q: no slash or space", cfg.Name)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/rackd/"
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionTTL < time.Second {
		return nil, fmt.Errorf("cluster: session TTL %v: at least 1s (etcd leases count whole seconds)", cfg.SessionTTL)
	}
	if cfg.PowerShards <= 0 {
		cfg.PowerShards = DefaultPowerShards
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("cluster: metrics: %w", err)
	}
	return &Node{cli: cli, cfg: cfg, log: log, m: m, held: map[string]Leadership{}, handoff: map[string]chan struct{}{},
		changed: make(chan struct{}, 1), started: time.Now().UTC()}, nil
}

// Name is the agent's name in the cluster ("" for a nil Node).
func (n *Node) Name() string {
	if n == nil {
		return ""
	}
	return n.cfg.Name
}

// Shards is the number of power shards (1 for a nil Node).
func (n *Node) Shards() int {
	if n == nil {
		return 1
	}
	return n.cfg.PowerShards
}

// Shard is the power shard of machine id among shards: fnv32a of the ID,
// mod shards.
func Shard(id string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}

// SetSubnets sets the subnets whose DHCP the node campaigns for: a
// campaign starts for each new one and a leadership of one no longer
// named is given up.
func (n *Node) SetSubnets(subnets []netip.Prefix) {
	if n == nil {
		return
	}
	s := slices.Clone(subnets)
	for i := range s {
		s[i] = s[i].Masked()
	}
	slices.SortFunc(s, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	s = slices.Compact(s)
	n.mu.Lock()
	same := slices.Equal(s, n.subnets)
	n.subnets = s
	n.mu.Unlock()
	if !same {
		select {
		case n.changed <- struct{}{}:
		default:
		}
	}
}

// DHCP returns the leadership of subnet's DHCP, and whether this agent
// holds it. A nil Node holds every one, without a fence.
func (n *Node) DHCP(subnet netip.Prefix) (Leadership, bool) {
	if n == nil {
		return Leadership{Kind: KindDHCP, Key: subnet.Masked().String()}, true
	}
	return n.lookup(KindDHCP, subnet.Masked().String())
}

// Power returns the leadership of machine id's power shard, and whether
// this agent holds it. A nil Node holds every one, without a fence.
func (n *Node) Power(id string) (Leadership, bool) {
	if n == nil {
		return Leadership{Kind: KindPower, Key: "0"}, true
	}
	return n.lookup(KindPower, strconv.Itoa(Shard(id, n.cfg.PowerShards)))
}

func (n *Node) lookup(k Kind, key string) (Leadership, bool) {
	n.mu.Lock()
	l, ok := n.held[electionName(k, key)]
	n.mu.Unlock()
	return l, ok
}

// Leading lists the leaderships held, by kind and key.
func (n *Node) Leading() []Leadership {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	out := make([]Leadership, 0, len(n.held))
	for _, l := range n.held {
		out = append(out, l)
	}
	n.mu.Unlock()
	slices.SortFunc(out, func(a, b Leadership) int {
		if c := strings.Compare(string(a.Kind), string(b.Kind)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// CountFenced counts a write of kind refused because its leadership was
// lost (kv.ErrFenced).
func (n *Node) CountFenced(k Kind) {
	if n != nil {
		n.m.fenced.WithLabelValues(string(k)).Inc()
	}
}

// electionName is an election's name: "dhcp/10.0.0.0_24", "power/7".
func electionName(k Kind, key string) string {
	return string(k) + "/" + strings.ReplaceAll(key, "/", "_")
}

// keyOfName is the key of an election's name (electionName's inverse for
// the key part; subnets get their slash back).
func keyOfName(k Kind, name string) string {
	if k == KindDHCP {
		return strings.ReplaceAll(name, "_", "/")
	}
	return name
}

// AgentInfo is an agent's registration, on its session's lease: it is
// there while the agent is alive.
type AgentInfo struct {
	Name         string    `json:"name"`
	AdvertiseURL string    `json:"advertise_url"`
	Version      string    `json:"version"`
	Started      time.Time `json:"started"`
}

func agentsPrefix(prefix string) string { return prefix + "cluster/agents/" }
func electPrefix(prefix string) string  { return prefix + "cluster/elect/" }

// Run keeps the node in the cluster until ctx ends: it makes a session,
// registers the agent and campaigns; when the session is lost it makes
// another. At the end it revokes the session, so the leaderships pass on
// at once rather than after the TTL. It returns nil when ctx ends.
func (n *Node) Run(ctx context.Context) error {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 && !sleep(ctx, min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second)) {
			break
		}
		// The session's own context outlives ctx by the revoke at the
		// end (a session revoked with a cancelled context is not).
		sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
		s, err := n.newSession(ctx, sctx)
		if err != nil {
			scancel()
			if ctx.Err() == nil {
				n.log.Warn("cluster: no session; trying again", "err", err)
			}
			continue
		}
		attempt = 0
		n.runSession(ctx, s)
		if ctx.Err() != nil {
			// Close revokes within the TTL at most.
			if err := s.Close(); err != nil {
				n.log.Warn("cluster: revoke the session (its leaderships pass on when it expires)", "err", err)
			}
			scancel()
			break
		}
		scancel()
		n.m.sessions.Inc()
		n.log.Warn("cluster: session lost; leaderships given up, joining again", "name", n.cfg.Name)
	}
	return nil
}

// newSession grants the lease (bounded by the TTL, so a cluster without a
// quorum is tried again rather than waited on) and registers the agent on
// it.
func (n *Node) newSession(ctx, sctx context.Context) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, n.cfg.SessionTTL)
	defer cancel()
	ttl := int((n.cfg.SessionTTL + time.Second - 1) / time.Second)
	lease, err := n.cli.Grant(gctx, int64(ttl))
	if err != nil {
		return nil, fmt.Errorf("grant a %ds lease: %w", ttl, err)
	}
	s, err := concurrency.NewSession(n.cli, concurrency.WithTTL(ttl), concurrency.WithLease(lease.ID), concurrency.WithContext(sctx))
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	info, _ := json.Marshal(AgentInfo{Name: n.cfg.Name, AdvertiseURL: n.cfg.AdvertiseURL, Version: n.cfg.Version, Started: n.started})
	key := agentsPrefix(n.cfg.Prefix) + n.cfg.Name
	// Another live agent registered under this name would be campaigning
	// as this one: refuse rather than share.
	resp, err := n.cli.Txn(gctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(info), clientv3.WithLease(s.Lease()))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("another live agent is registered as %q (%s): give each agent its own cluster.name", n.cfg.Name, key)
	}
	if err != nil {
		// Revoke, not orphan: nothing may stay on a lease nobody keeps.
		s.Close()
		return nil, fmt.Errorf("register %s: %w", key, err)
	}
	return s, nil
}

// runSession runs the campaigns on s until s ends or ctx does.
func (n *Node) runSession(ctx context.Context, s *concurrency.Session) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	running := map[string]context.CancelFunc{}
	go n.probe(ctx, s)
	go n.balance(ctx, s)
	for {
		for name, stop := range running {
			if !n.wanted(name) {
				stop()
				delete(running, name)
			}
		}
		for _, name := range n.wantedNames() {
			if _, ok := running[name]; ok {
				continue
			}
			cctx, stop := context.WithCancel(ctx)
			running[name] = stop
			kind, key, _ := strings.Cut(name, "/")
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.campaign(cctx, s, Kind(kind), keyOfName(Kind(kind), key))
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			return
		case <-n.changed:
		}
	}
}

// wantedNames lists the elections the node campaigns in.
func (n *Node) wantedNames() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var names []string
	for _, p := range n.subnets {
		names = append(names, electionName(KindDHCP, p.String()))
	}
	if n.cfg.Power {
		for i := range n.cfg.PowerShards {
			names = append(names, electionName(KindPower, strconv.Itoa(i)))
		}
	}
	return names
}

func (n *Node) wanted(name string) bool { return slices.Contains(n.wantedNames(), name) }

// campaign runs one election on s until ctx ends or s does: it waits to
// lead, leads until the leadership is lost, and campaigns again.
func (n *Node) campaign(ctx context.Context, s *concurrency.Session, kind Kind, key string) {
	pfx := electPrefix(n.cfg.Prefix) + electionName(kind, key)
	// The campaign ends with the session: a Campaign still waiting when
	// the lease is gone would otherwise win on a key that no longer exists.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 && !sleep(ctx, min(time.Duration(attempt)*100*time.Millisecond, time.Second)) {
			return
		}
		e := concurrency.NewElection(s, pfx)
		if err := e.Campaign(ctx, n.cfg.Name); err != nil {
			if ctx.Err() == nil {
				n.log.Warn("cluster: campaign", "election", pfx, "err", err)
			}
			continue
		}
		l := Leadership{Kind: kind, Key: key, LeaderKey: e.Key(), Revision: e.Rev()}
		if n.lead(ctx, e, l) {
			attempt = 0
		}
	}
}

// lead holds l until it is lost or ctx ends (then it resigns); it reports
// whether l was held at all.
//
// Only a leadership given up (ctx ended, not ready, handed over) is
// resigned: resigning deletes the key if it is still ours (compared on its
// create revision), so the next candidate leads at once. One whose watch
// broke is not: its key, if still there, keeps its place at the head of
// the line, and the next Campaign on the session finds it again.
func (n *Node) lead(ctx context.Context, e *concurrency.Election, l Leadership) bool {
	resign := false
	defer func() {
		if !resign {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = e.Resign(rctx)
	}()
	// Won is won only if the key is still there at its revision: a key
	// lost while campaigning (the lease expired) would otherwise look won.
	// From that read on, the watch sees every change to it.
	resp, err := n.cli.Get(ctx, l.LeaderKey)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.Revision {
		return false
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := n.cli.Watch(wctx, l.LeaderKey, clientv3.WithRev(resp.Header.Revision+1))
	if n.cfg.Ready != nil {
		if err := n.cfg.Ready(ctx, l); err != nil {
			if ctx.Err() == nil {
				n.log.Warn("cluster: won, but not ready to lead; giving it up", "kind", l.Kind, "key", l.Key, "err", err)
			}
			resign = true
			return false
		}
	}
	quit := make(chan struct{})
	n.mu.Lock()
	n.handoff[electionName(l.Kind, l.Key)] = quit
	n.mu.Unlock()
	n.set(l, true)
	defer n.set(l, false)
	for {
		select {
		case <-ctx.Done():
			resign = true
			return true
		case <-quit:
			resign = true
			// Balance: resigning puts this agent at the back of the
			// line, and the next candidate leads.
			n.log.Info("cluster: handing a leadership over to even the load", "kind", l.Kind, "key", l.Key)
			return true
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				// The watch broke (no leader on our member, compaction):
				// what happened to the key is unknown, so it is not held.
				return true
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != l.Revision {
					return true
				}
			}
		}
	}
}

// set records l held or not, and tells.
func (n *Node) set(l Leadership, held bool) {
	name := electionName(l.Kind, l.Key)
	n.mu.Lock()
	if held {
		n.held[name] = l
	} else {
		delete(n.held, name)
		delete(n.handoff, name)
	}
	n.mu.Unlock()
	v := 0.0
	if held {
		v = 1
	}
	n.m.leader.WithLabelValues(string(l.Kind), l.Key).Set(v)
	n.m.changes.WithLabelValues(string(l.Kind)).Inc()
	if held {
		n.log.Info("cluster: leading", "kind", l.Kind, "key", l.Key, "revision", l.Revision)
	} else {
		n.log.Info("cluster: no longer leading", "kind", l.Kind, "key", l.Key)
	}
	if n.cfg.OnChange != nil {
		n.cfg.OnChange(l, held)
	}
}

// balance evens the leaderships out among the agents, one handover per
// kind every two TTLs: an agent that leads more of a kind than its share
// (the elections it campaigns in over the live agents, rounded up) gives
// one up where another candidate waits. The first agent to start wins
// every election, and without this it would lead them all until it goes.
// It converges: an agent only gives up what is over its share, and the
// shares add up to at least the elections.
func (n *Node) balance(ctx context.Context, s *concurrency.Session) {
	everyWhile(ctx, s, 2*n.cfg.SessionTTL, func() {
		rctx, cancel := context.WithTimeout(ctx, n.cfg.SessionTTL)
		defer cancel()
		n.balanceOnce(rctx)
	})
}

// everyWhile calls fn every period while ctx and the session s live.
func everyWhile(ctx context.Context, s *concurrency.Session, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

func (n *Node) balanceOnce(ctx context.Context) {
	resp, err := n.cli.Get(ctx, agentsPrefix(n.cfg.Prefix), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count < 2 {
		return
	}
	agents := int(resp.Count)
	for _, kind := range []Kind{KindDHCP, KindPower} {
		total := 0
		for _, name := range n.wantedNames() {
			if strings.HasPrefix(name, string(kind)+"/") {
				total++
			}
		}
		share := (total + agents - 1) / agents
		var mine []Leadership
		for _, l := range n.Leading() {
			if l.Kind == kind {
				mine = append(mine, l)
			}
		}
		if len(mine) <= share {
			continue
		}
		for _, l := range mine {
			name := electionName(l.Kind, l.Key)
			c, err := n.cli.Get(ctx, electPrefix(n.cfg.Prefix)+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || c.Count < 2 {
				continue // nobody to take it
			}
			n.mu.Lock()
			quit := n.handoff[name]
			delete(n.handoff, name)
			n.mu.Unlock()
			if quit != nil {
				close(quit)
				break
			}
		}
	}
}

// probe reads the agent's own registration, linearizably, every half TTL
// while s lives: the latency of a request through etcd's Raft leader, as
// the agent's writes see it.
func (n *Node) probe(ctx context.Context, s *concurrency.Session) {
	key := agentsPrefix(n.cfg.Prefix) + n.cfg.Name
	everyWhile(ctx, s, n.cfg.SessionTTL/2, func() {
		pctx, cancel := context.WithTimeout(ctx, n.cfg.SessionTTL)
		defer cancel()
		start := time.Now()
		_, err := n.cli.Get(pctx, key)
		if err == nil {
			n.m.latency.Observe(time.Since(start).Seconds())
		} else if !errors.Is(err, context.Canceled) {
			n.m.probeErrors.Inc()
		}
	})
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
