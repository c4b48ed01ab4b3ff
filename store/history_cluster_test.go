package store_test

import (
	"fmt"
	"testing"

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
