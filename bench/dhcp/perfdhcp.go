package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"rackd/bench/internal/benchns"
)

// exchange is perfdhcp's statistics for one exchange (DISCOVER-OFFER or
// REQUEST-ACK). Delays are in milliseconds, NaN when perfdhcp had none.
type exchange struct {
	sent, received, drops int
	min, avg, max, std    float64
}

// report is what one perfdhcp run printed.
type report struct {
	rate     float64 // perfdhcp's "Rate:" (it counts its exit wait too)
	do, ra   exchange
	raw      string
	exitCode int
	cpu      time.Duration // perfdhcp's own CPU time (user+system)
}

// acks is the number of completed DORAs.
func (r report) acks() int { return r.ra.received }

// lossPct is the share of DORAs started (DISCOVERs sent) that did not
// complete (no ACK), in percent: drops of both exchanges together.
func (r report) lossPct() float64 {
	if r.do.sent == 0 {
		return 100
	}
	return 100 * float64(r.do.sent-r.ra.received) / float64(r.do.sent)
}

// perfdhcpArgs is the one command line every server gets: 4-way DORA,
// relayed (a unicast server address makes perfdhcp a relay with giaddr =
// the -l address), up to 60,000 distinct clients, period seconds, 1 s
// exit wait for late answers.
func perfdhcpArgs(rate, period int) []string {
	return []string{"-4", "-l", benchns.ClientIP, "-r", strconv.Itoa(rate), "-R", "60000",
		"-p", strconv.Itoa(period), "-W", "1000000", benchns.ServerIP}
}

// runPerfdhcp runs perfdhcp in the client namespace, bounded by the period
// plus a margin, and parses its output. perfdhcp exits 3 when packets were
// dropped; that is a result, not an error.
func runPerfdhcp(ctx context.Context, ns string, rate, period int) (report, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(period)*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "perfdhcp"}, perfdhcpArgs(rate, period)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		code = ee.ExitCode()
		if code == 3 {
			err = nil
		}
	}
	if err != nil {
		return report{raw: string(out)}, fmt.Errorf("perfdhcp -r %d: %v\n%s", rate, err, out)
	}
	r, perr := parsePerfdhcp(string(out))
	r.exitCode = code
	if ps := cmd.ProcessState; ps != nil {
		r.cpu = ps.UserTime() + ps.SystemTime()
	}
	if perr != nil {
		return r, fmt.Errorf("perfdhcp -r %d: %v\n%s", rate, perr, out)
	}
	return r, nil
}

// parsePerfdhcp reads perfdhcp's (Kea 2.2) statistics: the "Rate:" line and
// the "***Statistics for: DISCOVER-OFFER***" and "REQUEST-ACK" sections with
// "key: value" lines. Values it could not measure read "n/a" or "inf".
func parsePerfdhcp(out string) (report, error) {
	r := report{raw: out}
	nan := math.NaN()
	r.do = exchange{min: nan, avg: nan, max: nan, std: nan}
	r.ra = r.do
	var cur *exchange
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "***Statistics for: "); ok {
			name = strings.TrimSuffix(name, "***")
			switch name {
			case "DISCOVER-OFFER":
				cur = &r.do
			case "REQUEST-ACK":
				cur = &r.ra
			default:
				cur = nil
			}
			seen[name] = true
			continue
		}
		if strings.HasPrefix(line, "***") {
			cur = nil
		}
		key, val, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		num, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsInf(num, 0) {
			num = nan
		}
		if key == "Rate" {
			r.rate = num
			continue
		}
		if cur == nil {
			continue
		}
		count := 0
		if !math.IsNaN(num) {
			count = int(num)
		}
		switch key {
		case "sent packets":
			cur.sent = count
		case "received packets":
			cur.received = count
		case "drops":
			cur.drops = count
		case "min delay":
			cur.min = num
		case "avg delay":
			cur.avg = num
		case "max delay":
			cur.max = num
		case "std deviation":
			cur.std = num
		}
	}
	if !seen["DISCOVER-OFFER"] || !seen["REQUEST-ACK"] {
		return r, errors.New("no DISCOVER-OFFER and REQUEST-ACK statistics in the output")
	}
	return r, nil
}
