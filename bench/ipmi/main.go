// Command ipmi measures reading the power status of many BMCs through
// rackd against the shell loop an operator would write with ipmitool
// (`make bench-ipmi`). It starts -bmcs real ipmi_sim BMCs on 127.0.1.N:623
// (half of them powered on) and a real rackd (built from this tree, a child
// process on a loopback port, periodic power polling off) with one DEPLOYED
// machine per BMC, then, -reps times, interleaved:
//
//   - rackd: a "query" power request for every machine through the HTTP
//     API at once, waited for until all are done (the power queue with its
//     default bounds, the ipmi driver, the store); the figure in RESULT;
//   - driver: a new ipmi driver reads every BMC's status directly with
//     -concurrency commands in flight (the queue's default global bound),
//     cold (every BMC needs a session, as for ipmitool) and then warm;
//     printed for reference;
//   - ipmitool: `ipmitool -I lanplus -C 3 ... chassis power status` once
//     per BMC in a sequential bash loop, the password in the environment.
//
// Every answer is checked against the state each BMC was started with. The
// medians make the last line printed:
//
//	RESULT ipmi_status_all_s=<n> ipmitool_loop_s=<n> ratio=<ipmitool_loop_s / ipmi_status_all_s>
//
// rackd and every simulator are stopped by PID at the end, also on Ctrl-C.
// Loops are bounded in count and time; only loopback is used.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"rackd/api"
	"rackd/bench/internal/powerbench"
	"rackd/internal/ipmisim"
	"rackd/power"
	"rackd/power/ipmi"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-ipmi:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("bmcs", 50, "simulated BMCs")
	reps := flag.Int("reps", 5, "measured repetitions of each side")
	conc := flag.Int("concurrency", 64, "commands in flight through the driver (the power queue's default power.global)")
	flag.Parse()
	if os.Geteuid() != 0 {
		return errors.New("needs root (ipmi_sim binds port 623 on 127.0.1.N)")
	}
	for _, bin := range []string{"ipmi_sim", "ipmitool", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (bench/ipmi/deps.sh installs it)", bin)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("starting %d ipmi_sim BMCs\n", *n)
	sims := make([]*ipmisim.Sim, *n)
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range sims {
			if s != nil {
				s.Close()
			}
		}
	}()
	var g errgroup.Group
	g.SetLimit(8)
	for i := range sims {
		g.Go(func() error {
			s, err := ipmisim.New(ipmisim.Options{PowerOn: i%2 == 0, Password: "bench-" + strconv.Itoa(i)})
			if err != nil {
				return err
			}
			mu.Lock()
			sims[i] = s
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	want := func(i int) power.State {
		if i%2 == 0 {
			return power.StateOn
		}
		return power.StateOff
	}

	fmt.Println("starting rackd with one machine per BMC")
	bmcs := make([]api.PowerParams, len(sims))
	for i, s := range sims {
		bmcs[i] = api.PowerParams{Driver: "ipmi", Address: s.Addr, Username: s.User, Password: s.Password}
	}
	fleet, err := powerbench.Start(ctx, "bmc", bmcs)
	if err != nil {
		return err
	}
	defer fleet.Stop()

	var viaRackd, cold, warm, loop []float64
	for r := range *reps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rk, err := fleet.Query(ctx, "bench-ipmi", func(i int) string { return want(i).String() })
		if err != nil {
			return fmt.Errorf("rackd round %d: %w", r, err)
		}
		c, w, err := driverRound(ctx, sims, *conc, want)
		if err != nil {
			return fmt.Errorf("driver round %d: %w", r, err)
		}
		l, err := ipmitoolRound(ctx, sims, want)
		if err != nil {
			return fmt.Errorf("ipmitool round %d: %w", r, err)
		}
		viaRackd, cold, warm, loop = append(viaRackd, rk), append(cold, c), append(warm, w), append(loop, l)
		fmt.Printf("round %d: rackd API %.3fs, driver cold %.3fs warm %.3fs, ipmitool loop %.3fs\n", r+1, rk, c, w, l)
	}
	mr, mc, mw, ml := powerbench.Median(viaRackd), powerbench.Median(cold), powerbench.Median(warm), powerbench.Median(loop)
	fmt.Printf("medians over %d rounds, %d BMCs: through rackd %.3fs; driver alone cold %.3fs, warm %.3fs (concurrency %d); ipmitool loop %.3fs (%.1f ms per BMC)\n",
		*reps, *n, mr, mc, mw, *conc, ml, ml*1000/float64(*n))
	fmt.Printf("RESULT ipmi_status_all_s=%.3f ipmitool_loop_s=%.3f ratio=%.1f\n", mr, ml, ml/mr)
	return nil
}

// driverRound reads every BMC's status through a new driver (cold), then
// again through the same one (warm), and checks every answer.
func driverRound(ctx context.Context, sims []*ipmisim.Sim, conc int, want func(int) power.State) (cold, warm float64, err error) {
	d := ipmi.New(ipmi.Options{Logger: slog.New(slog.DiscardHandler)})
	defer d.Close()
	pass := func() (float64, error) {
		start := time.Now()
		var g errgroup.Group
		g.SetLimit(conc)
		for i, s := range sims {
			g.Go(func() error {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				st, err := d.Status(cctx, power.Target{Driver: "ipmi", Address: s.Addr, Username: s.User, Password: s.Password})
				if err != nil {
					return err
				}
				if st != want(i) {
					return fmt.Errorf("%s: status %v, want %v", s.Addr, st, want(i))
				}
				return nil
			})
		}
		err := g.Wait()
		return time.Since(start).Seconds(), err
	}
	if cold, err = pass(); err != nil {
		return 0, 0, err
	}
	warm, err = pass()
	return cold, warm, err
}

// ipmitoolRound runs the operator's loop: one ipmitool per BMC, in turn.
// Each BMC has its own password, so the loop sets IPMI_PASSWORD per call
// (in the environment, never argv).
func ipmitoolRound(ctx context.Context, sims []*ipmisim.Sim, want func(int) power.State) (float64, error) {
	var script strings.Builder
	script.WriteString("set -e\nwhile read -r host pass; do\n\tIPMI_PASSWORD=$pass ipmitool -I lanplus -C 3 -H \"$host\" -U admin -E chassis power status\ndone\n")
	var input strings.Builder
	for _, s := range sims {
		if s.Port != 623 || s.User != "admin" {
			return 0, fmt.Errorf("%s: the loop assumes port 623 and user admin", s.Addr)
		}
		fmt.Fprintf(&input, "%s %s\n", s.Host, s.Password)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(len(sims))*5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "bash", "-c", script.String())
	cmd.Stdin = strings.NewReader(input.String())
	start := time.Now()
	out, err := cmd.Output()
	took := time.Since(start).Seconds()
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(sims) {
		return 0, fmt.Errorf("%d answers from %d BMCs: %s", len(lines), len(sims), out)
	}
	for i, l := range lines {
		if w := "Chassis Power is " + want(i).String(); strings.TrimSpace(l) != w {
			return 0, fmt.Errorf("%s: ipmitool says %q, want %q", sims[i].Addr, l, w)
		}
	}
	return took, nil
}
