// Command redfish measures reading the power status of many Redfish BMCs
// through rackd against the shell loop an operator would write with DMTF's
// redfishtool (`make bench-redfish`). It starts -bmcs simulated Redfish BMCs
// (internal/redfishsim: HTTPS on 127.0.0.1, each with its own self-signed
// certificate and password, -latency added to every request, half of them
// powered on) and a real rackd (built from this tree, a child process on a
// loopback port, periodic power polling off) with one DEPLOYED machine per
// BMC, power driver redfish, then one warm-up round (which pins each BMC's
// certificate: trust on first use), then, -reps times, interleaved:
//
//   - rackd: a "query" power request for every machine through the HTTP
//     API at once, waited for until all are done (the power queue with its
//     default bounds, the redfish driver, the store); the figure in RESULT;
//   - redfishtool: `redfishtool -r HOST:PORT -u admin -p PASS -S Always
//     -P PowerState Systems -1 get` once per BMC in a sequential bash loop.
//
// Every answer is checked against the state each BMC was started with. The
// medians make the last line printed:
//
//	RESULT redfish_status_all_s=<n> redfishtool_loop_s=<n> ratio=<redfishtool_loop_s / redfish_status_all_s> bmcs=<n>
//
// rackd and every simulator are stopped at the end, also on Ctrl-C. Loops
// are bounded in count and time; only loopback is used.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"rackd/api"
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
	n := flag.Int("bmcs", 50, "simulated Redfish BMCs")
	reps := flag.Int("reps", 3, "measured repetitions of each side")
	latency := flag.Duration("latency", 20*time.Millisecond, "latency added to every request a BMC answers")
	flag.Parse()
	for _, bin := range []string{"redfishtool", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (bench/redfish/deps.sh installs it)", bin)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, _ := exec.Command("uptime").Output()
	fmt.Printf("start: %s", out)

	fmt.Printf("starting %d Redfish BMCs (%v per request)\n", *n, *latency)
	sims := make([]*redfishsim.Sim, *n)
	defer func() {
		for _, s := range sims {
			if s != nil {
				s.Close()
			}
		}
	}()
	for i := range sims {
		s, err := redfishsim.New(redfishsim.Options{PowerOn: i%2 == 0, Password: fmt.Sprintf("bench-%d", i),
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
	// The first round pins every certificate (a store write per machine)
	// and opens every session: not what an operator's status check costs.
	if warm, err := fleet.Query(ctx, "bench-redfish warm-up", want); err != nil {
		return fmt.Errorf("warm-up round: %w", err)
	} else {
		fmt.Printf("warm-up (certificates pinned, sessions opened): rackd API %.3fs\n", warm)
	}

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
	out, _ = exec.Command("uptime").Output()
	fmt.Printf("end: %s", out)
	fmt.Printf("RESULT redfish_status_all_s=%.3f redfishtool_loop_s=%.3f ratio=%.1f bmcs=%d\n", mr, ml, ml/mr, *n)
	return nil
}

// redfishtoolRound runs the operator's loop: one redfishtool per BMC, in
// turn, reading the system's PowerState.
func redfishtoolRound(ctx context.Context, sims []*redfishsim.Sim, want func(int) string) (float64, error) {
	script := "set -e\nwhile read -r host user pass; do\n" +
		"\tredfishtool -r \"$host\" -u \"$user\" -p \"$pass\" -S Always -T 10 -P PowerState Systems -1 get | tr -d '\\n '\n\techo\n" +
		"done\n"
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
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(sims) {
		return 0, fmt.Errorf("%d answers from %d BMCs: %s", len(lines), len(sims), out)
	}
	for i, l := range lines {
		w := map[string]string{"on": `{"PowerState":"On"}`, "off": `{"PowerState":"Off"}`}[want(i)]
		if l != w {
			return 0, fmt.Errorf("%s: redfishtool says %q, want %q", sims[i].Addr, l, w)
		}
	}
	return took, nil
}
