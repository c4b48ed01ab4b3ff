// Command dhcp compares rackd's DHCPv4 server with ISC Kea (kea-dhcp4,
// memfile with persistence) and dnsmasq, all three keeping their leases on
// disk (rackd and dnsmasq fsync before the ACK; Kea writes its lease file
// but does not fsync it), in the same run on the same machine (`make bench-dhcp`, as root). It prints
// progress, perfdhcp's latency figures per server, then one line:
//
//	RESULT dhcp_dora_per_s=<n> kea_dora_per_s=<n> dnsmasq_dora_per_s=<n> ratio_kea=<rackd/kea> ratio_dnsmasq=<rackd/dnsmasq> cpu_us_per_dora=<n> kea_cpu_us_per_dora=<n> cpu_ratio_kea=<kea/rackd> cpu_us_per_dora_8000=<n> kea_cpu_us_per_dora_8000=<n> cpu_ratio_kea_8000=<kea/rackd>
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
// each repetition each server gets the same search for the highest rate
// with less than 1 % of DORAs lost (from 2,000/s, doubling until a run
// fails, then bisecting to within 5 %: see ladder), then one run at each of
// two fixed rates (-cpu-rates, 2,000 and 8,000/s) during which its CPU time
// (utime+stime from /proc/PID/stat) is divided by the DORAs completed. The
// RESULT line has the medians over the repetitions; before it come the
// figures of every repetition, perfdhcp's latencies, and the load averages
// at the start and the end.
//
// *_dora_per_s is the DORAs completed per second (ACKs received over the
// period) of the best run with < 1 % loss; cpu_us_per_dora is server CPU
// microseconds per DORA; ratio_* divide rackd's rate by the peer's,
// cpu_ratio_kea divides Kea's CPU per DORA by rackd's (above 1: rackd uses
// less); keys without a suffix are at 2,000/s, those ending _8000 at
// 8,000/s. Missing figures print as 0.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"rackd/bench/internal/benchns"
	"rackd/bench/internal/perfdhcp"
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
	steps    int     // most perfdhcp runs of one search
	start    int     // first rate tried
	factor   float64 // coarse step of the search
	res      float64 // the search bisects until hi/lo is within this factor
	minRate  int
	maxRate  int
	loss     float64 // percent of DORAs that may be lost at a passing rate
	cpuRates []int
	verbose  bool
	perf     bool                 // count system calls and context switches (perf stat)
	required map[string]bool      // servers whose failure to start ends the run
	others   map[string][]float64 // per server: cores used by other work during each of its runs
	// runsPerRep is others split by repetition (newRep starts one).
	runsPerRep map[string][][]float64
}

// newRep starts the per-repetition record of the other work's cores of server name.
func (b *bench) newRep(name string) {
	b.runsPerRep[name] = append(b.runsPerRep[name], nil)
}

// trial is one perfdhcp run against a freshly started server.
type trial struct {
	rate   int // asked of perfdhcp
	rep    perfdhcp.Report
	dora   float64 // DORAs completed per second of the period
	cpuUs  float64 // server CPU µs per completed DORA; NaN without DORAs
	leases int     // leases in the server's durable store after the run; -1 unknown
	// CPUs used during the run (1 = one core busy): the server, perfdhcp,
	// and everything else on the machine (other work competing for it).
	srvCores, genCores, otherCores float64
	// cliDrops is the replies the kernel dropped at perfdhcp's socket
	// because its receive buffer was full (perfdhcp did not read them in
	// time): lost to the load generator, not to the server.
	cliDrops int64
	// syscalls and switches are the server's system calls and context
	// switches during the run (perf stat, with -perf); -1 not counted.
	syscalls, switches int64
}

func (t trial) ok() bool { return t.rep.DO.Sent > 0 }

// stats collects a server's figures, one per repetition.
type stats struct {
	best []trial         // the best run with < loss % lost, per repetition (zero: none)
	cpu  map[int][]trial // per fixed rate: that rate's run, per repetition (zero: none)
	note string          // why a figure is missing
}

func run() error {
	reps := flag.Int("reps", 3, "repetitions; each server gets a search and the CPU runs in each")
	period := flag.Int("period", 10, "seconds of each perfdhcp run (perfdhcp -p)")
	steps := flag.Int("steps", 10, "most perfdhcp runs of one rate search (0: no search, only the CPU runs)")
	start := flag.Int("start", 2000, "first rate (DORA/s) of every search")
	factor := flag.Float64("factor", 2, "coarse step of the search, until a rate passes and one fails")
	res := flag.Float64("resolution", 1.05, "the search bisects until the failing rate is within this factor of the passing one")
	minRate := flag.Int("min-rate", 25, "lowest rate tried")
	maxRate := flag.Int("max-rate", 16000, "highest rate tried (above it perfdhcp measures itself)")
	loss := flag.Float64("loss", 1, "percent of DORAs that may be lost at a passing rate")
	cpuRatesFlag := flag.String("cpu-rates", "2000,8000", "rates (DORA/s) of the CPU runs, comma-separated; a server that sustained less than 90 % of one runs at its highest rate instead")
	servers := flag.String("servers", "rackd,kea,dnsmasq", "servers to measure, comma-separated (rackd-b: the -rackd-b binary)")
	dir := flag.String("dir", "bench/out", "scratch directory (lease databases), on the disk being measured")
	bin := flag.String("rackd", "", "rackd binary to run (default: go build ./agent/cmd/rackd)")
	binB := flag.String("rackd-b", "", "a second rackd binary, measured as server rackd-b interleaved with the others (A/B comparisons); adds rackd-b to -servers")
	rackdExtra := flag.String("rackd-dhcp", "", "TOML lines appended to the [dhcp] section of rackd's config, for tuning experiments")
	profDir := flag.String("cpuprofile", "", "directory where each rackd run writes its CPU profile (RACKD_CPUPROFILE)")
	timeout := flag.Duration("timeout", 60*time.Minute, "bound of the whole run")
	verbose := flag.Bool("v", false, "print perfdhcp's output of every run")
	perf := flag.Bool("perf", false, "count each server's system calls and context switches per DORA (perf stat)")
	flag.Parse()
	var cpuRates []int
	for _, f := range strings.Split(*cpuRatesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-cpu-rates: %q is not a positive rate", f)
		}
		cpuRates = append(cpuRates, n)
	}
	if *reps < 1 || *period < 1 || *steps < 0 || *start < 1 || *factor <= 1 || *res <= 1 ||
		*minRate < 1 || *maxRate < *minRate {
		return errors.New("bad flags: counts and rates must be positive, factors above 1")
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces (run `sudo make bench-dhcp`)")
	}
	names := strings.Split(*servers, ",")
	if *binB != "" && !slices.Contains(names, "rackd-b") {
		names = append(names, "rackd-b")
	}
	for _, n := range names {
		if !slices.Contains([]string{"rackd", "rackd-b", "kea", "dnsmasq"}, n) {
			return fmt.Errorf("-servers: unknown server %q", n)
		}
	}
	if slices.Contains(names, "rackd-b") && *binB == "" {
		return errors.New("-servers rackd-b needs -rackd-b PATH")
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
	fmt.Printf("load at start: %s\n", benchns.Uptime(ctx))

	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(*dir, "dhcp-")
	if err != nil {
		return err
	}
	work, _ = filepath.Abs(work)
	defer os.RemoveAll(work)
	if *profDir != "" {
		if err := os.MkdirAll(*profDir, 0o755); err != nil {
			return err
		}
		if *profDir, err = filepath.Abs(*profDir); err != nil {
			return err
		}
	}

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
	fmt.Printf("perfdhcp %s\n", strings.Join(perfdhcp.Args(0, *period), " "))
	if *steps > 0 {
		fmt.Printf("search, the same for every server: from %d/s, ×%g until a run passes and one fails, then bisection until within ×%g, at most %d runs\n",
			*start, *factor, *res, *steps)
	}

	b := &bench{t: t, work: work, period: *period, steps: *steps, start: *start, factor: *factor, res: *res,
		minRate: *minRate, maxRate: *maxRate, loss: *loss, cpuRates: cpuRates,
		verbose: *verbose, perf: *perf, required: map[string]bool{"kea": true, "dnsmasq": true}, others: map[string][]float64{}, runsPerRep: map[string][][]float64{}}
	var list []server
	for _, n := range names {
		switch n {
		case "rackd":
			list = append(list, rackd{t: t, label: "rackd", bin: rackdBin, extra: *rackdExtra, profDir: *profDir})
		case "rackd-b":
			list = append(list, rackd{t: t, label: "rackd-b", bin: *binB, extra: *rackdExtra, profDir: *profDir})
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
		all[s.name()] = &stats{cpu: map[int][]trial{}}
	}
	for r := range *reps {
		// The lease stores of rackd and dnsmasq wait for fsync: say what
		// the disk answers at the moment (other work shares it).
		p50, p99, n, err := fsyncLatency(work, 200, 3*time.Second)
		if err != nil {
			return err
		}
		fmt.Printf("rep %d/%d disk: 4 KiB append + fsync p50 %.2f ms, p99 %.2f ms (%d); load %s\n", r+1, *reps,
			p50.Seconds()*1e3, p99.Seconds()*1e3, n, benchns.Loadavg())
		order := append(slices.Clone(list[r%len(list):]), list[:r%len(list)]...)
		for _, s := range order {
			if err := b.repetition(ctx, fmt.Sprintf("rep %d/%d %s", r+1, *reps, s.name()), s, all[s.name()]); err != nil {
				return err
			}
		}
	}
	elapsed := time.Since(began)

	med := func(name string, f func(trial) float64, ts func(*stats) []trial) float64 {
		st := all[name]
		if st == nil {
			return 0
		}
		var v []float64
		for _, t := range ts(st) {
			if t.ok() {
				v = append(v, f(t))
			} else {
				v = append(v, 0)
			}
		}
		return benchns.Median(v)
	}
	bestOf := func(st *stats) []trial { return st.best }
	cpuAt := func(rate int) func(*stats) []trial { return func(st *stats) []trial { return st.cpu[rate] } }
	dora := func(t trial) float64 { return t.dora }
	cpu := func(t trial) float64 { return t.cpuUs }

	fmt.Printf("\nper repetition (%.1f min):\n", elapsed.Minutes())
	fmt.Printf("%-8s %4s %9s %7s", "server", "rep", "DORA/s", "loss%")
	for _, cr := range cpuRates {
		fmt.Printf(" %16s", fmt.Sprintf("µs/DORA @%d", cr))
	}
	fmt.Printf(" %13s\n", "others cores")
	for _, s := range list {
		st := all[s.name()]
		for i, bt := range st.best {
			fmt.Printf("%-8s %4d %9.0f %7.2f", s.name(), i+1, bt.dora, lossOf(bt))
			for _, cr := range cpuRates {
				c := st.cpu[cr][i]
				cell := "-"
				if c.ok() {
					cell = fmt.Sprintf("%.1f", c.cpuUs)
					if c.rate != cr {
						cell += fmt.Sprintf(" (@%d)", c.rate)
					}
				}
				fmt.Printf(" %16s", cell)
			}
			fmt.Printf(" %13s\n", fmt.Sprintf("%.2f", benchns.Median(b.othersOf(s.name(), i))))
		}
	}
	fmt.Printf("\nmedians of %d repetitions:\n", *reps)
	for _, s := range list {
		fmt.Printf("%-8s %6.0f DORA/s", s.name(), med(s.name(), dora, bestOf))
		for _, cr := range cpuRates {
			fmt.Printf("  CPU %6.1f µs/DORA @%d", med(s.name(), cpu, cpuAt(cr)), cr)
		}
		fmt.Printf("  other work: median %.2f cores, max %.2f\n", benchns.Median(b.others[s.name()]),
			slices.Max(append([]float64{0}, b.others[s.name()]...)))
		if st := all[s.name()]; st.note != "" {
			fmt.Printf("%-8s note: %s\n", s.name(), st.note)
		}
	}
	fmt.Println("\nperfdhcp latency, ms (min/avg/max/std, medians of the repetitions):")
	for _, s := range list {
		st := all[s.name()]
		fmt.Printf("%-8s %-18s %s\n", s.name(), "highest rate", latency(st.best))
		for _, cr := range cpuRates {
			fmt.Printf("%-8s %-18s %s\n", s.name(), fmt.Sprintf("CPU run @%d", cr), latency(st.cpu[cr]))
		}
	}
	fmt.Printf("\nload at end: %s\n", benchns.Uptime(ctx))

	rk, kd, dm := med("rackd", dora, bestOf), med("kea", dora, bestOf), med("dnsmasq", dora, bestOf)
	line := fmt.Sprintf("RESULT dhcp_dora_per_s=%.0f kea_dora_per_s=%.0f dnsmasq_dora_per_s=%.0f ratio_kea=%.2f ratio_dnsmasq=%.2f",
		rk, kd, dm, benchns.Div(rk, kd), benchns.Div(rk, dm))
	for i, cr := range cpuRates {
		rc, kc := med("rackd", cpu, cpuAt(cr)), med("kea", cpu, cpuAt(cr))
		suffix := fmt.Sprintf("_%d", cr)
		if i == 0 {
			suffix = "" // the keys the first CPU rate always had
		}
		line += fmt.Sprintf(" cpu_us_per_dora%s=%.1f kea_cpu_us_per_dora%s=%.1f cpu_ratio_kea%s=%.2f",
			suffix, rc, suffix, kc, suffix, benchns.Div(kc, rc))
	}
	fmt.Println(line)
	return nil
}

// repetition runs one repetition for s: the search, then the CPU runs.
func (b *bench) repetition(ctx context.Context, tag string, s server, st *stats) error {
	best, err := b.search(ctx, tag, s)
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
	if b.steps > 0 && !best.ok() {
		if err == nil {
			st.note = fmt.Sprintf("no run with < %g%% lost", b.loss)
			fmt.Printf("%s: %s\n", tag, st.note)
		}
		for _, cr := range b.cpuRates {
			st.cpu[cr] = append(st.cpu[cr], trial{})
		}
		return nil
	}
	if b.steps > 0 {
		fmt.Printf("%s: highest rate with < %g%% lost: %.0f DORA/s\n", tag, b.loss, best.dora)
	}
	done := map[int]trial{}
	for _, cr := range b.cpuRates {
		rate := cr
		if b.steps > 0 && best.dora < 0.9*float64(cr) {
			// Far below its limit: a run at cr would measure an overloaded
			// server, not the cost of a DORA.
			rate = int(best.dora)
		}
		c, ok := done[rate]
		if !ok {
			c, err = b.trial(ctx, s, rate, true)
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
			done[rate] = c
		}
		st.cpu[cr] = append(st.cpu[cr], c)
	}
	return nil
}

// othersOf is the other work's cores during the runs of repetition i of
// server name.
func (b *bench) othersOf(name string, i int) []float64 {
	per := b.runsPerRep[name]
	if i >= len(per) {
		return nil
	}
	return per[i]
}

// search looks for the highest rate s sustains with less than b.loss % of
// DORAs lost, in at most b.steps runs of the ladder (the same for every
// server). A run passes when perfdhcp sent what was asked (within 5 %:
// otherwise the load generator is the limit) and less than b.loss % was
// lost. It returns the run with the most DORAs per second among those with
// less than b.loss % lost (zero if none).
func (b *bench) search(ctx context.Context, tag string, s server) (trial, error) {
	var best trial
	b.newRep(s.name())
	l := perfdhcp.NewLadder(b.start, b.minRate, b.maxRate, b.factor, b.res)
	for range b.steps {
		r := l.Rate()
		t, err := b.trial(ctx, s, r, false)
		if err != nil {
			return best, err
		}
		lossOK := t.rep.LossPct() < b.loss
		sentOK := float64(t.rep.DO.Sent) >= 0.95*float64(r*b.period)
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
		if t.rep.DO.Received == 0 {
			return best, fmt.Errorf("not answering (no OFFER at %d/s)", r)
		}
		if !l.Record(pass) {
			break
		}
	}
	return best, nil
}

func lossOf(t trial) float64 {
	if !t.ok() {
		return math.NaN()
	}
	return t.rep.LossPct()
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
	p, err := s.start(ctx, dir, rate)
	if err != nil {
		return trial{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.Stop(10 * time.Second)
		}
	}()
	rb0, err := udpRcvbufErrors(ctx, b.t.Cli)
	if err != nil {
		return trial{}, err
	}
	m0, err := benchns.MachineTicks()
	if err != nil {
		return trial{}, err
	}
	c0, err := cpuTicks(p.PID())
	if err != nil {
		return trial{}, err
	}
	var ps *perfStat
	if b.perf {
		if ps, err = startPerfStat(p.PID()); err != nil {
			return trial{}, err
		}
	}
	t0 := time.Now()
	rep, err := perfdhcp.Run(ctx, b.t.Cli, rate, b.period)
	var sysc, csw int64 = -1, -1
	if ps != nil {
		var perr error
		if sysc, csw, perr = ps.stop(); perr != nil {
			fmt.Println(perr)
			sysc, csw = -1, -1
		}
	}
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
	rb1, err := udpRcvbufErrors(ctx, b.t.Cli)
	if err != nil {
		return trial{}, err
	}
	if b.verbose {
		fmt.Print(rep.Raw)
	}
	t := trial{rate: rate, rep: rep, dora: float64(rep.Acks()) / float64(b.period), cpuUs: math.NaN(), leases: -1,
		cliDrops: rb1 - rb0, syscalls: sysc, switches: csw}
	if rep.Acks() > 0 {
		t.cpuUs = float64(c1-c0) * 1e6 / benchns.UserHZ / float64(rep.Acks())
	}
	t.srvCores = float64(c1-c0) / benchns.UserHZ / wall
	t.genCores = rep.CPU.Seconds() / wall
	t.otherCores = max(0, float64(m1-m0)/benchns.UserHZ/wall-t.srvCores-t.genCores)
	b.others[s.name()] = append(b.others[s.name()], t.otherCores)
	if per := b.runsPerRep[s.name()]; len(per) > 0 {
		per[len(per)-1] = append(per[len(per)-1], t.otherCores)
	}
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
	s := fmt.Sprintf("%d DORAs in %ds = %.0f/s, lost %.2f%% (answered: DO %d/%d, RA %d/%d; dropped at perfdhcp's full socket %d), avg DO %.2f RA %.2f ms, CPU %.1f µs/DORA; cores: server %.2f, perfdhcp %.2f, others %.2f",
		t.rep.Acks(), period, t.dora, t.rep.LossPct(), t.rep.DO.Received, t.rep.DO.Sent,
		t.rep.RA.Received, t.rep.RA.Sent, t.cliDrops, t.rep.DO.Avg, t.rep.RA.Avg, t.cpuUs,
		t.srvCores, t.genCores, t.otherCores)
	if t.leases >= 0 {
		s += fmt.Sprintf(", %d leases stored", t.leases)
	}
	if t.syscalls >= 0 && t.rep.Acks() > 0 {
		s += fmt.Sprintf("; per DORA: %.2f system calls, %.2f context switches",
			float64(t.syscalls)/float64(t.rep.Acks()), float64(t.switches)/float64(t.rep.Acks()))
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
		return fmt.Sprintf("%.3f", benchns.Median(v))
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
		fig(func(t trial) float64 { return t.rep.DO.Min }), fig(func(t trial) float64 { return t.rep.DO.Avg }),
		fig(func(t trial) float64 { return t.rep.DO.Max }), fig(func(t trial) float64 { return t.rep.DO.Std }),
		fig(func(t trial) float64 { return t.rep.RA.Min }), fig(func(t trial) float64 { return t.rep.RA.Avg }),
		fig(func(t trial) float64 { return t.rep.RA.Max }), fig(func(t trial) float64 { return t.rep.RA.Std }),
		strings.Join(rates, ","))
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
