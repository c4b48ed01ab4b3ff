package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"rackd/store/kv"
)

// What the store keeps in memory (the subnets cache, the MAC index of
// addresses) must follow every writer of a shared engine, not only this
// store's own commits. On such an engine (kv.Follower) the store loads that
// state at one revision R and watches the engine from R+1: each change
// another agent commits updates it, and the store's own commits, which
// arrive too, are applied again harmlessly (the MAC index keeps, for each
// address, the revision its entry reflects, and ignores older news).
//
// A store never reports a revision (Revision, WaitRevision) whose changes
// its reads do not show yet. There is one stream of changes, the engine's
// Watch, and everything kept in memory follows it in one order: the engine
// applies each revision to its mirror of the address records first (reads
// of offers and acknowledgements), then hands it to applyChanges, which
// applies it to the MAC index and the subnets cache and only then
// advances the revision. Nothing else follows the engine on its own.

// follower is the state of a store that follows a kv.Follower.
type follower struct {
	e kv.Follower

	mu sync.Mutex
	// applied is the revision up to which every change is applied;
	// advanced is closed and replaced whenever it grows.
	applied  int64
	advanced chan struct{}
	// own holds the revisions of this store's own commits not yet seen
	// by the watch, so that their power requests and events are not told
	// twice (the commit told of them).
	own map[int64]bool

	// inflight holds a channel for each commit from before it is sent
	// until its revision is in own, closed then: the watch waits for
	// those in flight to know that a revision it did not find in own is
	// another agent's. New commits do not wait for the watch.
	inflight map[uint64]chan struct{}
	ticket   uint64

	// alone is held for reading by every transaction's first run, and for
	// writing by the run again of one that conflicted: transactions that
	// contend (allocations, which all walk the free machines) would
	// otherwise rerun each other for ever, while those that do not (ACKs
	// of different addresses) stay in flight together.
	alone sync.RWMutex

	// imagesChanged is closed, and replaced, whenever the watch applies a
	// change to the image registry (see ImagesChanged).
	imagesChanged chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// Revision is the engine revision up to which this store has applied
// every change, its own and other agents'; 0 on a database file.
func (s *Store) Revision() int64 {
	f := s.follow
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// WaitRevision returns once every change up to engine revision rev is
// applied to this store's in-memory state (a leader taking over waits for
// what the previous one wrote), or with ctx's error. On a database file it
// returns nil at once: there is no other writer.
func (s *Store) WaitRevision(ctx context.Context, rev int64) error {
	f := s.follow
	if f == nil {
		return nil
	}
	applied, _ := f.state()
	if applied >= rev {
		return nil
	}
	// The watch delivers only revisions that changed the store's keys:
	// wait for the last of those at or before rev.
	last, err := f.e.LastChange(ctx, rev)
	if err != nil {
		return fmt.Errorf("store: wait for revision %d: %w", rev, err)
	}
	for {
		applied, advanced := f.state()
		if applied >= last {
			f.advance(rev)
			return nil
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return fmt.Errorf("store: wait for revision %d (applied %d of %d): %w", rev, applied, last, ctx.Err())
		}
	}
}

func (f *follower) state() (int64, chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied, f.advanced
}

// advance records that everything up to rev is applied.
func (f *follower) advance(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rev <= f.applied {
		return
	}
	f.applied = rev
	close(f.advanced)
	f.advanced = make(chan struct{})
	for r := range f.own {
		if r <= rev {
			delete(f.own, r)
		}
	}
}

// begin registers a commit about to be sent; end(ticket, rev) records its
// revision (0: none) once it is known.
func (f *follower) begin() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ticket++
	f.inflight[f.ticket] = make(chan struct{})
	return f.ticket
}

func (f *follower) end(ticket uint64, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rev > f.applied {
		f.own[rev] = true
	}
	close(f.inflight[ticket])
	delete(f.inflight, ticket)
}

// isOwn reports whether rev is one of the store's own commits, once every
// commit in flight now has recorded its revision.
func (f *follower) isOwn(rev int64) bool {
	f.mu.Lock()
	var wait []chan struct{}
	for _, ch := range f.inflight {
		wait = append(wait, ch)
	}
	f.mu.Unlock()
	for _, ch := range wait {
		<-ch
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.own[rev]
}

// startFollowing loads the in-memory state at one revision and starts
// the watch from the next.
func (s *Store) startFollowing(e kv.Follower) error {
	f := &follower{e: e, advanced: make(chan struct{}), own: map[int64]bool{}, inflight: map[uint64]chan struct{}{},
		imagesChanged: make(chan struct{}), done: make(chan struct{})}
	s.ipam.shared = true
	if m, ok := e.(mirrorEngine); ok {
		// DHCP offers and acknowledgements read only addresses and the
		// clients' lease keys: from memory, they cost the engine
		// nothing but the commit. The engine loads them with the state
		// below and keeps them from the same watch.
		m.Mirror(string(bucketAddresses), string(bucketLeaseMACs))
	}
	rev, err := s.loadState(e)
	if err != nil {
		return err
	}
	f.applied = rev
	s.follow = f
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go s.watchLoop(ctx, rev)
	return nil
}

// mirrorEngine is an engine that can keep buckets in memory for the
// transactions that ask for it (kv.WithMirroredReads), loaded by ViewRev
// and kept by Watch, each revision before Watch hands it over.
type mirrorEngine interface {
	Mirror(buckets ...string)
}

// stopFollowing ends the watch and waits for it.
func (s *Store) stopFollowing() {
	if f := s.follow; f != nil {
		f.cancel()
		<-f.done
	}
}

// loadState reads the subnets and the MAC index at one revision and
// installs them (the engine loads its mirror at the same revision); it
// returns the revision.
func (s *Store) loadState(e kv.Follower) (int64, error) {
	var (
		subnets []Subnet
		macs    map[netip.Addr]string
	)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	defer cancel()
	rev, err := e.ViewRev(ctx, func(tx kv.Tx) error {
		subnets, macs = nil, map[netip.Addr]string{}
		if tx.Bucket(bucketSubnets) != nil {
			var err error
			if subnets, err = readSubnets(tx); err != nil {
				return err
			}
		}
		return forEachAddressMAC(tx, func(mac string, ip netip.Addr) { macs[ip] = mac })
	})
	if err != nil {
		return 0, fmt.Errorf("load the subnets and the MAC index: %w", err)
	}
	s.ipam.subnets.Store(&subnets)
	s.ipam.macs.load(macs, rev)
	return rev, nil
}

// watchLoop applies the engine's changes from rev+1 until the store
// closes; a compacted watch reloads everything at a new revision.
func (s *Store) watchLoop(ctx context.Context, rev int64) {
	f := s.follow
	defer close(f.done)
	for {
		err := f.e.Watch(ctx, rev+1, s.applyChanges)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, kv.ErrCompacted) {
			slog.Warn("store: the engine compacted changes this agent had not seen; loading its state again", "engine", s.path, "err", err)
		} else {
			slog.Error("store: following the engine failed; loading its state again", "engine", s.path, "err", err)
		}
		for {
			if rev, err = s.loadState(f.e); err == nil {
				break
			}
			slog.Error("store: load the engine's state", "engine", s.path, "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
		}
		f.advance(rev)
		// Images made or deleted meanwhile were not seen either, nor
		// tokens revoked, users removed or machines released.
		f.imagesDidChange()
		s.access.fire()
		// Power requests made meanwhile were not seen: every machine
		// with an open one is told again.
		if ids, err := s.MachinesWithOpenPower(); err == nil {
			s.notifyPower(ids)
		}
	}
}

// applyChanges applies one revision's changes to the in-memory state
// (the engine has applied them to its mirror already), and only then
// records the revision as applied.
func (s *Store) applyChanges(rev int64, changes []kv.Change) error {
	f := s.follow
	var (
		subnets bool
		images  bool
		access  bool
		power   []string
		events  []Event
	)
	for _, c := range changes {
		switch c.Bucket {
		case string(bucketAddresses):
			ip, ok := netip.AddrFromSlice(c.Key)
			if !ok {
				continue
			}
			mac := ""
			if c.Value != nil {
				var r struct {
					MAC string `json:"mac"`
				}
				if json.Unmarshal(c.Value, &r) != nil {
					continue // Check reports a record that does not decode
				}
				mac = r.MAC
			}
			s.ipam.macs.set(ip.Unmap(), mac, rev)
		case string(bucketSubnets):
			subnets = true
		case string(bucketImages):
			images = true
		case string(bucketUsers), string(bucketTokens), string(bucketAPITokens):
			// A token revoked or a user removed (a deletion; a new
			// token or a token's last use noted takes no right away):
			// the streams check their rights again.
			access = access || c.Value == nil
		case string(bucketPowerRequests):
			var r PowerRequest
			if c.Created && json.Unmarshal(c.Value, &r) == nil && r.State == PowerPending {
				power = append(power, r.Machine)
			}
		case string(bucketEvents):
			var e Event
			if c.Created && json.Unmarshal(c.Value, &e) == nil {
				events = append(events, e)
			}
		}
	}
	if subnets {
		s.ipam.invalidateSubnets()
		s.ipam.refreshSubnets(s.viewKV)
	}
	// The store's own requests and events were told by their commit.
	foreign := (len(power) > 0 || len(events) > 0) && !f.isOwn(rev)
	f.advance(rev)
	if images {
		f.imagesDidChange()
	}
	if access {
		s.access.fire()
	}
	// Told after the state is applied: whoever hears of a request or an
	// event may read the store and find what it was told of.
	if foreign {
		s.notifyPower(power)
		if fn := s.eventHook(); fn != nil {
			for _, e := range events {
				fn(e)
			}
		}
	}
	return nil
}

// imagesDidChange wakes whoever waits on ImagesChanged.
func (f *follower) imagesDidChange() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.imagesChanged)
	f.imagesChanged = make(chan struct{})
}

// ImagesChanged returns a channel closed the next time the image registry
// of a store on a shared engine changes: an image recorded or deleted,
// here or by another agent (or possibly so: after the watch had to load
// everything again). Each agent keeps the blobs of the registry's images
// and serves bootloaders by name from it, so it looks again then. On a
// database file, which only this process changes, it is nil: never
// closed.
func (s *Store) ImagesChanged() <-chan struct{} {
	f := s.follow
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.imagesChanged
}
