// Package powerbench is what the power benchmarks (bench-ipmi, bench-redfish)
// share: a real rackd child process, built from this tree, with one DEPLOYED
// machine per simulated BMC and periodic power polling off (so only the
// measured queries reach the BMCs), and the round that reads every
// machine's power through rackd's HTTP API at once.
package powerbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"rackd/agent/client"
	"rackd/api"
	"rackd/bench/internal/benchrackd"
)

// Fleet is a running rackd and its machines, named PREFIX00, PREFIX01...
type Fleet struct {
	r     *benchrackd.Rackd
	c     *client.Client
	work  string
	names []string
}

// Start builds rackd, starts it on a free loopback port and adds one
// DEPLOYED machine per entry of bmcs (power policy none: rackd never powers
// them by itself). The caller stops it with Stop.
func Start(ctx context.Context, prefix string, bmcs []api.PowerParams) (*Fleet, error) {
	work, err := os.MkdirTemp("", "rackd-bench-"+prefix+"-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(work, "rackd")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./agent/cmd/rackd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(work)
		return nil, fmt.Errorf("build rackd: %v: %s", err, out)
	}
	r, err := benchrackd.Start(ctx, bin, work, "log_level = \"warn\"\n[power]\npoll_interval = \"0s\"\n", 30*time.Second)
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	f := &Fleet{r: r, work: work}
	token, err := os.ReadFile(filepath.Join(work, "state", "admin.token"))
	if err != nil {
		f.Stop()
		return nil, fmt.Errorf("admin token: %w", err)
	}
	f.c = client.New(r.Base, strings.TrimSpace(string(token)))
	for i, p := range bmcs {
		name := fmt.Sprintf("%s%02d", prefix, i)
		_, err := f.c.CreateMachine(ctx, api.CreateMachine{
			Hostname: name,
			MACs:     []string{fmt.Sprintf("52:54:00:77:%02x:%02x", i/256, i%256)},
			State:    "DEPLOYED",
			Power:    &p,
		})
		if err != nil {
			f.Stop()
			return nil, fmt.Errorf("add machine for %s: %w", p.Address, err)
		}
		f.names = append(f.names, name)
	}
	return f, nil
}

// Client is the admin's API client of the fleet's rackd.
func (f *Fleet) Client() *client.Client { return f.c }

// Query asks rackd to query every machine's BMC at once (POST .../power
// {"action": "query"}), waits until every request is done, and returns the
// seconds that took; then it checks that rackd observed want(i) ("on" or
// "off") for machine i.
func (f *Fleet) Query(ctx context.Context, reason string, want func(i int) string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	var g errgroup.Group
	for _, name := range f.names {
		g.Go(func() error {
			req, err := f.c.RequestPower(ctx, name, api.PowerAction{Action: "query", Reason: reason})
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			res, err := f.c.WaitPower(ctx, req.ID, 5*time.Millisecond)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if res.State != "done" {
				return fmt.Errorf("%s: query %s: %s", name, res.State, res.Error)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	took := time.Since(start).Seconds()
	for i, name := range f.names {
		mp, err := f.c.MachinePower(ctx, name)
		if err != nil {
			return 0, err
		}
		if mp.Observed != want(i) {
			return 0, fmt.Errorf("%s: rackd observed %q, want %q", name, mp.Observed, want(i))
		}
	}
	return took, nil
}

// Stop ends rackd by its PID and removes its work directory.
func (f *Fleet) Stop() {
	if f.r != nil {
		f.r.Stop()
	}
	os.RemoveAll(f.work)
}

// Median is the median of v (the upper one of an even count).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
