package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/api"
	"rackd/store"
	"rackd/store/storetest"
)

func readyMachine(i int) api.CreateMachine {
	return api.CreateMachine{Hostname: fmt.Sprintf("node%03d", i), Arch: "amd64",
		MACs: []string{fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256)}, CPUCount: 8, MemoryMB: 16384,
		Tags: []string{"rack1"}, State: "READY"}
}

// TestAllocationHandOver plays the hand-over of machines between tools end to end through the API: an
// installer reserves machines by name for agent U; the orchestrator, as the
// same user and the same agent name, takes exactly those; another agent name
// is refused until it shows the allocation token, which hands the machine
// over; allocate-by-constraints never returns a held machine.
func TestAllocationHandOver(t *testing.T) {
	ta := startAgent(t)
	andreas := ta.addUser(t, "andreas", false)
	other := ta.addUser(t, "landscape", false)
	names := []string{"elkhart", "dover", "salem"}
	for i, n := range names {
		m := readyMachine(i)
		m.Hostname = n
		ta.addMachine(t, m)
	}
	// A fourth machine stays free: constraints may take it, and only it.
	ta.addMachine(t, readyMachine(9))

	// The installer (agent_name U) reserves the three by name.
	tokens := map[string]string{}
	for _, n := range names {
		var res api.Allocation
		status, raw := ta.call(t, andreas, "POST", "/api/v1/allocations", api.AllocateRequest{Name: n, AgentName: "U"}, &res)
		if status != http.StatusCreated || res.Token == "" || res.Machine.State != "ALLOCATED" ||
			res.Machine.Owner != "andreas" || res.Machine.AgentName != "U" {
			t.Fatalf("installer allocates %s: %d %s", n, status, raw)
		}
		tokens[n] = res.Token
	}
	// The orchestrator, same user, same agent_name, asks by name: 200, same
	// machine, unchanged, no new token.
	for _, n := range names {
		var res api.Allocation
		status, raw := ta.call(t, andreas, "POST", "/api/v1/allocations", api.AllocateRequest{Name: n, AgentName: "U"}, &res)
		if status != http.StatusOK || res.Machine.Hostname != n || res.Token != "" || res.Machine.AgentName != "U" {
			t.Fatalf("orchestrator re-allocates %s: %d %s", n, status, raw)
		}
	}
	// Same user, another agent name: refused.
	for _, n := range names {
		status, raw := ta.call(t, andreas, "POST", "/api/v1/allocations", api.AllocateRequest{Name: n, AgentName: "V"}, nil)
		wantError(t, status, raw, http.StatusConflict, "allocated")
	}
	// Same user, no agent name: refused (an empty agent name matches nothing).
	status, raw := ta.call(t, andreas, "POST", "/api/v1/allocations", api.AllocateRequest{Name: names[0]}, nil)
	wantError(t, status, raw, http.StatusConflict, "allocated")
	// Constraints, as U, never return a held machine: only node009.
	var free api.Allocation
	status, raw = ta.call(t, andreas, "POST", "/api/v1/allocations",
		api.AllocateRequest{AgentName: "U", Constraints: &api.Constraints{Arch: "amd64"}}, &free)
	if status != http.StatusCreated || free.Machine.Hostname != "node009" {
		t.Fatalf("constraints: %d %s; want node009", status, raw)
	}
	status, raw = ta.call(t, andreas, "POST", "/api/v1/allocations",
		api.AllocateRequest{AgentName: "U", Constraints: &api.Constraints{Arch: "amd64"}}, nil)
	wantError(t, status, raw, http.StatusConflict, "no_available_machine")

	// Handing over: another user's tool shows the token under agent name V.
	for _, n := range names {
		var res api.Allocation
		status, raw := ta.call(t, other, "POST", "/api/v1/allocations",
			api.AllocateRequest{Name: n, AgentName: "V", Token: tokens[n]}, &res)
		if status != http.StatusOK || res.Token == "" || res.Token == tokens[n] ||
			res.Machine.Owner != "landscape" || res.Machine.AgentName != "V" {
			t.Fatalf("adopt %s: %d %s", n, status, raw)
		}
		// The old token is dead, for anyone.
		status, raw = ta.call(t, andreas, "POST", "/api/v1/allocations",
			api.AllocateRequest{Name: n, AgentName: "U", Token: tokens[n]}, nil)
		wantError(t, status, raw, http.StatusConflict, "allocated")
		// And the old owner/agent pair no longer owns it.
		status, raw = ta.call(t, andreas, "POST", "/api/v1/allocations", api.AllocateRequest{Name: n, AgentName: "U"}, nil)
		wantError(t, status, raw, http.StatusConflict, "allocated")
		// The new holder's repeat is the idempotent no-op.
		status, raw = ta.call(t, other, "POST", "/api/v1/allocations", api.AllocateRequest{Name: n, AgentName: "V"}, nil)
		if status != http.StatusOK {
			t.Fatalf("new holder repeats %s: %d %s", n, status, raw)
		}
	}
	var held []api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines?owner=landscape&agent_name=V", nil, &held)
	if len(held) != 3 {
		t.Fatalf("landscape/V holds %d machines, want 3", len(held))
	}
	// The hand-over is in each machine's history.
	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/elkhart/events", nil, &evs)
	if len(evs) != 3 || evs[0].Action != "create" || evs[1].Action != "allocate" || evs[2].Action != "adopt" || evs[2].Actor != "landscape" {
		t.Fatalf("events of elkhart: %+v", evs)
	}
}

// TestAllocationRace: 200 concurrent allocators over 50 READY machines get
// exactly 50 distinct machines; the rest are told no_available_machine.
func TestAllocationRace(t *testing.T) {
	ta := startAgent(t)
	for i := range 50 {
		ta.addMachine(t, readyMachine(i))
	}
	tokens := make([]string, 4)
	for i := range tokens {
		tokens[i] = ta.addUser(t, fmt.Sprintf("racer%d", i), false)
	}
	won, refused := raceAllocations(t, []string{ta.url}, tokens)
	if len(won) != 50 || refused != 150 {
		t.Fatalf("%d distinct machines won, %d refused; want 50 and 150", len(won), refused)
	}
	for id, n := range won {
		if n != 1 {
			t.Errorf("machine %s was handed out %d times", id, n)
		}
	}
	var ms []api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines?state=ALLOCATED", nil, &ms)
	if len(ms) != 50 {
		t.Fatalf("%d machines ALLOCATED, want 50", len(ms))
	}
}

// raceAllocations sends 200 allocation requests at once, request i to
// urls[i%len(urls)] with tokens[i%len(tokens)], and returns how often each
// machine was handed out and how many were told no_available_machine (any
// other answer fails the test).
func raceAllocations(t *testing.T, urls, tokens []string) (map[string]int, int) {
	t.Helper()
	var (
		mu      sync.Mutex
		won     = map[string]int{}
		refused int
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			body := fmt.Sprintf(`{"agent_name":"a%d","constraints":{"arch":"amd64"}}`, i)
			req, _ := http.NewRequest("POST", urls[i%len(urls)]+"/api/v1/allocations", strings.NewReader(body))
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
				t.Errorf("allocator %d on %s: status %d", i, urls[i%len(urls)], resp.StatusCode)
			}
		}()
	}
	close(start)
	wg.Wait()
	return won, refused
}

// snapshot is everything an API request could change, for "nothing changed"
// checks.
func snapshot(t *testing.T, s *store.Store) string {
	t.Helper()
	ms, err := s.ListMachines(store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	us, err := s.Users()
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	for _, m := range ms {
		e, err := s.Events(m.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e...)
	}
	b, _ := json.Marshal([]any{ms, us, evs})
	return string(b)
}

// TestBadInput: each malformed or illegal request gets its documented 4xx and
// leaves the database exactly as it was.
func TestBadInput(t *testing.T) {
	ta := startAgent(t, func(c *Config) { c.API.MaxBodyBytes = 4096 })
	bob := ta.addUser(t, "bob", false)
	ta.addMachine(t, readyMachine(1))
	newOne := readyMachine(2)
	newOne.State = ""
	ta.addMachine(t, newOne)
	var held api.Allocation
	if status, raw := ta.call(t, bob, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "node001", AgentName: "b"}, &held); status != 201 {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	huge := `{"hostname":"` + strings.Repeat("a", 5000) + `"}`
	tests := map[string]struct {
		token, method, path string
		body                any
		contentType         string
		status              int
		code                string
		msg                 string // a part of the message
	}{
		"malformed json":       {"admin", "POST", "/api/v1/machines", `{"hostname": "x",`, "", 400, "bad_request", "malformed JSON"},
		"not json":             {"admin", "POST", "/api/v1/machines", `hostname=x`, "", 400, "bad_request", "malformed JSON"},
		"empty body":           {"admin", "POST", "/api/v1/machines", ``, "", 400, "bad_request", "empty"},
		"trailing data":        {"admin", "POST", "/api/v1/users", `{"name":"x"} {"name":"y"}`, "", 400, "bad_request", "after the JSON object"},
		"unknown field":        {"admin", "POST", "/api/v1/machines", `{"hostname":"x","macs":["52:54:00:00:00:09"],"colour":"red"}`, "", 400, "bad_request", `unknown field "colour"`},
		"unknown nested field": {"bob", "POST", "/api/v1/allocations", `{"constraints":{"gpu":1}}`, "", 400, "bad_request", `unknown field "gpu"`},
		"wrong type":           {"admin", "POST", "/api/v1/machines", `{"hostname":"x","cpu_count":"eight"}`, "", 400, "bad_request", "cpu_count"},
		"oversized body":       {"admin", "POST", "/api/v1/machines", huge, "", 413, "body_too_large", "larger than 4096"},
		"wrong content type":   {"admin", "POST", "/api/v1/machines", `{}`, "text/plain", 415, "unsupported_media_type", "application/json"},
		"bad mac":              {"admin", "POST", "/api/v1/machines", api.CreateMachine{Hostname: "x", MACs: []string{"zz"}}, "", 400, "bad_request", "invalid MAC"},
		"bad hostname":         {"admin", "POST", "/api/v1/machines", api.CreateMachine{Hostname: "a b", MACs: []string{"52:54:00:00:00:09"}}, "", 400, "bad_request", "invalid hostname"},
		"bad create state":     {"admin", "POST", "/api/v1/machines", api.CreateMachine{Hostname: "x", MACs: []string{"52:54:00:00:00:09"}, State: "ALLOCATED"}, "", 400, "bad_request", "NEW, READY or DEPLOYED"},
		"duplicate hostname":   {"admin", "POST", "/api/v1/machines", api.CreateMachine{Hostname: "node001", MACs: []string{"52:54:00:00:00:09"}}, "", 409, "conflict", "node001"},
		"duplicate mac":        {"admin", "POST", "/api/v1/machines", api.CreateMachine{Hostname: "x", MACs: []string{"52:54:00:00:00:01"}}, "", 409, "conflict", "52:54:00:00:00:01"},
		"illegal transition":   {"admin", "POST", "/api/v1/machines/node002/deploy", nil, "", 409, "invalid_transition", "NEW -> DEPLOYING"},
		"illegal release":      {"admin", "DELETE", "/api/v1/allocations/node002", nil, "", 409, "invalid_transition", "NEW -> RELEASING"},
		"unknown action":       {"admin", "POST", "/api/v1/machines/node001/explode", nil, "", 404, "not_found", "explode"},
		"unknown machine":      {"admin", "GET", "/api/v1/machines/nosuch", nil, "", 404, "not_found", "nosuch"},
		"unknown machine act":  {"admin", "POST", "/api/v1/machines/nosuch/commission", nil, "", 404, "not_found", "nosuch"},
		"unknown alloc name":   {"bob", "POST", "/api/v1/allocations", api.AllocateRequest{Name: "nosuch"}, "", 404, "not_found", "nosuch"},
		"unknown endpoint":     {"admin", "GET", "/api/v1/nosuch", nil, "", 404, "not_found", "/api/v1/nosuch"},
		"bad state filter":     {"admin", "GET", "/api/v1/machines?state=SLEEPY", nil, "", 400, "bad_request", "SLEEPY"},
		"negative constraint":  {"bob", "POST", "/api/v1/allocations", `{"constraints":{"min_cpu":-1}}`, "", 400, "bad_request", "negative"},
		"token without name":   {"bob", "POST", "/api/v1/allocations", api.AllocateRequest{Token: "x"}, "", 400, "bad_request", "name"},
		"image on commission":  {"admin", "POST", "/api/v1/machines/node002/commission", `{"image":"x"}`, "", 400, "bad_request", "image"},
		"no token":             {"", "GET", "/api/v1/machines", nil, "", 401, "unauthorized", "Bearer"},
		"bad token":            {"wrong", "GET", "/api/v1/machines", nil, "", 401, "unauthorized", "invalid token"},
		"non-admin create":     {"bob", "POST", "/api/v1/machines", readyMachine(7), "", 403, "forbidden", "not an admin"},
		"non-admin users":      {"bob", "POST", "/api/v1/users", api.CreateUser{Name: "eve"}, "", 403, "forbidden", "not an admin"},
		"non-admin backup":     {"bob", "GET", "/api/v1/backup", nil, "", 403, "forbidden", "not an admin"},
		"non-admin commission": {"bob", "POST", "/api/v1/machines/node002/commission", nil, "", 403, "forbidden", "admin"},
		"release another's":    {"other", "DELETE", "/api/v1/allocations/node001", nil, "", 403, "forbidden", "not yours"},
		"duplicate user":       {"admin", "POST", "/api/v1/users", api.CreateUser{Name: "bob"}, "", 409, "conflict", "already exists"},
		"bad user name":        {"admin", "POST", "/api/v1/users", api.CreateUser{Name: "Bob Smith"}, "", 400, "bad_request", "invalid user name"},
		"remove the admin":     {"admin", "DELETE", "/api/v1/users/admin", nil, "", 409, "conflict", "admin token file"},
		"remove a holder":      {"admin", "DELETE", "/api/v1/users/bob", nil, "", 409, "conflict", "holds machines node001"},
		"remove unknown user":  {"admin", "DELETE", "/api/v1/users/nosuch", nil, "", 404, "not_found", "nosuch"},
		"non-admin removes":    {"bob", "DELETE", "/api/v1/users/other", nil, "", 403, "forbidden", "not an admin"},
	}
	otherTok := ta.addUser(t, "other", false)
	before := snapshot(t, ta.Store())
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			token := map[string]string{"admin": ta.admin, "bob": bob, "other": otherTok, "wrong": "not-a-token"}[tc.token]
			var rd *bytes.Reader
			switch b := tc.body.(type) {
			case nil:
				rd = bytes.NewReader(nil)
			case string:
				rd = bytes.NewReader([]byte(b))
			default:
				data, _ := json.Marshal(b)
				rd = bytes.NewReader(data)
			}
			req, _ := http.NewRequest(tc.method, ta.url+tc.path, rd)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e api.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("body is not a JSON error: %v", err)
			}
			if resp.StatusCode != tc.status || e.Code != tc.code || !strings.Contains(e.Error, tc.msg) {
				t.Fatalf("got %d %+v; want %d %s containing %q", resp.StatusCode, e, tc.status, tc.code, tc.msg)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
		})
	}
	if after := snapshot(t, ta.Store()); after != before {
		t.Fatalf("refused requests changed the database:\nbefore %s\nafter  %s", before, after)
	}
}

// TestMachineLifecycleAPI walks a machine through the API's actions and the
// background completion of a release (after the power queue powered it off:
// the machine has a simulated BMC).
func TestMachineLifecycleAPI(t *testing.T) {
	ta := startAgent(t, func(c *Config) { c.Power.Fake.Enabled = true })
	bob := ta.addUser(t, "bob", false)
	m := ta.addMachine(t, api.CreateMachine{Hostname: "web1", MACs: []string{"52-54-00-AA-BB-01"},
		CPUCount: 4, MemoryMB: 8192, Power: &api.PowerParams{Driver: "fake", Address: "10.0.0.9:623", Username: "root", Password: "s3cret-pw"}})
	if m.State != "NEW" || m.MACs[0] != "52:54:00:aa:bb:01" || m.Power.Driver != "fake" {
		t.Fatalf("created %+v", m)
	}
	// Credentials never come back, on any read.
	for _, path := range []string{"/api/v1/machines", "/api/v1/machines/web1", "/api/v1/machines/" + m.ID} {
		_, raw := ta.call(t, ta.admin, "GET", path, nil, nil)
		if bytes.Contains(raw, []byte("s3cret-pw")) || bytes.Contains(raw, []byte(`"username"`)) {
			t.Fatalf("%s leaks power credentials: %s", path, raw)
		}
	}
	step := func(token, method, path, want string) api.Machine {
		t.Helper()
		var out api.Machine
		status, raw := ta.call(t, token, method, path, `{"reason":"test"}`, &out)
		if status != http.StatusOK || out.State != want {
			t.Fatalf("%s %s: %d %s; want state %s", method, path, status, raw, want)
		}
		return out
	}
	step(ta.admin, "POST", "/api/v1/machines/web1/commission", "COMMISSIONING")
	// Commissioning completes through the store (the metadata flow of a later
	// issue); here rackd itself reports success.
	if _, err := ta.Store().Transition(t.Context(), store.System, store.TransitionRequest{Machine: "web1", Action: store.ActionCommissioningDone}); err != nil {
		t.Fatal(err)
	}
	var alloc api.Allocation
	if status, raw := ta.call(t, bob, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "web1", AgentName: "j"}, &alloc); status != 201 {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	// A deploy of an image that is not imported for the machine's arch is
	// refused, naming the ones that are, and the machine stays ALLOCATED
	// (it used to wait in DEPLOYING for the watchdog).
	storetest.DeployImages(t, ta.Store(), "amd64", "noble", "jammy")
	storetest.DeployImages(t, ta.Store(), "arm64", "bookworm")
	for _, body := range []string{`{"image":"nosuch"}`, `{"image":"bookworm"}`, `{}`} {
		status, raw := ta.call(t, bob, "POST", "/api/v1/machines/web1/deploy", body, nil)
		if e := wantError(t, status, raw, http.StatusBadRequest, api.CodeBadRequest); !strings.Contains(e.Error, "deploy images imported for amd64: jammy, noble") {
			t.Errorf("deploy %s refused with %q, want it to name jammy and noble", body, e.Error)
		}
		var m api.Machine
		if ta.call(t, bob, "GET", "/api/v1/machines/web1", nil, &m); m.State != "ALLOCATED" {
			t.Fatalf("after the refused deploy %s the machine is %s", body, m.State)
		}
	}
	var out api.Machine
	if status, raw := ta.call(t, bob, "POST", "/api/v1/machines/web1/deploy", `{"image":"noble"}`, &out); status != http.StatusOK || out.State != "DEPLOYING" {
		t.Fatalf("deploy noble: %d %s", status, raw)
	}
	if _, err := ta.Store().Transition(t.Context(), store.System, store.TransitionRequest{Machine: "web1", Action: store.ActionDeploymentDone}); err != nil {
		t.Fatal(err)
	}
	rel := step(bob, "DELETE", "/api/v1/allocations/web1", "RELEASING")
	if rel.Owner != "" {
		t.Fatalf("released machine still owned: %+v", rel)
	}
	// The releaser completes it in the background.
	waitState(t, ta, "web1", "READY")
	step(ta.admin, "POST", "/api/v1/machines/web1/mark-broken", "BROKEN")
	step(ta.admin, "POST", "/api/v1/machines/web1/mark-fixed", "READY")
	step(ta.admin, "POST", "/api/v1/machines/web1/retire", "RETIRED")
	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/web1/events", nil, &evs)
	var path []string
	for _, e := range evs {
		path = append(path, e.Action+":"+e.To)
	}
	want := "create:NEW commission:COMMISSIONING commissioning-done:READY allocate:ALLOCATED deploy:DEPLOYING " +
		"deployment-done:DEPLOYED release:RELEASING release-done:READY mark-broken:BROKEN mark-fixed:READY retire:RETIRED"
	if got := strings.Join(path, " "); got != want {
		t.Fatalf("history:\n got %s\nwant %s", got, want)
	}
	for _, e := range evs {
		if e.Actor == "" || e.Time.IsZero() {
			t.Fatalf("event without who/when: %+v", e)
		}
	}
}

func waitState(t *testing.T, ta *testAgent, machine, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var m api.Machine
		ta.call(t, ta.admin, "GET", "/api/v1/machines/"+machine, nil, &m)
		if m.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("machine %s is %s after 10s; want %s", machine, m.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWatchdog: a machine that stays COMMISSIONING past the timeout fails,
// with the reason recorded.
func TestWatchdog(t *testing.T) {
	ta := startAgent(t, func(c *Config) {
		c.Lifecycle.CommissioningTimeout = Duration(300 * time.Millisecond)
		c.Lifecycle.DeployingTimeout = Duration(time.Hour)
	})
	ta.addMachine(t, api.CreateMachine{Hostname: "slow", MACs: []string{"52:54:00:00:00:01"}, Power: &api.PowerParams{Driver: "manual"}})
	ta.addMachine(t, readyMachine(2))
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/slow/commission", nil, nil); status != 200 {
		t.Fatalf("commission: %d %s", status, raw)
	}
	waitState(t, ta, "slow", "FAILED_COMMISSIONING")
	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/slow/events?limit=1", nil, &evs)
	if len(evs) != 1 || evs[0].Actor != "rackd/watchdog" || !strings.HasPrefix(evs[0].Reason, "timeout:") {
		t.Fatalf("last event %+v", evs)
	}
	var m api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines/node002", nil, &m)
	if m.State != "READY" {
		t.Fatalf("idle machine touched by the watchdog: %s", m.State)
	}
}

func TestCreateStates(t *testing.T) {
	ta := startAgent(t)
	tests := map[string]struct {
		state, wantState, wantOwner string
	}{
		"default":  {"", "NEW", ""},
		"ready":    {"READY", "READY", ""},
		"deployed": {"deployed", "DEPLOYED", "admin"},
	}
	i := 0
	for name, tc := range tests {
		i++
		t.Run(name, func(t *testing.T) {
			m := readyMachine(i)
			m.State = tc.state
			got := ta.addMachine(t, m)
			if got.State != tc.wantState || got.Owner != tc.wantOwner {
				t.Fatalf("got %s owned by %q; want %s owned by %q", got.State, got.Owner, tc.wantState, tc.wantOwner)
			}
		})
	}
	// The adopted DEPLOYED machine can be released like any other.
	var ms []api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines?state=DEPLOYED", nil, &ms)
	if len(ms) != 1 {
		t.Fatalf("%d DEPLOYED machines", len(ms))
	}
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/allocations/"+ms[0].Hostname, nil, nil); status != 200 {
		t.Fatalf("release adopted machine: %d %s", status, raw)
	}
	waitState(t, ta, ms[0].Hostname, "READY")
}
