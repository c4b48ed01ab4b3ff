package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rackd/api"
	"rackd/power/powertest"
	"rackd/store"
)

// TestPowerCrash: 200 machines on simulated BMCs, 1,000 power requests
// accepted, SIGKILL while the queue works through them, restart: every
// accepted request ends done, failed or superseded (none lost), and no
// cycle was executed twice. The simulated BMCs log every command that took
// effect, with its request id, to a file that outlives the process.
func TestPowerCrash(t *testing.T) {
	const (
		machines = 200
		requests = 1000
		workers  = 8
	)
	state := t.TempDir()
	powerLog := filepath.Join(state, "fake-bmc.log")
	// The first rackd's BMCs stop carrying out commands after killAt (and
	// its commands wait for them for longer than the test runs), so that
	// the kill finds work open however fast or slow the machine is:
	// waiting for killAt commands and then killing raced the queue, and on
	// a loaded machine the test saw the log late, after all the work. The
	// second rackd's BMCs answer everything.
	const killAt = 100
	config := func(name string, hangAfter int, commandTimeout string) string {
		path := filepath.Join(state, name)
		if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[power]
max_in_flight = 16
max_per_bmc = 1
min_interval = "0s"
verify_interval = "10ms"
verify_deadline = "5s"
backoff = "10ms"
backoff_max = "50ms"
poll_interval = "0s"
command_timeout = %q
[power.fake]
enabled = true
latency = "20ms"
log = %q
hang_after = %d
`, commandTimeout, powerLog, hangAfter)), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	d := startDaemon(t, state, "--config", config("rackd-hangs.toml", killAt, "1h"))
	admin := adminToken(t, state)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	parallel := func(n int, fn func(i int)) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					fn(i)
				}
			}()
		}
		wg.Wait()
	}
	parallel(machines, func(i int) {
		status, raw, err := d.api(client, admin, "POST", "/api/v1/machines", api.CreateMachine{
			Hostname: fmt.Sprintf("p%03d", i), MACs: []string{fmt.Sprintf("52:54:00:dd:%02x:%02x", i>>8, i&0xff)},
			State: "READY", Power: &api.PowerParams{Driver: "fake", Address: fmt.Sprintf("bmc%03d", i), Username: "admin", Password: "pw"}}, nil)
		if err != nil || status != 201 {
			t.Errorf("create machine %d: %d %s %v", i, status, raw, err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	actions := []string{"on", "off", "cycle", "query"}
	accepted := make([]api.PowerRequest, requests)
	parallel(requests, func(i int) {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)))
		m := fmt.Sprintf("p%03d", rng.IntN(machines))
		var r api.PowerRequest
		status, raw, err := d.api(client, admin, "POST", "/api/v1/machines/"+m+"/power",
			api.PowerAction{Action: actions[rng.IntN(len(actions))], Reason: "crash test"}, &r)
		if err != nil || status != http.StatusAccepted {
			t.Errorf("request %d: %d %s %v", i, status, raw, err)
			return
		}
		accepted[i] = r
	})
	if t.Failed() {
		t.FailNow()
	}
	// Let the queue get some way in, then SIGKILL it mid-work.
	deadline := time.Now().Add(60 * time.Second)
	for {
		log, _ := powertest.ReadLog(powerLog)
		if len(log) >= killAt {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue executed %d commands in 60s", len(log))
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.kill()
	before, _ := powertest.ReadLog(powerLog)
	open := 0
	{
		s, err := store.Open(filepath.Join(state, store.FileName), store.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := s.OpenPowerCount()
		open = n
		s.Close()
	}
	t.Logf("killed after %d executed commands with %d requests open", len(before), open)
	if open == 0 {
		t.Fatal("the kill came after all the work: nothing to resume (the test proves nothing)")
	}

	d2 := startDaemon(t, state, "--config", config("rackd.toml", 0, "10s"))
	final := map[string]api.PowerRequest{}
	deadline = time.Now().Add(120 * time.Second)
	for len(final) < requests {
		for _, a := range accepted {
			if _, ok := final[a.ID]; ok {
				continue
			}
			var r api.PowerRequest
			status, raw, err := d2.api(client, admin, "GET", "/api/v1/power/requests/"+a.ID, nil, &r)
			if err != nil || status != 200 {
				t.Fatalf("accepted request %s lost after the restart: %d %s %v", a.ID, status, raw, err)
			}
			if r.State == "done" || r.State == "failed" || r.State == "superseded" {
				final[a.ID] = r
			}
		}
		if len(final) < requests && time.Now().After(deadline) {
			t.Fatalf("%d of %d accepted requests still open 120s after the restart", requests-len(final), requests)
		}
		time.Sleep(20 * time.Millisecond)
	}
	outcomes := map[string]int{}
	for _, r := range final {
		outcomes[r.State]++
		if r.State == "superseded" && r.SupersededBy == "" {
			t.Errorf("%s superseded by nobody", r.ID)
		}
		if r.State == "failed" {
			t.Errorf("%s failed on a healthy simulated BMC: %s", r.ID, r.Error)
		}
	}
	log, err := powertest.ReadLog(powerLog)
	if err != nil {
		t.Fatal(err)
	}
	cycles := map[string]int{}
	for _, e := range log {
		if e.Cmd == powertest.CmdCycle {
			cycles[e.Request]++
		}
	}
	for id, n := range cycles {
		if n > 1 {
			t.Errorf("request %s executed %d cycles", id, n)
		}
		if r, ok := final[id]; ok && r.Action != "cycle" {
			t.Errorf("request %s (%s) executed a cycle", id, r.Action)
		}
	}
	t.Logf("outcomes %v; %d commands executed, %d cycles", outcomes, len(log), len(cycles))

	// The CLI sees the same: a cycle through rackd power, waited for.
	code, out := runToExit(t, "power", "cycle", "p000", "--wait", "--url", d2.url, "--token", admin)
	if code != 0 || !strings.Contains(out, "done") {
		t.Errorf("rackd power cycle --wait: exit %d\n%s", code, out)
	}
	code, out = runToExit(t, "power", "status", "p000", "--url", d2.url, "--token", admin)
	if code != 0 || !strings.Contains(out, "Observed:") || !strings.Contains(out, "on at") {
		t.Errorf("rackd power status: exit %d\n%s", code, out)
	}

	d2.stop(t)
	s, err := store.Open(filepath.Join(state, store.FileName), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("store invariants after crash and restart:\n%v", err)
	}
}
