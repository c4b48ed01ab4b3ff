// Package manual is the power driver for machines nobody can power
// remotely: every request is recorded and an operator is told (a slog
// warning), who then presses the button.
//
// Status is always StateUnknown: rackd must never believe a machine is on
// because it asked a human to switch it on. The queue therefore cannot verify
// a manual request; it reports the request as handed to the operator.
package manual

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"rackd/power"
)

// Request is one thing the operator was asked to do.
type Request struct {
	At      time.Time
	Machine string // the machine's hostname (power.Target.Machine)
	Address string // the machine's BMC address field, often empty or a rack position
	Action  string // "power on", "power off", "power cycle", "next boot pxe", "next boot disk"
	// RequestID is the power queue's request id, when the ctx carried one.
	RequestID string
}

// Driver records requests for an operator. The zero value is not usable;
// call New.
type Driver struct {
	log  *slog.Logger
	keep int

	mu       sync.Mutex
	requests []Request
}

var _ power.Driver = (*Driver)(nil)

// New returns a manual driver that logs to logger (nil discards),
// with driver=manual added, and keeps the last keep requests (1000 when
// <= 0) for Requests.
func New(logger *slog.Logger, keep int) *Driver {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if keep <= 0 {
		keep = 1000
	}
	return &Driver{log: logger.With("driver", "manual"), keep: keep}
}

func (d *Driver) record(ctx context.Context, t power.Target, action string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("manual %s: %w", action, err)
	}
	r := Request{At: time.Now(), Machine: t.Machine, Address: t.Address, Action: action, RequestID: power.RequestID(ctx)}
	d.mu.Lock()
	d.requests = append(d.requests, r)
	if len(d.requests) > d.keep {
		d.requests = append([]Request(nil), d.requests[len(d.requests)-d.keep:]...)
	}
	d.mu.Unlock()
	// The machine first: it is what the operator looks for. Its address
	// field, often empty for a manual machine, only when set.
	attrs := []any{"machine", t.Machine, "action", action}
	if t.Address != "" {
		attrs = append(attrs, "address", t.Address)
	}
	attrs = append(attrs, "request", r.RequestID)
	d.log.Warn("manual power: an operator must act", attrs...)
	return nil
}

// Requests returns the recorded requests, oldest first.
func (d *Driver) Requests() []Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Request(nil), d.requests...)
}

// PowerOn asks the operator to switch the machine on.
func (d *Driver) PowerOn(ctx context.Context, t power.Target) error {
	return d.record(ctx, t, "power on")
}

// PowerOff asks the operator to switch the machine off.
func (d *Driver) PowerOff(ctx context.Context, t power.Target) error {
	return d.record(ctx, t, "power off")
}

// PowerCycle asks the operator to switch the machine off and on again.
func (d *Driver) PowerCycle(ctx context.Context, t power.Target) error {
	return d.record(ctx, t, "power cycle")
}

// Status is always StateUnknown (see the package comment).
func (d *Driver) Status(ctx context.Context, t power.Target) (power.State, error) {
	if err := ctx.Err(); err != nil {
		return power.StateUnknown, fmt.Errorf("manual status: %w", err)
	}
	return power.StateUnknown, nil
}

// SetNextBoot asks the operator to pick the boot device.
func (d *Driver) SetNextBoot(ctx context.Context, t power.Target, dev power.BootDevice) error {
	switch dev {
	case power.BootPXE, power.BootDisk:
	default:
		return fmt.Errorf("manual next boot %v: %w", dev, power.ErrUnsupported)
	}
	return d.record(ctx, t, "next boot "+dev.String())
}
