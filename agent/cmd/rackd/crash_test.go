package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rackd/api"
	"rackd/store"
)

// ledger is what the clients were told: per machine, the last acknowledged
// operation, and whether an operation was in flight when rackd died (then
// either outcome is legal).
type ledger struct {
	mu        sync.Mutex
	held      map[string]heldBy // acknowledged allocations not yet released
	uncertain map[string]bool   // machines with an unanswered request
	acked     int
	violation []string
}

type heldBy struct {
	agent, token string
}

// TestCrashKeepsAcknowledgedAllocations drives 1,000 allocations and
// releases through a real rackd process, SIGKILLs it at a random moment,
// restarts it on the same database and checks that every acknowledged
// allocation survived and that no machine is held twice.
func TestCrashKeepsAcknowledgedAllocations(t *testing.T) {
	const (
		machines = 50
		workers  = 8
		totalOps = 1000
	)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	killAt := 50 + rng.IntN(totalOps-150) // operations issued before the kill
	t.Logf("seed %d: SIGKILL after %d operations", seed, killAt)

	state := t.TempDir()
	d := startDaemon(t, state)
	admin := adminToken(t, state)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	for i := range machines {
		status, raw, err := d.api(client, admin, "POST", "/api/v1/machines", api.CreateMachine{
			Hostname: fmt.Sprintf("c%02d", i), MACs: []string{fmt.Sprintf("52:54:00:cc:00:%02x", i)},
			CPUCount: 4, MemoryMB: 4096, State: "READY"}, nil)
		if err != nil || status != 201 {
			t.Fatalf("create machine: %d %s %v", status, raw, err)
		}
	}

	l := &ledger{held: map[string]heldBy{}, uncertain: map[string]bool{}}
	var budget atomic.Int64
	budget.Store(totalOps)
	killed := false
	l.drive(d, client, admin, workers, &budget, func() bool {
		if totalOps-budget.Load() < int64(killAt) || killed {
			return false
		}
		killed = true
		d.kill() // SIGKILL, by PID, mid-traffic
		return true
	})
	if !killed {
		t.Fatalf("the run ended before the kill point (%d acknowledged)", l.acked)
	}
	for _, v := range l.violation {
		t.Error(v)
	}

	// Restart on the same database.
	d2 := startDaemon(t, state)
	unknownAllocs := 0
	for k := range l.uncertain {
		if k[0] == '?' {
			unknownAllocs++
		}
	}
	var all []api.Machine
	if status, raw, err := d2.api(client, admin, "GET", "/api/v1/machines", nil, &all); err != nil || status != 200 {
		t.Fatalf("list after restart: %d %s %v", status, raw, err)
	}
	byID := map[string]api.Machine{}
	heldNow := 0
	for _, m := range all {
		byID[m.ID] = m
		if m.Owner != "" {
			heldNow++
		}
	}
	for id, h := range l.held {
		m := byID[id]
		if l.uncertain[id] {
			continue // a release was in flight: either outcome is legal
		}
		if m.State != "ALLOCATED" || m.AgentName != h.agent {
			t.Errorf("acknowledged allocation lost: machine %s is %s for %q, was allocated to %s", id, m.State, m.AgentName, h.agent)
			continue
		}
		// The token handed out is still the live capability.
		var res api.Allocation
		status, raw, err := d2.api(client, admin, "POST", "/api/v1/allocations",
			api.AllocateRequest{Name: id, AgentName: h.agent + "-verified", Token: h.token}, &res)
		if err != nil || status != 200 {
			t.Errorf("token of machine %s no longer adopts it: %d %s %v", id, status, raw, err)
		}
	}
	// Everything held is accounted for: acknowledged, or answered-lost.
	lo, hi := 0, unknownAllocs
	for id := range l.held {
		if l.uncertain[id] {
			hi++
		} else {
			lo++
		}
	}
	if heldNow < lo || heldNow > lo+hi {
		t.Errorf("%d machines held after restart; the clients account for %d..%d", heldNow, lo, lo+hi)
	}
	// Releases interrupted by the kill are completed by the restarted rackd.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var releasing []api.Machine
		d2.api(client, admin, "GET", "/api/v1/machines?state=RELEASING", nil, &releasing)
		if len(releasing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d machines still RELEASING 20s after restart", len(releasing))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The restarted rackd carries the rest of the 1,000 operations.
	after := &ledger{held: map[string]heldBy{}, uncertain: map[string]bool{}}
	after.drive(d2, client, admin, workers, &budget, func() bool { return false })
	for _, v := range after.violation {
		t.Error(v)
	}
	if left := budget.Load(); left > 0 {
		t.Errorf("%d operations were not issued", left)
	}
	d2.stop(t)
	s, err := store.Open(filepath.Join(state, store.FileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open the database after the run: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("store invariants after crash and restart:\n%v", err)
	}
	t.Logf("%d acknowledged operations before the kill; %d machines held after restart (%d..%d expected)", l.acked, heldNow, lo, lo+hi)
}

// drive runs workers that allocate (by constraints) and release until the
// shared budget of operations is spent or kill says the daemon was killed.
// Every answer is checked against the ledger as it arrives: a machine must
// never be handed out while the ledger says it is held.
func (l *ledger) drive(d *daemon, client *http.Client, admin string, workers int, budget *atomic.Int64, kill func() bool) {
	var (
		dead atomic.Bool
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("worker%d", w)
			var mine []string // machines this worker holds, by id
			for !dead.Load() && budget.Add(-1) >= 0 {
				if len(mine) > 0 && (len(mine) >= 5 || rand.IntN(10) < 3) {
					id := mine[0]
					l.mu.Lock()
					l.uncertain[id] = true
					l.mu.Unlock()
					status, raw, err := d.api(client, admin, "DELETE", "/api/v1/allocations/"+id, nil, nil)
					if err != nil || status == 0 {
						return // rackd is gone: the release stays uncertain
					}
					l.mu.Lock()
					delete(l.uncertain, id)
					if status == 200 {
						// Another worker may already have been given the
						// machine between the release and this answer.
						if l.held[id].agent == agent {
							delete(l.held, id)
						}
						mine = mine[1:]
						l.acked++
					} else {
						l.violation = append(l.violation, fmt.Sprintf("release %s: %d %s", id, status, raw))
					}
					l.mu.Unlock()
				} else {
					var res api.Allocation
					status, raw, err := d.api(client, admin, "POST", "/api/v1/allocations",
						api.AllocateRequest{AgentName: agent, Constraints: &api.Constraints{MinCPU: 1}}, &res)
					if err != nil || status == 0 {
						// The answer was lost: whatever it allocated (if
						// anything) is unknown to us.
						l.mu.Lock()
						l.uncertain["?"+agent] = true
						l.mu.Unlock()
						return
					}
					l.mu.Lock()
					switch status {
					case 201:
						// Held and not being released: a double hand-out.
						if prev, ok := l.held[res.Machine.ID]; ok && !l.uncertain[res.Machine.ID] {
							l.violation = append(l.violation, fmt.Sprintf("machine %s handed to %s while held by %s", res.Machine.ID, agent, prev.agent))
						}
						l.held[res.Machine.ID] = heldBy{agent: agent, token: res.Token}
						mine = append(mine, res.Machine.ID)
						l.acked++
					case 409: // nothing free right now (others hold them all, or releases are completing)
					default:
						l.violation = append(l.violation, fmt.Sprintf("allocate: %d %s", status, raw))
					}
					l.mu.Unlock()
				}
				l.mu.Lock()
				if kill() {
					dead.Store(true)
				}
				l.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
