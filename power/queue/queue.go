// Package queue is rackd's power queue (docs/ARCHITECTURE.md section 6): it
// runs the power requests the store holds against the machines' BMCs.
//
//   - One worker per machine with open requests, so at most one BMC command
//     is in flight per machine; many machines run in parallel under a global
//     bound, a bound per BMC address (blades share a chassis BMC) and a
//     minimum interval between commands to one BMC (BMCs crash when flooded).
//   - Open requests of a machine coalesce to the newest desired state; the
//     folded ones are written superseded by the winner.
//   - A command on the wire is never cancelled: its context ends only at the
//     command timeout. A wait between retries (or between verification
//     polls) is cut short when a newer request wants a different final
//     state, and the waiting request is superseded by it.
//   - on and off are verified by polling the status until it matches or a
//     deadline passes; a cycle is written "sent" before it is sent and is
//     never sent twice (after a crash it is verified, and if the machine is
//     off at the deadline it is powered on, not cycled).
//   - Failures are retried with jittered exponential backoff, then the
//     request fails with the BMC's error (an event on the machine, a
//     metric); a circuit breaker per BMC stops hammering one that keeps
//     failing.
//   - Periodic jittered status polls keep the observed power fresh and drive
//     enforcement (the store decides: enforce corrects, expect reports).
package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"rackd/power"
	"rackd/store"
	"rackd/store/kv"
)

// Config tunes the queue. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Global bounds the BMC commands in flight across all machines.
	Global int
	// PerBMC bounds the commands in flight to one BMC address.
	PerBMC int
	// MinInterval is the least time between the starts of two commands to
	// one BMC address.
	MinInterval time.Duration
	// CommandTimeout bounds one BMC command (the drivers have their own,
	// shorter, timeouts; this one is the queue's guarantee).
	CommandTimeout time.Duration
	// VerifyDeadline is how long on, off and cycle may take to show in the
	// status; VerifyInterval spaces the status polls while verifying.
	VerifyDeadline time.Duration
	VerifyInterval time.Duration
	// Retries is how many times a failed request is tried again.
	Retries int
	// BackoffBase and BackoffMax shape the waits between tries: base,
	// 2*base, 4*base..., at most max, each jittered down by up to half.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// BreakerThreshold failures in a row open a BMC's circuit breaker for
	// BreakerCooldown: commands fail at once without reaching the BMC, then
	// one probe decides whether it closes again.
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// PollInterval is how often every machine's status is polled (jittered
	// by ±10%); 0 disables polling.
	PollInterval time.Duration
}

// DefaultConfig is the queue's configuration when nothing is said.
func DefaultConfig() Config {
	return Config{
		Global: 64, PerBMC: 1, MinInterval: 50 * time.Millisecond,
		CommandTimeout: 10 * time.Second, VerifyDeadline: 2 * time.Minute, VerifyInterval: 2 * time.Second,
		Retries: 3, BackoffBase: time.Second, BackoffMax: 30 * time.Second,
		BreakerThreshold: 5, BreakerCooldown: 30 * time.Second, PollInterval: 5 * time.Minute,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Global <= 0 {
		c.Global = d.Global
	}
	if c.PerBMC <= 0 {
		c.PerBMC = d.PerBMC
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = d.CommandTimeout
	}
	if c.VerifyDeadline <= 0 {
		c.VerifyDeadline = d.VerifyDeadline
	}
	if c.VerifyInterval <= 0 {
		c.VerifyInterval = d.VerifyInterval
	}
	if c.Retries < 0 {
		c.Retries = 0
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = d.BackoffBase
	}
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = max(d.BackoffMax, c.BackoffBase)
	}
	if c.BreakerThreshold <= 0 {
		c.BreakerThreshold = d.BreakerThreshold
	}
	if c.BreakerCooldown <= 0 {
		c.BreakerCooldown = d.BreakerCooldown
	}
	return c
}

// Queue runs power requests. Create it with New, start it with Run.
type Queue struct {
	st      Store
	drivers map[string]power.Driver
	cfg     Config
	log     *slog.Logger
	m       *Metrics

	global chan struct{}

	mu       sync.Mutex
	ctx      context.Context // set by Run
	workers  map[string]*worker
	bmcs     map[string]*bmc
	nextPoll map[string]time.Time
	wg       sync.WaitGroup
	onFinish func(store.PowerRequest)
	owner    Owner // nil: this queue drives every machine
}

// Owner says which machines a queue drives, when several agents share one
// store and each drives the BMCs of the shards it leads. It must be safe
// for concurrent use.
type Owner interface {
	// Owns reports whether this agent drives machine's BMC now and, if
	// so, returns ctx carrying the fence every write for the machine must
	// hold (kv.WithFence): a write after the leadership was lost is
	// refused by the store.
	Owns(ctx context.Context, machine string) (context.Context, bool)
	// Fenced is told of a write for machine that its fence refused.
	Fenced(machine string)
}

// SetOwner makes the queue drive only the machines o says it owns; call it
// before Run. A queue without an owner drives every machine.
func (q *Queue) SetOwner(o Owner) {
	q.mu.Lock()
	q.owner = o
	q.mu.Unlock()
}

// owns is Owner.Owns, or ctx and true without an owner.
func (q *Queue) owns(ctx context.Context, machine string) (context.Context, bool) {
	q.mu.Lock()
	o := q.owner
	q.mu.Unlock()
	if o == nil {
		return ctx, true
	}
	return o.Owns(ctx, machine)
}

// fenced tells the owner about err if it is a fence's refusal, and reports
// whether it was.
func (q *Queue) fenced(machine string, err error) bool {
	if !errors.Is(err, kv.ErrFenced) {
		return false
	}
	q.mu.Lock()
	o := q.owner
	q.mu.Unlock()
	if o != nil {
		o.Fenced(machine)
	}
	return true
}

// errNotOwner ends a request's run when this agent stopped driving the
// machine's BMC: it stays open for the agent that drives it now.
var errNotOwner = errors.New("this agent no longer drives the machine's BMC")

// Resume kicks every machine with open requests: an agent that just won
// the leadership of a shard takes over that shard's pending requests and
// those another agent left running (its workers skip the machines it does
// not own).
func (q *Queue) Resume() {
	ids, err := q.st.MachinesWithOpenPower()
	if err != nil {
		q.log.Error("power queue: list open requests", "err", err)
		return
	}
	for _, id := range ids {
		q.Kick(id)
	}
}

type worker struct {
	id      string
	kick    chan struct{}
	pollDue bool // guarded by Queue.mu
}

// New returns a queue over st driving machines through drivers (by the
// driver name in each machine's power parameters). m may be nil.
func New(st Store, drivers map[string]power.Driver, cfg Config, log *slog.Logger, m *Metrics) *Queue {
	cfg = cfg.withDefaults()
	if m == nil {
		m = NewMetrics(nil)
	}
	q := &Queue{st: st, drivers: drivers, cfg: cfg, log: log, m: m,
		global:  make(chan struct{}, cfg.Global),
		workers: map[string]*worker{}, bmcs: map[string]*bmc{}, nextPoll: map[string]time.Time{}}
	m.watch(q)
	return q
}

// OnFinish sets a function told about every request that ends done or
// failed (the agent completes releases with it). It must not block.
func (q *Queue) OnFinish(fn func(store.PowerRequest)) {
	q.mu.Lock()
	q.onFinish = fn
	q.mu.Unlock()
}

// Run resumes the open requests the store holds, then runs the queue until
// ctx is done; it returns once every worker has stopped (commands on the
// wire finish first: they are never cut off).
func (q *Queue) Run(ctx context.Context) error {
	q.mu.Lock()
	q.ctx = ctx
	q.mu.Unlock()
	q.st.OnPowerRequest(q.Kick)
	q.sweep(time.Now())
	tick := q.cfg.PollInterval / 10
	if tick <= 0 || tick > 5*time.Second {
		tick = 5 * time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Workers start under q.mu while ctx is live (workerLocked):
			// passing through q.mu orders every start before the wait,
			// and none starts after it.
			q.mu.Lock()
			q.mu.Unlock()
			q.wg.Wait()
			return nil
		case now := <-t.C:
			q.sweep(now)
		}
	}
}

// sweep kicks every machine with open requests (nothing is left behind
// even if a notification was missed, and a restart resumes everything) and
// schedules the status polls that are due.
func (q *Queue) sweep(now time.Time) {
	q.Resume()
	if q.cfg.PollInterval <= 0 {
		return
	}
	ms, err := q.st.ListMachines(store.Filter{})
	if err != nil {
		q.log.Error("power queue: list machines", "err", err)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range ms {
		if m.Power.Driver == "" || q.drivers[m.Power.Driver] == nil {
			continue
		}
		next, ok := q.nextPoll[m.ID]
		if !ok {
			// First sight: spread the machines over one interval.
			q.nextPoll[m.ID] = now.Add(time.Duration(rand.Int64N(int64(q.cfg.PollInterval))))
			continue
		}
		if now.Before(next) {
			continue
		}
		q.nextPoll[m.ID] = now.Add(jitter(q.cfg.PollInterval, 0.1))
		w := q.workerLocked(m.ID)
		if w != nil {
			w.pollDue = true
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// jitter returns d scaled by a random factor in [1-f, 1+f].
func jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*rand.Float64()))
}

// Kick tells the queue that machine has new requests.
func (q *Queue) Kick(machine string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w := q.workerLocked(machine); w != nil {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// workerLocked returns machine's worker, starting one if needed (nil when
// the queue is not running).
func (q *Queue) workerLocked(machine string) *worker {
	if q.ctx == nil || q.ctx.Err() != nil {
		return nil
	}
	w, ok := q.workers[machine]
	if !ok {
		w = &worker{id: machine, kick: make(chan struct{}, 1)}
		w.kick <- struct{}{}
		q.workers[machine] = w
		q.wg.Add(1)
		go q.run(q.ctx, w)
	}
	return w
}

// run is one machine's worker: it handles the machine's open requests one
// coalesced batch at a time, and its status polls, and exits when there is
// nothing left to do.
func (q *Queue) run(ctx context.Context, w *worker) {
	defer q.wg.Done()
	for {
		select {
		case <-w.kick:
		default:
		}
		did, err := q.step(ctx, w)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			q.log.Error("power queue", "machine", w.id, "err", err)
			// A store error: back off a little rather than spin.
			if !sleep(ctx, time.Second, nil, nil) {
				break
			}
			continue
		}
		if did {
			continue
		}
		q.mu.Lock()
		if len(w.kick) > 0 {
			q.mu.Unlock()
			continue
		}
		if w.pollDue {
			w.pollDue = false
			q.mu.Unlock()
			if pctx, ok := q.owns(ctx, w.id); ok {
				q.poll(pctx, w)
			}
			continue
		}
		delete(q.workers, w.id)
		q.mu.Unlock()
		return
	}
	q.mu.Lock()
	delete(q.workers, w.id)
	q.mu.Unlock()
}

// sleep waits d; it returns false when ctx ended first, or when a kick
// arrives and cut (when not nil) says the wait is pointless now.
func sleep(ctx context.Context, d time.Duration, kick <-chan struct{}, cut func() bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-kick:
			if cut != nil && cut() {
				return false
			}
		}
	}
}

// coalesce picks the request that stands for all of a machine's open ones
// (oldest first) and the ones it folds. The newest request that changes
// power wins; a cycle after the last off also wins over a newer on (both
// end on, and only the cycle reboots). Queries fold into anything, since
// every command ends with a status read; with only queries, the newest runs.
// nextBoot is the boot device the winner should set: a folded request that
// wanted PXE for the same final state still gets it.
func coalesce(open []store.PowerRequest) (winner store.PowerRequest, fold []string, nextBoot string) {
	win := -1
	lastOff := -1
	for i, r := range open {
		if r.Action != store.PowerQuery {
			win = i
		}
		if r.Action == store.PowerOff {
			lastOff = i
		}
	}
	if win < 0 {
		win = len(open) - 1
	}
	if open[win].Action == store.PowerOn {
		for i := len(open) - 1; i > lastOff; i-- {
			if open[i].Action == store.PowerCycle {
				win = i
				break
			}
		}
	}
	winner = open[win]
	nextBoot = winner.NextBoot
	final := winner.Action.Final()
	for i, r := range open {
		if i == win {
			continue
		}
		fold = append(fold, r.ID)
		if nextBoot == "" && i > lastOff && r.NextBoot != "" && r.Action.Final() == final && final != power.StateUnknown {
			nextBoot = r.NextBoot
		}
	}
	return winner, fold, nextBoot
}

// step handles one coalesced batch of a machine's open requests; it reports
// whether there was any.
func (q *Queue) step(ctx context.Context, w *worker) (bool, error) {
	// Another agent drives this machine: its requests are that agent's.
	ctx, ok := q.owns(ctx, w.id)
	if !ok {
		return false, nil
	}
	open, err := q.st.OpenPowerRequests(w.id)
	if err != nil || len(open) == 0 {
		return false, err
	}
	winner, fold, nextBoot := coalesce(open)
	resumed := winner.State == store.PowerRunning
	r, err := q.st.StartPower(ctx, winner.ID, fold)
	if q.fenced(w.id, err) {
		q.log.Info("power queue: lost the machine's shard before starting; its new owner runs the request", "request", winner.ID, "machine", w.id)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("start %s: %w", winner.ID, err)
	}
	for _, id := range fold {
		for _, o := range open {
			if o.ID == id {
				q.m.requests.WithLabelValues(string(o.Action), "superseded").Inc()
			}
		}
	}
	if !r.Started.IsZero() && !resumed {
		q.m.queueWait.Observe(r.Started.Sub(r.Created).Seconds())
	}
	q.execute(ctx, w, r, nextBoot, resumed)
	return true, nil
}

// target is how the drivers reach m's BMC.
func target(m store.Machine) power.Target {
	return power.Target{Machine: m.Hostname, Driver: m.Power.Driver, Address: m.Power.Address, Username: m.Power.Username,
		Password: m.Power.Password, CipherSuite: m.Power.CipherSuite, TLSFingerprint: m.Power.TLSFingerprint,
		InsecureTLS: m.Power.InsecureTLS, BootMode: m.Power.BootMode}
}

// target adds Pin to target(m): a BMC certificate a driver trusts on first
// use is recorded with the machine, so it is enforced from then on, across
// restarts.
func (q *Queue) target(m store.Machine) power.Target {
	t := target(m)
	id, addr := m.ID, m.Power.Address
	t.Pin = func(ctx context.Context, fingerprint string) error {
		return q.st.PinPowerCertificate(ctx, id, addr, fingerprint)
	}
	return t
}

// errNewer ends a request that a newer one superseded during a wait.
var errNewer = errors.New("superseded by a newer request")

// job is one request being executed.
type job struct {
	q        *Queue
	w        *worker
	r        store.PowerRequest
	m        store.Machine
	drv      power.Driver
	target   power.Target
	newer    string // the request that superseded this one during a wait
	observed power.State
}

func (q *Queue) execute(ctx context.Context, w *worker, r store.PowerRequest, nextBoot string, resumed bool) {
	j := &job{q: q, w: w, r: r}
	// The one read that opens the BMC secrets: a password that cannot be
	// decrypted fails the request with an error naming the machine.
	m, err := q.st.MachineForPower(r.Machine)
	if err != nil {
		q.finish(ctx, j, fmt.Errorf("read machine: %w", err))
		return
	}
	j.m = m
	j.drv = q.drivers[m.Power.Driver]
	if j.drv == nil {
		q.finish(ctx, j, fmt.Errorf("machine %s: no power driver %q in this rackd (known: %s)", m.Hostname, m.Power.Driver, q.driverNames()))
		return
	}
	j.target = q.target(m)
	err = j.run(ctx, nextBoot, resumed)
	if ctx.Err() != nil {
		// Shutting down: the request stays open and is resumed on restart.
		return
	}
	if errors.Is(err, errNotOwner) || q.fenced(r.Machine, err) {
		// The shard passed to another agent: the request stays open (or
		// running) and that agent resumes it, as after a crash.
		q.log.Warn("power queue: lost the machine's shard mid-request; its new owner resumes it", "request", r.ID, "machine", r.Machine, "err", err)
		return
	}
	if errors.Is(err, errNewer) {
		if serr := q.st.SupersedePower(context.WithoutCancel(ctx), r.ID, j.newer); q.fenced(r.Machine, serr) {
			return
		} else if serr != nil {
			q.log.Error("power queue: supersede", "request", r.ID, "err", serr)
		}
		q.m.requests.WithLabelValues(string(r.Action), "superseded").Inc()
		return
	}
	q.finish(ctx, j, err)
}

func (q *Queue) driverNames() string {
	if len(q.drivers) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(q.drivers)), ", ")
}

func (q *Queue) finish(ctx context.Context, j *job, err error) {
	state, text := store.PowerDone, ""
	if err != nil {
		state, text = store.PowerFailed, err.Error()
	}
	r, ferr := q.st.FinishPower(context.WithoutCancel(ctx), j.r.ID, state, j.r.Attempts, text, j.observed)
	if q.fenced(j.r.Machine, ferr) {
		q.log.Warn("power queue: lost the machine's shard before recording the outcome; its new owner verifies it", "request", j.r.ID, "machine", j.r.Machine, "outcome", state)
		return
	}
	if ferr != nil {
		q.log.Error("power queue: finish", "request", j.r.ID, "err", ferr)
		return
	}
	q.m.requests.WithLabelValues(string(r.Action), string(state)).Inc()
	if err != nil {
		q.log.Warn("power request failed", "request", r.ID, "machine", j.m.Hostname, "action", r.Action, "attempts", r.Attempts, "err", err)
	} else {
		q.log.Debug("power request done", "request", r.ID, "machine", j.m.Hostname, "action", r.Action)
	}
	q.mu.Lock()
	fn := q.onFinish
	q.mu.Unlock()
	if fn != nil {
		fn(r)
	}
}

// newerWants reports (and remembers) whether an open request newer than
// this one wants a different final state: the wait in progress is then cut.
func (j *job) newerWants() bool {
	open, err := j.q.st.OpenPowerRequests(j.r.Machine)
	if err != nil {
		return false
	}
	mySeq, _ := store.ParsePowerRequestID(j.r.ID)
	final := j.r.Action.Final()
	for i := len(open) - 1; i >= 0; i-- {
		o := open[i]
		seq, _ := store.ParsePowerRequestID(o.ID)
		if seq <= mySeq || o.Action == store.PowerQuery {
			continue
		}
		if f := o.Action.Final(); f != final && final != power.StateUnknown {
			j.newer = o.ID
			return true
		}
		return false
	}
	return false
}

// wait sleeps d unless a newer request wants something else (errNewer) or
// the queue stops.
func (j *job) wait(ctx context.Context, d time.Duration) error {
	if j.newerWants() {
		return errNewer
	}
	if !sleep(ctx, d, j.w.kick, j.newerWants) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errNewer
	}
	return nil
}

// permanent errors are not retried: the same command will fail the same way.
func permanent(err error) bool {
	return errors.Is(err, power.ErrAuth) || errors.Is(err, power.ErrUnsupported)
}

func (j *job) backoff(attempt int) time.Duration {
	d := j.q.cfg.BackoffBase << min(attempt-1, 20)
	if d > j.q.cfg.BackoffMax || d <= 0 {
		d = j.q.cfg.BackoffMax
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// run executes the request with its retries.
func (j *job) run(ctx context.Context, nextBoot string, resumed bool) error {
	r := &j.r
	final := r.Action.Final()
	boot, err := power.ParseBootDevice(nextBoot)
	if err != nil {
		return fmt.Errorf("power request %s: next boot: %w", r.ID, err)
	}
	if resumed && (r.Action == store.PowerOn || r.Action == store.PowerOff) {
		// Interrupted by a restart: it may have worked already.
		if s, err := j.cmdStatus(ctx); err == nil && s == final {
			return nil
		}
	}
	var last error
	for {
		if r.Attempts > j.q.cfg.Retries || (last != nil && permanent(last)) {
			return last
		}
		if last != nil {
			if err := j.wait(ctx, j.backoff(r.Attempts)); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var err error
		switch r.Action {
		case store.PowerQuery, store.PowerOn, store.PowerOff:
			// Tries are recorded when one fails (so GET shows them during
			// the backoff) and with the request's fate: the happy path
			// costs no extra commit. A restart re-verifies on and off.
			r.Attempts++
			if r.Action == store.PowerQuery {
				_, err = j.cmdStatus(ctx)
			} else {
				err = j.onOff(ctx, r.Action, boot)
			}
		case store.PowerCycle:
			err = j.cycle(ctx, boot)
		default:
			return fmt.Errorf("unknown power action %q", r.Action)
		}
		if err == nil || errors.Is(err, errNewer) || ctx.Err() != nil || lost(err) {
			return err
		}
		last = err
		if r.Attempts <= j.q.cfg.Retries && !permanent(err) {
			if perr := j.progress(ctx, r.Phase); perr != nil {
				return perr
			}
		}
	}
}

// progress writes the attempts and phase so far (a crash resumes from it).
func (j *job) progress(ctx context.Context, phase string) error {
	j.r.Phase = phase
	return j.q.st.PowerProgress(ctx, j.r.ID, j.r.Attempts, phase)
}

// setNextBoot sets the boot device a power-on needs. Its failure ends the
// try: the power-on is never sent without it (a machine with an installed
// disk would boot that disk instead of rackd's environment).
func (j *job) setNextBoot(ctx context.Context, dev power.BootDevice) error {
	if dev == power.BootNone {
		return nil
	}
	err := j.cmd(ctx, "set_boot", func(c context.Context) error { return j.drv.SetNextBoot(c, j.target, dev) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, power.ErrBMC), errors.Is(err, power.ErrUnsupported):
		return fmt.Errorf("BMC refused set-boot-device: next boot %s is required before powering on, so the machine was not powered on: %w", dev, err)
	}
	return fmt.Errorf("set-boot-device %s failed, so the machine was not powered on: %w", dev, err)
}

func (j *job) onOff(ctx context.Context, action store.PowerAction, boot power.BootDevice) error {
	if action == store.PowerOn {
		if err := j.setNextBoot(ctx, boot); err != nil {
			return err
		}
	}
	var err error
	if action == store.PowerOn {
		err = j.cmd(ctx, "on", func(c context.Context) error { return j.drv.PowerOn(c, j.target) })
	} else {
		err = j.cmd(ctx, "off", func(c context.Context) error { return j.drv.PowerOff(c, j.target) })
	}
	if err != nil {
		return fmt.Errorf("power %s: %w", action, err)
	}
	return j.verify(ctx, action.Final())
}

// cycle sends the cycle at most once per request: the phase is durable
// before the command leaves. A cycle that may have been executed (sent,
// whatever the answer) is only verified; if the machine is not on by the
// deadline it is powered on, never cycled again.
func (j *job) cycle(ctx context.Context, boot power.BootDevice) error {
	if j.r.Phase != store.PhaseCycleSent {
		j.r.Attempts++
		if err := j.setNextBoot(ctx, boot); err != nil {
			return err
		}
		if err := j.progress(ctx, store.PhaseCycleSent); err != nil {
			return err
		}
		err := j.cmd(ctx, "cycle", func(c context.Context) error { return j.drv.PowerCycle(c, j.target) })
		if err != nil && notSent(err) {
			// It never reached the BMC: a retry may cycle.
			if perr := j.progress(ctx, ""); perr != nil {
				return perr
			}
			return fmt.Errorf("power cycle: %w", err)
		}
		if err != nil {
			j.q.log.Warn("power cycle: no clean answer; verifying instead of sending it again", "request", j.r.ID, "machine", j.m.Hostname, "err", err)
		}
	}
	err := j.verify(ctx, power.StateOn)
	if err == nil || errors.Is(err, errNewer) || ctx.Err() != nil || lost(err) {
		return err
	}
	// Still not on after the deadline: power on (retried by run as an on
	// would be; the cycle itself is not repeated).
	j.r.Attempts++
	if perr := j.progress(ctx, store.PhaseCycleSent); perr != nil {
		return perr
	}
	// This power-on needs the next boot as much as the cycle did (the
	// cycle may never have happened, or this is a restart after a crash).
	if berr := j.setNextBoot(ctx, boot); berr != nil {
		return fmt.Errorf("power cycle: %v; then %w", err, berr)
	}
	if oerr := j.cmd(ctx, "on", func(c context.Context) error { return j.drv.PowerOn(c, j.target) }); oerr != nil {
		return fmt.Errorf("power cycle: %v; then power on: %w", err, oerr)
	}
	return j.verify(ctx, power.StateOn)
}

// notSent reports errors that mean the command cannot have been executed:
// the session was never established or the breaker refused it.
func notSent(err error) bool {
	return errors.Is(err, power.ErrAuth) || errors.Is(err, power.ErrUnreachable) || errors.Is(err, errBreakerOpen) || errors.Is(err, errNotOwner)
}

// lost reports errors that mean this agent no longer drives the machine:
// nothing is retried, the request is left to the agent that does.
func lost(err error) bool { return errors.Is(err, errNotOwner) || errors.Is(err, kv.ErrFenced) }

// verify polls the status until it reads want or the verify deadline passes.
// A driver that cannot read the status (manual: StateUnknown or
// ErrUnsupported) is taken at its word.
func (j *job) verify(ctx context.Context, want power.State) error {
	deadline := time.Now().Add(j.q.cfg.VerifyDeadline)
	var lastErr error
	for {
		s, err := j.cmdStatus(ctx)
		switch {
		case err == nil && s == want:
			return nil
		case errors.Is(err, power.ErrUnsupported), err == nil && s == power.StateUnknown:
			// The driver cannot read the power (manual): nothing to wait for.
			return nil
		case lost(err):
			return err
		case err != nil:
			lastErr = err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().Add(j.q.cfg.VerifyInterval).After(deadline) {
			if lastErr != nil && err != nil {
				return fmt.Errorf("verify: power did not read %s within %s: %w", want, j.q.cfg.VerifyDeadline, lastErr)
			}
			return fmt.Errorf("verify: power still reads %s, not %s, after %s", s, want, j.q.cfg.VerifyDeadline)
		}
		if err := j.wait(ctx, j.q.cfg.VerifyInterval); err != nil {
			return err
		}
	}
}

func (j *job) cmdStatus(ctx context.Context) (power.State, error) {
	var s power.State
	err := j.cmd(ctx, "status", func(c context.Context) error {
		var err error
		s, err = j.drv.Status(c, j.target)
		return err
	})
	if err == nil {
		j.observed = s
	}
	return s, err
}

// cmd runs one BMC command for the job's request, if this agent still
// drives the machine: the last look before the wire, which narrows (but
// cannot close: docs/ARCHITECTURE.md) the window in which an agent that
// lost the shard without knowing it yet still sends.
func (j *job) cmd(ctx context.Context, action string, fn func(context.Context) error) error {
	if _, ok := j.q.owns(ctx, j.r.Machine); !ok {
		return errNotOwner
	}
	return j.q.command(power.WithRequestID(ctx, j.r.ID), j.target.Address, j.target.Driver, action, fn)
}

// poll reads a machine's status for the periodic poll and lets the store
// act on drift.
func (q *Queue) poll(ctx context.Context, w *worker) {
	m, err := q.st.MachineForPower(w.id)
	if errors.Is(err, store.ErrSecretUnreadable) {
		// Said once at start and by every request for the machine; the
		// poll, every interval, only at debug level.
		q.log.Debug("power poll skipped", "err", err)
		return
	}
	if err != nil || q.drivers[m.Power.Driver] == nil {
		return
	}
	drv := q.drivers[m.Power.Driver]
	t := q.target(m)
	var s power.State
	err = q.command(power.WithRequestID(ctx, "poll"), t.Address, t.Driver, "status", func(c context.Context) error {
		var err error
		s, err = drv.Status(c, t)
		return err
	})
	if err != nil {
		if !errors.Is(err, power.ErrUnsupported) && ctx.Err() == nil {
			q.log.Debug("power poll failed", "machine", m.Hostname, "err", err)
		}
		return
	}
	o, err := q.st.ObservePower(ctx, m.ID, s)
	if err != nil {
		if ctx.Err() == nil {
			q.log.Error("power queue: record observed power", "machine", m.Hostname, "err", err)
		}
		return
	}
	if o.Drift {
		q.m.drift.WithLabelValues("detected").Inc()
		q.log.Warn("power drift (reported, not corrected)", "machine", m.Hostname, "observed", s, "desired", o.Status.Desired, "state", m.State)
	}
	if o.Correction != nil {
		q.m.drift.WithLabelValues("detected").Inc()
		q.m.drift.WithLabelValues("corrected").Inc()
		q.log.Info("power drift: correcting", "machine", m.Hostname, "observed", s, "desired", o.Status.Desired, "request", o.Correction.ID)
	}
}

// Target is how the drivers reach m's BMC, for the other users of a
// machine's BMC than the queue (the serial console).
func Target(m store.Machine) power.Target { return target(m) }
