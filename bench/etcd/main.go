// Command etcd measures rackd on a shared etcd against rackd on its own
// database file, in the same run on the same machine (`make bench-etcd`, as
// root), and what a DHCP failover between three agents costs. It prints
// progress, then one line:
//
//	RESULT etcd_dora_per_s=<n> bbolt_dora_per_s=<n> ratio=<etcd/bbolt> etcd_alloc_per_s=<n> bbolt_alloc_per_s=<n> failover_s=<n> duplicates=<n> lost=<n>
//
// The etcd is a 3-member cluster of Debian's etcd-server on the loopback of
// the server namespace (internal/etcdtest); the agents are the rackd binary
// given, in the same namespace, each with a veth interface whose peer hangs
// off one bridge in the client namespace.
//
//   - *_dora_per_s: one agent, perfdhcp as in make bench-dhcp (4-way DORA,
//     relayed, up to 60,000 distinct clients), the highest rate with less
//     than 1 % of DORAs lost found by the same ladder; a freshly started
//     agent and an empty store (a new etcd prefix) for every run. The two
//     stores take turns, repetition by repetition (the order rotates); the
//     figures are medians.
//   - *_alloc_per_s: allocations through the HTTP API from 16 clients, on a
//     pool of READY machines made through the API first.
//   - failover_s, duplicates, lost: three agents on one etcd prefix, DHCP
//     clients broadcasting on the bridge (perfdhcp given the bridge and no
//     server, so every agent hears every client) at a fixed rate; a third of the way in, the
//     agent that answers is killed (SIGKILL). A packet socket on the bridge
//     records every DHCPACK: failover_s is the time from the kill to the
//     first ACK of another agent; duplicates counts addresses acknowledged
//     to two MACs; lost counts acknowledged leases (MAC and address) the
//     store does not hold afterwards.
//
// Everything it starts is stopped by PID, the namespaces removed, at the
// end, on error and on SIGINT/SIGTERM. Every run is bounded in time, the
// searches in steps, the allocations in count and time, and the whole in
// -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
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
	"rackd/internal/etcdtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-etcd:", err)
		os.Exit(1)
	}
}

type bench struct {
	t        *topology
	bin      string
	work     string
	etcd     *etcdtest.Cluster
	storeURL string
	runs     int // agents started so far: each run's etcd prefix is its own
	logLevel string

	period, steps, start, maxRate int
	loss                          float64
}

func run() error {
	bin := flag.String("rackd", "bin/rackd", "the rackd binary")
	reps := flag.Int("reps", 3, "repetitions of the DHCP rate search per store")
	period := flag.Int("period", 10, "seconds per perfdhcp run of the rate search")
	steps := flag.Int("steps", 8, "most perfdhcp runs of one search")
	start := flag.Int("start", 500, "first rate the search tries")
	maxRate := flag.Int("max-rate", 32000, "highest rate the search tries")
	machines := flag.Int("alloc-machines", 2000, "READY machines made for each allocation run")
	allocDur := flag.Duration("alloc-duration", 5*time.Second, "time bound of each allocation run")
	foRate := flag.Int("failover-rate", 200, "DORAs per second started during the failover run")
	foPeriod := flag.Int("failover-period", 30, "seconds of the failover run")
	dir := flag.String("dir", "bench/out", "scratch directory")
	timeout := flag.Duration("timeout", 45*time.Minute, "bound of the whole run")
	logLevel := flag.String("log-level", "warn", "the agents' log level (their output is printed when one fails)")
	phases := flag.String("phases", "rate,alloc,failover", "the phases to run (a figure of a phase left out prints as 0)")
	flag.Parse()
	run := map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		run[strings.TrimSpace(p)] = true
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces)")
	}
	for _, tool := range []string{"perfdhcp", "etcd", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %w (make bench-deps installs it)", tool, err)
		}
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
	}()
	defer benchns.StopAll()

	fmt.Println("start:", benchns.Uptime(ctx))
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(*dir, "etcd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	t, err := newTopology(ctx)
	if err != nil {
		return fmt.Errorf("namespaces: %w", err)
	}
	defer t.close()
	b := &bench{t: t, bin: abs, work: work, period: *period, steps: *steps, start: *start,
		maxRate: *maxRate, loss: 1, logLevel: *logLevel}
	b.etcd, err = etcdtest.LaunchWith(3, filepath.Join(work, "etcd"),
		etcdtest.LaunchOptions{Netns: t.srv, Dial: benchns.Dialer(t.srv)})
	if b.etcd != nil {
		defer b.etcd.Close()
	}
	if err != nil {
		return err
	}
	var hosts []string
	for _, ep := range b.etcd.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	b.storeURL = "etcd://" + strings.Join(hosts, ",")
	fmt.Println("etcd: 3 members at", b.storeURL, "in namespace", t.srv)
	fmt.Printf("perfdhcp %s\n", strings.Join(perfdhcp.Args(0, *period), " "))

	// The DHCP rate, the two stores taking turns.
	rates := map[string][]float64{}
	kinds := []string{"bbolt", "etcd"}
	for rep := range *reps {
		if !run["rate"] {
			break
		}
		for i := range kinds {
			kind := kinds[(rep+i)%len(kinds)]
			best, err := b.search(ctx, fmt.Sprintf("rep %d %s", rep+1, kind), kind)
			if err != nil {
				return fmt.Errorf("%s: %w", kind, err)
			}
			fmt.Printf("rep %d %s: best %.0f DORA/s\n", rep+1, kind, best)
			rates[kind] = append(rates[kind], best)
		}
	}

	// Allocations through the API.
	alloc := map[string]float64{}
	for _, kind := range kinds {
		if !run["alloc"] {
			break
		}
		a, err := b.startOne(ctx, kind)
		if err != nil {
			return err
		}
		r, err := a.allocRate(ctx, *machines, 16, *allocDur)
		a.proc.Stop(10 * time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		fmt.Printf("allocate %s, HTTP, 16 clients: %.0f/s\n", kind, r)
		alloc[kind] = r
	}

	var fo failoverResult
	if run["failover"] {
		if fo, err = b.failover(ctx, *foRate, *foPeriod); err != nil {
			return fmt.Errorf("failover: %w", err)
		}
	}
	fmt.Println("end:", benchns.Uptime(ctx))
	e, bb := benchns.Median(rates["etcd"]), benchns.Median(rates["bbolt"])
	fmt.Printf("RESULT etcd_dora_per_s=%.0f bbolt_dora_per_s=%.0f ratio=%.2f etcd_alloc_per_s=%.0f bbolt_alloc_per_s=%.0f failover_s=%.2f duplicates=%d lost=%d\n",
		e, bb, benchns.Div(e, bb), alloc["etcd"], alloc["bbolt"], fo.seconds, fo.duplicates, fo.lost)
	return nil
}

// storeSection is the [store] section of an agent on kind's store, with
// an etcd prefix of its own per run (an empty store each time).
func (b *bench) storeSection(kind, prefix string) string {
	if kind != "etcd" {
		return ""
	}
	return fmt.Sprintf("url = %q\netcd_prefix = %q\n", b.storeURL, prefix)
}

// startOne starts agent 0 alone on kind's store, relayed DHCP on its
// address, with the subnet made.
func (b *bench) startOne(ctx context.Context, kind string) (*agentProc, error) {
	b.runs++
	a, err := b.startAgent(ctx, agentSpec{name: "agent0-" + kind, ip: agentIPs[0],
		dir:   filepath.Join(b.work, fmt.Sprintf("run%d", b.runs)),
		store: b.storeSection(kind, fmt.Sprintf("/bench%d/", b.runs)),
		dhcp:  fmt.Sprintf("listen = [%q]\n", agentIPs[0]+":67")})
	if err != nil {
		return nil, err
	}
	if err := a.readToken(); err == nil {
		err = a.createSubnet(ctx)
	}
	if err == nil {
		err = a.waitDHCP(ctx)
	}
	if err == nil && kind == "etcd" {
		err = a.waitLeading(ctx)
	}
	if err != nil {
		a.proc.Stop(10 * time.Second)
		return nil, err
	}
	return a, nil
}

// search finds the highest rate with less than b.loss % of DORAs lost, one
// freshly started agent per perfdhcp run.
func (b *bench) search(ctx context.Context, tag, kind string) (float64, error) {
	best := 0.0
	l := perfdhcp.NewLadder(b.start, 250, b.maxRate, 2, 1.1)
	for range b.steps {
		r := l.Rate()
		a, err := b.startOne(ctx, kind)
		if err != nil {
			return 0, err
		}
		rpc0 := b.etcdRPCs(ctx)
		rep, err := perfdhcp.Run(ctx, b.t.cli, r, b.period)
		rpc1 := b.etcdRPCs(ctx)
		a.proc.Stop(10 * time.Second)
		if err != nil {
			return 0, err
		}
		if kind == "etcd" && rep.Acks() > 0 {
			var per []string
			for _, m := range []string{"Range", "Txn", "Put", "LeaseKeepAlive"} {
				per = append(per, fmt.Sprintf("%s %.2f", m, float64(rpc1[m]-rpc0[m])/float64(rep.Acks())))
			}
			fmt.Printf("%s -r %d: etcd requests per DORA (all members): %s\n", tag, r, strings.Join(per, ", "))
		}
		dora := float64(rep.Acks()) / float64(b.period)
		lossOK := rep.LossPct() < b.loss
		sentOK := float64(rep.DO.Sent) >= 0.95*float64(r*b.period)
		verdict := "pass"
		switch {
		case !lossOK:
			verdict = "fail"
		case !sentOK:
			verdict = "fail (perfdhcp could not send at this rate)"
		}
		fmt.Printf("%s -r %d: %d ACKs, %.0f DORA/s, %.2f%% lost, DO %.2f ms RA %.2f ms: %s\n",
			tag, r, rep.Acks(), dora, rep.LossPct(), rep.DO.Avg, rep.RA.Avg, verdict)
		if lossOK && dora > best {
			best = dora
		}
		if rep.DO.Received == 0 {
			return best, fmt.Errorf("not answering (no OFFER at %d/s)", r)
		}
		if !l.Record(lossOK && sentOK) {
			break
		}
	}
	return best, nil
}

// etcdRPCs sums, over the members, the gRPC requests each has handled by
// method (etcd's grpc_server_handled_total): what one DORA costs the
// cluster.
func (b *bench) etcdRPCs(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: benchns.Dialer(b.t.srv), DisableKeepAlives: true}}
	for _, ep := range b.etcd.Endpoints() {
		req, err := http.NewRequestWithContext(ctx, "GET", ep+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		for line := range strings.SplitSeq(string(body), "\n") {
			if !strings.HasPrefix(line, "grpc_server_handled_total{") {
				continue
			}
			_, m, ok := strings.Cut(line, `grpc_method="`)
			if !ok {
				continue
			}
			method, _, _ := strings.Cut(m, `"`)
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[method] += v
			}
		}
	}
	return out
}

type failoverResult struct {
	seconds          float64
	duplicates, lost int
}

// failover runs three agents on one etcd prefix, kills the one answering a
// third of the way into a broadcast DHCP load, and counts from the ACKs
// seen on the bridge.
func (b *bench) failover(ctx context.Context, rate, period int) (failoverResult, error) {
	var res failoverResult
	var agents []*agentProc
	defer func() {
		for _, a := range agents {
			a.proc.Stop(10 * time.Second)
		}
	}()
	for i, ip := range agentIPs {
		a, err := b.startAgent(ctx, agentSpec{name: fmt.Sprintf("agent%d", i), ip: ip,
			dir:   filepath.Join(b.work, fmt.Sprintf("failover%d", i)),
			store: b.storeSection("etcd", "/bench-failover/"),
			dhcp:  fmt.Sprintf("interfaces = [%q]\n", b.t.srvIfs[i]),
			extra: fmt.Sprintf("[cluster]\nname = %q\n", fmt.Sprintf("agent%d", i))})
		if err != nil {
			return res, err
		}
		agents = append(agents, a)
		if i == 0 {
			if err := a.readToken(); err != nil {
				return res, err
			}
			if err := a.createSubnet(ctx); err != nil {
				return res, err
			}
		} else {
			a.token = agents[0].token // one store: one admin token
		}
	}
	for _, a := range agents {
		if err := a.waitDHCP(ctx); err != nil {
			return res, err
		}
	}
	byIP := map[string]*agentProc{}
	for _, a := range agents {
		byIP[a.ip] = a
	}
	c, err := startCapture(b.t.cli, b.t.bridge)
	if err != nil {
		return res, err
	}
	// With an interface and no server, perfdhcp broadcasts on the bridge
	// (every agent hears every client) with the bridge's address as giaddr
	// (the leader answers there).
	args := []string{"-4", "-l", b.t.bridge, "-r", strconv.Itoa(rate), "-R", "60000",
		"-p", strconv.Itoa(period), "-W", "1000000"}
	fmt.Printf("failover: perfdhcp %s\n", strings.Join(args, " "))
	type out struct {
		rep perfdhcp.Report
		err error
	}
	pd := make(chan out, 1)
	go func() {
		r, err := perfdhcp.RunArgs(ctx, b.t.cli, args, rate, period)
		pd <- out{r, err}
	}()
	if err := benchns.Sleep(ctx, time.Duration(period)*time.Second/3); err != nil {
		return res, err
	}
	seen := c.snapshot()
	if len(seen) == 0 {
		packets, replies := c.counts()
		c.stop()
		var outs []string
		for _, a := range agents {
			outs = append(outs, fmt.Sprintf("--- %s:\n%s", a.name, a.proc.Out))
		}
		return res, fmt.Errorf("no agent answered in %ds (the capture read %d packets, %d of them from port 67)\n%s",
			period/3, packets, replies, strings.Join(outs, "\n"))
	}
	before := map[string]int{}
	for _, a := range seen {
		before[a.server]++
	}
	victim := byIP[seen[len(seen)-1].server]
	if victim == nil {
		c.stop()
		return res, fmt.Errorf("ACKs from %s, not an agent", seen[len(seen)-1].server)
	}
	killAt := time.Now()
	if err := victim.proc.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.stop()
		return res, err
	}
	fmt.Printf("failover: ACKs before the kill by server %v; killed %s (%s)\n", before, victim.name, victim.ip)
	o := <-pd
	if err := benchns.Sleep(ctx, time.Second); err != nil {
		return res, err
	}
	acks := c.stop()
	if o.err != nil {
		return res, o.err
	}
	fmt.Printf("failover: perfdhcp: %d DORAs started, %d ACKs, %.2f%% lost\n", o.rep.DO.Sent, o.rep.Acks(), o.rep.LossPct())
	res.seconds = -1
	after := map[string]int{}
	for _, a := range acks {
		if a.at.After(killAt) {
			after[a.server]++
			if res.seconds < 0 && a.server != victim.ip {
				res.seconds = a.at.Sub(killAt).Seconds()
			}
		}
	}
	fmt.Printf("failover: ACKs after the kill by server %v; first from another agent after %.2fs\n", after, res.seconds)
	macsOf := map[string]map[string]bool{}
	for _, a := range acks {
		if macsOf[a.ip] == nil {
			macsOf[a.ip] = map[string]bool{}
		}
		macsOf[a.ip][a.mac] = true
	}
	for ip, macs := range macsOf {
		if len(macs) > 1 {
			res.duplicates++
			if res.duplicates <= 5 {
				fmt.Printf("failover: DUPLICATE %s acknowledged to %v\n", ip, slices.Sorted(maps.Keys(macs)))
			}
		}
	}
	var survivor *agentProc
	for _, a := range agents {
		if a != victim {
			survivor = a
			break
		}
	}
	leases, err := survivor.leases(ctx)
	if err != nil {
		return res, err
	}
	held := map[string]string{}
	for _, l := range leases {
		held[l.IP] = l.MAC
	}
	for ip, macs := range macsOf {
		for mac := range macs {
			if held[ip] != mac {
				res.lost++
			}
		}
	}
	fmt.Printf("failover: %d ACKs seen, %d addresses, %d leases in the store, %d acknowledged leases missing\n",
		len(acks), len(macsOf), len(leases), res.lost)
	return res, nil
}
