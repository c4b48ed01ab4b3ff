package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/agent/api"
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

	var (
		mu      sync.Mutex
		won     = map[string]int{}
		refused int
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			body := fmt.Sprintf(`{"agent_name":"a%d","constraints":{"arch":"amd64"}}`, i)
			req, _ := http.NewRequest("POST", agents[i%3].url+"/api/v1/allocations", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tokens[i%len(tokens)])
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("allocator %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case http.StatusCreated:
				var res api.Allocation
				json.NewDecoder(resp.Body).Decode(&res)
				won[res.Machine.ID]++
			case http.StatusConflict:
				var e api.Error
				json.NewDecoder(resp.Body).Decode(&e)
				if e.Code != "no_available_machine" {
					t.Errorf("allocator %d: 409 %+v", i, e)
				}
				refused++
			default:
				var e api.Error
				json.NewDecoder(resp.Body).Decode(&e)
				t.Errorf("allocator %d on agent %d: status %d %+v", i, i%3, resp.StatusCode, e)
			}
		}()
	}
	close(start)
	wg.Wait()
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
