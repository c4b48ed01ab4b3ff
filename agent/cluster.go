package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"rackd/cluster"
	"rackd/netboot/dhcp"
	"rackd/store/kv"
)

// ClusterConfig is [cluster]: this agent among others sharing one store on
// etcd. Without an etcd store there is no cluster.
type ClusterConfig struct {
	Name         string   `toml:"name"`
	AdvertiseURL string   `toml:"advertise_url"`
	SessionTTL   Duration `toml:"session_ttl"`
	PowerShards  int      `toml:"power_shards"`
	// The appliance's own etcd member and TLS listener
	// (clusterapi_member.go).
	ClusterMemberConfig
}

func (c ClusterConfig) validate() error {
	var errs []error
	if c.SessionTTL < Duration(time.Second) || time.Duration(c.SessionTTL)%time.Second != 0 {
		errs = append(errs, fmt.Errorf("cluster.session_ttl %v: whole seconds, at least 1s (an etcd lease's TTL)", time.Duration(c.SessionTTL)))
	}
	if c.PowerShards < 1 || c.PowerShards > 1024 {
		errs = append(errs, fmt.Errorf("cluster.power_shards %d: from 1 to 1024", c.PowerShards))
	}
	return errors.Join(errs...)
}

// newCluster makes the agent's cluster node when the store is on etcd
// (cli); a bbolt store has no cluster, and a.cluster stays nil: the agent
// leads everything, unfenced.
func (a *Agent) newCluster(cfg Config, cli *clientv3.Client) error {
	if cli == nil {
		return nil
	}
	name := cfg.Cluster.Name
	if name == "" {
		name = cfg.Name
	}
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("cluster.name is empty and the host has no name: %w", err)
		}
		name = h
	}
	prefix := cfg.Store.EtcdPrefix
	if prefix == "" {
		prefix = "/rackd/"
	}
	n, err := cluster.New(cli, cluster.Config{
		Name: name, AdvertiseURL: cfg.Cluster.AdvertiseURL, Version: Version, Prefix: prefix,
		SessionTTL: time.Duration(cfg.Cluster.SessionTTL), PowerShards: cfg.Cluster.PowerShards, Power: true,
		Ready: a.leadReady, OnChange: a.leadChanged,
		Log: a.log.With("service", "cluster"), Registerer: a.metrics.reg,
	})
	if err != nil {
		return err
	}
	a.cluster = n
	return nil
}

// leadReady makes the store catch up with a leadership won at revision R
// before the agent acts on it: everything its predecessor committed (the
// leases it ACKed, the requests it started) is in this store's memory
// first.
func (a *Agent) leadReady(ctx context.Context, l cluster.Leadership) error {
	return a.store.WaitRevision(ctx, l.Revision)
}

// leadChanged takes over a power shard's requests when its leadership is
// won. (The node logs every change; DHCP reads the leadership per request.)
func (a *Agent) leadChanged(l cluster.Leadership, held bool) {
	if l.Kind == cluster.KindPower && held && a.power != nil {
		go a.power.Resume()
	}
}

// fence is ctx carrying l's fence, or ctx itself for an unfenced
// leadership (an agent alone on its store).
func fence(ctx context.Context, l cluster.Leadership) context.Context {
	if !l.Fenced() {
		return ctx
	}
	return kv.WithFence(ctx, kv.Fence{Key: l.LeaderKey, CreateRevision: l.Revision})
}

// powerOwner is the power queue's owner: the shards this agent leads.
type powerOwner struct{ n *cluster.Node }

func (o powerOwner) Owns(ctx context.Context, machine string) (context.Context, bool) {
	l, ok := o.n.Power(machine)
	if !ok {
		return ctx, false
	}
	return fence(ctx, l), true
}

func (o powerOwner) Fenced(string) { o.n.CountFenced(cluster.KindPower) }

// runCluster keeps the node in the cluster and its DHCP campaigns in step
// with the subnets this agent can answer, until ctx ends.
func (a *Agent) runCluster(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- a.cluster.Run(ctx) }()
	// Subnets are made (here or on another agent) at any time: look
	// again when the store says they changed, and every half TTL in case
	// a read failed.
	t := time.NewTicker(time.Duration(a.cfg.Cluster.SessionTTL) / 2)
	defer t.Stop()
	for {
		changed := a.store.SubnetsChanged()
		if subnets, err := a.dhcpSubnets(); err != nil {
			// Keep campaigning for what it had: a failed read is no
			// reason to give a subnet up.
			a.log.Warn("cluster: read the subnets", "err", err)
		} else {
			a.cluster.SetSubnets(subnets)
		}
		select {
		case err := <-done:
			return err
		case <-changed:
		case <-t.C:
		}
	}
}

// dhcpSubnets are the subnets this agent campaigns to answer: none without
// DHCP; every managed subnet when it listens for relays (a relay may bring
// any of them); else those on its DHCP interfaces' links. An agent that
// led a subnet it cannot hear would leave it unanswered.
func (a *Agent) dhcpSubnets() ([]netip.Prefix, error) {
	if a.dhcp == nil {
		return nil, nil
	}
	subnets, err := a.store.Subnets()
	if err != nil {
		return nil, err
	}
	var links []netip.Prefix
	for _, name := range a.cfg.DHCP.Interfaces {
		links = append(links, linkPrefixes(name)...)
	}
	var out []netip.Prefix
	for _, sn := range subnets {
		if len(a.cfg.DHCP.Listen) > 0 {
			out = append(out, sn.CIDR)
			continue
		}
		for _, l := range links {
			if sn.CIDR.Contains(l.Addr().Unmap()) {
				out = append(out, sn.CIDR)
				break
			}
		}
	}
	return out, nil
}

// dhcpLead is the DHCP gate: the subnet of link is answered only by the
// agent that leads it. It returns ctx with that leadership's fence, or
// dhcp.ErrNotLeader (the server stays silent and counts it).
func dhcpLead(ctx context.Context, d dhcpLeases, link netip.Addr) (context.Context, error) {
	if d.c == nil {
		return ctx, nil
	}
	sn, err := d.s.SubnetFor(link)
	if err != nil {
		return ctx, dhcpError(err)
	}
	l, ok := d.c.DHCP(sn.CIDR)
	if !ok {
		return ctx, dhcp.ErrNotLeader
	}
	return fence(ctx, l), nil
}
