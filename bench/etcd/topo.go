package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"rackd/bench/internal/benchns"
)

// The addresses: the agents' interfaces in the server namespace, the
// client's bridge, and the subnet served (a /16, so that a run's tens of
// thousands of distinct clients never exhaust the pool).
const (
	clientIP   = "10.77.0.2"
	prefixLen  = "/16"
	servedCIDR = "10.77.0.0/16"
	poolStart  = "10.77.1.0"
	poolEnd    = "10.77.255.254"
)

// agentIPs are the agents' interface addresses, agent i on interface i.
var agentIPs = []string{"10.77.0.1", "10.77.0.3", "10.77.0.4"}

// topology is two namespaces: the server one, where the etcd members and
// the agents run, each agent with a veth interface of its own, and the
// client one, where the three veth peers hang off one bridge (as three
// appliances' ports on one rack switch). A client broadcasting on the
// bridge reaches every agent.
type topology struct {
	srv, cli string
	srvIfs   []string // agent i's interface in srv
	bridge   string   // in cli
}

func newTopology(ctx context.Context) (_ *topology, err error) {
	base := benchns.RandName("rke")
	t := &topology{srv: base + "s", cli: base + "c", bridge: base + "br"}
	var created []string
	defer func() {
		if err != nil {
			for _, ns := range created {
				benchns.Command(context.Background(), "ip", "netns", "del", ns)
			}
		}
	}()
	for _, ns := range []string{t.srv, t.cli} {
		if _, err := os.Stat("/var/run/netns/" + ns); err == nil {
			return nil, fmt.Errorf("namespace %s exists already", ns)
		}
		if err := benchns.RunCmd(ctx, "ip", "netns", "add", ns); err != nil {
			return nil, err
		}
		created = append(created, ns)
	}
	steps := [][]string{
		{"-n", t.srv, "link", "set", "lo", "up"},
		{"-n", t.cli, "link", "set", "lo", "up"},
		{"-n", t.cli, "link", "add", t.bridge, "type", "bridge"},
		{"-n", t.cli, "addr", "add", clientIP + prefixLen, "dev", t.bridge},
		{"-n", t.cli, "link", "set", t.bridge, "up"},
	}
	for i, ip := range agentIPs {
		in, peer := fmt.Sprintf("%sa%d", base, i), fmt.Sprintf("%sp%d", base, i)
		t.srvIfs = append(t.srvIfs, in)
		steps = append(steps,
			// Created directly in the namespaces: the names never
			// appear in the host's.
			[]string{"link", "add", in, "netns", t.srv, "type", "veth", "peer", "name", peer, "netns", t.cli},
			[]string{"-n", t.srv, "addr", "add", ip + prefixLen, "dev", in},
			[]string{"-n", t.srv, "link", "set", in, "up"},
			[]string{"-n", t.cli, "link", "set", peer, "master", t.bridge},
			[]string{"-n", t.cli, "link", "set", peer, "up"},
		)
	}
	for _, s := range steps {
		if err := benchns.RunCmd(ctx, "ip", s...); err != nil {
			return nil, err
		}
	}
	// The links take a moment to come up (carrier on both ends).
	deadline := time.Now().Add(10 * time.Second)
	for _, in := range t.srvIfs {
		for {
			out, err := benchns.Command(ctx, "ip", "-n", t.srv, "-o", "link", "show", in)
			if err == nil && strings.Contains(string(out), "state UP") {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("veth %s not up after 10s: %s", in, out)
			}
			if err := benchns.Sleep(ctx, 50*time.Millisecond); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// close deletes both namespaces, which destroys the links in them.
func (t *topology) close() error {
	var errs []error
	for _, ns := range []string{t.srv, t.cli} {
		if out, err := benchns.Command(context.Background(), "ip", "netns", "del", ns); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns, err, out))
		}
	}
	return errors.Join(errs...)
}
