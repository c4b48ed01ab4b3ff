package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

// OnEvent is told about every committed event, once, after its commit:
// the event is readable by then. A refused operation tells nothing.
func TestOnEvent(t *testing.T) {
	s := storetest.New(t)
	var (
		mu   sync.Mutex
		got  []store.Event
		seen []bool // whether the event was in the database when told
	)
	s.OnEvent(func(e store.Event) {
		evs, _ := s.Events(e.Machine, 0)
		in := false
		for _, x := range evs {
			in = in || x.Seq == e.Seq
		}
		mu.Lock()
		got, seen = append(got, e), append(seen, in)
		mu.Unlock()
	})
	m := create(t, s, store.NewMachine{Hostname: "web1", MACs: []string{nextMAC()}, State: store.StateReady})
	if _, err := s.Transition(t.Context(), admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionMarkBroken, Reason: "fan"}); err != nil {
		t.Fatal(err)
	}
	// Refused: no event.
	if _, err := s.Transition(t.Context(), admin, store.TransitionRequest{Machine: m.ID, Action: store.ActionMarkBroken}); err == nil {
		t.Fatal("a second mark-broken was accepted")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Action != "create" || got[1].Action != "mark-broken" || got[1].From != store.StateReady ||
		got[1].To != store.StateBroken || got[1].Reason != "fan" || got[1].Seq == 0 {
		t.Fatalf("told %+v", got)
	}
	for i, in := range seen {
		if !in {
			t.Errorf("event %d was told before it was committed", i)
		}
	}
	s.OnEvent(nil)
	create(t, s, store.NewMachine{Hostname: "web2", MACs: []string{nextMAC()}})
	if len(got) != 2 {
		t.Errorf("told after the hook was removed: %+v", got[2:])
	}
}

func TestRecentEvents(t *testing.T) {
	s := storetest.New(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, create(t, s, store.NewMachine{Hostname: fmt.Sprintf("web%d", i), MACs: []string{nextMAC()}, State: store.StateReady}).ID)
	}
	// Events of the machines interleaved, so that key order (by machine)
	// is not sequence order.
	for _, id := range []string{ids[3], ids[0], ids[4]} {
		if _, err := s.Transition(t.Context(), admin, store.TransitionRequest{Machine: id, Action: store.ActionMarkBroken}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		limit int
		want  []string // machine of each event, newest first
	}{
		{0, nil},
		{1, []string{ids[4]}},
		{3, []string{ids[4], ids[0], ids[3]}},
		{4, []string{ids[4], ids[0], ids[3], ids[4]}},
		{100, []string{ids[4], ids[0], ids[3], ids[4], ids[3], ids[2], ids[1], ids[0]}},
	}
	for _, tc := range tests {
		evs, err := s.RecentEvents(tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, e := range evs {
			got = append(got, e.Machine)
			if i > 0 && e.Seq >= evs[i-1].Seq {
				t.Errorf("limit %d: not newest first: %d after %d", tc.limit, e.Seq, evs[i-1].Seq)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("limit %d: machines %v, want %v", tc.limit, got, tc.want)
		}
	}
}

func TestPowerHistory(t *testing.T) {
	s := storetest.New(t)
	a := create(t, s, store.NewMachine{Hostname: "web1", MACs: []string{nextMAC()}, State: store.StateReady, Power: manual})
	b := create(t, s, store.NewMachine{Hostname: "web2", MACs: []string{nextMAC()}, State: store.StateReady, Power: manual})
	var want []string
	for i, id := range []string{a.ID, b.ID, a.ID, a.ID, b.ID} {
		r, err := s.RequestPower(t.Context(), admin, id, store.PowerQuery, fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if id == a.ID {
			want = append([]string{r.ID}, want...)
		}
	}
	got, err := s.PowerHistory(a.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
		if r.Machine != a.ID {
			t.Errorf("request %s is %s's", r.ID, r.Machine)
		}
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("history %v, want %v (newest first)", ids, want)
	}
	if two, _ := s.PowerHistory(a.ID, 2); len(two) != 2 || two[0].ID != want[0] {
		t.Errorf("limit 2: %+v", two)
	}
}

// The event of a move to a failed state carries the console tail the hook
// gives for that machine (made valid UTF-8); other events carry none, and
// without a hook nothing is attached.
func TestConsoleTailOnFailure(t *testing.T) {
	var (
		mu   sync.Mutex
		now  = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
		asks []string
	)
	s := storetest.New(t, func(o *store.Options) {
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	s.ConsoleTail(func(machine string) []byte {
		asks = append(asks, machine)
		return []byte("kernel panic\xff\r\n")
	})
	m := create(t, s, store.NewMachine{Hostname: "c1", MACs: []string{nextMAC()}, Power: manual})
	transition(t, s, admin, "c1", store.ActionCommission)
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if _, err := s.Expire(t.Context(), store.Timeouts{Commissioning: time.Hour, Deploying: time.Hour}); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(m.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.To != store.StateFailedCommissioning || last.Console != "kernel panic\uFFFD\r\n" {
		t.Fatalf("failure event %+v", last)
	}
	for _, e := range evs[:len(evs)-1] {
		if e.Console != "" {
			t.Errorf("event %s carries a console tail", e.Action)
		}
	}
	if fmt.Sprint(asks) != "["+m.ID+"]" {
		t.Errorf("hook asked for %v", asks)
	}
	s.ConsoleTail(nil)
	transition(t, s, admin, "c1", store.ActionCommission)
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	s.Expire(t.Context(), store.Timeouts{Commissioning: time.Hour, Deploying: time.Hour})
	evs, _ = s.Events(m.ID, 0)
	if last := evs[len(evs)-1]; last.To != store.StateFailedCommissioning || last.Console != "" {
		t.Errorf("without the hook: %+v", last)
	}
}
