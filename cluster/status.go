package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// State is the cluster as etcd holds it: the live agents, who leads what,
// and how the etcd members are.
type State struct {
	Agents []AgentInfo `json:"agents"`
	// DHCP is the leader of every subnet someone campaigns for, by subnet;
	// Power of every power shard, by shard number.
	DHCP      []Leader   `json:"dhcp"`
	Power     []Leader   `json:"power"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Leader is who leads one election.
type Leader struct {
	Key string `json:"key"`
	// Agent is the leader's name; Revision its key's create revision
	// (its fence).
	Agent    string `json:"agent"`
	Revision int64  `json:"revision"`
	// Candidates counts the agents in the election, the leader included.
	Candidates int `json:"candidates"`
}

// Endpoint is one etcd endpoint's answer to a status request.
type Endpoint struct {
	URL       string   `json:"url"`
	MemberID  string   `json:"member_id,omitempty"`
	Version   string   `json:"version,omitempty"`
	Leader    bool     `json:"leader"`
	RaftIndex uint64   `json:"raft_index,omitempty"`
	RaftTerm  uint64   `json:"raft_term,omitempty"`
	DBSize    int64    `json:"db_size,omitempty"`
	Errors    []string `json:"errors,omitempty"`
	// Err is why the endpoint did not answer ("" when it did).
	Err string `json:"error,omitempty"`
}

// EndpointTimeout bounds Status's wait for one endpoint's answer.
const EndpointTimeout = 3 * time.Second

// Status reads the cluster's state under prefix ("/rackd/" when empty)
// through cli, and asks every endpoint of cli for its status. An endpoint
// that does not answer is in the result with its error; Status fails only
// when the cluster's keys cannot be read.
func Status(ctx context.Context, cli *clientv3.Client, prefix string) (State, error) {
	if prefix == "" {
		prefix = "/rackd/"
	}
	var st State
	resp, err := cli.Get(ctx, agentsPrefix(prefix), clientv3.WithPrefix())
	if err != nil {
		return st, fmt.Errorf("cluster status: read the agents: %w", err)
	}
	for _, kv := range resp.Kvs {
		var a AgentInfo
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			a.Name = strings.TrimPrefix(string(kv.Key), agentsPrefix(prefix))
		}
		st.Agents = append(st.Agents, a)
	}
	resp, err = cli.Get(ctx, electPrefix(prefix), clientv3.WithPrefix())
	if err != nil {
		return st, fmt.Errorf("cluster status: read the elections: %w", err)
	}
	// An election's candidates are keys <election>/<lease>; the leader is
	// the one created first.
	type election struct {
		kind Kind
		l    Leader
	}
	elections := map[string]*election{}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), electPrefix(prefix))
		name, _, ok := cutLast(rest, "/")
		if !ok {
			continue
		}
		kind, key, ok := strings.Cut(name, "/")
		if !ok {
			continue
		}
		e := elections[name]
		if e == nil {
			e = &election{kind: Kind(kind), l: Leader{Key: keyOfName(Kind(kind), key)}}
			elections[name] = e
		}
		e.l.Candidates++
		if e.l.Revision == 0 || kv.CreateRevision < e.l.Revision {
			e.l.Agent, e.l.Revision = string(kv.Value), kv.CreateRevision
		}
	}
	for _, e := range elections {
		switch e.kind {
		case KindDHCP:
			st.DHCP = append(st.DHCP, e.l)
		case KindPower:
			st.Power = append(st.Power, e.l)
		}
	}
	slices.SortFunc(st.DHCP, func(a, b Leader) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(st.Power, func(a, b Leader) int {
		x, _ := strconv.Atoi(a.Key)
		y, _ := strconv.Atoi(b.Key)
		return cmp.Compare(x, y)
	})
	for _, ep := range cli.Endpoints() {
		st.Endpoints = append(st.Endpoints, endpointStatus(ctx, cli, ep))
	}
	return st, nil
}

func endpointStatus(ctx context.Context, cli *clientv3.Client, ep string) Endpoint {
	out := Endpoint{URL: ep}
	// One member that hangs (paused, partitioned) must not take the
	// others' answers with it.
	ctx, cancel := context.WithTimeout(ctx, EndpointTimeout)
	defer cancel()
	r, err := cli.Status(ctx, ep)
	if err != nil {
		out.Err = err.Error()
		return out
	}
	out.MemberID = strconv.FormatUint(r.Header.MemberId, 16)
	out.Version = r.Version
	out.Leader = r.Leader == r.Header.MemberId
	out.RaftIndex, out.RaftTerm, out.DBSize = r.RaftIndex, r.RaftTerm, r.DbSize
	out.Errors = r.Errors
	return out
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
