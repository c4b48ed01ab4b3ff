package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rackd/api"
	"rackd/internal/etcdtest"
)

// TestAllocationRaceAcrossAgents: three agents share one real 3-member
// etcd cluster; 200 concurrent allocators, spread over the three agents'
// APIs, race for 50 READY machines: exactly 50 distinct machines are
// handed out, each once, the other 150 are told no_available_machine, and
// every agent lists the same 50 ALLOCATED afterwards. The uniqueness lives
// in the store's transaction (the engine compares what it read), not in
// any agent's memory.
func TestAllocationRaceAcrossAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	c := etcdtest.Start(t, 3)
	var hosts []string
	for _, ep := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	url := "etcd://" + strings.Join(hosts, ",")
	var firstDir string
	shared := func(i int) func(*Config) {
		return func(cfg *Config) {
			cfg.Store.URL = url
			cfg.Store.EtcdPrefix = "/alloc-race/"
			if i == 0 {
				firstDir = cfg.StateDir
				return
			}
			// Every agent of a cluster holds the same keys.
			for _, f := range []string{SecretsKeyFile, "credential.key"} {
				b, err := os.ReadFile(filepath.Join(firstDir, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cfg.StateDir, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	agents := []*testAgent{startAgent(t, shared(0))}
	for i := 1; i < 3; i++ {
		ta := startAgent(t, shared(i))
		ta.admin = agents[0].admin // one store, one admin token
		agents = append(agents, ta)
	}
	for i := range 50 {
		agents[i%3].addMachine(t, readyMachine(i))
	}
	tokens := make([]string, 4)
	for i := range tokens {
		tokens[i] = agents[i%3].addUser(t, fmt.Sprintf("racer%d", i), false)
	}

	var urls []string
	for _, ta := range agents {
		urls = append(urls, ta.url)
	}
	won, refused := raceAllocations(t, urls, tokens)
	if len(won) != 50 || refused != 150 {
		t.Fatalf("%d distinct machines won, %d refused; want 50 and 150", len(won), refused)
	}
	for id, n := range won {
		if n != 1 {
			t.Errorf("machine %s was handed out %d times", id, n)
		}
	}
	for i, ta := range agents {
		var ms []api.Machine
		ta.call(t, ta.admin, "GET", "/api/v1/machines?state=ALLOCATED", nil, &ms)
		if len(ms) != 50 {
			t.Errorf("agent %d lists %d machines ALLOCATED, want 50", i, len(ms))
		}
		for _, m := range ms {
			if won[m.ID] != 1 {
				t.Errorf("agent %d lists %s ALLOCATED, which no allocator was given", i, m.ID)
			}
		}
	}
	if err := agents[0].Store().Check(); err != nil {
		t.Errorf("store invariants after the race:\n%v", err)
	}
}
