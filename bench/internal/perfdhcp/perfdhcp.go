// Package perfdhcp runs Kea's perfdhcp in a client network namespace
// (benchns's topology) and reads its statistics: the one DHCP load
// generator every DHCP benchmark drives its servers with.
package perfdhcp

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

// Exchange is perfdhcp's statistics for one exchange (DISCOVER-OFFER or
// REQUEST-ACK). Delays are in milliseconds, NaN when perfdhcp had none.
type Exchange struct {
	Sent, Received, Drops int
	Min, Avg, Max, Std    float64
}

// Report is what one perfdhcp run printed.
type Report struct {
	Rate     float64 // perfdhcp's "Rate:" (it counts its exit wait too)
	DO, RA   Exchange
	Raw      string
	ExitCode int
	CPU      time.Duration // perfdhcp's own CPU time (user+system)
}

// acks is the number of completed DORAs.
func (r Report) Acks() int { return r.RA.Received }

// lossPct is the share of DORAs started (DISCOVERs sent) that did not
// complete (no ACK), in percent: drops of both exchanges together.
func (r Report) LossPct() float64 {
	if r.DO.Sent == 0 {
		return 100
	}
	return 100 * float64(r.DO.Sent-r.RA.Received) / float64(r.DO.Sent)
}

// Args is the one command line every server gets: 4-way DORA,
// relayed (a unicast server address makes perfdhcp a relay with giaddr =
// the -l address), up to 60,000 distinct clients, period seconds, 1 s
// exit wait for late answers.
func Args(rate, period int) []string {
	return []string{"-4", "-l", benchns.ClientIP, "-r", strconv.Itoa(rate), "-R", "60000",
		"-p", strconv.Itoa(period), "-W", "1000000", benchns.ServerIP}
}

// Run runs perfdhcp in the client namespace, bounded by the period
// plus a margin, and parses its output. perfdhcp exits 3 when packets were
// dropped; that is a result, not an error.
func Run(ctx context.Context, ns string, rate, period int) (Report, error) {
	return RunArgs(ctx, ns, Args(rate, period), rate, period)
}

// RunArgs is Run with another command line (args, for rate and period
// seconds): a benchmark whose clients broadcast, for one.
func RunArgs(ctx context.Context, ns string, args []string, rate, period int) (Report, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(period)*time.Second+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "perfdhcp"}, args...)...)
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
		return Report{Raw: string(out)}, fmt.Errorf("perfdhcp -r %d: %v\n%s", rate, err, out)
	}
	r, perr := Parse(string(out))
	r.ExitCode = code
	if ps := cmd.ProcessState; ps != nil {
		r.CPU = ps.UserTime() + ps.SystemTime()
	}
	if perr != nil {
		return r, fmt.Errorf("perfdhcp -r %d: %v\n%s", rate, perr, out)
	}
	return r, nil
}

// Parse reads perfdhcp's (Kea 2.2) statistics: the "Rate:" line and
// the "***Statistics for: DISCOVER-OFFER***" and "REQUEST-ACK" sections with
// "key: value" lines. Values it could not measure read "n/a" or "inf".
func Parse(out string) (Report, error) {
	r := Report{Raw: out}
	nan := math.NaN()
	r.DO = Exchange{Min: nan, Avg: nan, Max: nan, Std: nan}
	r.RA = r.DO
	var cur *Exchange
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "***Statistics for: "); ok {
			name = strings.TrimSuffix(name, "***")
			switch name {
			case "DISCOVER-OFFER":
				cur = &r.DO
			case "REQUEST-ACK":
				cur = &r.RA
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
			r.Rate = num
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
			cur.Sent = count
		case "received packets":
			cur.Received = count
		case "drops":
			cur.Drops = count
		case "min delay":
			cur.Min = num
		case "avg delay":
			cur.Avg = num
		case "max delay":
			cur.Max = num
		case "std deviation":
			cur.Std = num
		}
	}
	if !seen["DISCOVER-OFFER"] || !seen["REQUEST-ACK"] {
		return r, errors.New("no DISCOVER-OFFER and REQUEST-ACK statistics in the output")
	}
	return r, nil
}
