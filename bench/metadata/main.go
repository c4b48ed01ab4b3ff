// Command metadata measures GET /metadata/v1/whoami of a real rackd (the
// binary, as a child process, on loopback) holding 10,000 known machines,
// under wrk (`make bench-metadata`). It prints progress, then one line:
//
//	RESULT whoami_req_per_s=<n> p99_ms=<n>
//
// The figures are the medians over -reps runs of -duration each, after a
// warm-up. wrk picks a machine at random for every request (9 in 10 known,
// in mixed states; 1 in 10 unknown) and sends its two MACs, as the enlist
// client does. The target is 20,000 requests a second on 2 cores, where wrk
// and rackd share the cores.
//
// rackd runs with its default configuration except the metadata rate limit,
// raised far beyond what wrk can reach from its single loopback address: the
// limiter's code still runs on every request.
//
// Every loop is bounded in count and time, and only loopback is used; the
// rackd child and its state directory are removed at the end.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"rackd/bench/internal/benchrackd"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-metadata:", err)
		os.Exit(1)
	}
}

type options struct {
	rackd    string
	machines int
	duration time.Duration
	reps     int
	threads  int
	conns    int
	dir      string
}

func run() error {
	var o options
	flag.StringVar(&o.rackd, "rackd", "bin/rackd", "the rackd binary to measure")
	flag.IntVar(&o.machines, "machines", 10000, "known machines in the store")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measured wrk run")
	flag.IntVar(&o.reps, "reps", 3, "measured runs (the medians are reported)")
	flag.IntVar(&o.threads, "threads", 2, "wrk threads")
	flag.IntVar(&o.conns, "connections", 32, "wrk connections (kept alive)")
	flag.StringVar(&o.dir, "dir", "bench/out", "scratch directory")
	flag.Parse()
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("wrk is not installed (make bench-metadata installs it)")
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.dir, "metadata-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	base, stop, err := startRackd(ctx, o.rackd, work)
	if err != nil {
		return err
	}
	defer stop()
	token, err := os.ReadFile(filepath.Join(work, "state", "admin.token"))
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	start := time.Now()
	if err := populate(ctx, base, strings.TrimSpace(string(token)), o.machines); err != nil {
		return err
	}
	fmt.Printf("bench-metadata: %d machines added in %s\n", o.machines, time.Since(start).Round(time.Millisecond))
	if err := check(base, o.machines); err != nil {
		return err
	}
	script := filepath.Join(work, "whoami.lua")
	if err := os.WriteFile(script, []byte(luaScript(o.machines)), 0o644); err != nil {
		return err
	}
	fmt.Printf("bench-metadata: warm-up\n")
	if _, err := wrk(ctx, o, base, script, 2*time.Second); err != nil {
		return err
	}
	var rates, p99s []float64
	for i := range o.reps {
		r, err := wrk(ctx, o, base, script, o.duration)
		if err != nil {
			return err
		}
		fmt.Printf("bench-metadata: run %d/%d: %.0f req/s, p99 %.2f ms, %d requests (wrk -t%d -c%d -d%s); cores: rackd %.2f, wrk %.2f, other work %.2f\n",
			i+1, o.reps, r.rate, r.p99ms, r.requests, o.threads, o.conns, o.duration, r.rackdCores, r.wrkCores, r.otherCores)
		rates, p99s = append(rates, r.rate), append(p99s, r.p99ms)
	}
	fmt.Printf("RESULT whoami_req_per_s=%.0f p99_ms=%.2f\n", median(rates), median(p99s))
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// startRackd runs the rackd binary on a free loopback port until stop.
func startRackd(ctx context.Context, bin, work string) (string, func(), error) {
	rackdPID = 0
	r, err := benchrackd.Start(ctx, bin, work, "log_level = \"warn\"\n[enlist]\nrate_limit = 1e12\nrate_burst = 1000000000\n", 10*time.Second)
	if err != nil {
		return "", nil, err
	}
	rackdPID = r.PID
	fmt.Printf("bench-metadata: rackd %s serving on %s\n", bin, strings.TrimPrefix(r.Base, "http://"))
	return r.Base, r.Stop, nil
}

// mac is machine i's MAC number n (0 or 1); the Lua script computes the
// same.
func mac(i, n int) string {
	return fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", 0x10+n, i>>16&0xff, i>>8&0xff, i&0xff)
}

// state spreads the machines over the states rackd creates directly; the
// answers differ (NEW, READY and DEPLOYED: poweroff) but the path is the
// one every known machine takes.
func state(i int) string { return []string{"NEW", "READY", "DEPLOYED"}[i%3] }

// populate adds the machines through the API, 32 at a time (group commit
// makes that quick).
func populate(ctx context.Context, base, token string, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				body, _ := json.Marshal(map[string]any{"hostname": fmt.Sprintf("bench%05d", i), "macs": []string{mac(i, 0), mac(i, 1)},
					"cpu_count": 8, "memory_mb": 16384, "state": state(i)})
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/machines", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("add machine %d: %d %s", i, resp.StatusCode, msg)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// check asks whoami the way wrk will, and checks the answers, so that the
// figures are about correct answers.
func check(base string, n int) error {
	for _, i := range []int{0, 1, 2, n - 1, n + 5} {
		resp, err := http.Get(fmt.Sprintf("%s/metadata/v1/whoami?mac=%s&mac=%s", base, mac(i, 1), mac(i, 0)))
		if err != nil {
			return err
		}
		var w struct {
			Known  bool   `json:"known"`
			State  string `json:"state"`
			Action string `json:"action"`
		}
		err = json.NewDecoder(resp.Body).Decode(&w)
		resp.Body.Close()
		want := i < n && w.State == state(i) && w.Action == "poweroff"
		if i >= n {
			want = !w.Known && w.Action == "enlist"
		}
		if err != nil || !want {
			return fmt.Errorf("whoami of machine %d: %+v, %v", i, w, err)
		}
	}
	return nil
}

// luaScript makes wrk ask for a random machine each time: 9 in 10 known.
func luaScript(n int) string {
	return fmt.Sprintf(`-- generated by bench/metadata
local n = %d
local function mac(i, k)
  -- wrk's LuaJIT has no bit operators: arithmetic does
  return string.format("52:54:%%02x:%%02x:%%02x:%%02x", 16 + k, math.floor(i / 65536) %% 256, math.floor(i / 256) %% 256, i %% 256)
end
math.randomseed(os.time())
request = function()
  local i = math.random(0, n + math.floor(n / 9) - 1)
  return wrk.format("GET", "/metadata/v1/whoami?mac=" .. mac(i, 0) .. "&mac=" .. mac(i, 1))
end
`, n)
}

type result struct {
	rate     float64
	p99ms    float64
	requests int
	// Cores busy during the run: rackd, wrk, and everything else on the
	// machine (other work competing for the same 2 cores skews the figures;
	// each run says how much there was).
	rackdCores, wrkCores, otherCores float64
}

// rackdPID is the rackd child being measured.
var rackdPID int

const userHZ = 100 // USER_HZ of /proc/*/stat and /proc/stat

// procTicks is a process's CPU time so far, in USER_HZ ticks.
func procTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// machineTicks is the busy time of all CPUs so far (all but idle and
// iowait; guest time is already in user), in USER_HZ ticks.
func machineTicks() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, s := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		busy += n
	}
	return busy
}

var (
	rateRE     = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	p99RE      = regexp.MustCompile(`(?m)^\s+99%\s+([0-9.]+)(us|ms|s)\s*$`)
	requestsRE = regexp.MustCompile(`(?m)^\s+(\d+) requests in`)
	errorsRE   = regexp.MustCompile(`(?m)^\s+(Non-2xx or 3xx responses|Socket errors):.*$`)
)

// wrk runs one measurement and reads its report.
func wrk(ctx context.Context, o options, base, script string, d time.Duration) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "wrk", "-t"+strconv.Itoa(o.threads), "-c"+strconv.Itoa(o.conns),
		"-d"+strconv.Itoa(int(d.Seconds()))+"s", "--latency", "-s", script, base)
	start, rackd0, machine0 := time.Now(), procTicks(rackdPID), machineTicks()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	secs := time.Since(start).Seconds()
	var r result
	r.rackdCores = float64(procTicks(rackdPID)-rackd0) / userHZ / secs
	r.wrkCores = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() / secs
	r.otherCores = max(0, float64(machineTicks()-machine0)/userHZ/secs-r.rackdCores-r.wrkCores)
	if m := errorsRE.Find(out); m != nil {
		return result{}, fmt.Errorf("wrk saw failures (%s):\n%s", bytes.TrimSpace(m), out)
	}
	m := rateRE.FindSubmatch(out)
	p := p99RE.FindSubmatch(out)
	q := requestsRE.FindSubmatch(out)
	if m == nil || p == nil || q == nil {
		return result{}, fmt.Errorf("cannot read wrk's report:\n%s", out)
	}
	r.rate, _ = strconv.ParseFloat(string(m[1]), 64)
	r.p99ms, _ = strconv.ParseFloat(string(p[1]), 64)
	switch string(p[2]) {
	case "us":
		r.p99ms /= 1000
	case "s":
		r.p99ms *= 1000
	}
	r.requests, _ = strconv.Atoi(string(q[1]))
	return r, nil
}
