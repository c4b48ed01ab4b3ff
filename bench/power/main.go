// Command bench-power measures the power queue: 1,000 machines on simulated
// BMCs that take 50 ms per command, a global bound of P commands in flight,
// 5,000 mixed requests (on, off, cycle, query on random machines) accepted
// through the store as the API does. It reports the BMC commands per second
// against the ideal P / latency (every slot busy all the time), the p99 time
// a request waited from acceptance to start, how many requests were folded
// into newer ones (superseded), and how many accepted requests did not end
// (lost; must be 0).
//
// Last line: RESULT power_cmds_per_s=<n> ideal_cmds_per_s=<n> efficiency=<ratio>
// p99_queue_wait_ms=<n> superseded=<n> lost=0
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/power"
	"rackd/power/powertest"
	"rackd/power/queue"
	"rackd/store"
)

func main() {
	machines := flag.Int("machines", 1000, "machines, each behind its own simulated BMC")
	requests := flag.Int("requests", 5000, "power requests to send")
	bound := flag.Int("p", 32, "global bound: BMC commands in flight at once")
	latency := flag.Duration("latency", 50*time.Millisecond, "time of one simulated BMC command")
	clients := flag.Int("clients", 16, "concurrent request senders")
	seed := flag.Uint64("seed", 1, "random seed of the request mix")
	reps := flag.Int("reps", 3, "runs; the RESULT is the run of median efficiency (the machine may be busy)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the runs to `FILE`")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-power:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var results []result
	for i := range *reps {
		r, err := run(*machines, *requests, *bound, *clients, *latency, *seed+uint64(i))
		if err != nil {
			pprof.StopCPUProfile()
			fmt.Fprintln(os.Stderr, "bench-power:", err)
			os.Exit(1)
		}
		fmt.Printf("run %d: %s\n", i+1, r)
		results = append(results, r)
	}
	slices.SortFunc(results, func(a, b result) int { return cmp.Compare(a.efficiency, b.efficiency) })
	fmt.Printf("RESULT %s\n", results[len(results)/2])
}

type result struct {
	perS, ideal, efficiency float64
	p99                     time.Duration
	superseded, lost        int
}

func (r result) String() string {
	return fmt.Sprintf("power_cmds_per_s=%.0f ideal_cmds_per_s=%.0f efficiency=%.3f p99_queue_wait_ms=%.0f superseded=%d lost=%d",
		r.perS, r.ideal, r.efficiency, float64(r.p99)/float64(time.Millisecond), r.superseded, r.lost)
}

func run(machines, requests, bound, clients int, latency time.Duration, seed uint64) (result, error) {
	dir, err := os.MkdirTemp("", "rackd-bench-power-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(filepath.Join(dir, store.FileName), store.Options{})
	if err != nil {
		return result{}, err
	}
	defer st.Close()
	ctx := context.Background()
	admin := store.Actor{Name: "admin", Admin: true}
	ids := make([]string, machines)
	for i := range machines {
		m, err := st.CreateMachine(ctx, admin, store.NewMachine{Hostname: fmt.Sprintf("b%04d", i),
			MACs: []string{fmt.Sprintf("52:54:00:ee:%02x:%02x", i>>8, i&0xff)}, State: store.StateReady,
			Power: store.PowerParams{Driver: "fake", Address: fmt.Sprintf("bmc%04d", i)}})
		if err != nil {
			return result{}, err
		}
		ids[i] = m.ID
	}
	reg := prometheus.NewRegistry()
	fake := powertest.NewFake()
	fake.SetLatency(latency)
	cfg := queue.DefaultConfig()
	cfg.Global = bound
	cfg.PollInterval = 0
	cfg.VerifyInterval = latency
	q := queue.New(st, map[string]power.Driver{"fake": fake}, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), queue.NewMetrics(reg))
	qctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { q.Run(qctx); close(done) }()
	defer func() { stop(); <-done }()

	fmt.Printf("bench-power (seed %d): %d machines, %d requests, P=%d, %s per BMC command, %d senders\n", seed, machines, requests, bound, latency, clients)
	actions := []store.PowerAction{store.PowerOn, store.PowerOff, store.PowerCycle, store.PowerQuery}
	accepted := make([]string, requests)
	var next atomic.Int64
	var sendErr atomic.Pointer[error]
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < requests; i = int(next.Add(1)) - 1 {
				rng := rand.New(rand.NewPCG(seed, uint64(i)))
				r, err := st.RequestPower(ctx, admin, ids[rng.IntN(machines)], actions[rng.IntN(len(actions))], "bench")
				if err != nil {
					sendErr.Store(&err)
					return
				}
				accepted[i] = r.ID
			}
		}()
	}
	wg.Wait()
	if e := sendErr.Load(); e != nil {
		return result{}, *e
	}
	sent := time.Since(start)
	// Wait (bounded) until every accepted request has ended.
	var open int
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if open, err = st.OpenPowerCount(); err != nil {
			return result{}, err
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cmds := fake.Total()

	var waits []time.Duration
	superseded, lost := 0, 0
	outcomes := map[store.PowerRequestState]int{}
	for _, id := range accepted {
		r, err := st.PowerRequest(id)
		if err != nil {
			lost++
			continue
		}
		outcomes[r.State]++
		switch r.State {
		case store.PowerSuperseded:
			superseded++
		case store.PowerDone, store.PowerFailed:
			waits = append(waits, r.Started.Sub(r.Created))
		default:
			lost++
		}
	}
	slices.Sort(waits)
	p99 := time.Duration(0)
	if len(waits) > 0 {
		p99 = waits[min(len(waits)-1, len(waits)*99/100)]
	}
	perS := float64(cmds) / elapsed.Seconds()
	ideal := float64(bound) / latency.Seconds()
	fmt.Printf("sent %d requests in %s; all ended after %s; outcomes %v; %d BMC commands (most at once: %d)\n",
		requests, sent.Round(time.Millisecond), elapsed.Round(time.Millisecond), outcomes, cmds, fake.MaxInFlight())
	// Where the time went: a command's time on the wire against the
	// simulated latency (a busy machine wakes the simulator late), and how
	// full the global bound was kept.
	mfs, err := reg.Gather()
	if err != nil {
		return result{}, err
	}
	for _, mf := range mfs {
		if mf.GetName() != "rackd_power_command_duration_seconds" {
			continue
		}
		var sum float64
		var n uint64
		for _, m := range mf.Metric {
			sum += m.GetHistogram().GetSampleSum()
			n += m.GetHistogram().GetSampleCount()
		}
		if n > 0 {
			fmt.Printf("mean command time %.1f ms (simulated %s); the bound was %.1f%% full\n",
				sum/float64(n)*1000, latency, 100*sum/(elapsed.Seconds()*float64(bound)))
		}
	}
	res := result{perS: perS, ideal: ideal, efficiency: perS / ideal, p99: p99, superseded: superseded, lost: lost}
	if lost > 0 {
		return res, fmt.Errorf("%d accepted requests did not end (%s)", lost, res)
	}
	return res, nil
}
