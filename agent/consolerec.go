package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"rackd/internal/consolelog"
	"rackd/power"
	"rackd/power/consolehub"
	"rackd/store"
)

// The console recorder keeps the console output of machines in a phase
// (commissioning, deploying, erasing) in the console log: one boot starts
// when the phase starts, and another each time rackd powers the machine on
// or cycles it during the phase, unless the boot so far has no output. It
// holds the BMC's console session for the phase (sharing it with a user's
// rackd console: consolehub), attaches again when the BMC drops it, and
// resumes the newest boot after a restart of rackd.

// The recorder attaches again recordRetry after the BMC ended the
// session; while it cannot attach (the BMC unreachable, its console held
// by another), it waits twice as long after each failure, up to
// recordRetryMax, and from recordRetry again once it attaches. It logs the
// change, unreachable and reachable again, once each, not every retry.
const (
	recordRetry    = 2 * time.Second
	recordRetryMax = time.Minute
)

// A phase report of a recorded machine waits (settle) until the console has
// had settleMin to deliver what the environment printed before it reported,
// and then until it has been quiet for settleQuiet, at most settleMax: the
// log then has the environment's last words before the recording stops,
// and a failure event's console tail its own words on the failure.
const (
	settleMin   = time.Second
	settleQuiet = 500 * time.Millisecond
	settleMax   = 3 * time.Second
)

// recorderNote is something the recorder looks at, in order.
type recorderNote struct {
	machine string
	enter   bool // a transition into a phase: a new boot
	powered bool // a power on or cycle completed
	deleted bool
}

type recorder struct {
	a     *Agent
	log   *slog.Logger
	opts  recorderOptions
	notes chan recorderNote
	mu    sync.Mutex
	recs  map[string]*recording // by machine id; only the run loop changes it
}

// recorderOptions tune the recorder; the zero value takes the defaults.
type recorderOptions struct {
	// retry and retryMax bound the wait between attaches (recordRetry,
	// recordRetryMax).
	retry, retryMax time.Duration
	// after is the clock the waits run on (time.After; tests: a fake).
	after func(time.Duration) <-chan time.Time
}

// attachBackoff is the wait before a recording's next attach.
type attachBackoff struct {
	min, max, next time.Duration
	// down: the last attach failed.
	down bool
}

// failed returns how long to wait after an attach that failed, and
// whether it is the first failure since the console was last reachable.
func (b *attachBackoff) failed() (wait time.Duration, first bool) {
	if b.next < b.min {
		b.next = b.min
	}
	wait, first = b.next, !b.down
	b.next, b.down = min(2*b.next, b.max), true
	return wait, first
}

// attached resets the wait and reports whether the console had been
// unreachable.
func (b *attachBackoff) attached() (recovered bool) {
	recovered = b.down
	b.next, b.down = b.min, false
	return recovered
}

type recording struct {
	cancel context.CancelFunc
	done   chan struct{}
	boot   chan struct{} // cap 1: start a new boot (a power on)
	enter  chan struct{} // cap 1: the machine entered a phase again
	sink   *bootSink
}

func newRecorder(a *Agent, opts recorderOptions) *recorder {
	if opts.retry <= 0 {
		opts.retry = recordRetry
	}
	if opts.retryMax < opts.retry {
		opts.retryMax = max(recordRetryMax, opts.retry)
	}
	if opts.after == nil {
		opts.after = time.After
	}
	return &recorder{a: a, log: a.log.With("service", "console-recorder"), opts: opts,
		notes: make(chan recorderNote, 1024), recs: map[string]*recording{}}
}

// note hands n to the run loop; when it is full the next sweep catches up.
func (rc *recorder) note(n recorderNote) {
	select {
	case rc.notes <- n:
	default:
	}
}

// event is told about every committed event (on the committer's goroutine:
// it only queues a note).
func (rc *recorder) event(e store.Event) {
	switch {
	case e.Action == "delete":
		rc.note(recorderNote{machine: e.Machine, deleted: true})
	case e.To != "" && e.To != e.From:
		rc.note(recorderNote{machine: e.Machine, enter: phaseState(e.To)})
	}
}

// powered is told about every finished power request.
func (rc *recorder) powered(r store.PowerRequest) {
	if r.State == store.PowerDone && (r.Action == store.PowerOn || r.Action == store.PowerCycle) {
		rc.note(recorderNote{machine: r.Machine, powered: true})
	}
}

// phaseState: a state in which a phase's environment may run (RELEASING
// only with an erase, which store.PhaseOf tells from the machine).
func phaseState(s store.State) bool {
	return s == store.StateCommissioning || s == store.StateDeploying || s == store.StateReleasing
}

// run follows the notes and sweeps every watchdog interval until ctx ends;
// then it stops the recordings and ends every console session.
func (rc *recorder) run(ctx context.Context) {
	t := time.NewTicker(time.Duration(rc.a.cfg.Lifecycle.WatchdogInterval))
	defer t.Stop()
	rc.sweep(ctx)
	for {
		select {
		case <-ctx.Done():
			rc.mu.Lock()
			for id, r := range rc.recs {
				r.cancel()
				<-r.done
				delete(rc.recs, id)
			}
			rc.mu.Unlock()
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Duration(rc.a.cfg.Power.CommandTimeout))
			if err := rc.a.consoles.Close(cctx); err != nil {
				rc.log.Warn("console sessions at shutdown", "err", err)
			}
			cancel()
			return
		case n := <-rc.notes:
			rc.handle(ctx, n)
		case <-t.C:
			rc.sweep(ctx)
		}
	}
}

func (rc *recorder) handle(ctx context.Context, n recorderNote) {
	rc.mu.Lock()
	r := rc.recs[n.machine]
	rc.mu.Unlock()
	if n.deleted {
		rc.stop(n.machine)
		if err := rc.a.consoleLog.Remove(n.machine); err != nil {
			rc.log.Warn("remove the console log of a deleted machine", "machine", n.machine, "err", err)
		}
		return
	}
	if n.powered {
		if r != nil {
			select {
			case r.boot <- struct{}{}:
			default:
			}
		}
		return
	}
	m, err := rc.a.store.Machine(n.machine)
	if err != nil || store.PhaseOf(m) == "" || !rc.a.cfg.Console.Record {
		// At once, before the machine's power-off: a BMC whose serial
		// line is a link to the machine (ipmi_sim's to QEMU's serial
		// port) is best left with SOL inactive when the machine dies.
		rc.stop(n.machine)
		return
	}
	switch {
	case r == nil:
		rc.start(ctx, m, n.enter)
	case n.enter:
		select {
		case r.enter <- struct{}{}:
		default:
		}
	}
}

// settle waits, bounded, until the console of machine (when it is being
// recorded) has delivered what was printed up to now (settleMin, settleQuiet,
// settleMax).
func (rc *recorder) settle(ctx context.Context, machine string) {
	rc.mu.Lock()
	r := rc.recs[machine]
	rc.mu.Unlock()
	if r == nil {
		return
	}
	start := time.Now()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		since := time.Since(start)
		if since >= settleMax || (since >= settleMin && time.Since(r.sink.last()) >= settleQuiet) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-r.done:
			return
		case <-t.C:
		}
	}
}

// sweep starts the recordings of machines in a phase that have none (after
// a restart, or a note lost), stops those of machines that left it, and
// removes the logs of machines that are gone.
func (rc *recorder) sweep(ctx context.Context) {
	inPhase := map[string]store.Machine{}
	if rc.a.cfg.Console.Record {
		for _, st := range []store.State{store.StateCommissioning, store.StateDeploying, store.StateReleasing} {
			ms, err := rc.a.store.ListMachines(store.Filter{State: st})
			if err != nil {
				rc.log.Warn("console recorder: list machines", "err", err)
				return
			}
			for _, m := range ms {
				if store.PhaseOf(m) != "" {
					inPhase[m.ID] = m
				}
			}
		}
	}
	rc.mu.Lock()
	stale := map[string]*recording{}
	for id, r := range rc.recs {
		if _, ok := inPhase[id]; !ok {
			stale[id] = r
		}
	}
	rc.mu.Unlock()
	for id := range stale {
		rc.stop(id)
	}
	for id, m := range inPhase {
		rc.mu.Lock()
		r := rc.recs[id]
		rc.mu.Unlock()
		if r == nil {
			rc.start(ctx, m, false)
		}
	}
	ids, err := rc.a.consoleLog.Machines()
	if err != nil {
		rc.log.Warn("console recorder: list logs", "err", err)
		return
	}
	for _, id := range ids {
		if _, err := rc.a.store.Machine(id); store.CodeOf(err) == store.CodeNotFound {
			if err := rc.a.consoleLog.Remove(id); err != nil {
				rc.log.Warn("remove the console log of a deleted machine", "machine", id, "err", err)
			}
		}
	}
}

func (rc *recorder) start(ctx context.Context, m store.Machine, fresh bool) {
	phase := store.PhaseOf(m)
	var (
		w   *consolelog.Writer
		err error
	)
	if fresh {
		w, err = rc.a.consoleLog.NewBoot(m.ID, phase, time.Now())
	} else {
		w, err = rc.a.consoleLog.Resume(m.ID, phase, time.Now())
	}
	if err != nil {
		rc.log.Warn("console log: start a boot", "machine", m.ID, "err", err)
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &recording{cancel: cancel, done: make(chan struct{}), boot: make(chan struct{}, 1),
		enter: make(chan struct{}, 1), sink: &bootSink{log: rc.a.consoleLog, machine: m.ID, phase: phase, w: w, written: !fresh}}
	rc.mu.Lock()
	rc.recs[m.ID] = r
	rc.mu.Unlock()
	go rc.record(rctx, m.ID, r)
}

func (rc *recorder) stop(id string) {
	rc.mu.Lock()
	r := rc.recs[id]
	delete(rc.recs, id)
	rc.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// record holds machine id's console session for its recording until ctx
// ends.
func (rc *recorder) record(ctx context.Context, id string, r *recording) {
	defer close(r.done)
	defer r.sink.close()
	backoff := attachBackoff{min: rc.opts.retry, max: rc.opts.retryMax}
	for {
		wait := rc.opts.retry
		m, err := rc.a.store.Machine(id)
		if err != nil {
			return
		}
		drv, ok := rc.a.powerDrivers[m.Power.Driver].(power.Consoler)
		if !ok {
			wait = time.Duration(rc.a.cfg.Lifecycle.WatchdogInterval) // no console: nothing to record
		} else {
			target, err := rc.a.consoleTarget(m)
			var att *consolehub.Attachment
			if err == nil {
				actx, cancel := context.WithTimeout(ctx, 2*time.Duration(rc.a.cfg.Power.CommandTimeout))
				att, err = rc.a.consoles.Attach(actx, drv, target,
					consolehub.AttachOptions{Recorder: true, Sink: r.sink, Machine: m.Hostname})
				cancel()
			}
			if err == nil {
				if backoff.attached() {
					rc.log.Info("console recorder: console reachable again; recording", "machine", id, "hostname", m.Hostname)
				} else {
					rc.log.Debug("console recording", "machine", id, "hostname", m.Hostname)
				}
				again, boot := rc.hold(ctx, att, r)
				if !again {
					return
				}
				if boot {
					continue
				}
			} else if ctx.Err() == nil {
				var first bool
				wait, first = backoff.failed()
				if first {
					rc.log.Info("console recorder: console unreachable; retrying, less often the longer it lasts", "machine", id, "hostname", m.Hostname,
						"max_interval", rc.opts.retryMax.String(), "err", err)
				} else {
					rc.log.Debug("console recorder: console still unreachable", "machine", id, "next_try", wait.String(), "err", err)
				}
			}
		}
		// A new boot or phase tries at once: the machine is being powered
		// on, which may be what its console waited for.
		select {
		case <-ctx.Done():
			return
		case <-r.boot:
			r.sink.newBoot()
		case <-r.enter:
			r.sink.newBoot()
		case <-rc.opts.after(wait):
		}
	}
}

// hold keeps att until the session ends (again: attach again) or ctx does,
// starting new boots as told. A machine that enters a phase again while
// its recording lingers gets a new session (again and boot: at once),
// unless a user holds the current one, as a recording that starts with the
// phase does: a BMC whose serial line is a link to the machine (ipmi_sim's
// to QEMU's serial port) loses it when the machine is powered off and
// links it again when SOL is activated.
func (rc *recorder) hold(ctx context.Context, att *consolehub.Attachment, r *recording) (again, boot bool) {
	defer att.Close()
	for {
		select {
		case <-ctx.Done():
			return false, false
		case <-att.Done():
			return true, false
		case <-r.boot:
			r.sink.newBoot()
		case <-r.enter:
			r.sink.newBoot()
			return true, true
		}
	}
}

// bootSink is the recorder's sink: the current boot's writer, which a new
// boot replaces while the session goes on.
type bootSink struct {
	log     *consolelog.Log
	machine string
	phase   string
	mu      sync.Mutex
	w       *consolelog.Writer
	written bool      // the current boot has output
	at      time.Time // of the last output
}

// last is when the last output came.
func (s *bootSink) last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at
}

func (s *bootSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	if len(p) > 0 {
		s.written, s.at = true, time.Now()
	}
	return s.w.Write(p)
}

// newBoot starts the next boot, unless this one has no output yet (the
// power-on that follows a phase's start).
func (s *bootSink) newBoot() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.written || s.w == nil {
		return
	}
	s.w.Close()
	w, err := s.log.NewBoot(s.machine, s.phase, time.Now())
	if err != nil {
		s.w = nil
		return
	}
	s.w, s.written = w, false
}

func (s *bootSink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
}
