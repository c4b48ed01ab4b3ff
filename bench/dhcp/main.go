// Command dhcp compares rackd's DHCPv4 server with ISC Kea (kea-dhcp4,
// memfile with persistence) and dnsmasq, all three keeping their leases on
// disk (rackd and dnsmasq fsync before the ACK; Kea writes its lease file
// but does not fsync it), in the same run on the same machine (`make bench-dhcp`, as root). It prints
// progress, perfdhcp's latency figures per server, then one line:
//
//	RESULT dhcp_dora_per_s=<n> kea_dora_per_s=<n> dnsmasq_dora_per_s=<n> ratio_kea=<rackd/kea> ratio_dnsmasq=<rackd/dnsmasq> cpu_us_per_dora=<n> kea_cpu_us_per_dora=<n> cpu_ratio_kea=<kea/rackd>
//
// It creates two network namespaces joined by a veth pair (server
// 10.77.0.1/24, client 10.77.0.2/24, no default route) and drives each
// server from the client namespace with Kea's perfdhcp, the same command
// line for all: 4-way DORA, relayed (giaddr 10.77.0.2), up to 60,000
// distinct clients, the subnet 10.77.0.0/16 with the pool
// 10.77.1.0-10.77.255.254. Every perfdhcp run gets a freshly started server
// with an empty lease database.
//
// Repetition by repetition, the servers take turns (the order rotates). In
// each repetition each server gets a bounded coarse-to-fine search for the
// highest rate with less than 1 % of DORAs lost (-steps runs of -period
// seconds), then one run at a fixed rate (-cpu-rate, capped at the rate it
// sustained) during which its CPU time (utime+stime from /proc/PID/stat) is
// divided by the DORAs completed. The RESULT line has the medians over the
// repetitions.
//
// *_dora_per_s is the DORAs completed per second (ACKs received over the
// period) of the best run with < 1 % loss; cpu_us_per_dora is server CPU
// microseconds per DORA; ratio_* divide rackd's rate by the peer's,
// cpu_ratio_kea divides Kea's CPU per DORA by rackd's (above 1: rackd uses
// less). Missing figures print as 0.
//
// Everything it starts is stopped by PID, and the namespaces removed, at
// the end, on error and on SIGINT/SIGTERM. Every run is bounded in time, the
// searches in steps, and the whole in -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"rackd/bench/internal/benchns"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-dhcp:", err)
		os.Exit(1)
	}
}

type bench struct {
	t        *benchns.Topology
	work     string
	period   int     // seconds per perfdhcp run
	steps    int     // perfdhcp runs per server per repetition in the search
	start    int     // first rate tried
	factor   float64 // coarse step of the first repetition's search
	refine   float64 // coarse step of the later ones, from the last result
	minRate  int
	maxRate  int
	loss     float64 // percent of DORAs that may be lost
	cpuRate  int
	verbose  bool
	required map[string]bool      // servers whose failure to start ends the run
	others   map[string][]float64 // per server: cores used by other work during each of its runs
}

// trial is one perfdhcp run against a freshly started server.
type trial struct {
	rate   int // asked of perfdhcp
	rep    report
	dora   float64 // DORAs completed per second of the period
	cpuUs  float64 // server CPU µs per completed DORA; NaN without DORAs
	leases int     // leases in the server's durable store after the run; -1 unknown
	// CPUs used during the run (1 = one core busy): the server, perfdhcp,
	// and everything else on the machine (other work competing for it).
	srvCores, genCores, otherCores float64
}

func (t trial) ok() bool { return t.rep.do.sent > 0 }

// stats collects a server's figures, one per repetition.
type stats struct {
	best []trial // the best run with < loss % lost, per repetition (zero: none)
	cpu  []trial // the fixed-rate run, per repetition (zero: none)
	note string  // why a figure is missing
}

func run() error {
	reps := flag.Int("reps", 3, "repetitions; each server gets a search and a CPU run in each")
	period := flag.Int("period", 10, "seconds of each perfdhcp run (perfdhcp -p)")
	steps := flag.Int("steps", 5, "perfdhcp runs per server per repetition in the rate search")
	start := flag.Int("start", 1000, "first rate (DORA/s) tried in the first repetition")
	factor := flag.Float64("factor", 2, "coarse step of the first repetition's search")
	refine := flag.Float64("refine", 1.25, "coarse step of later repetitions, which start from the best earlier result")
	minRate := flag.Int("min-rate", 25, "lowest rate tried")
	maxRate := flag.Int("max-rate", 16000, "highest rate tried (above it perfdhcp measures itself)")
	loss := flag.Float64("loss", 1, "percent of DORAs that may be lost at a passing rate")
	cpuRate := flag.Int("cpu-rate", 2000, "rate (DORA/s) of the CPU run, capped at the rate a server sustained")
	servers := flag.String("servers", "rackd,kea,dnsmasq", "servers to measure, comma-separated")
	dir := flag.String("dir", "bench/out", "scratch directory (lease databases), on the disk being measured")
	bin := flag.String("rackd", "", "rackd binary to run (default: go build ./agent/cmd/rackd)")
	rackdExtra := flag.String("rackd-dhcp", "", "TOML lines appended to the [dhcp] section of rackd's config, for tuning experiments")
	timeout := flag.Duration("timeout", 30*time.Minute, "bound of the whole run")
	verbose := flag.Bool("v", false, "print perfdhcp's output of every run")
	flag.Parse()
	if *reps < 1 || *period < 1 || *steps < 1 || *start < 1 || *factor <= 1 || *refine <= 1 ||
		*minRate < 1 || *maxRate < *minRate || *cpuRate < 1 {
		return errors.New("bad flags: counts and rates must be positive, factors above 1")
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces (run `sudo make bench-dhcp`)")
	}
	names := strings.Split(*servers, ",")
	for _, n := range names {
		if !slices.Contains([]string{"rackd", "kea", "dnsmasq"}, n) {
			return fmt.Errorf("-servers: unknown server %q", n)
		}
	}
	tools := []string{"ip", "perfdhcp"}
	if slices.Contains(names, "kea") {
		tools = append(tools, "kea-dhcp4")
	}
	if slices.Contains(names, "dnsmasq") {
		tools = append(tools, "dnsmasq")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (make bench-deps installs it): %w", tool, err)
		}
	}

	// SIGPIPE too: output piped into `head` that exits must not kill the
	// run before it has stopped its servers and removed its namespaces.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	began := time.Now()

	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(*dir, "dhcp-")
	if err != nil {
		return err
	}
	work, _ = filepath.Abs(work)
	defer os.RemoveAll(work)

	rackdBin := *bin
	if rackdBin == "" && slices.Contains(names, "rackd") {
		rackdBin = filepath.Join(work, "rackd")
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Minute)
		out, err := exec.CommandContext(bctx, "go", "build", "-o", rackdBin, "./agent/cmd/rackd").CombinedOutput()
		bcancel()
		if err != nil {
			return fmt.Errorf("go build ./agent/cmd/rackd: %v\n%s", err, out)
		}
		fmt.Println("built rackd from ./agent/cmd/rackd")
	}

	t, err := benchns.NewTopology(ctx, "rkb")
	if err != nil {
		return err
	}
	defer func() {
		if err := t.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-dhcp: cleanup:", err)
		}
	}()
	defer benchns.StopAll() // before the namespaces go (defers run last first)
	fmt.Printf("namespaces %s (%s %s%s) <-> %s (%s %s%s), veth, no default route\n",
		t.Srv, t.SrvIf, benchns.ServerIP, benchns.IfPrefix, t.Cli, t.CliIf, benchns.ClientIP, benchns.IfPrefix)
	fmt.Printf("perfdhcp %s\n", strings.Join(perfdhcpArgs(0, *period), " "))

	b := &bench{t: t, work: work, period: *period, steps: *steps, start: *start, factor: *factor,
		refine: *refine, minRate: *minRate, maxRate: *maxRate, loss: *loss, cpuRate: *cpuRate,
		verbose: *verbose, required: map[string]bool{"kea": true, "dnsmasq": true}, others: map[string][]float64{}}
	var list []server
	for _, n := range names {
		switch n {
		case "rackd":
			list = append(list, rackd{t: t, bin: rackdBin, extra: *rackdExtra})
		case "kea":
			k := kea{t: t}
			cdir, err := os.MkdirTemp(work, "kea-check-")
			if err != nil {
				return err
			}
			if err := k.check(ctx, cdir); err != nil {
				return err
			}
			list = append(list, k)
		case "dnsmasq":
			list = append(list, dnsmasq{t: t})
		}
	}

	all := map[string]*stats{}
	for _, s := range list {
		all[s.name()] = &stats{}
	}
	for r := range *reps {
		// The lease stores of rackd and dnsmasq wait for fsync: say what
		// the disk answers at the moment (other work shares it).
		p50, p99, n, err := fsyncLatency(work, 200, 3*time.Second)
		if err != nil {
			return err
		}
		fmt.Printf("rep %d/%d disk: 4 KiB append + fsync p50 %.2f ms, p99 %.2f ms (%d)\n", r+1, *reps,
			p50.Seconds()*1e3, p99.Seconds()*1e3, n)
		order := append(slices.Clone(list[r%len(list):]), list[:r%len(list)]...)
		for _, s := range order {
			st := all[s.name()]
			startRate, factor := b.start, b.factor
			if r > 0 {
				// From the best earlier result: a repetition slowed by
				// other work on the machine should not anchor the next.
				prev := 0.0
				for _, t := range st.best {
					prev = max(prev, t.dora)
				}
				if prev > 0 {
					startRate, factor = int(math.Round(prev)), b.refine
				}
			}
			tag := fmt.Sprintf("rep %d/%d %s", r+1, *reps, s.name())
			best, err := b.search(ctx, tag, s, startRate, factor)
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted: %w", context.Cause(ctx))
			}
			if err != nil {
				if b.required[s.name()] {
					return fmt.Errorf("%s: %w", s.name(), err)
				}
				fmt.Printf("%s: %v\n", tag, firstLine(err))
				st.note = firstLine(err)
			}
			st.best = append(st.best, best)
			if !best.ok() {
				if err == nil {
					st.note = fmt.Sprintf("rep %d: no run with < %g%% lost", r+1, b.loss)
					fmt.Printf("%s: %s\n", tag, st.note)
				}
				st.cpu = append(st.cpu, trial{})
				continue
			}
			fmt.Printf("%s: highest rate with < %g%% lost: %.0f DORA/s\n", tag, b.loss, best.dora)
			rate := min(b.cpuRate, int(best.dora))
			c, err := b.trial(ctx, s, rate, true)
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted: %w", context.Cause(ctx))
			}
			if err != nil {
				if b.required[s.name()] {
					return fmt.Errorf("%s: %w", s.name(), err)
				}
				fmt.Printf("%s cpu: %v\n", tag, firstLine(err))
				st.note = firstLine(err)
				c = trial{}
			} else {
				fmt.Printf("%s cpu -r %d: %s\n", tag, c.rate, c.line(b.period))
			}
			st.cpu = append(st.cpu, c)
		}
	}

	med := func(name string, f func(trial) float64, src func(*stats) []trial) float64 {
		st := all[name]
		if st == nil {
			return 0
		}
		var v []float64
		for _, t := range src(st) {
			if t.ok() {
				v = append(v, f(t))
			} else {
				v = append(v, 0)
			}
		}
		return median(v)
	}
	bestOf := func(st *stats) []trial { return st.best }
	cpuOf := func(st *stats) []trial { return st.cpu }
	dora := func(t trial) float64 { return t.dora }
	cpu := func(t trial) float64 { return t.cpuUs }

	fmt.Printf("\nmedians of %d repetitions (%.1f min):\n", *reps, time.Since(began).Minutes())
	for _, s := range list {
		st := all[s.name()]
		var rates, cpus []string
		for i := range st.best {
			rates = append(rates, fmt.Sprintf("%.0f", st.best[i].dora))
			cpus = append(cpus, fmt.Sprintf("%.1f@%d/s", st.cpu[i].cpuUs, st.cpu[i].rate))
		}
		fmt.Printf("%-7s %6.0f DORA/s [%s]  CPU %6.1f µs/DORA [%s]  other work: median %.2f cores, max %.2f\n", s.name(),
			med(s.name(), dora, bestOf), strings.Join(rates, " "),
			med(s.name(), cpu, cpuOf), strings.Join(cpus, " "), median(b.others[s.name()]), slices.Max(append([]float64{0}, b.others[s.name()]...)))
		if st.note != "" {
			fmt.Printf("%-7s note: %s\n", s.name(), st.note)
		}
	}
	fmt.Println("\nperfdhcp latency, ms (min/avg/max/std, medians of the repetitions):")
	for _, s := range list {
		st := all[s.name()]
		fmt.Printf("%-7s at its highest rate: %s\n", s.name(), latency(st.best))
		fmt.Printf("%-7s at the CPU run's rate: %s\n", s.name(), latency(st.cpu))
	}

	rk, kd, dm := med("rackd", dora, bestOf), med("kea", dora, bestOf), med("dnsmasq", dora, bestOf)
	rc, kc := med("rackd", cpu, cpuOf), med("kea", cpu, cpuOf)
	fmt.Printf("RESULT dhcp_dora_per_s=%.0f kea_dora_per_s=%.0f dnsmasq_dora_per_s=%.0f ratio_kea=%.2f ratio_dnsmasq=%.2f cpu_us_per_dora=%.1f kea_cpu_us_per_dora=%.1f cpu_ratio_kea=%.2f\n",
		rk, kd, dm, div(rk, kd), div(rk, dm), rc, kc, div(kc, rc))
	return nil
}

// search looks for the highest rate s sustains with less than b.loss % of
// DORAs lost, in at most b.steps runs: from startRate it steps up (or down)
// by factor, the step growing by factor each time up to ×2, until it has a
// passing and a failing rate, then bisects (geometrically) between them. A run passes when perfdhcp sent what was
// asked (within 5 %: otherwise the load generator is the limit) and less
// than b.loss % was lost. It returns the run with the most DORAs per second
// among those with less than b.loss % lost (zero if none).
func (b *bench) search(ctx context.Context, tag string, s server, startRate int, factor float64) (trial, error) {
	var best trial
	lo, hi := 0, 0 // highest passing, lowest failing rate; 0 unknown
	r := startRate
	step := factor // grows while the runs keep passing (failing), up to 2
	for range b.steps {
		r = max(b.minRate, min(b.maxRate, r))
		t, err := b.trial(ctx, s, r, false)
		if err != nil {
			return best, err
		}
		lossOK := t.rep.lossPct() < b.loss
		sentOK := float64(t.rep.do.sent) >= 0.95*float64(r*b.period)
		pass := lossOK && sentOK
		verdict := "pass"
		switch {
		case !lossOK:
			verdict = "fail"
		case !sentOK:
			verdict = "fail (perfdhcp could not send at this rate)"
		}
		fmt.Printf("%s search -r %d: %s: %s\n", tag, r, t.line(b.period), verdict)
		if lossOK && t.dora > best.dora {
			best = t
		}
		if t.rep.do.received == 0 {
			return best, fmt.Errorf("not answering (no OFFER at %d/s)", r)
		}
		if pass {
			lo = r
		} else {
			hi = r
		}
		next := r
		switch {
		case hi == 0:
			if r >= b.maxRate {
				return best, nil
			}
			next = int(math.Round(float64(r) * step))
			step = min(2, step*factor)
		case lo == 0:
			if r <= b.minRate {
				return best, nil
			}
			next = int(math.Round(float64(r) / step))
			step = min(2, step*factor)
		default:
			next = int(math.Round(math.Sqrt(float64(lo) * float64(hi))))
			if float64(hi)/float64(lo) < 1.03 || next == lo || next == hi {
				return best, nil
			}
		}
		r = next
	}
	return best, nil
}

// trial starts s with an empty lease database, runs perfdhcp at rate
// against it, measures its CPU time, and stops it. With count it also
// counts the leases in its durable store.
func (b *bench) trial(ctx context.Context, s server, rate int, count bool) (trial, error) {
	dir, err := os.MkdirTemp(b.work, s.name()+"-")
	if err != nil {
		return trial{}, err
	}
	defer os.RemoveAll(dir)
	p, err := s.start(ctx, dir)
	if err != nil {
		return trial{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.Stop(10 * time.Second)
		}
	}()
	m0, err := benchns.MachineTicks()
	if err != nil {
		return trial{}, err
	}
	c0, err := cpuTicks(p.PID())
	if err != nil {
		return trial{}, err
	}
	t0 := time.Now()
	rep, err := runPerfdhcp(ctx, b.t.Cli, rate, b.period)
	if err != nil {
		return trial{}, err
	}
	c1, err := cpuTicks(p.PID())
	if err != nil {
		return trial{}, fmt.Errorf("%s died during the run: %v\n%s", s.name(), err, p.Out)
	}
	wall := time.Since(t0).Seconds()
	m1, err := benchns.MachineTicks()
	if err != nil {
		return trial{}, err
	}
	if b.verbose {
		fmt.Print(rep.raw)
	}
	t := trial{rate: rate, rep: rep, dora: float64(rep.acks()) / float64(b.period), cpuUs: math.NaN(), leases: -1}
	if rep.acks() > 0 {
		t.cpuUs = float64(c1-c0) * 1e6 / benchns.UserHZ / float64(rep.acks())
	}
	t.srvCores = float64(c1-c0) / benchns.UserHZ / wall
	t.genCores = rep.cpu.Seconds() / wall
	t.otherCores = max(0, float64(m1-m0)/benchns.UserHZ/wall-t.srvCores-t.genCores)
	b.others[s.name()] = append(b.others[s.name()], t.otherCores)
	if count {
		if n, err := s.leases(ctx, dir); err != nil {
			fmt.Printf("%s: counting leases: %v\n", s.name(), err)
		} else {
			t.leases = n
		}
	}
	stopped = true
	if err := p.Stop(10 * time.Second); err != nil {
		return t, fmt.Errorf("%v\n%s", err, p.Out)
	}
	return t, nil
}

func (t trial) line(period int) string {
	s := fmt.Sprintf("%d DORAs in %ds = %.0f/s, lost %.2f%% (answered: DO %d/%d, RA %d/%d), avg DO %.2f RA %.2f ms, CPU %.1f µs/DORA; cores: server %.2f, perfdhcp %.2f, others %.2f",
		t.rep.acks(), period, t.dora, t.rep.lossPct(), t.rep.do.received, t.rep.do.sent,
		t.rep.ra.received, t.rep.ra.sent, t.rep.do.avg, t.rep.ra.avg, t.cpuUs,
		t.srvCores, t.genCores, t.otherCores)
	if t.leases >= 0 {
		s += fmt.Sprintf(", %d leases stored", t.leases)
	}
	return s
}

// latency formats the medians over the runs of perfdhcp's delay figures.
func latency(ts []trial) string {
	fig := func(f func(trial) float64) string {
		var v []float64
		for _, t := range ts {
			if x := f(t); t.ok() && !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", median(v))
	}
	var rates []string
	for _, t := range ts {
		if t.ok() {
			rates = append(rates, fmt.Sprint(t.rate))
		}
	}
	if len(rates) == 0 {
		return "no runs"
	}
	return fmt.Sprintf("DISCOVER-OFFER %s/%s/%s/%s  REQUEST-ACK %s/%s/%s/%s  (-r %s)",
		fig(func(t trial) float64 { return t.rep.do.min }), fig(func(t trial) float64 { return t.rep.do.avg }),
		fig(func(t trial) float64 { return t.rep.do.max }), fig(func(t trial) float64 { return t.rep.do.std }),
		fig(func(t trial) float64 { return t.rep.ra.min }), fig(func(t trial) float64 { return t.rep.ra.avg }),
		fig(func(t trial) float64 { return t.rep.ra.max }), fig(func(t trial) float64 { return t.rep.ra.std }),
		strings.Join(rates, ","))
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	for i := range v {
		if math.IsNaN(v[i]) {
			v[i] = 0
		}
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func div(a, b float64) float64 {
	if b == 0 || a == 0 {
		return 0
	}
	return a / b
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
