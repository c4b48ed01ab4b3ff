package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"rackd/power"
)

// runQuery makes a query request for machine id and runs it to done, as the
// queue would, and returns its id.
func runQuery(t *testing.T, s *Store, id string, i int) string {
	t.Helper()
	ctx := context.Background()
	r, err := s.RequestPower(ctx, testAdmin, id, PowerQuery, fmt.Sprintf("poll %d", i))
	if err != nil {
		t.Fatalf("request %d: %v", i, err)
	}
	if _, err := s.StartPower(ctx, r.ID, nil); err != nil {
		t.Fatalf("start %s: %v", r.ID, err)
	}
	if _, err := s.FinishPower(ctx, r.ID, PowerDone, 1, "", power.StateOff); err != nil {
		t.Fatalf("finish %s: %v", r.ID, err)
	}
	return r.ID
}

// TestPowerHistoryKeepsNewest: a machine keeps its newest PowerHistoryKeep
// finished requests; the older ones are gone, by id too.
func TestPowerHistoryKeepsNewest(t *testing.T) {
	s := openTest(t, Options{}, true)
	m := createPowered(t, s, "h1", 1, StateReady)
	other := createPowered(t, s, "h2", 2, StateReady)
	otherID := runQuery(t, s, other.ID, 0)
	var ids []string
	for i := range PowerHistoryKeep + 5 {
		ids = append(ids, runQuery(t, s, m.ID, i))
	}
	hist, err := s.PowerHistory(m.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != PowerHistoryKeep || hist[0].ID != ids[len(ids)-1] || hist[len(hist)-1].ID != ids[5] {
		t.Errorf("history has %d requests, %v first; want %d, %s to %s", len(hist), hist[0].ID, PowerHistoryKeep, ids[len(ids)-1], ids[5])
	}
	for _, id := range ids[:5] {
		if _, err := s.PowerRequest(id); CodeOf(err) != CodeNotFound {
			t.Errorf("PowerRequest(%s) after it was pruned: %v, want not found", id, err)
		}
	}
	if oh, err := s.PowerHistory(other.ID, 100); err != nil || len(oh) != 1 || oh[0].ID != otherID {
		t.Errorf("another machine's history: %v, %v; want its one request %s", oh, err, otherID)
	}
}

// TestOpenPowerRequestsBounded: an admin's request beyond MaxOpenPower
// waiting ones is refused (nothing written); requests rackd queues itself
// supersede the oldest waiting one instead. Either way the queue, when it
// gets to the machine, folds at most MaxOpenPower requests in one
// transaction (which on etcd has room for that many).
func TestOpenPowerRequestsBounded(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	m := createPowered(t, s, "o1", 1, StateReady)
	for i := range MaxOpenPower {
		if _, err := s.RequestPower(ctx, testAdmin, m.ID, PowerQuery, fmt.Sprint(i)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if _, err := s.RequestPower(ctx, testAdmin, m.ID, PowerOn, "one more"); CodeOf(err) != CodeConflict {
		t.Fatalf("request beyond %d waiting: %v, want %s", MaxOpenPower, err, CodeConflict)
	}
	// Transitions queue their policy's request whatever waits.
	for i := range 4 {
		for _, a := range []Action{ActionMarkBroken, ActionMarkFixed} {
			if _, err := s.Transition(ctx, testAdmin, TransitionRequest{Machine: m.ID, Action: a, Reason: fmt.Sprint(i)}); err != nil {
				t.Fatalf("%s %d: %v", a, i, err)
			}
		}
	}
	open, err := s.OpenPowerRequests(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != MaxOpenPower || open[len(open)-1].Action != PowerOff {
		t.Fatalf("%d open requests, the newest %+v; want %d, the last transition's off newest", len(open), open[len(open)-1], MaxOpenPower)
	}
	hist, err := s.PowerHistory(m.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	superseded := 0
	for _, r := range hist {
		if r.State == PowerSuperseded {
			superseded++
		}
	}
	if superseded != 8 {
		t.Errorf("%d requests superseded to make room, want the 8 oldest", superseded)
	}
	ids := make([]string, 0, len(open)-1)
	for _, r := range open[:len(open)-1] {
		ids = append(ids, r.ID)
	}
	if _, err := s.StartPower(ctx, open[len(open)-1].ID, ids); err != nil {
		t.Fatalf("start the newest, folding %d: %v", len(ids), err)
	}
}

// TestPowerHistoryIndexedAtOpen: a database written before machines had
// power history records (here: the records dropped) has them made at open,
// each machine keeping its newest PowerHistoryKeep finished requests and
// every open one; the others are deleted.
func TestPowerHistoryIndexedAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := createPowered(t, s, "l1", 1, StateReady)
	var ids []string
	for i := range PowerHistoryKeep + 10 {
		ids = append(ids, runQuery(t, s, m.ID, i))
	}
	pending, err := s.RequestPower(ctx, testAdmin, m.ID, PowerQuery, "waiting")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketPowerHistory) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Errorf("after indexing at open: %v", err)
	}
	hist, err := s.PowerHistory(m.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != PowerHistoryKeep+1 || hist[0].ID != pending.ID || hist[1].ID != ids[len(ids)-1] {
		t.Errorf("history after indexing: %d requests from %s; want %d from %s", len(hist), hist[0].ID, PowerHistoryKeep+1, pending.ID)
	}
	if _, err := s.PowerRequest(ids[9]); CodeOf(err) != CodeNotFound {
		t.Errorf("an old finished request survived the indexing: %v", err)
	}
	if _, err := s.DeleteMachine(ctx, testAdmin, DeleteRequest{Machine: m.ID}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Errorf("after the deletion: %v", err)
	}
}
