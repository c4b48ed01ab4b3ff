package store_test

import (
	"fmt"
	"testing"
	"time"

	"rackd/power"
	"rackd/store"
)

// TestDeleteMachineAfterLongPowerHistory: on a real etcd (128 comparisons
// and writes a transaction), a machine that has run more power requests
// than one transaction can delete keeps a bounded history of them, and is
// deleted with all of them; the invariants (Check, at the end) hold.
func TestDeleteMachineAfterLongPowerHistory(t *testing.T) {
	cli := etcdClient(t)
	s := openAgent(t, cli, freshPrefix())
	m, err := s.CreateMachine(bg, admin, store.NewMachine{Hostname: "busy1", MACs: []string{macWeb1}, State: store.StateReady,
		Power: store.PowerParams{Driver: "fake", Address: "busy1"}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 140
	var last string
	for i := range n {
		r, err := s.RequestPower(bg, admin, m.ID, store.PowerQuery, fmt.Sprintf("poll %d", i))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := s.StartPower(bg, r.ID, nil); err != nil {
			t.Fatalf("start %s: %v", r.ID, err)
		}
		if _, err := s.FinishPower(bg, r.ID, store.PowerDone, 1, "", power.StateOff); err != nil {
			t.Fatalf("finish %s: %v", r.ID, err)
		}
		last = r.ID
	}
	hist, err := s.PowerHistory(m.ID, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != store.PowerHistoryKeep {
		t.Errorf("%d requests kept after %d finished, want the newest %d", len(hist), n, store.PowerHistoryKeep)
	}
	if len(hist) > 0 && hist[0].ID != last {
		t.Errorf("newest kept request is %s, want %s", hist[0].ID, last)
	}
	if _, err := s.DeleteMachine(bg, admin, store.DeleteRequest{Machine: m.ID}); err != nil {
		t.Fatalf("delete the machine: %v", err)
	}
	if hist, err := s.PowerHistory(m.ID, 2*n); err != nil || len(hist) != 0 {
		t.Errorf("after the deletion the machine has %d power requests (%v), want none", len(hist), err)
	}
}

// TestManyTokensOnEtcd: making a token checks its name against the user's
// others; on a real etcd that check must not cost a comparison per token
// of the rack, or the 130th token could not be made.
func TestManyTokensOnEtcd(t *testing.T) {
	cli := etcdClient(t)
	s := openAgent(t, cli, freshPrefix())
	ops := withUser(t, s, "ops")
	const n = 140
	for i := range n {
		if _, _, err := s.CreateToken(bg, ops, store.NewTokenRequest{Name: fmt.Sprintf("ci-%d", i)}); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	if _, _, err := s.CreateToken(bg, ops, store.NewTokenRequest{Name: "ci-0"}); store.CodeOf(err) != store.CodeConflict {
		t.Errorf("a second token named ci-0: %v, want %s", err, store.CodeConflict)
	}
	if _, gone, err := s.ReplaceTokens(bg, admin, ops.Name, "ci-7", store.NewToken(), ""); err != nil || len(gone) != 1 {
		t.Errorf("replace ci-7 among %d tokens: %v replaced, %v", n, gone, err)
	}
}

// TestSeedAmongManyDeploymentsOnEtcd: the deploy environment's seed fetch
// finds its machine among every machine that has a deployment; on a real
// etcd that search must not cost a comparison per deployment of the rack.
func TestSeedAmongManyDeploymentsOnEtcd(t *testing.T) {
	cli := etcdClient(t)
	s := openAgent(t, cli, freshPrefix())
	alice := withUser(t, s, "alice")
	const n = 130
	var last store.Machine // the one whose deployment record comes last
	for i := range n {
		host := fmt.Sprintf("d%03d", i)
		ready(t, s, host)
		allocate(t, s, alice, host, "juju")
		if m := deploy(t, s, alice, host, store.DeployRequest{}); m.ID > last.ID {
			last = m
		}
	}
	src, err := s.Seed(bg, s.PhaseToken(last))
	if err != nil {
		t.Fatalf("seed of the last of %d deployments: %v", n, err)
	}
	if src.Machine.ID != last.ID || src.Deployment.SeedServed.IsZero() {
		t.Errorf("seed %+v, want machine %s's, served", src.Machine.ID, last.ID)
	}
}

// TestWatchdogExpiresManyOnEtcd: the watchdog fails every phase that timed
// out, however many time out at once; on a real etcd that is more than one
// transaction holds.
func TestWatchdogExpiresManyOnEtcd(t *testing.T) {
	cli := etcdClient(t)
	clk := &fakeClock{now: t0}
	s := openAgent(t, cli, freshPrefix(), func(o *store.Options) { o.Now = clk.Now })
	const n = 40
	for i := range n {
		m, err := s.CreateMachine(bg, admin, store.NewMachine{Hostname: fmt.Sprintf("c%02d", i), MACs: []string{fmt.Sprintf("52:54:00:aa:00:%02x", i)},
			State: store.StateNew, Power: store.PowerParams{Driver: "fake", Address: fmt.Sprintf("c%02d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(bg, admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionCommission}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Hour)
	exp, err := s.Expire(bg, store.Timeouts{Commissioning: time.Hour, Deploying: time.Hour})
	if err != nil {
		t.Fatalf("expire %d commissionings at once: %v", n, err)
	}
	if len(exp) != n {
		t.Errorf("%d expired, want %d", len(exp), n)
	}
	if c, err := s.CountByState(); err != nil || c[store.StateFailedCommissioning] != n {
		t.Errorf("states after the sweep: %v, %v; want %d FAILED_COMMISSIONING", c, err, n)
	}
}

// TestAllocateLastMatchOnEtcd: an allocation by constraints looks through
// the READY machines in hostname order until one matches; on a real etcd
// that search must not cost a comparison per machine passed over.
func TestAllocateLastMatchOnEtcd(t *testing.T) {
	cli := etcdClient(t)
	s := openAgent(t, cli, freshPrefix())
	const n = 140
	for i := range n {
		nm := store.NewMachine{Hostname: fmt.Sprintf("r%03d", i), State: store.StateReady, CPUCount: 4, MemoryMB: 4096}
		if i == n-1 {
			nm.Tags = []string{"gpu"}
		}
		create(t, s, nm)
	}
	res, err := s.Allocate(bg, admin, store.AllocateRequest{Constraints: store.Constraints{Tags: []string{"gpu"}}})
	if err != nil {
		t.Fatalf("allocate the one gpu machine of %d: %v", n, err)
	}
	if res.Machine.Hostname != fmt.Sprintf("r%03d", n-1) {
		t.Errorf("allocated %s", res.Machine.Hostname)
	}
}
