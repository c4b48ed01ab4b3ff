package queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"rackd/power"
	"rackd/power/powertest"
	"rackd/store"
)

var admin = store.Actor{Name: "admin", Admin: true}

type harness struct {
	t     *testing.T
	st    *store.Store
	fake  *powertest.Fake
	q     *Queue
	reg   *prometheus.Registry
	stop  func()
	names map[string]string // hostname -> id
}

// fastConfig is a queue that retries and verifies quickly.
func fastConfig() Config {
	return Config{Global: 16, PerBMC: 1, CommandTimeout: 5 * time.Second,
		VerifyDeadline: 2 * time.Second, VerifyInterval: 10 * time.Millisecond,
		Retries: 2, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		BreakerThreshold: 1000, BreakerCooldown: time.Minute}
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), store.FileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessOn(t, st, cfg)
}

// newHarnessOn is newHarness on a store of the test's.
func newHarnessOn(t *testing.T, st *store.Store, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, st: st, fake: powertest.NewFake(), reg: prometheus.NewRegistry(), names: map[string]string{}}
	h.q = New(st, map[string]power.Driver{"fake": h.fake}, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(h.reg))
	h.start()
	t.Cleanup(func() {
		h.stop()
		if err := st.Check(); err != nil {
			t.Errorf("store invariants: %v", err)
		}
		st.Close()
	})
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.q.Run(ctx); close(done) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			for _, a := range []string{"hang", "bmc-hang"} {
				h.fake.Release(a)
			}
			<-done
		})
	}
}

// machine adds a READY machine on BMC addr; the fake knows it as addr/name.
func (h *harness) machine(name, addr string) (id, key string) {
	h.t.Helper()
	m, err := h.st.CreateMachine(context.Background(), admin, store.NewMachine{
		Hostname: name, MACs: []string{fmt.Sprintf("52:54:00:00:%02x:%02x", len(h.names)>>8, len(h.names)&0xff)},
		State: store.StateReady, Power: store.PowerParams{Driver: "fake", Address: addr, Username: name}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.names[name] = m.ID
	return m.ID, addr + "/" + name
}

func (h *harness) request(machine string, action store.PowerAction) store.PowerRequest {
	h.t.Helper()
	r, err := h.st.RequestPower(context.Background(), admin, machine, action, "test")
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) get(id string) store.PowerRequest {
	h.t.Helper()
	r, err := h.st.PowerRequest(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// waitFor polls cond for up to 30 s (a bound for loaded CI machines, not a
// speed target).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// settled waits until machine's worker has looked at every request made
// before the call: it takes its kicks one at a time, so the receipt of a
// second kick sent now proves it is done with what the first woke it for.
func (h *harness) settled(machine string) {
	h.t.Helper()
	for range 2 {
		h.q.Kick(machine)
		h.waitFor("the worker of "+machine+" to take its kick", func() bool {
			h.q.mu.Lock()
			defer h.q.mu.Unlock()
			w := h.q.workers[machine]
			return w == nil || len(w.kick) == 0
		})
	}
}

func (h *harness) waitFinal(ids ...string) {
	h.t.Helper()
	for _, id := range ids {
		h.waitFor(id+" to end", func() bool { return !h.get(id).State.Open() })
	}
}

func TestOnOffCycleQuery(t *testing.T) {
	h := newHarness(t, fastConfig())
	id, key := h.machine("n1", "bmc1")
	for _, tc := range []struct {
		action store.PowerAction
		want   power.State
	}{{store.PowerOn, power.StateOn}, {store.PowerOff, power.StateOff}, {store.PowerCycle, power.StateOn}, {store.PowerQuery, power.StateOn}} {
		r := h.request(id, tc.action)
		h.waitFinal(r.ID)
		got := h.get(r.ID)
		if got.State != store.PowerDone || got.Attempts != 1 || got.Finished.IsZero() {
			t.Errorf("%s: %+v", tc.action, got)
		}
		if s := h.fake.State(key); s != tc.want {
			t.Errorf("%s: fake is %v, want %v", tc.action, s, tc.want)
		}
		ps, _ := h.st.PowerStatusOf(id)
		if ps.Observed != tc.want || ps.LastRequest != r.ID {
			t.Errorf("%s: power status %+v", tc.action, ps)
		}
	}
	if n := h.fake.Count(key, powertest.CmdCycle); n != 1 {
		t.Errorf("%d cycles sent, want 1", n)
	}
	if ps, _ := h.st.PowerStatusOf(id); ps.Desired != power.StateOn {
		t.Errorf("desired %q after cycle, want on", ps.Desired)
	}
	if tg := h.fake.LastTarget(key); tg.Address != "bmc1" || tg.Username != "n1" || tg.Driver != "fake" || tg.Machine != "n1" {
		t.Errorf("target %+v", tg)
	}
}

// TestTargetCarriesCipherSuite: the machine's cipher suite reaches the
// driver.
func TestTargetCarriesCipherSuite(t *testing.T) {
	h := newHarness(t, fastConfig())
	m, err := h.st.CreateMachine(context.Background(), admin, store.NewMachine{
		Hostname: "c17", MACs: []string{"52:54:00:00:99:01"}, State: store.StateReady,
		Power: store.PowerParams{Driver: "fake", Address: "bmc17", Username: "u", Password: "p", CipherSuite: 17}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitFinal(h.request(m.ID, store.PowerQuery).ID)
	if tg := h.fake.LastTarget("bmc17/u"); tg.CipherSuite != 17 || tg.Password != "p" {
		t.Errorf("target %+v, want cipher suite 17", tg)
	}
}

// TestUnreadableSecretFailsTheRequest: a machine whose BMC password the
// keyring cannot open (a database restored without its key file, started
// anyway) gets a failed request that names it and says what to do, and no
// command reaches its BMC.
func TestUnreadableSecretFailsTheRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.FileName)
	st, err := store.Open(path, store.Options{Secrets: store.MemoryKeys()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.CreateMachine(context.Background(), admin, store.NewMachine{
		Hostname: "lost", MACs: []string{"52:54:00:00:98:01"}, State: store.StateReady,
		Power: store.PowerParams{Driver: "fake", Address: "bmc98", Username: "u", Password: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = store.Open(path, store.Options{Secrets: store.MemoryKeys(), AcceptLostSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessOn(t, st, fastConfig())
	r := h.request(m.ID, store.PowerOn)
	h.waitFinal(r.ID)
	got := h.get(r.ID)
	if got.State != store.PowerFailed || !strings.Contains(got.Error, "machine lost:") ||
		!strings.Contains(got.Error, "rackd machines set lost --power-password") {
		t.Fatalf("request for a machine with a lost password: %+v", got)
	}
	for _, c := range []string{powertest.CmdOn, powertest.CmdStatus} {
		if n := h.fake.Count("bmc98/u", c); n != 0 {
			t.Errorf("%d %s commands reached the BMC", n, c)
		}
	}
}

// TestCoalescing: while a command hangs, requests pile up; when it returns,
// they fold into the newest desired state and say so.
func TestCoalescing(t *testing.T) {
	h := newHarness(t, fastConfig())
	id, key := h.machine("n1", "hang")
	h.fake.Hang("hang")
	first := h.request(id, store.PowerQuery)
	h.waitFor("the first command on the wire", func() bool { return h.fake.InFlight() == 1 })
	a := h.request(id, store.PowerOn)
	b := h.request(id, store.PowerCycle)
	c := h.request(id, store.PowerOff)
	d := h.request(id, store.PowerOn)
	e := h.request(id, store.PowerQuery)
	h.fake.Release("hang")
	h.waitFinal(first.ID, a.ID, b.ID, c.ID, d.ID, e.ID)
	if got := h.get(first.ID); got.State != store.PowerDone {
		t.Errorf("the request on the wire: %+v", got)
	}
	for _, r := range []store.PowerRequest{a, b, c, e} {
		if got := h.get(r.ID); got.State != store.PowerSuperseded || got.SupersededBy != d.ID {
			t.Errorf("%s %s: %s by %q, want superseded by %s", r.ID, r.Action, got.State, got.SupersededBy, d.ID)
		}
	}
	if got := h.get(d.ID); got.State != store.PowerDone {
		t.Errorf("winner %+v", got)
	}
	if h.fake.Count(key, powertest.CmdOn) != 1 || h.fake.Count(key, powertest.CmdOff) != 0 || h.fake.Count(key, powertest.CmdCycle) != 0 {
		t.Errorf("commands: on %d off %d cycle %d, want only the winner's on",
			h.fake.Count(key, powertest.CmdOn), h.fake.Count(key, powertest.CmdOff), h.fake.Count(key, powertest.CmdCycle))
	}
	h.waitFor("the superseded cycle to be counted", func() bool {
		return testutil.ToFloat64(h.q.m.requests.WithLabelValues("cycle", "superseded")) == 1
	})
}

func TestCoalescePicksCycleOverLaterOn(t *testing.T) {
	rs := func(actions ...store.PowerAction) []store.PowerRequest {
		var out []store.PowerRequest
		for i, a := range actions {
			out = append(out, store.PowerRequest{ID: fmt.Sprintf("pr-%d", i+1), Action: a})
		}
		return out
	}
	for _, tc := range []struct {
		in   []store.PowerRequest
		want string
	}{
		{rs(store.PowerQuery), "pr-1"},
		{rs(store.PowerQuery, store.PowerQuery), "pr-2"},
		{rs(store.PowerOn, store.PowerQuery), "pr-1"},
		{rs(store.PowerCycle, store.PowerOn), "pr-1"},
		{rs(store.PowerCycle, store.PowerOff, store.PowerOn), "pr-3"},
		{rs(store.PowerOn, store.PowerCycle), "pr-2"},
		{rs(store.PowerCycle, store.PowerOff), "pr-2"},
	} {
		w, fold, _ := coalesce(tc.in)
		if w.ID != tc.want || len(fold) != len(tc.in)-1 {
			t.Errorf("coalesce %v: winner %s fold %v, want %s", tc.in, w.ID, fold, tc.want)
		}
	}
	in := rs(store.PowerOn, store.PowerOn)
	in[0].NextBoot = "pxe"
	if _, _, nb := coalesce(in); nb != "pxe" {
		t.Errorf("a folded on's next boot was lost: %q", nb)
	}
}

// TestNoCancelOnTheWire: a newer request does not cut a command that is on
// the wire; it waits for it.
func TestNoCancelOnTheWire(t *testing.T) {
	h := newHarness(t, fastConfig())
	id, key := h.machine("n1", "hang")
	h.fake.Hang("hang")
	on := h.request(id, store.PowerOn)
	h.waitFor("the on command on the wire", func() bool { return h.fake.InFlight() == 1 })
	off := h.request(id, store.PowerOff)
	time.Sleep(100 * time.Millisecond) // give a wrong implementation time to cancel
	if h.fake.InFlight() != 1 || h.get(on.ID).State != store.PowerRunning {
		t.Fatalf("the command on the wire was disturbed: in flight %d, %+v", h.fake.InFlight(), h.get(on.ID))
	}
	h.fake.Release("hang")
	h.waitFinal(on.ID, off.ID)
	if got := h.get(on.ID); got.State != store.PowerDone {
		t.Errorf("on: %+v, want done", got)
	}
	if got := h.get(off.ID); got.State != store.PowerDone || h.fake.State(key) != power.StateOff {
		t.Errorf("off: %+v, fake %v", got, h.fake.State(key))
	}
}

// TestBackoffCancelled: a request waiting to retry is superseded at once by
// a newer one that wants another final state.
func TestBackoffCancelled(t *testing.T) {
	cfg := fastConfig()
	cfg.BackoffBase, cfg.BackoffMax = time.Hour, time.Hour
	h := newHarness(t, cfg)
	id, key := h.machine("n1", "bmc1")
	h.fake.Fail("bmc1", 1, power.ErrBMC)
	on := h.request(id, store.PowerOn)
	h.waitFor("the first attempt to fail", func() bool { return h.fake.Count(key, powertest.CmdOn) == 1 && h.get(on.ID).Attempts == 1 })
	off := h.request(id, store.PowerOff)
	h.waitFinal(on.ID, off.ID)
	if got := h.get(on.ID); got.State != store.PowerSuperseded || got.SupersededBy != off.ID {
		t.Errorf("on in backoff: %+v, want superseded by %s", got, off.ID)
	}
	if got := h.get(off.ID); got.State != store.PowerDone {
		t.Errorf("off: %+v", got)
	}
	// Same final state: the backoff is not cut, and the newer one waits.
	h.fake.Fail("bmc1", 1, power.ErrBMC)
	cfg2 := h.request(id, store.PowerOn)
	h.waitFor("the attempt to fail", func() bool { return h.get(cfg2.ID).Attempts == 1 && h.fake.Count(key, powertest.CmdOn) == 2 })
	again := h.request(id, store.PowerCycle)
	h.settled(id)
	if got := h.get(cfg2.ID); got.State != store.PowerRunning {
		t.Errorf("a newer request with the same final state cut the backoff: %+v", got)
	}
	if got := h.get(again.ID); got.State != store.PowerPending {
		t.Errorf("newer request: %+v", got)
	}
}

// TestPerMachineSerialisation: many concurrent requests to one machine,
// never two commands at once to it, every request ends. Callers that find
// store.MaxOpenPower requests waiting are refused and ask again, as a
// client would; the store keeps as many finished requests of a machine as
// the test makes (store.PowerHistoryKeep), so each can be looked at.
func TestPerMachineSerialisation(t *testing.T) {
	h := newHarness(t, fastConfig())
	h.fake.SetLatency(2 * time.Millisecond)
	id, key := h.machine("n1", "bmc1")
	actions := []store.PowerAction{store.PowerOn, store.PowerOff, store.PowerCycle, store.PowerQuery}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	const goroutines = 4
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range store.PowerHistoryKeep / goroutines {
				r, err := h.st.RequestPower(context.Background(), admin, id, actions[(g+i)%4], "")
				for deadline := time.Now().Add(30 * time.Second); store.CodeOf(err) == store.CodeConflict && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
					r, err = h.st.RequestPower(context.Background(), admin, id, actions[(g+i)%4], "")
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, r.ID)
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	h.waitFinal(ids...)
	if n := h.fake.MaxInFlightMachine(key); n != 1 {
		t.Errorf("%d commands at once to one machine", n)
	}
	done := 0
	for _, id := range ids {
		r := h.get(id)
		switch r.State {
		case store.PowerDone:
			done++
		case store.PowerSuperseded:
			if r.SupersededBy == "" {
				t.Errorf("%s superseded by nobody", id)
			}
		default:
			t.Errorf("%s ended %s", id, r.State)
		}
	}
	if done == 0 {
		t.Error("nothing done")
	}
}

// TestBounds: the global bound and the per-BMC bound hold, and both are
// reached (parallelism happens).
func TestBounds(t *testing.T) {
	cfg := fastConfig()
	cfg.Global, cfg.PerBMC = 6, 2
	h := newHarness(t, cfg)
	h.fake.SetLatency(20 * time.Millisecond)
	var ids []string
	for b := range 5 {
		for i := range 6 {
			id, _ := h.machine(fmt.Sprintf("m%d-%d", b, i), fmt.Sprintf("bmc%d", b))
			ids = append(ids, h.request(id, store.PowerOn).ID)
		}
	}
	h.waitFinal(ids...)
	if n := h.fake.MaxInFlight(); n > 6 || n < 2 {
		t.Errorf("max in flight %d, want 2..6", n)
	}
	for b := range 5 {
		if n := h.fake.MaxInFlightAddr(fmt.Sprintf("bmc%d", b)); n > 2 {
			t.Errorf("bmc%d saw %d commands at once, bound 2", b, n)
		}
	}
	for _, id := range ids {
		if r := h.get(id); r.State != store.PowerDone {
			t.Errorf("%+v", r)
		}
	}
}

// TestMinInterval: commands to one BMC start at least MinInterval apart,
// even for different machines behind it.
func TestMinInterval(t *testing.T) {
	cfg := fastConfig()
	cfg.PerBMC, cfg.MinInterval = 3, 30*time.Millisecond
	h := newHarness(t, cfg)
	var ids []string
	for i := range 3 {
		id, _ := h.machine(fmt.Sprintf("m%d", i), "chassis")
		ids = append(ids, h.request(id, store.PowerOn).ID)
	}
	h.waitFinal(ids...)
	starts := h.fake.Starts("chassis")
	if len(starts) < 6 {
		t.Fatalf("%d commands, want at least 6 (on + status each)", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		// A few milliseconds of slack: the fake stamps its own start a
		// moment after the queue does.
		if gap := starts[i].Sub(starts[i-1]); gap < 25*time.Millisecond {
			t.Errorf("commands %d and %d to one BMC %s apart, minimum 30ms", i-1, i, gap)
		}
	}
}

// TestHangIsolation: one BMC hangs; the 99 other machines finish while its
// command is still on the wire.
func TestHangIsolation(t *testing.T) {
	cfg := fastConfig()
	cfg.Global = 8
	cfg.CommandTimeout = time.Minute
	h := newHarness(t, cfg)
	h.fake.SetLatency(time.Millisecond)
	hungID, _ := h.machine("hung", "bmc-hang")
	h.fake.Hang("bmc-hang")
	hung := h.request(hungID, store.PowerOn)
	h.waitFor("the hung command", func() bool { return h.fake.InFlight() == 1 })
	var ids []string
	for i := range 99 {
		id, _ := h.machine(fmt.Sprintf("m%d", i), fmt.Sprintf("bmc%d", i))
		ids = append(ids, h.request(id, store.PowerCycle).ID)
	}
	h.waitFinal(ids...)
	for _, id := range ids {
		if r := h.get(id); r.State != store.PowerDone {
			t.Errorf("%+v", r)
		}
	}
	if r := h.get(hung.ID); r.State != store.PowerRunning {
		t.Errorf("the hung request: %+v, want still running", r)
	}
	h.fake.Release("bmc-hang")
	h.waitFinal(hung.ID)
}

// TestHangTimesOut: a command that never answers fails at the command
// timeout with a timeout error, after the retries.
func TestHangTimesOut(t *testing.T) {
	cfg := fastConfig()
	cfg.CommandTimeout, cfg.Retries = 50*time.Millisecond, 1
	h := newHarness(t, cfg)
	id, key := h.machine("n1", "hang")
	h.fake.Hang("hang")
	r := h.request(id, store.PowerOff)
	h.waitFinal(r.ID)
	got := h.get(r.ID)
	if got.State != store.PowerFailed || got.Attempts != 2 || !strings.Contains(got.Error, "timeout") {
		t.Errorf("%+v", got)
	}
	if n := h.fake.Count(key, powertest.CmdOff); n != 2 {
		t.Errorf("%d offs sent, want 2", n)
	}
	h.waitFor("two timeouts counted", func() bool { return testutil.ToFloat64(h.q.m.bmcErrors.WithLabelValues("timeout")) == 2 })
}

func TestRetriesThenFailed(t *testing.T) {
	h := newHarness(t, fastConfig())
	id, key := h.machine("n1", "bmc1")
	h.fake.Fail("bmc1", -1, power.ErrBMC)
	r := h.request(id, store.PowerOn)
	h.waitFinal(r.ID)
	got := h.get(r.ID)
	if got.State != store.PowerFailed || got.Attempts != 3 || !strings.Contains(got.Error, "refused") {
		t.Errorf("%+v", got)
	}
	if n := h.fake.Count(key, powertest.CmdOn); n != 3 {
		t.Errorf("%d ons sent, want 3 (1 + 2 retries)", n)
	}
	evs, _ := h.st.Events(id, 1)
	if len(evs) != 1 || evs[0].Action != "power-failed" || !strings.Contains(evs[0].Reason, "refused") {
		t.Errorf("event %+v", evs)
	}
	h.waitFor("the failure to be counted", func() bool {
		return testutil.ToFloat64(h.q.m.requests.WithLabelValues("on", "failed")) == 1
	})
	// Authentication errors are not retried.
	h.fake.Fail("bmc1", -1, power.ErrAuth)
	r = h.request(id, store.PowerOff)
	h.waitFinal(r.ID)
	if got := h.get(r.ID); got.State != store.PowerFailed || got.Attempts != 1 || !strings.Contains(got.Error, "authentication") {
		t.Errorf("auth failure: %+v", got)
	}
}

func TestCircuitBreaker(t *testing.T) {
	cfg := fastConfig()
	cfg.BreakerThreshold, cfg.BreakerCooldown, cfg.Retries = 2, time.Hour, 3
	h := newHarness(t, cfg)
	id, key := h.machine("n1", "bmc1")
	h.fake.Fail("bmc1", -1, power.ErrUnreachable)
	r := h.request(id, store.PowerOn)
	h.waitFinal(r.ID)
	got := h.get(r.ID)
	if got.State != store.PowerFailed || !strings.Contains(got.Error, "circuit breaker open") {
		t.Errorf("%+v", got)
	}
	if n := h.fake.Count(key, powertest.CmdOn); n != 2 {
		t.Errorf("%d commands reached the failing BMC, want 2 (the breaker's threshold)", n)
	}
	if open, _ := h.q.breakers(); open != 1 {
		t.Errorf("%d open breakers", open)
	}
}

// TestFailingBMCsSeries: a BMC that keeps failing has a series with its
// failures in a row, up to the breaker's threshold (the open breaker sends
// nothing more); a BMC that recovered has none; the command timeout is
// exported as configured.
func TestFailingBMCsSeries(t *testing.T) {
	cfg := fastConfig()
	cfg.BreakerThreshold, cfg.BreakerCooldown, cfg.Retries = 2, time.Hour, 3
	h := newHarness(t, cfg)
	bad, _ := h.machine("n1", "bmc1")
	good, _ := h.machine("n2", "bmc2")
	h.fake.Fail("bmc1", -1, power.ErrUnreachable)
	h.fake.Fail("bmc2", 1, power.ErrBMC)
	badReq, goodReq := h.request(bad, store.PowerOn), h.request(good, store.PowerOn)
	h.waitFinal(badReq.ID, goodReq.ID)
	if r := h.get(goodReq.ID); r.State != store.PowerDone {
		t.Fatalf("the request to the BMC that failed once: %+v, want done after a retry", r)
	}
	want := `
# HELP rackd_power_bmc_consecutive_failures Failed commands in a row of each BMC whose last command failed, by BMC address (a success removes the series; at power.breaker_threshold its circuit breaker opens).
# TYPE rackd_power_bmc_consecutive_failures gauge
rackd_power_bmc_consecutive_failures{bmc="bmc1"} 2
# HELP rackd_power_command_timeout_seconds The bound of one BMC command (power.command_timeout); a command still unanswered then fails as a timeout.
# TYPE rackd_power_command_timeout_seconds gauge
rackd_power_command_timeout_seconds 5
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want),
		"rackd_power_bmc_consecutive_failures", "rackd_power_command_timeout_seconds"); err != nil {
		t.Error(err)
	}
}

// TestResume: requests left running by a crash are resumed: an on is
// re-verified first (not sent again when it worked), a sent cycle is
// verified and never sent again.
func TestResume(t *testing.T) {
	h := newHarness(t, fastConfig())
	h.stop()
	ctx := context.Background()
	onID, onKey := h.machine("n1", "bmc1")
	cyID, cyKey := h.machine("n2", "bmc2")
	h.fake.SetState(onKey, power.StateOn)
	h.fake.SetState(cyKey, power.StateOn)
	on := h.request(onID, store.PowerOn)
	cy := h.request(cyID, store.PowerCycle)
	for _, r := range []store.PowerRequest{on, cy} {
		if _, err := h.st.StartPower(ctx, r.ID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.st.PowerProgress(ctx, cy.ID, 1, store.PhaseCycleSent); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitFinal(on.ID, cy.ID)
	if got := h.get(on.ID); got.State != store.PowerDone || h.fake.Count(onKey, powertest.CmdOn) != 0 {
		t.Errorf("resumed on: %+v, %d ons sent", got, h.fake.Count(onKey, powertest.CmdOn))
	}
	if got := h.get(cy.ID); got.State != store.PowerDone || h.fake.Count(cyKey, powertest.CmdCycle) != 0 {
		t.Errorf("resumed cycle: %+v, %d cycles sent", got, h.fake.Count(cyKey, powertest.CmdCycle))
	}
}

// TestSlowCycle: a BMC that takes longer than one status poll to show a
// cycled machine on is polled until the deadline, not cycled again.
func TestSlowCycle(t *testing.T) {
	h := newHarness(t, fastConfig())
	id, key := h.machine("n1", "bmc1")
	h.fake.SetSlow(200*time.Millisecond, 0)
	r := h.request(id, store.PowerCycle)
	h.waitFinal(r.ID)
	if got := h.get(r.ID); got.State != store.PowerDone || h.fake.Count(key, powertest.CmdCycle) != 1 || h.fake.Count(key, powertest.CmdStatus) < 2 {
		t.Errorf("%+v; cycles %d statuses %d", got, h.fake.Count(key, powertest.CmdCycle), h.fake.Count(key, powertest.CmdStatus))
	}
}

// TestPollEnforceAndExpect: polling corrects drift under enforce and only
// reports it under expect.
func TestPollEnforceAndExpect(t *testing.T) {
	cfg := fastConfig()
	cfg.PollInterval = 100 * time.Millisecond
	h := newHarness(t, cfg)
	ready, readyKey := h.machine("ready", "bmc1")
	broken, brokenKey := h.machine("broken", "bmc2")
	ctx := context.Background()
	if _, err := h.st.Transition(ctx, admin, store.TransitionRequest{Machine: broken, Action: store.ActionMarkBroken}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("broken's power-off", func() bool {
		open, _ := h.st.OpenPowerRequests(broken)
		return len(open) == 0 && h.fake.Count(brokenKey, powertest.CmdOff) == 1
	})
	h.fake.SetState(readyKey, power.StateOn)
	h.fake.SetState(brokenKey, power.StateOn)
	h.waitFor("enforce to turn ready off", func() bool { return h.fake.State(readyKey) == power.StateOff })
	h.waitFor("drift on broken to be reported", func() bool {
		evs, _ := h.st.Events(broken, 1)
		return len(evs) == 1 && evs[0].Action == "power-drift"
	})
	// Three more polls of broken: each would have corrected the drift.
	polls := h.fake.Count(brokenKey, powertest.CmdStatus)
	h.waitFor("three more polls", func() bool { return h.fake.Count(brokenKey, powertest.CmdStatus) >= polls+3 })
	if h.fake.State(brokenKey) != power.StateOn || h.fake.Count(brokenKey, powertest.CmdOff) != 1 {
		t.Errorf("expect corrected the drift")
	}
	if ps, _ := h.st.PowerStatusOf(ready); ps.Observed != power.StateOff {
		t.Errorf("ready observed %q", ps.Observed)
	}
	h.waitFor("a correction counted", func() bool { return testutil.ToFloat64(h.q.m.drift.WithLabelValues("corrected")) >= 1 })
}

// TestPhasePowerOnAlwaysCarriesNextBoot: a BMC that refuses set-boot-device
// fails the commissioning power-on with a clear error and event, no
// power-on is sent, and the commissioning fails with that error (the store
// ends a phase whose power-on failed); once the BMC accepts again, the
// commissioning's retry sets next boot PXE first and powers the machine on
// (without it, a machine with an installed disk boots that disk).
func TestPhasePowerOnAlwaysCarriesNextBoot(t *testing.T) {
	cfg := fastConfig()
	cfg.PollInterval = 100 * time.Millisecond
	h := newHarness(t, cfg)
	id, key := h.machine("n1", "bmc1")
	h.fake.FailCommand("bmc1", powertest.CmdBoot, -1, fmt.Errorf("completion code 0xc1: %w", power.ErrBMC))
	if _, err := h.st.Transition(context.Background(), admin, store.TransitionRequest{Machine: id, Action: store.ActionCommission}); err != nil {
		t.Fatal(err)
	}
	open, _ := h.st.OpenPowerRequests(id)
	if len(open) != 1 || open[0].Action != store.PowerOn || open[0].NextBoot != "pxe" {
		t.Fatalf("commissioning queued %+v, want one on with next boot pxe", open)
	}
	first := open[0].ID
	h.waitFinal(first)
	r := h.get(first)
	if r.State != store.PowerFailed || !strings.HasPrefix(r.Error, "BMC refused set-boot-device: ") || strings.Contains(r.Error, "\n") {
		t.Errorf("the refused power-on: %s %q", r.State, r.Error)
	}
	evs, _ := h.st.Events(id, 0)
	var failed []store.Event
	for _, e := range evs {
		if e.Action == "power-failed" {
			failed = append(failed, e)
		}
	}
	if len(failed) == 0 || !strings.Contains(failed[0].Reason, first+" on ") || !strings.Contains(failed[0].Reason, "BMC refused set-boot-device: ") {
		t.Errorf("power-failed events %+v, want the first naming %s and the refusal", failed, first)
	}
	if n := h.fake.Count(key, powertest.CmdOn); n != 0 {
		t.Errorf("%d power-ons sent while the BMC refused set-boot-device", n)
	}

	h.waitFor("the commissioning to fail", func() bool {
		m, _ := h.st.Machine(id)
		return m.State == store.StateFailedCommissioning
	})

	// The BMC takes boot-device commands again: commissioning again powers
	// the machine on, with next boot PXE.
	h.fake.FailCommand("bmc1", powertest.CmdBoot, 0, nil)
	if _, err := h.st.Transition(context.Background(), admin, store.TransitionRequest{Machine: id, Action: store.ActionCommission}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the retry to power the machine on", func() bool { return h.fake.State(key) == power.StateOn })
	if dev, boots := h.fake.BootedFrom(key); dev != power.BootPXE || boots != 1 {
		t.Errorf("the machine booted %d time(s), the last from %q; want once, from pxe", boots, dev)
	}
}

func TestMetricsExposition(t *testing.T) {
	h := newHarness(t, fastConfig())
	id, _ := h.machine("n1", "bmc1")
	h.waitFinal(h.request(id, store.PowerOn).ID)
	h.waitFor("two commands counted (on, status) and the request", func() bool {
		return testutil.ToFloat64(h.q.m.commands) == 2 && testutil.ToFloat64(h.q.m.requests.WithLabelValues("on", "done")) == 1
	})
	// requests_total: every action and outcome from the start (4 x 3).
	n, err := testutil.GatherAndCount(h.reg, "rackd_power_requests_total", "rackd_power_queue_depth", "rackd_power_commands_total",
		"rackd_power_command_timeout_seconds")
	if err != nil || n != 15 {
		t.Errorf("gathered %d series, want 15: %v", n, err)
	}
	lint, err := testutil.GatherAndLint(h.reg)
	if err != nil || len(lint) > 0 {
		t.Errorf("lint: %v %v", lint, err)
	}
}

// TestStopWhileKicked: a queue stopped while machines are being kicked
// (a watchdog's expiry, an API request) starts no worker once it stops
// waiting for them, and its wait does not race with a worker's start.
func TestStopWhileKicked(t *testing.T) {
	h := newHarness(t, fastConfig())
	var ids []string
	for i := range 8 {
		id, _ := h.machine(fmt.Sprintf("k%d", i), "10.0.0.1")
		ids = append(ids, id)
	}
	h.stop() // the harness's own run
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { h.q.Run(ctx); close(done) }()
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						h.q.Kick(id) // no open request: each worker exits at once
					}
				}
			}()
		}
		time.Sleep(time.Millisecond)
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of its context ending")
		}
		close(stop)
		wg.Wait()
	}
}

// owner owns the machines in its set.
type owner struct {
	mu     sync.Mutex
	owned  map[string]bool
	fenced int
}

func (o *owner) Owns(ctx context.Context, machine string) (context.Context, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return ctx, o.owned[machine]
}

func (o *owner) Fenced(string) {
	o.mu.Lock()
	o.fenced++
	o.mu.Unlock()
}

func (o *owner) set(machine string, owned bool) {
	o.mu.Lock()
	o.owned[machine] = owned
	o.mu.Unlock()
}

// TestOwner: a queue with an owner drives only the machines it owns; a
// machine it stops owning mid-request is left with its request open (for
// the agent that owns it now), and taken up again, resumed, once owned.
func TestOwner(t *testing.T) {
	h := newHarness(t, fastConfig())
	h.stop()
	o := &owner{owned: map[string]bool{}}
	h.q.SetOwner(o)
	mine, mineKey := h.machine("mine", "bmc1")
	other, otherKey := h.machine("other", "bmc2")
	o.set(mine, true)
	rOther := h.request(other, store.PowerOn)
	rMine := h.request(mine, store.PowerOn)
	h.start()
	h.waitFinal(rMine.ID)
	if got := h.get(rOther.ID); got.State != store.PowerPending || h.fake.Count(otherKey, powertest.CmdOn) != 0 {
		t.Fatalf("a machine the queue does not own: %+v, %d ons sent", got, h.fake.Count(otherKey, powertest.CmdOn))
	}
	o.set(other, true)
	h.q.Resume()
	h.waitFinal(rOther.ID)
	if got := h.get(rOther.ID); got.State != store.PowerDone {
		t.Fatalf("once owned: %+v", got)
	}

	// Lost while the command is on the wire: the command finishes, the
	// verification is not sent, the request stays running.
	h.fake.Hang("bmc1")
	rLost := h.request(mine, store.PowerOff)
	h.waitFor("the off on the wire", func() bool { return h.get(rLost.ID).State == store.PowerRunning && h.fake.InFlight() == 1 })
	before := h.fake.Count(mineKey, powertest.CmdStatus)
	o.set(mine, false)
	h.fake.Release("bmc1")
	h.waitFor("the worker to give the machine up", func() bool {
		h.q.mu.Lock()
		defer h.q.mu.Unlock()
		return h.q.workers[mine] == nil
	})
	if got := h.get(rLost.ID); got.State != store.PowerRunning || h.fake.Count(mineKey, powertest.CmdStatus) != before {
		t.Fatalf("lost mid-request: %+v, %d status reads after the loss", got, h.fake.Count(mineKey, powertest.CmdStatus)-before)
	}
	o.set(mine, true)
	h.q.Resume()
	h.waitFinal(rLost.ID)
	if got := h.get(rLost.ID); got.State != store.PowerDone || h.fake.State(mineKey) != power.StateOff {
		t.Fatalf("resumed by its owner: %+v, power %v", got, h.fake.State(mineKey))
	}
}
