package store_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

// rack is the fleet TestAllocateByConstraints searches. In hostname order:
// arm, big, broken, held, newbig, small.
func rack(t *testing.T, s *store.Store) {
	t.Helper()
	for _, nm := range []store.NewMachine{
		{Hostname: "small", State: store.StateReady, Arch: "amd64", CPUCount: 4, MemoryMB: 8192, Tags: []string{"ssd"}, Zone: "a"},
		{Hostname: "big", State: store.StateReady, Arch: "amd64", CPUCount: 32, MemoryMB: 131072, Tags: []string{"ssd", "gpu"}, Zone: "b"},
		{Hostname: "arm", State: store.StateReady, Arch: "arm64", CPUCount: 16, MemoryMB: 32768, Zone: "a"},
		// The rest would match almost anything but are not available.
		{Hostname: "newbig", State: store.StateNew, Arch: "amd64", CPUCount: 64, MemoryMB: 1 << 20, Tags: []string{"ssd", "gpu", "nvme"}, Zone: "a"},
		{Hostname: "held", State: store.StateReady, Arch: "amd64", CPUCount: 64, MemoryMB: 1 << 20, Tags: []string{"ssd", "gpu", "nvme"}, Zone: "a"},
		{Hostname: "broken", State: store.StateReady, Arch: "amd64", CPUCount: 64, MemoryMB: 1 << 20, Tags: []string{"ssd", "gpu", "nvme"}, Zone: "a"},
	} {
		create(t, s, nm)
	}
	allocate(t, s, alice, "held", "juju")
	transition(t, s, admin, "broken", store.ActionMarkBroken)
}

func TestAllocateByConstraints(t *testing.T) {
	tests := map[string]struct {
		c    store.Constraints
		want string // hostname, or "" for CodeNoAvailableMachine
	}{
		"anything":                {store.Constraints{}, "arm"},
		"arch":                    {store.Constraints{Arch: "amd64"}, "big"},
		"arch arm64":              {store.Constraints{Arch: "arm64"}, "arm"},
		"min cpu":                 {store.Constraints{MinCPU: 20}, "big"},
		"min cpu, exact":          {store.Constraints{MinCPU: 32}, "big"},
		"min cpu, amd64":          {store.Constraints{Arch: "amd64", MinCPU: 4}, "big"},
		"min memory":              {store.Constraints{MinMemoryMB: 40000}, "big"},
		"min memory, exact":       {store.Constraints{MinMemoryMB: 8192, Zone: "a", Arch: "amd64"}, "small"},
		"tag":                     {store.Constraints{Tags: []string{"gpu"}}, "big"},
		"two tags":                {store.Constraints{Tags: []string{"ssd", "gpu"}}, "big"},
		"zone":                    {store.Constraints{Zone: "a"}, "arm"},
		"zone and arch":           {store.Constraints{Zone: "a", Arch: "amd64"}, "small"},
		"all of them":             {store.Constraints{Arch: "amd64", MinCPU: 2, MinMemoryMB: 4096, Tags: []string{"ssd"}, Zone: "a"}, "small"},
		"only held machines fit":  {store.Constraints{MinCPU: 33}, ""},
		"only NEW/BROKEN have it": {store.Constraints{Tags: []string{"nvme"}}, ""},
		"unknown arch":            {store.Constraints{Arch: "ppc64el"}, ""},
		"tag in other zone":       {store.Constraints{Tags: []string{"gpu"}, Zone: "a"}, ""},
		"too much memory":         {store.Constraints{MinMemoryMB: 1 << 21}, ""},
		"unknown zone":            {store.Constraints{Zone: "c"}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			rack(t, s)
			before := snap(t, s)
			res, err := s.Allocate(t.Context(), bob, store.AllocateRequest{AgentName: "tf-1", Constraints: tc.c})
			if tc.want == "" {
				wantCode(t, err, store.CodeNoAvailableMachine)
				if !strings.Contains(err.Error(), "no READY machine matches") {
					t.Errorf("error %q does not say what was asked", err)
				}
				before.mustEqual(t, snap(t, s))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := res.Machine
			if m.Hostname != tc.want || m.State != store.StateAllocated || m.Owner != "bob" || m.AgentName != "tf-1" ||
				!res.Created || res.Adopted || res.Token == "" {
				t.Errorf("got %s %s owner %q agent %q created=%t adopted=%t token=%q; want %s ALLOCATED to bob/tf-1 with a token",
					m.Hostname, m.State, m.Owner, m.AgentName, res.Created, res.Adopted, res.Token, tc.want)
			}
			if stored, _ := s.Machine(m.ID); !reflect.DeepEqual(stored, m) {
				t.Errorf("returned %+v\nstored %+v", m, stored)
			}
			ev, _ := s.Events(m.ID, 1)
			want := store.Event{Seq: ev[0].Seq, Time: ev[0].Time, Machine: m.ID, Actor: "bob", Action: "allocate",
				From: store.StateReady, To: store.StateAllocated, Reason: `agent_name "tf-1"`}
			if len(ev) != 1 || ev[0] != want {
				t.Errorf("event %+v, want %+v", ev, want)
			}
		})
	}
}

// A client must not race itself into a machine it already holds, so
// allocate-by-constraints skips held machines even for their holder.
func TestAllocateByConstraintsSkipsHeld(t *testing.T) {
	tests := map[string]struct {
		actor store.Actor
		agent string
		token bool
	}{
		"same owner and agent":    {alice, "juju", false},
		"same owner, with token":  {alice, "juju", true},
		"other user, with token":  {bob, "juju", true},
		"same owner, no agent":    {alice, "", false},
		"admin":                   {admin, "juju", false},
		"other user, other agent": {bob, "x", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			ready(t, s, "a")
			ready(t, s, "b")
			held := allocate(t, s, alice, "a", "juju")
			req := store.AllocateRequest{AgentName: tc.agent}
			if tc.token {
				req.Token = held.Token
			}
			res, err := s.Allocate(t.Context(), tc.actor, req)
			if err != nil || res.Machine.Hostname != "b" || !res.Created {
				t.Fatalf("first = %s created=%t, %v; want the free machine b", res.Machine.Hostname, res.Created, err)
			}
			before := snap(t, s)
			_, err = s.Allocate(t.Context(), tc.actor, req)
			wantCode(t, err, store.CodeNoAvailableMachine)
			before.mustEqual(t, snap(t, s))
		})
	}
}

func TestAllocateByName(t *testing.T) {
	// Every case starts from: "m1" allocated by alice as agent "juju-1"
	// (token given to the case), "m3" allocated by alice with no agent name,
	// "dep" DEPLOYED for alice as "juju-1", "m2" READY and free, "n" NEW,
	// "fc" FAILED_COMMISSIONING, "gone" RETIRED.
	type want struct {
		code    store.Code // refusals
		message string
		created bool // new allocation
		adopted bool
		noop    bool
		owner   string
		agent   string
		state   store.State
	}
	tests := map[string]struct {
		actor store.Actor
		req   func(token string) store.AllocateRequest
		want  want
	}{
		"free machine": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m2", AgentName: "tf"}
		}, want{created: true, owner: "bob", agent: "tf", state: store.StateAllocated}},
		"free machine, no agent name": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m2"}
		}, want{created: true, owner: "bob", agent: "", state: store.StateAllocated}},
		"free machine by upper-case name": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "M2", AgentName: "tf"}
		}, want{created: true, owner: "bob", agent: "tf", state: store.StateAllocated}},
		"free machine, matching constraints": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m2", AgentName: "tf", Constraints: store.Constraints{MinCPU: 4}}
		}, want{created: true, owner: "bob", agent: "tf", state: store.StateAllocated}},
		"free machine, constraints do not match": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m2", AgentName: "tf", Constraints: store.Constraints{MinCPU: 5}}
		}, want{code: store.CodeNoAvailableMachine, message: "machine m2 does not match the constraints"}},
		"free machine, stray token": {bob, func(tok string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m2", AgentName: "tf", Token: tok}
		}, want{created: true, owner: "bob", agent: "tf", state: store.StateAllocated}},
		"same owner and agent": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-1"}
		}, want{noop: true, owner: "alice", agent: "juju-1", state: store.StateAllocated}},
		"same owner and agent, by id": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "<m1 id>", AgentName: "juju-1"}
		}, want{noop: true, owner: "alice", agent: "juju-1", state: store.StateAllocated}},
		"same owner and agent, deployed": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "dep", AgentName: "juju-1"}
		}, want{noop: true, owner: "alice", agent: "juju-1", state: store.StateDeployed}},
		"same owner, empty agent name": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1"}
		}, want{code: store.CodeAllocated, message: "machine m1 is already allocated (ALLOCATED)"}},
		"same owner, both agent names empty": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m3"}
		}, want{code: store.CodeAllocated, message: "machine m3 is already allocated"}},
		"same owner, other agent": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-2"}
		}, want{code: store.CodeAllocated, message: "already allocated"}},
		"same owner, agent differs in case": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "JUJU-1"}
		}, want{code: store.CodeAllocated, message: "already allocated"}},
		"other user, same agent": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-1"}
		}, want{code: store.CodeAllocated, message: "already allocated"}},
		"admin, same agent": {admin, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-1"}
		}, want{code: store.CodeAllocated, message: "already allocated"}},
		"other user with the token": {bob, func(tok string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-bob", Token: tok}
		}, want{adopted: true, owner: "bob", agent: "juju-bob", state: store.StateAllocated}},
		"same owner with the token, new agent": {alice, func(tok string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-2", Token: tok}
		}, want{adopted: true, owner: "alice", agent: "juju-2", state: store.StateAllocated}},
		"token, empty agent name": {bob, func(tok string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", Token: tok}
		}, want{adopted: true, owner: "bob", agent: "", state: store.StateAllocated}},
		"wrong token": {bob, func(tok string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-1", Token: tok + "x"}
		}, want{code: store.CodeAllocated, message: "not its allocation token"}},
		"wrong token, by the owner's agent": {alice, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m1", AgentName: "juju-1", Token: store.NewToken()}
		}, want{code: store.CodeAllocated, message: "not its allocation token"}},
		"any token for a machine created DEPLOYED": {bob, func(tok string) store.AllocateRequest {
			return store.AllocateRequest{Name: "dep", AgentName: "x", Token: tok}
		}, want{code: store.CodeAllocated, message: "not its allocation token"}},
		"unknown name": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "elkhart", AgentName: "tf"}
		}, want{code: store.CodeNotFound, message: `machine "elkhart" not found`}},
		"NEW machine": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "n", AgentName: "tf"}
		}, want{code: store.CodeNoAvailableMachine, message: "machine n is NEW, not READY"}},
		"FAILED_COMMISSIONING machine": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "fc", AgentName: "tf"}
		}, want{code: store.CodeNoAvailableMachine, message: "not READY"}},
		"RETIRED machine": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "gone", AgentName: "tf"}
		}, want{code: store.CodeNoAvailableMachine, message: "not READY"}},
		"agent name too long": {bob, func(string) store.AllocateRequest {
			return store.AllocateRequest{Name: "m2", AgentName: strings.Repeat("x", 257)}
		}, want{code: store.CodeInvalid, message: "agent_name is too long"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			m1 := ready(t, s, "m1")
			ready(t, s, "m2")
			create(t, s, store.NewMachine{Hostname: "n"})
			create(t, s, store.NewMachine{Hostname: "fc", Power: manual})
			transition(t, s, admin, "fc", store.ActionCommission)
			transition(t, s, store.System, "fc", store.ActionCommissioningFailed)
			create(t, s, store.NewMachine{Hostname: "gone", State: store.StateReady})
			transition(t, s, admin, "gone", store.ActionRetire)
			if _, err := s.CreateMachine(t.Context(), store.Actor{Name: "alice", Admin: true}, store.NewMachine{
				Hostname: "dep", MACs: []string{nextMAC()}, State: store.StateDeployed, AgentName: "juju-1"}); err != nil {
				t.Fatal(err)
			}
			held := allocate(t, s, alice, "m1", "juju-1")
			ready(t, s, "m3")
			allocate(t, s, alice, "m3", "")

			req := tc.req(held.Token)
			if req.Name == "<m1 id>" {
				req.Name = m1.ID
			}
			before := snap(t, s)
			res, err := s.Allocate(t.Context(), tc.actor, req)
			if tc.want.code != "" {
				wantCode(t, err, tc.want.code)
				if !strings.Contains(err.Error(), tc.want.message) {
					t.Errorf("error %q does not say %q", err, tc.want.message)
				}
				if !reflect.DeepEqual(res, store.AllocateResult{}) {
					t.Errorf("a refusal returned %+v", res)
				}
				before.mustEqual(t, snap(t, s))
				// The holder's token still works.
				if _, err := s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "m1", Token: held.Token}); err != nil {
					t.Errorf("the allocation token stopped working after a refusal: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := res.Machine
			if res.Created != tc.want.created || res.Adopted != tc.want.adopted ||
				m.Owner != tc.want.owner || m.AgentName != tc.want.agent || m.State != tc.want.state {
				t.Errorf("got created=%t adopted=%t owner %q agent %q %s; want %+v",
					res.Created, res.Adopted, m.Owner, m.AgentName, m.State, tc.want)
			}
			if stored, _ := s.Machine(m.ID); !reflect.DeepEqual(stored, m) {
				t.Errorf("returned %+v\nstored %+v", m, stored)
			}
			switch {
			case tc.want.noop:
				// Unchanged, no new token, no event; the old token still works.
				if res.Token != "" {
					t.Errorf("no-op minted a token")
				}
				before.mustEqual(t, snap(t, s))
				if m.ID == m1.ID {
					adopted, err := s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "m1", Token: held.Token})
					if err != nil || !adopted.Adopted {
						t.Errorf("the token stopped working after a no-op: %+v, %v", adopted, err)
					}
				}
			case tc.want.adopted:
				if res.Token == "" || res.Token == held.Token {
					t.Errorf("adoption returned token %q (old %q); want a new one", res.Token, held.Token)
				}
				if !m.StateSince.Equal(before.Machines[indexOf(before.Machines, m.ID)].StateSince) {
					t.Errorf("adoption changed state_since")
				}
				ev, _ := s.Events(m.ID, 0)
				last := ev[len(ev)-1]
				wantReason := fmt.Sprintf(`from owner alice agent_name "juju-1" to owner %s agent_name %s`, tc.want.owner, quote(tc.want.agent))
				if len(ev) != 3 || last.Action != "adopt" || last.Actor != tc.actor.Name || last.Reason != wantReason ||
					last.From != "" || last.To != "" {
					t.Errorf("events %+v; want create, allocate, adopt by %s with reason %q", ev, tc.actor.Name, wantReason)
				}
				// The old token died; the new one works, for anybody.
				carol := store.Actor{Name: "carol"}
				_, err := s.Allocate(t.Context(), carol, store.AllocateRequest{Name: "m1", AgentName: "c", Token: held.Token})
				wantCode(t, err, store.CodeAllocated)
				again, err := s.Allocate(t.Context(), carol, store.AllocateRequest{Name: "m1", AgentName: "c", Token: res.Token})
				if err != nil || !again.Adopted || again.Machine.Owner != "carol" {
					t.Errorf("adopting with the new token = %+v, %v", again, err)
				}
			case tc.want.created:
				if res.Token == "" || res.Token == held.Token {
					t.Errorf("new allocation returned token %q", res.Token)
				}
				// The new token hands this machine over, and only this one.
				_, err := s.Allocate(t.Context(), alice, store.AllocateRequest{Name: "m1", AgentName: "x", Token: res.Token})
				wantCode(t, err, store.CodeAllocated)
				got, err := s.Allocate(t.Context(), alice, store.AllocateRequest{Name: m.ID, AgentName: "x", Token: res.Token})
				if err != nil || !got.Adopted {
					t.Errorf("adopting with the new token = %+v, %v", got, err)
				}
			}
		})
	}
}

func indexOf(ms []store.Machine, id string) int {
	for i, m := range ms {
		if m.ID == id {
			return i
		}
	}
	return -1
}

func quote(s string) string {
	if s == "" {
		return "(none)"
	}
	return fmt.Sprintf("%q", s)
}

// Release: RELEASING at once, owner and token gone, then READY.
func TestReleaseFlow(t *testing.T) {
	s := storetest.New(t)
	ready(t, s, "web1")
	res := allocate(t, s, alice, "web1", "juju")
	transition(t, s, alice, "web1", store.ActionDeploy)
	transition(t, s, store.System, "web1", store.ActionDeploymentDone)

	m, err := s.Release(t.Context(), alice, "web1", "done")
	if err != nil {
		t.Fatal(err)
	}
	if m.State != store.StateReleasing || m.Owner != "" || m.AgentName != "" {
		t.Fatalf("released: %s owner %q agent %q; want RELEASING, nobody's", m.State, m.Owner, m.AgentName)
	}
	// The token died with the allocation: no adopting a machine on its way out.
	_, err = s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "web1", AgentName: "x", Token: res.Token})
	wantCode(t, err, store.CodeNoAvailableMachine)
	_, err = s.Allocate(t.Context(), alice, store.AllocateRequest{Name: "web1", AgentName: "juju"})
	wantCode(t, err, store.CodeNoAvailableMachine)
	_, err = s.Allocate(t.Context(), bob, store.AllocateRequest{})
	wantCode(t, err, store.CodeNoAvailableMachine)
	// Nor releasing it twice, by its former owner (refused by the
	// lifecycle, 409, never as a matter of rights) or anyone.
	_, err = s.Release(t.Context(), alice, "web1", "")
	wantCode(t, err, store.CodeInvalidTransition)
	_, err = s.Release(t.Context(), bob, "web1", "")
	wantCode(t, err, store.CodeInvalidTransition)
	_, err = s.Release(t.Context(), admin, "web1", "")
	wantCode(t, err, store.CodeInvalidTransition)

	m, err = s.CompleteRelease(t.Context(), m.ID)
	if err != nil || m.State != store.StateReady || m.Owner != "" {
		t.Fatalf("CompleteRelease = %+v, %v; want READY", m, err)
	}
	_, err = s.CompleteRelease(t.Context(), m.ID)
	wantCode(t, err, store.CodeInvalidTransition)
	ev, _ := s.Events(m.ID, 2)
	if len(ev) != 2 || ev[0].Action != "release" || ev[0].Actor != "alice" || ev[0].Reason != "done" ||
		ev[1].Action != "release-done" || ev[1].Actor != store.System.Name || ev[1].From != store.StateReleasing || ev[1].To != store.StateReady {
		t.Errorf("last events %+v", ev)
	}
	// READY again: a token from the old allocation is just ignored, and
	// whoever asks gets a new allocation, not an adoption.
	got, err := s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "web1", AgentName: "x", Token: res.Token})
	if err != nil || !got.Created || got.Adopted || got.Token == res.Token || got.Machine.Owner != "bob" {
		t.Errorf("allocating after the release = %+v, %v; want a new allocation for bob", got, err)
	}
}

// Racing clients never get the same machine.
func TestAllocateRace(t *testing.T) {
	const machines, clients = 50, 200
	s := storetest.New(t)
	for i := range machines {
		ready(t, s, fmt.Sprintf("m%03d", i))
	}
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		mu    sync.Mutex
		won   = map[string]string{} // machine id -> client
		lost  int
		other []error
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actor := store.Actor{Name: fmt.Sprintf("u%03d", i)}
			<-start
			res, err := s.Allocate(context.Background(), actor, store.AllocateRequest{AgentName: "juju", Constraints: store.Constraints{MinCPU: 1}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if prev, dup := won[res.Machine.ID]; dup {
					other = append(other, fmt.Errorf("machine %s given to %s and %s", res.Machine.Hostname, prev, actor.Name))
				}
				won[res.Machine.ID] = actor.Name
			case store.CodeOf(err) == store.CodeNoAvailableMachine:
				lost++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(other) > 0 || len(won) != machines || lost != clients-machines {
		t.Fatalf("%d winners, %d refused, other errors %v; want %d and %d", len(won), lost, other, machines, clients-machines)
	}
	for id, owner := range won {
		m, err := s.Machine(id)
		if err != nil || m.State != store.StateAllocated || m.Owner != owner {
			t.Errorf("machine %s: %s owner %q (%v), want ALLOCATED to %s", id, m.State, m.Owner, err, owner)
		}
	}
}

// Concurrent writers share commits: the committer takes everything queued
// while the previous commit was syncing.
func TestGroupCommit(t *testing.T) {
	const goroutines, perGoroutine = 64, 8
	var commits, committed atomic.Int64
	s := storetest.New(t, func(o *store.Options) {
		o.OnCommit = func(ops int, d time.Duration) {
			if ops < 1 || d < 0 {
				t.Errorf("OnCommit(%d, %s)", ops, d)
			}
			commits.Add(1)
			committed.Add(int64(ops))
		}
	})
	for i := range goroutines {
		ready(t, s, fmt.Sprintf("pool%03d", i))
	}
	commits.Store(0)
	committed.Store(0)

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*perGoroutine)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			actor := store.Actor{Name: fmt.Sprintf("u%02d", g)}
			for i := range perGoroutine {
				var err error
				if i%2 == 0 {
					_, err = s.CreateMachine(context.Background(), admin, store.NewMachine{
						Hostname: fmt.Sprintf("g%02d-%d", g, i), MACs: []string{mac(g<<8 | i)}})
				} else {
					// One machine per goroutine in the pool: allocate it, then
					// repeat the no-op.
					_, err = s.Allocate(context.Background(), actor, store.AllocateRequest{
						Name: fmt.Sprintf("pool%03d", g), AgentName: "juju"})
				}
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	const ops = goroutines * perGoroutine
	// Every write was carried by a commit; batches of only no-op repeats are
	// rolled back rather than committed, so they may not be counted.
	const writes = ops/2 + goroutines
	if got := committed.Load(); got < writes || got > ops {
		t.Errorf("commits carried %d operations, want %d..%d", got, writes, ops)
	}
	if n := commits.Load(); n >= ops {
		t.Errorf("%d operations took %d commits: no group commit", ops, n)
	} else {
		t.Logf("%d operations in %d commits", ops, n)
	}
	if ms, _ := s.ListMachines(store.Filter{}); len(ms) != goroutines+ops/2 {
		t.Errorf("%d machines, want %d", len(ms), goroutines+ops/2)
	}
}
