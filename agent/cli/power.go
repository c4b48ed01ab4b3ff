package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"rackd/agent/client"
	"rackd/api"
)

func powerGroup() *group {
	g := &group{name: "power", summary: "Power machines on, off or cycle them through their BMCs, and read their power."}
	for _, a := range []string{"on", "off", "cycle"} {
		g.verbs = append(g.verbs, powerActionVerb(a))
	}
	g.verbs = append(g.verbs, powerStatusVerb())
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func powerActionVerb(action string) *verb {
	return &verb{
		name:     action,
		args:     []string{"ID"},
		synopsis: "[--reason TEXT] [--wait] [--timeout D]",
		summary:  fmt.Sprintf("queue a power %s (admin or the machine's owner)", action),
		help: `ID is the machine's id or hostname. The request is queued (durably) and its
id printed; with --wait the command waits for its fate and exits 1 if it
failed. A request folded into a newer one (superseded) is followed to the one
that stands for it.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.PowerAction
			var wait bool
			var timeout time.Duration
			fs.StringVar(&req.Reason, "reason", "", "why, for the record")
			fs.BoolVar(&wait, "wait", false, "wait until the request is done, failed or superseded")
			fs.DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait: give up waiting after `D`")
			return func(e *env, args []string) error {
				req.Action = action
				c, err := e.client()
				if err != nil {
					return err
				}
				ctx, raw := e.capture()
				r, err := c.RequestPower(ctx, args[0], req)
				if err != nil {
					return err
				}
				if !wait {
					if e.json() {
						return printJSON(e.stdout, *raw)
					}
					fmt.Fprintf(e.stdout, "Queued power %s of %s as %s (rackd power status %s).\n", action, cell(args[0]), r.ID, cell(args[0]))
					return nil
				}
				return waitAndPrint(e, c, r.ID, timeout)
			}
		},
	}
}

// waitAndPrint waits for a request's fate and prints it; a failed request
// is an error (exit 1).
func waitAndPrint(e *env, c *client.Client, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	r, err := c.WaitPower(ctx, id, 200*time.Millisecond)
	if err != nil {
		return err
	}
	if e.json() {
		if err := marshalJSON(e.stdout, r); err != nil {
			return err
		}
	} else if err := printPowerRequest(e.stdout, r); err != nil {
		return err
	}
	if r.State == "failed" {
		return fmt.Errorf("power request %s failed: %s", r.ID, r.Error)
	}
	return nil
}

func powerStatusVerb() *verb {
	return &verb{
		name:     "status",
		args:     []string{"ID"},
		synopsis: "[--wait] [--timeout D]",
		summary:  "show a machine's desired and observed power and its queued requests",
		help: `Without --wait, shows what rackd knows now (observed is what the BMC said at
observed_at). With --wait, first asks the BMC (a query request, admin or the
machine's owner), waits for the answer, then shows the result.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var wait bool
			var timeout time.Duration
			fs.BoolVar(&wait, "wait", false, "query the BMC now and wait for its answer")
			fs.DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait: give up waiting after `D`")
			return func(e *env, args []string) error {
				if wait {
					c, err := e.client()
					if err != nil {
						return err
					}
					r, err := c.RequestPower(e.ctx, args[0], api.PowerAction{Action: "query", Reason: "rackd power status --wait"})
					if err != nil {
						return err
					}
					ctx, cancel := context.WithTimeout(e.ctx, timeout)
					defer cancel()
					if r, err = c.WaitPower(ctx, r.ID, 200*time.Millisecond); err != nil {
						return err
					}
					if r.State == "failed" {
						return fmt.Errorf("power query %s failed: %s", r.ID, r.Error)
					}
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.MachinePower, error) {
					return c.MachinePower(ctx, args[0])
				}, printMachinePower)
			}
		},
	}
}

func printPowerRequest(w io.Writer, r api.PowerRequest) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Request", cell(r.ID))
	row("Machine", cell(r.Machine))
	row("Action", cell(r.Action))
	state := cell(r.State)
	if r.SupersededBy != "" {
		state += " by " + r.SupersededBy
	}
	row("State", state)
	row("Attempts", count(r.Attempts))
	if r.Error != "" {
		row("Error", r.Error)
	}
	row("Asked by", cell(r.Who))
	if r.Reason != "" {
		row("Reason", r.Reason)
	}
	row("Created", when(r.Created))
	if !r.Finished.IsZero() {
		row("Finished", when(r.Finished))
	}
	return tw.Flush()
}

func printMachinePower(w io.Writer, mp api.MachinePower) error {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("Machine", cell(mp.Machine))
	row("Driver", cell(mp.Driver))
	row("Desired", cell(mp.Desired))
	observed := cell(mp.Observed)
	if !mp.ObservedAt.IsZero() {
		observed += " at " + when(mp.ObservedAt)
	}
	row("Observed", observed)
	policy := cell(mp.Policy)
	if mp.Drift {
		policy += " (drift reported)"
	}
	row("Policy", policy)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(mp.Pending) == 0 {
		fmt.Fprintln(w, "\nNo power requests queued.")
		return nil
	}
	fmt.Fprintln(w, "\nQueued:")
	tw = newTable(w)
	fmt.Fprintln(tw, "REQUEST\tACTION\tSTATE\tATTEMPTS\tBY\tCREATED")
	for _, r := range mp.Pending {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Action, r.State, r.Attempts, cell(r.Who), when(r.Created))
	}
	return tw.Flush()
}
