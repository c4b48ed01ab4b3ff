package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// configMetric is rackd's histogram of rendered-config answers over TFTP.
const configMetric = "rackd_tftp_config_answer_seconds"

// bootconf registers o.machines machines, learns their configs, then runs
// o.reps storms during which config clients fetch configs, and reports
// rackd's own latency figures for those answers.
func (b *bench) bootconf(ctx context.Context, rk *server) error {
	c := apiClient(b.t)
	token, err := os.ReadFile(filepath.Join(rk.state, "admin.token"))
	if err != nil {
		return err
	}
	var names []string
	for i := range b.o.machines {
		mac := fmt.Sprintf("52:54:00:bc:%02x:%02x", i/256, i%256)
		body := fmt.Sprintf(`{"hostname":"bc-%03d","arch":"amd64","macs":[%q]}`, i, mac)
		req, err := http.NewRequestWithContext(ctx, "POST", "http://"+rackdAPI+"/api/v1/machines", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("create machine: %w", err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("create machine: %d %s", resp.StatusCode, msg)
		}
		dash := strings.ReplaceAll(mac, ":", "-")
		names = append(names, "pxelinux.cfg/01-"+dash, "grub/grub.cfg-"+mac, "ipxe/"+mac+".ipxe")
	}
	// What each config holds when nothing changes: every answer during the
	// storms must be the same.
	want := map[string][]byte{}
	dir := filepath.Join(b.work, "configs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	got, err := b.fetchConfigs(ctx, rk, dir, names)
	if err != nil {
		return err
	}
	for i, n := range names {
		if len(got[i]) == 0 {
			return fmt.Errorf("config %s: empty", n)
		}
		want[n] = got[i]
	}
	fmt.Printf("%d machines registered, %d configs fetched once (%d-%d bytes)\n", b.o.machines, len(names),
		minLen(got), maxLen(got))

	before, err := scrapeHistogram(ctx, c, configMetric)
	if err != nil {
		return err
	}
	var fetched, bad atomic.Int64
	for r := range b.o.reps {
		stormDone := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, b.o.configClients)
		for i := range b.o.configClients {
			wg.Go(func() {
				cdir := filepath.Join(dir, fmt.Sprintf("c%d", i))
				if err := os.MkdirAll(cdir, 0o755); err != nil {
					errs[i] = err
					return
				}
				// Bounded: at most 200 rounds, each a curl fetching
				// every machine's configs in turn.
				for round := 0; round < 200; round++ {
					select {
					case <-stormDone:
						return
					default:
					}
					// Start at a different machine each round, so
					// the clients do not march in step.
					k := (round*7 + i*13) % len(names)
					batch := append(names[k:], names[:k]...)[:min(30, len(names))]
					got, err := b.fetchConfigs(ctx, rk, cdir, batch)
					if err != nil {
						errs[i] = err
						return
					}
					for j, n := range batch {
						fetched.Add(1)
						if !bytes.Equal(got[j], want[n]) {
							bad.Add(1)
						}
					}
				}
			})
		}
		p, err := b.phase(ctx, b.stormClient(), rk, stormName, b.o.clients)
		close(stormDone)
		wg.Wait()
		if err != nil {
			return fmt.Errorf("storm %d: %w", r+1, err)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("storm %d: config clients: %w", r+1, err)
		}
		fmt.Printf("storm %d/%d: %s\n", r+1, b.o.reps, p)
	}
	if n := bad.Load(); n > 0 {
		return fmt.Errorf("%d of %d configs fetched during the storms differ from the idle answer", n, fetched.Load())
	}
	after, err := scrapeHistogram(ctx, c, configMetric)
	if err != nil {
		return err
	}
	if err := rk.checkAlive(); err != nil {
		return err
	}
	d := after.sub(before)
	if d.count == 0 {
		return fmt.Errorf("%s counted no answers during the storms", configMetric)
	}
	p50, p99 := d.quantile(0.5), d.quantile(0.99)
	fmt.Printf("%d configs fetched by %d curl clients during %d storms, all as expected; rackd counted %.0f config answers, mean %.0f µs\n",
		fetched.Load(), b.o.configClients, b.o.reps, d.count, d.sum/float64(d.count)*1e6)
	fmt.Printf("p50 and p99 are interpolated within %s's buckets (%s)\n", configMetric, d.bucketsAround(p99))
	fmt.Printf("RESULT bootconf_p50_us=%.0f bootconf_p99_us=%.0f\n", p50*1e6, p99*1e6)
	return nil
}

// stormClient is the client of the storms during which configs are
// fetched: atftp asking for windowsize when -windowsize is set, as in
// bench-tftp's RESULT, else curl.
func (b *bench) stormClient() client {
	if b.o.windowsize > 0 {
		return atftpClient(b.o.windowsize)
	}
	return curlClient
}

// fetchConfigs fetches names from rk with one curl process (one transfer
// each, one after the other) and returns their contents.
func (b *bench) fetchConfigs(ctx context.Context, rk *server, dir string, names []string) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := []string{"netns", "exec", b.t.Cli, "curl", "-sS", "--tftp-blksize", fmt.Sprint(blksize), "--max-time", "60"}
	name := "ip"
	if b.o.clientNice != 0 {
		args = append([]string{"-n", strconv.Itoa(b.o.clientNice), "ip"}, args...)
		name = "nice"
	}
	var outs []string
	for i, n := range names {
		out := filepath.Join(dir, strconv.Itoa(i))
		os.Remove(out)
		outs = append(outs, out)
		args = append(args, "-o", out, "tftp://"+rk.addr+"/"+n)
	}
	msg, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("curl configs: %v: %s", err, msg)
	}
	var got [][]byte
	for _, o := range outs {
		b, err := os.ReadFile(o)
		if err != nil {
			return nil, err
		}
		got = append(got, b)
	}
	return got, nil
}

func minLen(v [][]byte) int {
	m := math.MaxInt
	for _, b := range v {
		m = min(m, len(b))
	}
	return m
}

func maxLen(v [][]byte) int {
	m := 0
	for _, b := range v {
		m = max(m, len(b))
	}
	return m
}

// histogram is one Prometheus histogram's cumulative buckets.
type histogram struct {
	le    []float64 // upper bounds, ascending, +Inf last
	cum   []float64
	count float64
	sum   float64
}

// scrapeHistogram reads name from rackd's /metrics (text format).
func scrapeHistogram(ctx context.Context, c *http.Client, name string) (histogram, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+rackdAPI+"/metrics", nil)
	resp, err := c.Do(req)
	if err != nil {
		return histogram{}, fmt.Errorf("scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return histogram{}, fmt.Errorf("scrape /metrics: %s", resp.Status)
	}
	var h histogram
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, name+"_bucket{"):
			i := strings.Index(l, `le="`)
			j := strings.Index(l, `"}`)
			if i < 0 || j < i {
				return h, fmt.Errorf("metrics: %q", l)
			}
			le, err := strconv.ParseFloat(l[i+4:j], 64)
			if err != nil {
				return h, fmt.Errorf("metrics: %q", l)
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(l[j+2:]), 64)
			if err != nil {
				return h, fmt.Errorf("metrics: %q", l)
			}
			h.le = append(h.le, le)
			h.cum = append(h.cum, v)
			found = true
		case strings.HasPrefix(l, name+"_count "):
			h.count, _ = strconv.ParseFloat(strings.TrimPrefix(l, name+"_count "), 64)
		case strings.HasPrefix(l, name+"_sum "):
			h.sum, _ = strconv.ParseFloat(strings.TrimPrefix(l, name+"_sum "), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if !found {
		return h, fmt.Errorf("rackd's /metrics has no %s", name)
	}
	return h, nil
}

func (h histogram) sub(o histogram) histogram {
	d := histogram{le: h.le, count: h.count - o.count, sum: h.sum - o.sum}
	for i := range h.cum {
		v := h.cum[i]
		if i < len(o.cum) {
			v -= o.cum[i]
		}
		d.cum = append(d.cum, v)
	}
	return d
}

// quantile interpolates linearly within the bucket holding rank q, as
// Prometheus's histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 || len(h.le) == 0 {
		return math.NaN()
	}
	rank := q * h.cum[len(h.cum)-1]
	i := sort.Search(len(h.cum), func(i int) bool { return h.cum[i] >= rank })
	if i >= len(h.le)-1 {
		// +Inf bucket: the highest finite bound is all we know.
		return h.le[len(h.le)-2]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.le[i-1], h.cum[i-1]
	}
	in := h.cum[i] - below
	if in == 0 {
		return h.le[i]
	}
	return lo + (h.le[i]-lo)*(rank-below)/in
}

// bucketsAround names the bucket bounds next to v, to say how coarse the
// interpolation is.
func (h histogram) bucketsAround(v float64) string {
	for i, le := range h.le {
		if le >= v {
			lo := 0.0
			if i > 0 {
				lo = h.le[i-1]
			}
			return fmt.Sprintf("p99 lies in the bucket %.0f-%.0f µs", lo*1e6, le*1e6)
		}
	}
	return "p99 beyond the last bucket"
}
