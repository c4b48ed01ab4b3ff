// Command redfish measures reading the power status of many Redfish BMCs
// through rackd against the shell loop an operator would write with
// redfishtool (`make bench-redfish`). It starts -bmcs simulated Redfish BMCs
// (internal/redfishsim, in this process, each on its own loopback port with
// its own certificate and -latency added to every request; half of them
// powered on) and a real rackd (built from this tree, a child process,
// periodic power polling off) with one DEPLOYED machine per BMC, then,
// -reps times, interleaved:
//
//   - rackd: a "query" power request for every machine through the HTTP
//     API at once, waited for until all are done (the power queue with its
//     default bounds, the redfish driver with its sessions and pinned
//     certificates, the store); the figure in RESULT;
//   - redfishtool: `redfishtool -r HOST:PORT -u admin -p PASSWORD -S Always
//     -P PowerState Systems -1 get` once per BMC in a sequential bash loop.
//
// Every answer is checked against the state each BMC was started with. The
// medians make the last line printed:
//
//	RESULT redfish_status_all_s=<n> redfishtool_loop_s=<n> ratio=<loop/rackd> bmcs=<n>
//
// rackd is stopped by PID at the end, also on Ctrl-C; the simulators end
// with this process. Loops are bounded in count and time; only loopback is
// used.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"rackd/agent/api"
	"rackd/bench/internal/powerbench"
	"rackd/internal/redfishsim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-redfish:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("bmcs", 50, "simulated BMCs")
	reps := flag.Int("reps", 5, "measured repetitions of each side")
	latency := flag.Duration("latency", 20*time.Millisecond, "latency each simulated BMC adds to every request")
	flag.Parse()
	for _, bin := range []string{"redfishtool", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (bench/redfish/deps.sh installs it)", bin)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("starting %d simulated Redfish BMCs (%v added per request)\n", *n, *latency)
	sims := make([]*redfishsim.Sim, *n)
	defer func() {
		for _, s := range sims {
			if s != nil {
				s.Close()
			}
		}
	}()
	for i := range sims {
		s, err := redfishsim.New(redfishsim.Options{PowerOn: i%2 == 0, Password: "bench-" + strconv.Itoa(i),
			Quirks: redfishsim.Quirks{Latency: *latency}})
		if err != nil {
			return err
		}
		sims[i] = s
	}
	want := func(i int) string {
		if i%2 == 0 {
			return "on"
		}
		return "off"
	}

	fmt.Println("starting rackd with one machine per BMC")
	bmcs := make([]api.PowerParams, len(sims))
	for i, s := range sims {
		bmcs[i] = api.PowerParams{Driver: "redfish", Address: s.URL, Username: s.User, Password: s.Password}
	}
	fleet, err := powerbench.Start(ctx, "rf", bmcs)
	if err != nil {
		return err
	}
	defer fleet.Stop()

	var viaRackd, loop []float64
	for r := range *reps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rk, err := fleet.Query(ctx, "bench-redfish", want)
		if err != nil {
			return fmt.Errorf("rackd round %d: %w", r, err)
		}
		l, err := redfishtoolRound(ctx, sims, want)
		if err != nil {
			return fmt.Errorf("redfishtool round %d: %w", r, err)
		}
		viaRackd, loop = append(viaRackd, rk), append(loop, l)
		fmt.Printf("round %d: rackd API %.3fs, redfishtool loop %.3fs\n", r+1, rk, l)
	}
	mr, ml := powerbench.Median(viaRackd), powerbench.Median(loop)
	fmt.Printf("medians over %d rounds, %d BMCs: through rackd %.3fs; redfishtool loop %.3fs (%.1f ms per BMC)\n",
		*reps, *n, mr, ml, ml*1000/float64(*n))
	fmt.Printf("RESULT redfish_status_all_s=%.3f redfishtool_loop_s=%.3f ratio=%.1f bmcs=%d\n", mr, ml, ml/mr, *n)
	return nil
}

// redfishtoolRound runs the operator's loop: one redfishtool per BMC, in
// turn, each with its own password.
func redfishtoolRound(ctx context.Context, sims []*redfishsim.Sim, want func(int) string) (float64, error) {
	script := "set -e\nwhile read -r addr user pass; do\n\tredfishtool -r \"$addr\" -u \"$user\" -p \"$pass\" -S Always -P PowerState Systems -1 get | tr -d '\\n'; echo\ndone\n"
	var input strings.Builder
	for _, s := range sims {
		fmt.Fprintf(&input, "%s %s %s\n", s.Addr, s.User, s.Password)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Duration(len(sims))*10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "bash", "-c", script)
	cmd.Stdin = strings.NewReader(input.String())
	start := time.Now()
	out, err := cmd.Output()
	took := time.Since(start).Seconds()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return 0, fmt.Errorf("%v: %s %s", err, out, ee.Stderr)
		}
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(sims) {
		return 0, fmt.Errorf("%d answers from %d BMCs: %s", len(lines), len(sims), out)
	}
	for i, l := range lines {
		w := `"PowerState": "On"`
		if want(i) == "off" {
			w = `"PowerState": "Off"`
		}
		if !strings.Contains(l, w) {
			return 0, fmt.Errorf("%s: redfishtool says %q, want %s", sims[i].Addr, l, w)
		}
	}
	return took, nil
}
