package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"rackd/store"
)

// rights ends the long-lived streams (the serial console, the web UI's live
// updates) whose right no longer holds. Each stream holds its right
// (hold) for as long as it runs; the right is checked again by the store
// (store.CheckRight, where the rule lives) whenever something it rests on
// may have changed: a token revoked or a user removed (the store's
// AccessChanged), the machine's allocation (a machine event, from
// onStoreEvent), the token's expiry (a timer at that moment). A stream
// whose right is lost has its context cancelled with the store's reason as
// the cause: it says why to its client and ends.
type rights struct {
	store *store.Store
	log   *slog.Logger

	mu   sync.Mutex
	held map[*heldRight]struct{}
	// machines are the machines with events not yet checked.
	machines map[string]bool
	kick     chan struct{}
}

// heldRight is one stream's right.
type heldRight struct {
	right  store.Right
	cancel context.CancelCauseFunc
	timer  *time.Timer // at the token's expiry, or to retry a failed check
}

// retryCheck is how soon a check that could not read the store is tried
// again.
const retryCheck = time.Second

func newRights(s *store.Store, log *slog.Logger) *rights {
	return &rights{store: s, log: log, held: map[*heldRight]struct{}{}, machines: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// hold returns a context that is cancelled, with the reason as its cause
// (store.RightLost), when r no longer holds, or when ctx is. The caller
// calls release when its stream ends. A right already lost is cancelled
// before hold returns.
func (rs *rights) hold(ctx context.Context, r store.Right) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	h := &heldRight{right: r, cancel: cancel}
	// Registered before the first check: a change between the two is
	// seen by one of them.
	rs.mu.Lock()
	rs.held[h] = struct{}{}
	rs.mu.Unlock()
	rs.check(h)
	return ctx, func() {
		rs.mu.Lock()
		delete(rs.held, h)
		if h.timer != nil {
			h.timer.Stop()
		}
		rs.mu.Unlock()
		cancel(context.Canceled)
	}
}

// check checks h's right and ends its stream when it is lost; it arms the
// timer for the token's expiry, or to retry when the store could not say.
func (rs *rights) check(h *heldRight) {
	expires, err := rs.store.CheckRight(h.right)
	var wait time.Duration
	switch {
	case store.RightLost(err):
		rs.log.Info("a stream's right is lost: ending it", "user", h.right.Actor.Name, "token", h.right.Actor.Token,
			"machine", h.right.Machine, "why", err.Error())
		h.cancel(err)
		return
	case err != nil:
		rs.log.Warn("check a stream's right (trying again)", "user", h.right.Actor.Name, "machine", h.right.Machine, "err", err)
		wait = retryCheck
	case !expires.IsZero():
		// The timer may fire a little early on another clock than the
		// store's: the check then arms it again.
		wait = max(time.Until(expires), 10*time.Millisecond)
	default:
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.held[h]; !ok {
		return // released meanwhile
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(wait, func() { rs.check(h) })
}

// machineChanged is told of every machine event (onStoreEvent); it returns
// at once: the rights on that machine are checked by run.
func (rs *rights) machineChanged(id string) {
	rs.mu.Lock()
	if len(rs.held) == 0 {
		rs.mu.Unlock()
		return
	}
	rs.machines[id] = true
	rs.mu.Unlock()
	select {
	case rs.kick <- struct{}{}:
	default:
	}
}

// run checks the held rights as the store changes, until ctx is done.
func (rs *rights) run(ctx context.Context) {
	changed := rs.store.AccessChanged()
	for {
		select {
		case <-changed:
			// The next change's channel, taken before the check: a
			// change made while it runs is not missed.
			changed = rs.store.AccessChanged()
			rs.checkWhere(func(store.Right) bool { return true })
		case <-rs.kick:
			rs.mu.Lock()
			ms := rs.machines
			rs.machines = map[string]bool{}
			rs.mu.Unlock()
			rs.checkWhere(func(r store.Right) bool { return ms[r.Machine] })
		case <-ctx.Done():
			return
		}
	}
}

// checkWhere checks the held rights that match.
func (rs *rights) checkWhere(match func(store.Right) bool) {
	rs.mu.Lock()
	var hs []*heldRight
	for h := range rs.held {
		if match(h.right) {
			hs = append(hs, h)
		}
	}
	rs.mu.Unlock()
	for _, h := range hs {
		rs.check(h)
	}
}

// holdUser is the web UI's hold: the right of a request made with a token
// alone.
func (a *Agent) holdUser(ctx context.Context, who store.Actor) (context.Context, context.CancelFunc) {
	return a.rights.hold(ctx, store.UserRight(who))
}
