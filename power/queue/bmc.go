package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"rackd/power"
)

// errBreakerOpen is a command refused without reaching its BMC.
var errBreakerOpen = errors.New("circuit breaker open")

// bmc is what the queue keeps per BMC address: its slots, the earliest time
// the next command may start, and its circuit breaker.
type bmc struct {
	slots chan struct{}
	gate  chan struct{}
	// lastStart is when the last command to this BMC started (guarded by
	// gate).
	lastStart time.Time
	// guarded by Queue.mu:
	failures  int       // in a row
	openUntil time.Time // breaker open until then
	probing   bool      // half-open: one command is testing the BMC
}

func (q *Queue) bmc(addr string) *bmc {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, ok := q.bmcs[addr]
	if !ok {
		b = &bmc{slots: make(chan struct{}, q.cfg.PerBMC), gate: make(chan struct{}, 1)}
		q.bmcs[addr] = b
	}
	return b
}

// admit asks the breaker whether a command may go to the BMC now.
func (q *Queue) admit(addr string, b *bmc, now time.Time) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if b.failures < q.cfg.BreakerThreshold {
		return nil
	}
	if now.Before(b.openUntil) || b.probing {
		return fmt.Errorf("bmc %s: %w after %d failures in a row; next try after %s",
			addr, errBreakerOpen, b.failures, b.openUntil.UTC().Format(time.RFC3339))
	}
	b.probing = true // half-open: this command is the probe
	return nil
}

func (q *Queue) record(b *bmc, err error, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b.probing = false
	// An unsupported command says nothing about the BMC's health.
	if err == nil || errors.Is(err, power.ErrUnsupported) {
		b.failures = 0
		return
	}
	b.failures++
	if b.failures >= q.cfg.BreakerThreshold {
		b.openUntil = now.Add(q.cfg.BreakerCooldown)
	}
}

// breakers counts BMCs whose breaker is open and half-open (probing).
func (q *Queue) breakers() (open, halfOpen int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	for _, b := range q.bmcs {
		switch {
		case b.failures < q.cfg.BreakerThreshold:
		case b.probing || !now.Before(b.openUntil):
			halfOpen++
		default:
			open++
		}
	}
	return open, halfOpen
}

// failingBMCs is the failures in a row of each BMC whose last command
// failed.
func (q *Queue) failingBMCs() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[string]int{}
	for addr, b := range q.bmcs {
		if b.failures > 0 {
			out[addr] = b.failures
		}
	}
	return out
}

// command runs one BMC command under the bounds: a slot of the BMC, the
// BMC's minimum interval, a global slot. Waiting for those ends with ctx; the
// command itself does not: once sent it runs to its answer or to the command
// timeout, whatever happens to ctx (nobody can know what cutting it off
// would leave behind).
func (q *Queue) command(ctx context.Context, addr, driver, action string, fn func(context.Context) error) error {
	b := q.bmc(addr)
	if err := q.admit(addr, b, time.Now()); err != nil {
		q.m.bmcErrors.WithLabelValues("circuit_open").Inc()
		return err
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		q.undoProbe(b)
		return ctx.Err()
	}
	defer func() { <-b.slots }()
	// The gate spaces the starts of commands to this BMC: whoever holds it
	// waits out the minimum interval, takes a global slot and stamps its
	// start. Machines behind other BMCs never wait here.
	select {
	case b.gate <- struct{}{}:
	case <-ctx.Done():
		q.undoProbe(b)
		return ctx.Err()
	}
	if d := time.Until(b.lastStart.Add(q.cfg.MinInterval)); d > 0 && !sleep(ctx, d, nil, nil) {
		<-b.gate
		q.undoProbe(b)
		return ctx.Err()
	}
	select {
	case q.global <- struct{}{}:
	case <-ctx.Done():
		<-b.gate
		q.undoProbe(b)
		return ctx.Err()
	}
	b.lastStart = time.Now()
	<-b.gate
	q.m.inFlight.Inc()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.cfg.CommandTimeout)
	begin := time.Now()
	err := fn(cctx)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, power.ErrTimeout) {
		err = fmt.Errorf("bmc %s: %s: no answer within %s: %w (%w)", addr, action, q.cfg.CommandTimeout, err, power.ErrTimeout)
	}
	cancel()
	q.m.cmdDuration.WithLabelValues(driver, action).Observe(time.Since(begin).Seconds())
	q.m.commands.Inc()
	q.m.inFlight.Dec()
	<-q.global
	q.record(b, err, time.Now())
	if err != nil {
		q.m.bmcErrors.WithLabelValues(power.ErrorKind(err)).Inc()
	}
	return err
}

func (q *Queue) undoProbe(b *bmc) {
	q.mu.Lock()
	b.probing = false
	q.mu.Unlock()
}

// Health is the queue at a glance, for the web UI's dashboard: what the
// rackd_power_queue_depth, rackd_power_commands_in_flight and
// rackd_power_circuit_breakers_* series say, and which BMCs are failing.
type Health struct {
	// Depth is the number of requests pending or running.
	Depth int
	// InFlight is the number of BMC commands holding a global slot.
	InFlight         int
	BreakersOpen     int
	BreakersHalfOpen int
	// Failing are the BMCs whose last command failed, by address.
	Failing []FailingBMC
}

// FailingBMC is a BMC whose last commands failed.
type FailingBMC struct {
	Address string
	// Failures is how many commands in a row failed.
	Failures int
	// OpenUntil is when its breaker lets a probe through (zero: not open).
	OpenUntil time.Time
}

// Health reads the queue's health now.
func (q *Queue) Health() (Health, error) {
	depth, err := q.st.OpenPowerCount()
	if err != nil {
		return Health{}, fmt.Errorf("count open power requests: %w", err)
	}
	h := Health{Depth: depth, InFlight: len(q.global)}
	h.BreakersOpen, h.BreakersHalfOpen = q.breakers()
	for addr, n := range q.failingBMCs() {
		h.Failing = append(h.Failing, FailingBMC{Address: addr, Failures: n})
	}
	q.mu.Lock()
	for i := range h.Failing {
		if b := q.bmcs[h.Failing[i].Address]; b != nil && b.failures >= q.cfg.BreakerThreshold {
			h.Failing[i].OpenUntil = b.openUntil
		}
	}
	q.mu.Unlock()
	slices.SortFunc(h.Failing, func(a, b FailingBMC) int { return strings.Compare(a.Address, b.Address) })
	return h, nil
}
