package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// A machine's power requests, and how many of them are kept.
//
// Requests are stored by sequence for the whole rack (bucketPowerRequests);
// each machine's are also listed in its power history record, so that
// nothing has to walk the rack's requests to find one machine's: its open
// requests (pending and running, oldest first) and its finished ones
// (done, failed, superseded) in the order they finished. A machine keeps
// its newest PowerHistoryKeep finished requests: the transaction that
// finishes one more deletes the oldest. It has at most MaxOpenPower open
// requests (RequestPower refuses more; a transition or enforcement that
// queues one more supersedes the oldest pending). So a machine holds at
// most PowerHistoryKeep+MaxOpenPower requests, and every transaction
// writes a bounded number of them, within etcd's per-transaction limit
// (DeleteMachine deletes a machine's finished requests in chunks first on
// such an engine).

// PowerHistoryKeep is how many finished power requests each machine keeps
// (what the web UI and the API show of its power history); older ones
// are deleted as newer ones finish.
const PowerHistoryKeep = 32

// MaxOpenPower is how many pending and running power requests one machine
// may have: the queue folds them into one when it gets to them, so more
// would only wait to be superseded.
const MaxOpenPower = 16

// bucketPowerHistory: machine id -> powerHistory. Created by the first
// request (or the indexing at open) rather than by a migration: a missing
// bucket reads as no machine having any request.
var bucketPowerHistory = []byte("power_history")

// powerHistory lists one machine's power requests by sequence number.
type powerHistory struct {
	// Open is its pending and running requests, oldest first.
	Open []uint64 `json:"open,omitempty"`
	// Done is its finished requests, in the order they finished: a
	// superseded request finishes before the one that superseded it, so
	// pruning from the front never leaves a request naming a deleted one.
	Done []uint64 `json:"done,omitempty"`
}

func (t *Tx) powerHistoryOf(machine string) (powerHistory, error) {
	var h powerHistory
	if t.tx.Bucket(bucketPowerHistory) == nil {
		return h, nil
	}
	_, err := t.get(bucketPowerHistory, []byte(machine), &h)
	return h, err
}

func (t *Tx) putPowerHistory(machine string, h powerHistory) error {
	if _, err := t.tx.CreateBucketIfNotExists(bucketPowerHistory); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketPowerHistory, err)
	}
	return t.put(bucketPowerHistory, []byte(machine), h)
}

// recordPower keeps r's machine's history up with r's new state: an open
// request is listed as open, a finished one moves to the finished, and the
// oldest finished beyond PowerHistoryKeep are deleted.
func (t *Tx) recordPower(seq uint64, r PowerRequest) error {
	h, err := t.powerHistoryOf(r.Machine)
	if err != nil {
		return err
	}
	if r.State.Open() {
		if slices.Contains(h.Open, seq) {
			return nil // a progress or a start: the history is the same
		}
		h.Open = append(h.Open, seq)
		return t.putPowerHistory(r.Machine, h)
	}
	h.Open = slices.DeleteFunc(h.Open, func(s uint64) bool { return s == seq })
	if !slices.Contains(h.Done, seq) {
		h.Done = append(h.Done, seq)
	}
	for len(h.Done) > PowerHistoryKeep {
		if err := t.del(bucketPowerRequests, powerKey(h.Done[0])); err != nil {
			return err
		}
		h.Done = h.Done[1:]
	}
	return t.putPowerHistory(r.Machine, h)
}

// makeRoomForPower keeps a machine within MaxOpenPower open requests before
// one more is queued for it by rackd itself (a transition, enforcement): the
// oldest pending request is superseded by by. A request running is left
// alone.
func (t *Tx) makeRoomForPower(machine, by string) error {
	h, err := t.powerHistoryOf(machine)
	if err != nil || len(h.Open) < MaxOpenPower {
		return err
	}
	for _, seq := range h.Open {
		var r PowerRequest
		found, err := t.get(bucketPowerRequests, powerKey(seq), &r)
		if err != nil {
			return err
		}
		if found && r.State == PowerPending {
			return t.supersede(r.ID, by)
		}
	}
	return nil
}

// PowerHistory returns a machine's newest limit power requests, whatever
// their fate, newest first: of its finished ones it keeps the newest
// PowerHistoryKeep.
func (s *Store) PowerHistory(machine string, limit int) ([]PowerRequest, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []PowerRequest
	err := s.view(func(t *Tx) error {
		out = nil
		h, err := t.powerHistoryOf(machine)
		if err != nil {
			return err
		}
		seqs := slices.Concat(h.Open, h.Done)
		slices.SortFunc(seqs, func(a, b uint64) int { return cmp.Compare(b, a) })
		for _, seq := range seqs[:min(limit, len(seqs))] {
			var r PowerRequest
			found, err := t.get(bucketPowerRequests, powerKey(seq), &r)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("store: power request pr-%d of machine %s is listed in its history but has no record", seq, machine)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// deletePower removes a machine's power status, history and every power
// request of it, open or not: a request names a machine that exists
// (Check), and the queue finds nothing to do for one that is gone.
func (t *Tx) deletePower(id string) error {
	if err := t.del(bucketPowerState, []byte(id)); err != nil {
		return err
	}
	h, err := t.powerHistoryOf(id)
	if err != nil {
		return err
	}
	for _, seq := range h.Open {
		if err := t.del(bucketPowerOpen, powerOpenKey(id, seq)); err != nil {
			return err
		}
	}
	for _, seq := range slices.Concat(h.Open, h.Done) {
		if err := t.del(bucketPowerRequests, powerKey(seq)); err != nil {
			return err
		}
	}
	if t.tx.Bucket(bucketPowerHistory) == nil {
		return nil
	}
	return t.del(bucketPowerHistory, []byte(id))
}

// powerDeleteChunk is how many finished requests of a machine being deleted
// one transaction deletes on a shared engine before the one that deletes
// the machine (which deletes up to as many more, and its open requests).
const powerDeleteChunk = 32

// trimPowerForDelete deletes, on a shared engine, all but powerDeleteChunk
// of the finished power requests of the machine req deletes, in
// transactions of powerDeleteChunk, each checking first that the deletion
// would be allowed. What it deleted is history the deletion would delete
// anyway; if the deletion is then refused (the machine became busy
// meanwhile), the machine has lost that much of its power history and
// nothing else.
func (s *Store) trimPowerForDelete(ctx context.Context, req DeleteRequest) error {
	if !s.ipam.shared {
		return nil
	}
	for {
		more := false
		err := s.update(ctx, func(t *Tx) error {
			more = false
			m, err := t.machine(req.Machine)
			if err != nil {
				return err
			}
			if why := busy(m); why != "" && !req.Force {
				return errorf(CodeConflict, "machine %s is not deleted: %s (release it first, or force)", m.Hostname, why)
			}
			h, err := t.powerHistoryOf(m.ID)
			if err != nil || len(h.Done) <= powerDeleteChunk {
				return err
			}
			for _, seq := range h.Done[:powerDeleteChunk] {
				if err := t.del(bucketPowerRequests, powerKey(seq)); err != nil {
					return err
				}
			}
			h.Done = h.Done[powerDeleteChunk:]
			more = len(h.Done) > powerDeleteChunk
			return t.putPowerHistory(m.ID, h)
		})
		if err != nil || !more {
			return err
		}
	}
}

// indexPowerHistory brings every machine's power history record up with
// its requests, at open: a database written before the records existed
// (or by a rackd that did not keep them) has requests no record lists, and
// as many finished ones as were ever made. Each such machine gets its
// record, keeping its newest PowerHistoryKeep finished requests and
// deleting the others, in transactions of at most powerDeleteChunk
// deletions on a shared engine. A database whose records are up to date
// costs one read.
func (s *Store) indexPowerHistory(ctx context.Context) error {
	type req struct {
		seq     uint64
		open    bool
		sorting PowerRequest // Finished and SupersededBy, for the order
	}
	byMachine := map[string][]req{}
	var stale []string
	err := s.view(func(t *Tx) error {
		clear(byMachine)
		stale = nil
		hs := map[string]powerHistory{}
		if b := t.tx.Bucket(bucketPowerHistory); b != nil {
			err := b.ForEach(func(k, v []byte) error {
				var h powerHistory
				if err := json.Unmarshal(v, &h); err != nil {
					return fmt.Errorf("decode the power history of %s: %w", k, err)
				}
				hs[string(k)] = h
				return nil
			})
			if err != nil {
				return err
			}
		}
		all := map[string][]req{}
		err := t.tx.Bucket(bucketPowerRequests).ForEach(func(k, v []byte) error {
			var r PowerRequest
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode power request %x: %w", k, err)
			}
			seq, err := ParsePowerRequestID(r.ID)
			if err != nil {
				return fmt.Errorf("power request %x: %w", k, err)
			}
			all[r.Machine] = append(all[r.Machine], req{seq: seq, open: r.State.Open(),
				sorting: PowerRequest{Finished: r.Finished, SupersededBy: r.SupersededBy}})
			return nil
		})
		if err != nil {
			return err
		}
		for id, rs := range all {
			h := hs[id]
			ok := len(rs) == len(h.Open)+len(h.Done)
			for _, r := range rs {
				ok = ok && (r.open && slices.Contains(h.Open, r.seq) || !r.open && slices.Contains(h.Done, r.seq))
			}
			if !ok {
				byMachine[id] = rs
			}
		}
		for id := range hs {
			if _, ok := all[id]; !ok {
				stale = append(stale, id) // lists requests that are gone
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the power requests: %w", err)
	}
	for _, id := range stale {
		err := s.update(ctx, func(t *Tx) error {
			h, err := t.powerHistoryOf(id)
			if err != nil {
				return err
			}
			for _, seq := range slices.Concat(h.Open, h.Done) {
				if t.bucket(bucketPowerRequests).Get(powerKey(seq)) != nil {
					return nil // made since: the next open looks again
				}
			}
			return t.del(bucketPowerHistory, []byte(id))
		})
		if err != nil {
			return fmt.Errorf("drop the power history of %s: %w", id, err)
		}
	}
	chunk := 0 // no bound
	if s.ipam.shared {
		chunk = powerDeleteChunk
	}
	ids := make([]string, 0, len(byMachine))
	for id := range byMachine {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rs := byMachine[id]
		var (
			open []uint64
			done []req
		)
		for _, r := range rs {
			if r.open {
				open = append(open, r.seq)
			} else {
				done = append(done, r)
			}
		}
		// The order they finished in; of two at once, one superseded
		// first.
		slices.SortFunc(done, func(a, b req) int {
			return cmp.Or(a.sorting.Finished.Compare(b.sorting.Finished),
				cmp.Compare(b.sorting.SupersededBy, a.sorting.SupersededBy), cmp.Compare(a.seq, b.seq))
		})
		var drop []uint64
		for _, r := range done[:max(0, len(done)-PowerHistoryKeep)] {
			drop = append(drop, r.seq)
		}
		var keep []uint64
		for _, r := range done[len(drop):] {
			keep = append(keep, r.seq)
		}
		for len(drop) > 0 {
			n := len(drop)
			if chunk > 0 {
				n = min(n, chunk)
			}
			err := s.update(ctx, func(t *Tx) error {
				h, err := t.powerHistoryOf(id)
				if err != nil {
					return err
				}
				for _, seq := range drop[:n] {
					if err := t.del(bucketPowerRequests, powerKey(seq)); err != nil {
						return err
					}
				}
				if !slices.ContainsFunc(h.Done, func(s uint64) bool { return slices.Contains(drop[:n], s) }) {
					return nil
				}
				h.Done = slices.DeleteFunc(h.Done, func(s uint64) bool { return slices.Contains(drop[:n], s) })
				return t.putPowerHistory(id, h)
			})
			if err != nil {
				return fmt.Errorf("delete old power requests of %s: %w", id, err)
			}
			drop = drop[n:]
		}
		err := s.update(ctx, func(t *Tx) error {
			h, err := t.powerHistoryOf(id)
			if err != nil {
				return err
			}
			// What the record lists and what was found, as they are now
			// (another agent may have moved some on meanwhile).
			var nh powerHistory
			for _, seq := range slices.Concat(keep, h.Done, open, h.Open) {
				if slices.Contains(nh.Done, seq) || slices.Contains(nh.Open, seq) {
					continue
				}
				var r PowerRequest
				found, err := t.get(bucketPowerRequests, powerKey(seq), &r)
				if err != nil {
					return err
				}
				switch {
				case !found:
				case r.State.Open():
					nh.Open = append(nh.Open, seq)
				default:
					nh.Done = append(nh.Done, seq)
				}
			}
			slices.Sort(nh.Open)
			for len(nh.Done) > PowerHistoryKeep {
				if err := t.del(bucketPowerRequests, powerKey(nh.Done[0])); err != nil {
					return err
				}
				nh.Done = nh.Done[1:]
			}
			return t.putPowerHistory(id, nh)
		})
		if err != nil {
			return fmt.Errorf("record the power history of %s: %w", id, err)
		}
	}
	return nil
}

// checkPowerHistory verifies the history records against the requests
// (reqs: each request's machine and whether it is open, by sequence): every
// request is listed in its machine's record, as open or finished as it is,
// every listed one exists, and no machine keeps more than
// PowerHistoryKeep finished.
func (t *Tx) checkPowerHistory(machines map[string]Machine, reqs map[uint64]PowerRequest, bad func(string, ...any)) {
	listed := map[uint64]bool{}
	if b := t.tx.Bucket(bucketPowerHistory); b != nil {
		b.ForEach(func(k, v []byte) error {
			var h powerHistory
			if err := json.Unmarshal(v, &h); err != nil {
				bad("power history of %s: undecodable: %v", k, err)
				return nil
			}
			if _, ok := machines[string(k)]; !ok {
				bad("power history of %s: no such machine", k)
			}
			if len(h.Done) > PowerHistoryKeep {
				bad("power history of %s: %d finished requests, more than the %d kept", k, len(h.Done), PowerHistoryKeep)
			}
			for i, seqs := range [][]uint64{h.Open, h.Done} {
				for _, seq := range seqs {
					r, ok := reqs[seq]
					switch {
					case listed[seq]:
						bad("power history of %s: pr-%d is listed twice", k, seq)
					case !ok:
						bad("power history of %s: pr-%d does not exist", k, seq)
					case r.Machine != string(k):
						bad("power history of %s: pr-%d is machine %s's", k, seq, r.Machine)
					case r.State.Open() != (i == 0):
						bad("power history of %s: pr-%d is %s but listed as open=%v", k, seq, r.State, i == 0)
					}
					listed[seq] = true
				}
			}
			return nil
		})
	}
	for seq, r := range reqs {
		if !listed[seq] {
			bad("power request %s (%s) is not in machine %s's power history", r.ID, r.State, r.Machine)
		}
	}
}
