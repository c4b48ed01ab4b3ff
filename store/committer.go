package store

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"rackd/store/kv"
)

// op is one write waiting for the committer.
type op struct {
	ctx   context.Context
	fn    func(*Tx) error
	done  chan error
	delay time.Duration // how long it may wait for others to share its commit
	batch int           // for at most this many (0: no bound but MaxBatch)
	group string        // on a shared engine, who it shares commits with (see patience)
	// then, when set, is called with the outcome instead of sending it on
	// done, on the committer's goroutine (see updateAsync).
	then func(error)
}

// answer reports the operation's outcome to whoever waits for it.
func (o *op) answer(err error) {
	if o.then != nil {
		o.then(err)
		return
	}
	o.done <- err
}

// update runs fn in the next group commit and returns once that commit is
// durable (or fn refused). A cancelled ctx stops the operation only if it has
// not started: once fn has run, its outcome is reported whatever ctx says.
func (s *Store) update(ctx context.Context, fn func(*Tx) error) error {
	return s.updateLazy(ctx, patience{}, fn)
}

// patience is how long an operation may wait for others to share its
// commit: until delay after the previous commit ended, and only while fewer
// than batch operations wait (0: no bound but MaxBatch).
//
// On a shared engine (OpenEngine) operations commit alone, except those of
// one group, which read the same records and would conflict if they
// committed side by side: one commit of a group is in flight at a time,
// carrying the group's operations queued behind it (commitConcurrently).
type patience struct {
	delay time.Duration
	batch int
	group string
}

// The groups of operations that share commits on a shared engine.
const (
	groupLease    = "lease"    // DHCP acknowledgements
	groupAllocate = "allocate" // allocations, which all want the first free machine
)

// updateLazy is update for an operation that may wait for others to share
// its commit (see patience). A DHCP server acknowledging a few thousand
// leases a second pays one fsync'd commit per lease when each commits at
// once; spacing commits a few milliseconds apart under load lets many share
// one, at a latency no DHCP client notices (they wait seconds), while a
// lone lease after a quiet spell commits at once. Once batch of them wait,
// the commit starts at once: at high rates commits follow each other
// back to back, each taking what arrived during the one before. An
// operation with no delay (an API call) ends the wait of the batch it joins.
func (s *Store) updateLazy(ctx context.Context, p patience, fn func(*Tx) error) error {
	if s.opts.ReadOnly {
		// Nobody reads s.ops: queueing would wait forever.
		return ErrReadOnly
	}
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1), delay: p.delay, batch: p.batch, group: p.group}
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	select {
	case s.ops <- o:
		s.nudgeFor(o)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return ErrClosed
	}
	// When Close races with this call, the select above may queue o after the
	// committer's last look at s.ops. The committer answers every op it took
	// before it closes s.stopped, so an op still unanswered then never will be.
	select {
	case err := <-o.done:
		return err
	case <-s.stopped:
		select {
		case err := <-o.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// updateAsync is updateLazy without the wait: fn is queued and then is
// called with its outcome once that is durable (or fn refused), on the
// committer's goroutine, so then must be quick and must not block (a DHCP
// server sends its reply there, saving a goroutine hand-off per lease; on
// a shared engine several operations' then may run at once). It
// returns an error, and then is never called, when fn could not be queued.
// An operation queued as the store closes may never run; its then is not
// called either.
func (s *Store) updateAsync(ctx context.Context, p patience, fn func(*Tx) error, then func(error)) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return s.enqueue(&op{ctx: ctx, fn: fn, delay: p.delay, batch: p.batch, group: p.group, then: then}, true)
}

// QueuedWrites is the number of writes waiting for the committer.
func (s *Store) QueuedWrites() int { return len(s.ops) }

// tryUpdateAsync is updateAsync for bookkeeping that is dropped rather than
// waited for when the write queue is full.
func (s *Store) tryUpdateAsync(delay time.Duration, fn func(*Tx) error, then func(error)) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return s.enqueue(&op{ctx: context.Background(), fn: fn, delay: delay, then: then}, false)
}

// enqueue hands o to the committer. When the queue is full it waits for
// room (until o's context ends or the store closes) if wait is set, and
// otherwise gives up with errQueueFull.
func (s *Store) enqueue(o *op, wait bool) error {
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	if !wait {
		select {
		case s.ops <- o:
			s.nudgeFor(o)
			return nil
		default:
			return errQueueFull
		}
	}
	select {
	case s.ops <- o:
		s.nudgeFor(o)
		return nil
	case <-o.ctx.Done():
		return o.ctx.Err()
	case <-s.stop:
		return ErrClosed
	}
}

var errQueueFull = errors.New("store: write queue full")

// nudgeFor wakes the committer for a queued operation that cannot wait, or
// that makes the operations waiting as many as it waits for at most, or
// when the queue is half full: patient operations do not wake it one by
// one while it sleeps to its commit deadline.
func (s *Store) nudgeFor(o *op) {
	n := s.waiting.Add(1)
	if o.delay <= 0 || (o.batch > 0 && n >= int64(o.batch)) || len(s.ops) >= cap(s.ops)/2 {
		select {
		case s.urgent <- struct{}{}:
		default:
		}
	}
}

func (s *Store) commitLoop() {
	if s.shared != nil {
		s.commitConcurrently()
		return
	}
	defer close(s.stopped)
	batch := make([]*op, 0, s.opts.MaxBatch)
	// lastEnd is when the previous commit finished. Patient operations
	// wait for company only until lastEnd + their delay: after a quiet
	// spell one commits at once, and under load commits are spaced by the
	// delay, each taking everything that arrived meanwhile.
	var lastEnd time.Time
	for {
		select {
		case o := <-s.ops:
			batch = append(batch[:0], o)
			// A nudge from before this batch is stale: what it was for
			// is queued, and the drain below sees it.
			select {
			case <-s.urgent:
			default:
			}
		case <-s.stop:
			// Finish what was queued before Close: it was promised an answer.
			for {
				select {
				case o := <-s.ops:
					s.commit([]*op{o})
				default:
					return
				}
			}
		}
		// Take what is queued; then, if every operation so far can wait,
		// wait (up to the least patient one's delay after the previous
		// commit, while fewer wait than it waits for) for company.
		wait, upTo := batch[0].delay, bound(batch[0].batch, s.opts.MaxBatch)
		var timer *time.Timer
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
				wait = min(wait, o.delay)
				upTo = min(upTo, bound(o.batch, s.opts.MaxBatch))
				continue
			default:
			}
			if wait <= 0 || len(batch) >= upTo {
				break
			}
			left := time.Until(lastEnd.Add(wait))
			if left <= 0 {
				break
			}
			if timer == nil {
				timer = time.NewTimer(left)
			}
			// Sleep to the deadline. Patient operations queue in s.ops
			// meanwhile without waking the committer one by one (a wake-up
			// per lease cost more CPU than the lease's share of the
			// commit); an impatient one, or a queue filling up, nudges.
			select {
			case <-timer.C:
				wait = 0 // take what queued, then commit
			case <-s.urgent:
				// Take what queued; an impatient operation makes wait 0.
			case <-s.stop:
				break drain
			}
		}
		if timer != nil {
			timer.Stop()
		}
		// Operations queued from here on wait for the next commit.
		s.waiting.Add(-int64(len(batch)))
		s.commit(batch)
		lastEnd = time.Now()
	}
}

// commitConcurrently is the committer of a store on a shared engine: each
// operation runs in a transaction of its own as soon as one of
// MaxInFlight slots is free, so that many are in flight at once. The
// engine keeps them serialisable (a conflict reruns one); each is answered
// after its own commit and hooks, as in a group commit.
//
// Operations of a group (DHCP acknowledgements, allocations) are the
// exception: at most patientInFlight commits of a group are in flight,
// and each takes, with the operation that starts it, the group's
// operations queued behind it (up to its batch bound, under the same
// fence). A commit through the engine's consensus costs about the same for
// one record as for thirty, so at a few thousand leases a second one
// commit per lease would be what limits the rate; allocations, which all
// take the first free machine, would conflict with each other side by
// side, and in one commit run one after the other instead. At a trickle
// each still commits at once, alone.
func (s *Store) commitConcurrently() {
	defer close(s.stopped)
	var wg sync.WaitGroup
	// A slot is taken before an operation leaves the queue, so that what
	// waits for one stays counted there (QueuedWrites).
	slots := make(chan struct{}, s.opts.MaxInFlight)
	groupSlots := map[string]chan struct{}{}
	// held is an operation taken from the queue that could not join the
	// batch before it: it goes first next time.
	var held *op
	run := func(o *op) {
		batch := []*op{o}
		var groupSlot chan struct{}
		if o.group != "" {
			if groupSlot = groupSlots[o.group]; groupSlot == nil {
				groupSlot = make(chan struct{}, patientInFlight)
				groupSlots[o.group] = groupSlot
			}
			groupSlot <- struct{}{} // meanwhile, company queues up
			for limit := bound(o.batch, maxShared[o.group]); len(batch) < limit && held == nil; {
				select {
				case next := <-s.ops:
					if next.group == o.group && sameFence(o, next) {
						batch = append(batch, next)
					} else {
						held = next
					}
					continue
				default:
				}
				break
			}
		}
		s.waiting.Add(-int64(len(batch)))
		wg.Go(func() {
			defer func() {
				if groupSlot != nil {
					<-groupSlot
				}
				<-slots
			}()
			s.commit(batch)
		})
	}
	take := func() (*op, bool) {
		if o := held; o != nil {
			held = nil
			return o, true
		}
		select {
		case o := <-s.ops:
			return o, true
		default:
			return nil, false
		}
	}
	for {
		select {
		case slots <- struct{}{}:
		case <-s.stop:
			slots <- struct{}{}
		}
		if o, ok := take(); ok {
			run(o)
			continue
		}
		select {
		case o := <-s.ops:
			run(o)
			continue
		case <-s.stop:
		}
		// Finish what was queued before Close: it was promised an answer,
		// and s.stopped closes only once every one has it.
		for {
			o, ok := take()
			if !ok {
				<-slots
				wg.Wait()
				return
			}
			run(o)
			slots <- struct{}{}
		}
	}
}

// patientInFlight bounds the commits of one group in flight at once on a
// shared engine (maxShared: how many operations one takes, within the
// engine's per-transaction limit; a commit over it is split, see commit).
// One commit of up to sixty acknowledgements at a time
// measured best on a three-member etcd (when sixty fitted in one: before
// each new lease also wrote its client's lease_macs key): at 3200 leases a
// second, four commits of up to 24 in flight kept offers at 3.4 ms and
// acks at 14.8 ms, two of up to 40 at 2.1 and 10.9 ms, one of up to 60 at
// 1.6 and 9.0 ms; while one commits, the next batch fills, so fewer and
// larger commits cost the engine less consensus per lease.
const patientInFlight = 1

// maxShared is, per group, how many operations one commit takes: thirty
// acknowledgements (a new lease: the address record and its client's
// lease_macs key, each compared and written; a renewal three of those) or
// sixteen allocations (a machine, its event, its allocation record, their
// comparisons) stay within etcd's default 128 operations a transaction
// (one over it is split in halves).
var maxShared = map[string]int{groupLease: 30, groupAllocate: 16}

// sameFence reports whether a and b may share a commit: one commit
// checks one fence.
func sameFence(a, b *op) bool {
	fa, _ := kv.FenceFrom(a.ctx)
	fb, _ := kv.FenceFrom(b.ctx)
	return fa == fb
}

// bound is an operation's batch bound, 0 meaning max.
func bound(batch, max int) int {
	if batch <= 0 {
		return max
	}
	return min(batch, max)
}

// errReplay aborts a shared transaction whose operation failed after writing.
var errReplay = errors.New("store: operation failed after writing; replaying alone")

// errNothingWritten rolls back a batch that changed nothing.
var errNothingWritten = errors.New("store: nothing written")

// OnAnswered registers fn, called on the committer's goroutine once each
// commit has answered all its operations (called the then of every
// asynchronous one): a caller that answers its own clients from then (the
// DHCP server's ACKs) can hold what it sends there and send it all in fn,
// in one system call. fn must be quick and must not block. On a shared
// engine commits run concurrently (MaxInFlight): fn is called once after
// each, from several goroutines at once, each call after that commit's
// answers. It replaces the function registered before; nil removes it.
func (s *Store) OnAnswered(fn func()) {
	if fn == nil {
		s.answered.Store(nil)
		return
	}
	s.answered.Store(&fn)
}

// commit runs batch in one transaction and answers every op after the commit.
func (s *Store) commit(batch []*op) {
	defer func() {
		if fn := s.answered.Load(); fn != nil {
			(*fn)()
		}
	}()
	if len(batch) > 1 && s.shared != nil && slices.ContainsFunc(batch[1:], func(o *op) bool { return !sameFence(batch[0], o) }) {
		// Each fence is its own operation's condition: a shared commit
		// carries only one.
		for _, o := range batch {
			s.commit1(o)
		}
		return
	}
	start := time.Now()
	results := make([]error, len(batch))
	wrote := false
	var after []func()
	ctx, cancel := s.commitContext(batch[0])
	defer cancel()
	err := s.engineUpdate(ctx, func(tx kv.Tx, c *commitInfo) error {
		// An engine may run this function again (a conflict): start over.
		clear(results)
		wrote, after = false, after[:0]
		now := s.now().UTC()
		for i, o := range batch {
			if err := o.ctx.Err(); err != nil {
				results[i] = err
				continue
			}
			t := s.newTx(tx, now, c)
			if err := runOp(func(t *Tx) error { return s.checkCaller(o.ctx, t) }, t); err != nil {
				results[i] = err
				continue
			}
			err := runOp(o.fn, t)
			if err != nil && t.dirty {
				return errReplay
			}
			results[i] = err
			wrote = wrote || t.dirty
			if err == nil {
				after = append(after, t.after...)
			}
		}
		if !wrote {
			// Only refusals and no-ops: a commit would cost two fsyncs for
			// nothing.
			return errNothingWritten
		}
		return nil
	})
	if errors.Is(err, errNothingWritten) {
		runAll(after)
		for i, o := range batch {
			o.answer(results[i])
		}
		return
	}
	if errors.Is(err, kv.ErrTooLarge) && len(batch) > 1 {
		// Over the engine's per-transaction limit together: in halves.
		s.commit(batch[:len(batch)/2])
		s.commit(batch[len(batch)/2:])
		return
	}
	if errors.Is(err, errReplay) {
		// Rare: replay each op in a transaction of its own so that the
		// failing one rolls back alone.
		for _, o := range batch {
			s.commit1(o)
		}
		return
	}
	if err == nil {
		runAll(after)
		s.ipam.refreshSubnets(s.viewKV)
	}
	if s.opts.OnCommit != nil {
		s.opts.OnCommit(len(batch), time.Since(start))
	}
	for i, o := range batch {
		// A failed transaction fails every operation of it, a refusal
		// too: an engine's failed read may be what it was refused on.
		if err != nil {
			results[i] = s.unavailable(fmt.Errorf("commit: %w", err))
		}
		o.answer(results[i])
	}
}

func (s *Store) commit1(o *op) {
	if err := o.ctx.Err(); err != nil {
		o.answer(err)
		return
	}
	var result error
	var t *Tx
	now := s.now().UTC()
	ctx, cancel := s.commitContext(o)
	defer cancel()
	err := s.engineUpdate(ctx, func(tx kv.Tx, c *commitInfo) error {
		t = s.newTx(tx, now, c) // afresh if the engine runs this again
		if result = runOp(func(t *Tx) error { return s.checkCaller(o.ctx, t) }, t); result != nil {
			return result
		}
		result = runOp(o.fn, t)
		return result
	})
	if err != nil && (result == nil || !errors.Is(err, result)) {
		// Not the operation's own refusal: the engine failed (see commit).
		result = s.unavailable(fmt.Errorf("commit: %w", err))
	}
	if err == nil {
		runAll(t.after)
		s.ipam.refreshSubnets(s.viewKV)
	}
	o.answer(result)
}

// commitContext is the context of the engine's transaction for o: o's own
// values (its fence, kv.WithFence), so that the engine checks what the
// operation relies on in the same commit, but not its cancellation (once
// the operation runs its outcome is reported whatever its caller does),
// and bounded by CommitTimeout.
func (s *Store) commitContext(o *op) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(o.ctx), s.opts.CommitTimeout)
}

// newTx is one operation's view of the engine's transaction tx.
func (s *Store) newTx(tx kv.Tx, now time.Time, c *commitInfo) *Tx {
	return &Tx{tx: tx, now: now, ipam: s.ipam, credKey: s.credKey, keys: s.keys, onEvent: s.eventHook(), consoleTail: s.consoleTailHook(), commit: c}
}

// commitInfo is what the operations of one engine transaction learn of
// its commit, in their after-commit hooks.
type commitInfo struct {
	// shared: the engine has other writers (follow.go).
	shared bool
	// rev is the commit's revision on such an engine (0: nothing was
	// committed).
	rev int64
}

// engineUpdate runs fn in one read-write transaction of the engine, giving
// it the commitInfo its hooks will read. On an engine with other writers
// the commit's revision is recorded as the store's own before the hooks
// run (follower.end).
func (s *Store) engineUpdate(ctx context.Context, fn func(kv.Tx, *commitInfo) error) error {
	f := s.follow
	var c *commitInfo
	run := func(tx kv.Tx) error {
		c = &commitInfo{shared: f != nil} // afresh for each run
		return fn(tx, c)
	}
	if f == nil {
		return s.kv.Update(ctx, run)
	}
	ticket := f.begin()
	f.alone.RLock()
	rev, err := f.e.TryUpdateRev(ctx, run)
	f.alone.RUnlock()
	if errors.Is(err, kv.ErrConflict) {
		// Run again with none of this store's transactions beside it
		// (other agents' may still conflict: the engine reruns it then).
		f.alone.Lock()
		rev, err = f.e.UpdateRev(ctx, run)
		f.alone.Unlock()
	}
	if err != nil {
		rev = 0
	}
	if c != nil {
		c.rev = rev
	}
	f.end(ticket, rev)
	return err
}

func runAll(fns []func()) {
	for _, fn := range fns {
		fn()
	}
}

// runOp turns a panic in an operation into an error so that one bad request
// cannot take the committer (and every waiter) down.
func runOp(fn func(*Tx) error, t *Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			t.dirty = true // be safe: replay alone
			err = fmt.Errorf("store: operation panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(t)
}
