package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Add adds m to the cluster cli talks to, as a learner, and returns the
// initial cluster m must start with (every member's name and peer URL,
// m's included). A learner does not count for the quorum: the cluster
// keeps one however long the new appliance takes to start its member, which
// Promote then makes a voting member once it has caught up. A
// member of the same name or peer URL already there is refused: remove it
// first (Remove), as when a dead appliance is replaced.
func Add(ctx context.Context, cli *clientv3.Client, m Member) (map[string]string, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	list, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: list members: %w", err)
	}
	for _, o := range list.Members {
		if o.Name == m.Name {
			return nil, fmt.Errorf("etcdmember: the cluster has a member named %s already (rackd cluster remove %s first, if it is dead)", m.Name, m.Name)
		}
		for _, u := range o.PeerURLs {
			if u == m.PeerURL {
				return nil, fmt.Errorf("etcdmember: member %q already has the peer URL %s", memberName(o.Name, o.ID), u)
			}
		}
	}
	// etcd refuses a member while its leader has not been in touch with
	// every member for a moment (strict reconfiguration checks): right
	// after another join, that is. Tried again until ctx ends.
	var resp *clientv3.MemberAddResponse
	for {
		resp, err = cli.MemberAddAsLearner(ctx, []string{m.PeerURL})
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") {
			return nil, fmt.Errorf("etcdmember: add member %s (%s): %w", m.Name, m.PeerURL, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdmember: add member %s (%s): %w (until %w)", m.Name, m.PeerURL, err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	initial := map[string]string{}
	for _, o := range resp.Members {
		if o.ID == resp.Member.ID {
			initial[m.Name] = m.PeerURL
			continue
		}
		if o.Name == "" || len(o.PeerURLs) == 0 {
			// Added and never started: the new member could not
			// start with it in its initial cluster, and neither
			// could that one now.
			return nil, fmt.Errorf("etcdmember: member %x (%s) was added but never started: start it or remove it first",
				o.ID, strings.Join(o.PeerURLs, ","))
		}
		initial[o.Name] = o.PeerURLs[0]
	}
	return initial, nil
}

// Promote makes the learner m a voting member, once it has caught up with
// the leader (tried again until then, or until ctx ends). A member that
// votes already is left alone. cli must not talk to the learner itself
// only: a learner serves no such request.
//
// The learner is found by its name or, until it has published its name
// through the leader (a started member does so moments after it listens,
// later on a loaded machine), by the peer URL it was added with.
func Promote(ctx context.Context, cli *clientv3.Client, m Member) error {
	for {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return fmt.Errorf("etcdmember: list members: %w", err)
		}
		id, learner, found := findMember(list.Members, m)
		switch {
		case found && !learner:
			return waitVoter(ctx, cli, m)
		case found:
			_, err = cli.MemberPromote(ctx, id)
			if err == nil {
				return waitVoter(ctx, cli, m)
			}
			if !strings.Contains(err.Error(), "in sync with leader") && !strings.Contains(err.Error(), "unhealthy cluster") {
				return fmt.Errorf("etcdmember: promote %s: %w", m.Name, err)
			}
		default:
			return fmt.Errorf("etcdmember: %w: no member named %s or with peer URL %s in the cluster", ErrNoMember, m.Name, m.PeerURL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdmember: promote %s: %w (until %w)", m.Name, err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitVoter waits until m's own member has applied its promotion: until
// then it still refuses, as a learner, every request a client sends it
// ("rpc not supported for learner"), and a client of the cluster that
// picks it (rackd serve opening its store through every member) fails.
func waitVoter(ctx context.Context, cli *clientv3.Client, m Member) error {
	if m.ClientURL == "" {
		return nil
	}
	for {
		st, err := cli.Status(ctx, m.ClientURL)
		if err == nil && !st.IsLearner {
			return nil
		}
		if err == nil {
			err = errors.New("it still reports itself a learner")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdmember: %s promoted, but its member at %s did not serve as a voter: %w (until %w)", m.Name, m.ClientURL, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// findMember finds m in a member list: by name, or by peer URL for a
// member that has not published its name yet.
func findMember(list []*etcdserverpb.Member, m Member) (id uint64, learner, found bool) {
	for _, o := range list {
		if o.Name == m.Name || (o.Name == "" && m.PeerURL != "" && slices.Contains(o.PeerURLs, m.PeerURL)) {
			return o.ID, o.IsLearner, true
		}
	}
	return 0, false, false
}

// Remove removes the member named name from the cluster.
func Remove(ctx context.Context, cli *clientv3.Client, name string) error {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("etcdmember: list members: %w", err)
	}
	var names []string
	for _, o := range list.Members {
		n := memberName(o.Name, o.ID)
		if n == name {
			if _, err := cli.MemberRemove(ctx, o.ID); err != nil {
				return fmt.Errorf("etcdmember: remove member %s: %w", name, err)
			}
			return nil
		}
		names = append(names, n)
	}
	return fmt.Errorf("etcdmember: %w: no member named %s (members: %s)", ErrNoMember, name, strings.Join(names, ", "))
}

// ErrNoMember is returned (wrapped) by Remove for an unknown name.
var ErrNoMember = fmt.Errorf("no such member")

// memberName is a member's name, or its hex id while it has none (added,
// not started yet).
func memberName(name string, id uint64) string {
	if name != "" {
		return name
	}
	return fmt.Sprintf("%x", id)
}
