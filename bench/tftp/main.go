// Command tftp compares rackd's TFTP server with tftpd-hpa on the same file
// tree, in the same run, on the same machine (`make bench-tftp`, as root),
// and measures how fast rackd answers per-machine boot configs while a boot
// storm is under way (`make bench-bootconf`, the -bootconf flag).
//
// It creates two network namespaces joined by a veth pair (server
// 10.77.0.1/24, client 10.77.0.2/24, no default route). In the server
// namespace it runs a real rackd (built for the run, TFTP on
// 10.77.0.1:69, API on 127.0.0.1:5240) and `in.tftpd -L` (tftpd-hpa, on
// 10.77.0.1:6969, chrooted to the same tree: rackd's <state>/boot), each in a
// cgroup (v2) of its own, so that a server's CPU is the cgroup's usage_usec,
// tftpd-hpa's per-transfer children included. Downloads are made in the
// client namespace, blksize 1468 (an Ethernet MTU's worth, what firmware
// asks for), piped into the bench and checked against the file's SHA-256,
// by two clients in turn:
//
//   - curl, which cannot ask for RFC 7440 windowsize: lock step, one block
//     per round trip, with either server;
//   - atftp asking for windowsize -windowsize (16): rackd grants it,
//     tftpd-hpa leaves it out of its OACK and serves atftp in lock step,
//     which is what firmware that asks for windowsize gets from each.
//
// Repetition by repetition, in alternating order, for each client each
// server gets
//
//   - single: one client fetching a 64 MiB file;
//   - storm: -clients clients (50) at once, each fetching a 16 MiB file.
//
// Rates are file bytes over wall time (MB = 10^6 bytes); the storm's is the
// aggregate, all bytes over the time until the last client finished. CPU per
// GB is the server cgroup's CPU time during the storm over the GB (10^9
// bytes) delivered: on two cores the storm saturates the machine, clients
// taking about half, so the CPU a server spends per byte is the figure that
// shows its efficiency. It prints the medians for both clients; the last
// line has those of atftp asking windowsize (of curl with -windowsize 0):
//
//	RESULT tftp_single_mb_s=<n> tftpd_hpa_single_mb_s=<n> storm_mb_s=<n> tftpd_hpa_storm_mb_s=<n> ratio_single=<n> ratio_storm=<n> cpu_s_per_gb=<n> tftpd_hpa_cpu_s_per_gb=<n> cpu_ratio=<tftpd-hpa/rackd>
//
// With -bootconf it runs rackd alone: it registers -machines machines through
// the API, fetches each one's three configs (pxelinux, grub, iPXE) once to
// know their content, then runs -reps storms (the RESULT line's client,
// atftp asking windowsize 16 by default) during which -config-clients curl
// processes fetch configs of the machines in a loop, each checked. The
// latency is rackd's own: its histogram rackd_tftp_config_answer_seconds
// (from a read request for a rendered config read off the server socket to
// the first packet of the answer, OACK or DATA, handed to the kernel),
// scraped from /metrics before and after, p50 and p99 interpolated within
// the histogram's buckets (25 % apart). The end point is the first packet,
// not the last ACK: what follows it is round trips whose length is the
// client's. All clients run at nice 19 (-client-nice): in a rack the
// booting machines are other computers, while here they share the server's
// two cores, and at equal priority they would stand in the way of the
// server's own work as no real client can. Last line:
//
//	RESULT bootconf_p50_us=<n> bootconf_p99_us=<n>
//
// Everything it starts is stopped by PID, the cgroups and namespaces
// removed, at the end, on error and on SIGINT/SIGTERM. Every download has a
// time limit, the run a count of repetitions and -timeout.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"rackd/bench/internal/benchns"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-tftp:", err)
		os.Exit(1)
	}
}

const (
	bigName   = "bench/single.img" // the single client's file
	stormName = "bench/storm.img"  // each storm client's file
	blksize   = 1468
)

type options struct {
	reps          int
	clients       int
	bigMiB        int
	stormMiB      int
	timeout       time.Duration
	bootconf      bool
	machines      int
	configClients int
	cpuprofile    string
	windowsize    int
	clientNice    int
	verbose       bool
}

func run() error {
	var o options
	flag.IntVar(&o.reps, "reps", 3, "repetitions; each server gets a single download and a storm in each")
	flag.IntVar(&o.clients, "clients", 50, "clients in a storm")
	flag.IntVar(&o.bigMiB, "single-mib", 64, "MiB of the single client's file")
	flag.IntVar(&o.stormMiB, "storm-mib", 16, "MiB of each storm client's file")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound of the whole run")
	flag.BoolVar(&o.bootconf, "bootconf", false, "measure rackd's config answers during storms instead (bench-bootconf)")
	flag.IntVar(&o.machines, "machines", 50, "machines registered for -bootconf")
	flag.IntVar(&o.configClients, "config-clients", 4, "curl processes fetching configs during each storm with -bootconf")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of rackd to this file (RACKD_CPUPROFILE)")
	flag.IntVar(&o.windowsize, "windowsize", 16, "also measure with atftp asking for this RFC 7440 windowsize, whose figures make the RESULT line (0: curl in lock step only)")
	flag.IntVar(&o.clientNice, "client-nice", 0, "run the clients at this nice value (with -bootconf the default is 19, see the doc)")
	dir := flag.String("dir", "bench/out", "scratch directory (the file tree, rackd's state)")
	bin := flag.String("rackd", "", "rackd binary to run (default: go build ./agent/cmd/rackd)")
	flag.BoolVar(&o.verbose, "v", false, "more detail")
	flag.Parse()
	niceSet := false
	flag.Visit(func(f *flag.Flag) { niceSet = niceSet || f.Name == "client-nice" })
	if o.bootconf && !niceSet {
		o.clientNice = 19
	}
	if o.reps < 1 || o.clients < 1 || o.bigMiB < 1 || o.stormMiB < 1 || o.machines < 1 || o.configClients < 1 || o.windowsize < 0 {
		return errors.New("bad flags: counts and sizes must be positive")
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces and cgroups (run `sudo make bench-tftp`)")
	}
	tools := []string{"ip", "curl"}
	if !o.bootconf {
		tools = append(tools, "in.tftpd")
	}
	if o.windowsize > 0 {
		tools = append(tools, "atftp")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err2 := exec.LookPath("/usr/sbin/" + tool); err2 == nil {
				continue
			}
			return fmt.Errorf("%s not found (bench/tftp/deps.sh installs it): %w", tool, err)
		}
	}

	// SIGPIPE too: output piped into `head` that exits must not kill the
	// run before it has stopped its servers and removed its namespaces.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(*dir, "tftp-")
	if err != nil {
		return err
	}
	work, _ = filepath.Abs(work)
	defer os.RemoveAll(work)
	// tftpd-hpa drops to its own user after chrooting: the path to the
	// tree must be searchable by it.
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}

	rackdBin := *bin
	if rackdBin == "" {
		rackdBin = filepath.Join(work, "rackd")
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Minute)
		out, err := exec.CommandContext(bctx, "go", "build", "-o", rackdBin, "./agent/cmd/rackd").CombinedOutput()
		bcancel()
		if err != nil {
			return fmt.Errorf("go build ./agent/cmd/rackd: %v\n%s", err, out)
		}
		fmt.Println("built rackd from ./agent/cmd/rackd")
	}

	state := filepath.Join(work, "state")
	tree := filepath.Join(state, "boot")
	sums := map[string][32]byte{}
	for name, mib := range map[string]int{bigName: o.bigMiB, stormName: o.stormMiB} {
		sum, err := writeRandom(filepath.Join(tree, filepath.FromSlash(name)), int64(mib)<<20)
		if err != nil {
			return err
		}
		sums[name] = sum
	}

	cgRoot, err := cgroup2Root()
	if err != nil {
		return err
	}
	cgParent := filepath.Join(cgRoot, benchns.RandName("rackd-bench-tftp-"))
	defer os.Remove(cgParent) // after the servers' own (defers run last first)

	t, err := benchns.NewTopology(ctx, "rkt")
	if err != nil {
		return err
	}
	defer func() {
		if err := t.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-tftp: cleanup:", err)
		}
	}()
	defer benchns.StopAll() // before the namespaces go
	fmt.Printf("namespaces %s (%s %s%s) <-> %s (%s %s%s), veth, no default route\n",
		t.Srv, t.SrvIf, benchns.ServerIP, benchns.IfPrefix, t.Cli, t.CliIf, benchns.ClientIP, benchns.IfPrefix)

	rk, err := startRackd(ctx, t, cgParent, rackdBin, state, o.cpuprofile)
	if err != nil {
		return err
	}
	defer rk.stop()
	b := &bench{t: t, o: o, sums: sums, sizes: map[string]int64{bigName: int64(o.bigMiB) << 20, stormName: int64(o.stormMiB) << 20}, work: work}
	if o.bootconf {
		return b.bootconf(ctx, rk)
	}

	hpa, err := startHPA(ctx, t, cgParent, tree)
	if err != nil {
		return err
	}
	defer hpa.stop()
	servers := []*server{rk, hpa}
	// The clients measured: curl in lock step always; with -windowsize,
	// atftp asking for it too, whose figures make the RESULT line.
	clients := []client{curlClient}
	if o.windowsize > 0 {
		clients = append(clients, atftpClient(o.windowsize))
	}
	fmt.Printf("rackd at %s, tftpd-hpa at %s; single: %d MiB, storm: %d clients x %d MiB, blksize %d; clients: %s\n",
		rk.addr, hpa.addr, o.bigMiB, o.clients, o.stormMiB, blksize, clientNames(clients))

	// figures[client][server]
	single := map[string]map[string][]phase{}
	storm := map[string]map[string][]phase{}
	for _, c := range clients {
		single[c.name], storm[c.name] = map[string][]phase{}, map[string][]phase{}
	}
	for r := range o.reps {
		order := servers
		if r%2 == 1 {
			order = []*server{hpa, rk}
		}
		for _, c := range clients {
			for _, s := range order {
				p, err := b.phase(ctx, c, s, bigName, 1)
				if err != nil {
					return fmt.Errorf("rep %d %s %s single: %w", r+1, c.name, s.name, err)
				}
				fmt.Printf("rep %d/%d %-19s %-9s single: %s\n", r+1, o.reps, c.name, s.name, p)
				single[c.name][s.name] = append(single[c.name][s.name], p)
			}
			for _, s := range order {
				p, err := b.phase(ctx, c, s, stormName, o.clients)
				if err != nil {
					return fmt.Errorf("rep %d %s %s storm: %w", r+1, c.name, s.name, err)
				}
				fmt.Printf("rep %d/%d %-19s %-9s storm:  %s\n", r+1, o.reps, c.name, s.name, p)
				storm[c.name][s.name] = append(storm[c.name][s.name], p)
			}
		}
	}
	if err := rk.checkAlive(); err != nil {
		return err
	}
	if err := hpa.checkAlive(); err != nil {
		return err
	}

	med := func(ps []phase, f func(phase) float64) float64 {
		var v []float64
		for _, p := range ps {
			v = append(v, f(p))
		}
		return median(v)
	}
	rate := func(p phase) float64 { return p.mbps() }
	cpu := func(p phase) float64 { return p.cpuPerGB() }
	fmt.Printf("\nmedians of %d repetitions:\n", o.reps)
	var line string
	for _, c := range clients {
		sg, st := single[c.name], storm[c.name]
		rs, hs := med(sg["rackd"], rate), med(sg["tftpd-hpa"], rate)
		rst, hst := med(st["rackd"], rate), med(st["tftpd-hpa"], rate)
		rc, hc := med(st["rackd"], cpu), med(st["tftpd-hpa"], cpu)
		fmt.Printf("%s: single rackd %.1f MB/s (CPU %.2f s/GB), tftpd-hpa %.1f MB/s (CPU %.2f s/GB); storm rackd %.1f MB/s (CPU %.2f s/GB), tftpd-hpa %.1f MB/s (CPU %.2f s/GB)\n",
			c.name, rs, med(sg["rackd"], cpu), hs, med(sg["tftpd-hpa"], cpu), rst, rc, hst, hc)
		line = fmt.Sprintf("tftp_single_mb_s=%.1f tftpd_hpa_single_mb_s=%.1f storm_mb_s=%.1f tftpd_hpa_storm_mb_s=%.1f ratio_single=%.2f ratio_storm=%.2f cpu_s_per_gb=%.2f tftpd_hpa_cpu_s_per_gb=%.2f cpu_ratio=%.2f",
			rs, hs, rst, hst, div(rs, hs), div(rst, hst), rc, hc, div(hc, rc))
		fmt.Printf("%s: %s\n", c.name, line)
	}
	// The last client's: atftp asking for windowsize when there is one.
	fmt.Printf("RESULT %s\n", line)
	return nil
}

func clientNames(cs []client) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.name)
	}
	return strings.Join(n, ", ")
}

type bench struct {
	t     *benchns.Topology
	o     options
	sums  map[string][32]byte
	sizes map[string]int64
	work  string
}

// phase is one measured download run: n clients each fetching a file.
type phase struct {
	bytes      int64
	wall       time.Duration
	cpu        time.Duration // server cgroup
	machine    float64       // cores busy on the whole machine, on average
	clients    int
	retransmit string // what the server says of it, when it says
}

func (p phase) mbps() float64 { return float64(p.bytes) / p.wall.Seconds() / 1e6 }

func (p phase) cpuPerGB() float64 { return p.cpu.Seconds() / (float64(p.bytes) / 1e9) }

func (p phase) String() string {
	return fmt.Sprintf("%d x %.0f MiB in %.2fs = %.1f MB/s; server CPU %.2fs = %.2f s/GB (%.2f cores); machine %.2f cores busy",
		p.clients, float64(p.bytes)/float64(p.clients)/(1<<20), p.wall.Seconds(), p.mbps(), p.cpu.Seconds(), p.cpuPerGB(),
		p.cpu.Seconds()/p.wall.Seconds(), p.machine)
}

// client is a TFTP client program: the command line that fetches name
// from addr (host:port) and writes it to standard output.
type client struct {
	name string
	args func(addr, name string) []string
}

// curlClient: blksize only (curl cannot ask for windowsize), so every
// transfer runs in lock step, one block per round trip.
var curlClient = client{"curl", func(addr, name string) []string {
	return []string{"curl", "-sS", "--tftp-blksize", fmt.Sprint(blksize), "--max-time", "300", "-o", "-", "tftp://" + addr + "/" + name}
}}

// atftpClient asks for blksize and an RFC 7440 windowsize; a server that
// does not acknowledge windowsize (tftpd-hpa) gets lock step.
func atftpClient(window int) client {
	return client{fmt.Sprintf("atftp windowsize %d", window), func(addr, name string) []string {
		host, port, _ := strings.Cut(addr, ":")
		return []string{"atftp", "--option", fmt.Sprintf("blksize %d", blksize), "--option", fmt.Sprintf("windowsize %d", window),
			"-g", "-r", name, "-l", "/dev/stdout", host, port}
	}}
}

// phase runs n clients c at once against s, each fetching name, checks
// every download and measures the server's CPU.
func (b *bench) phase(ctx context.Context, c client, s *server, name string, n int) (phase, error) {
	return b.measure(ctx, s, n, name, func(ctx context.Context) error {
		return b.fetch(ctx, c, s, name)
	})
}

func (b *bench) measure(ctx context.Context, s *server, n int, name string, fetch func(context.Context) error) (phase, error) {
	// Bounded: at a crawl of 1 MB/s per client, the files fetched here
	// take about a minute; ten minutes means something is broken.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	m0, err := benchns.MachineTicks()
	if err != nil {
		return phase{}, err
	}
	c0, err := s.cg.usage()
	if err != nil {
		return phase{}, err
	}
	t0 := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fetch(ctx) })
	}
	wg.Wait()
	wall := time.Since(t0)
	c1, err := s.cg.usage()
	if err != nil {
		return phase{}, err
	}
	m1, err := benchns.MachineTicks()
	if err != nil {
		return phase{}, err
	}
	if err := errors.Join(errs...); err != nil {
		return phase{}, err
	}
	return phase{bytes: int64(n) * b.sizes[name], wall: wall, cpu: c1 - c0, clients: n,
		machine: float64(m1-m0) / benchns.UserHZ / wall.Seconds()}, nil
}

// fetch fetches name from s with c in the client namespace and checks its
// SHA-256 as it streams in.
func (b *bench) fetch(ctx context.Context, c client, s *server, name string) error {
	got, n, err := b.fetchHash(ctx, c, s, name)
	if err != nil {
		return err
	}
	if n != b.sizes[name] || got != b.sums[name] {
		return fmt.Errorf("%s from %s: %d bytes, sha256 %x; want %d bytes, %x", name, s.name, n, got, b.sizes[name], b.sums[name])
	}
	return nil
}

func (b *bench) fetchHash(ctx context.Context, c client, s *server, name string) ([32]byte, int64, error) {
	args := append([]string{"netns", "exec", b.t.Cli}, c.args(s.addr, name)...)
	if b.o.clientNice != 0 {
		args = append([]string{"-n", strconv.Itoa(b.o.clientNice), "ip"}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	if b.o.clientNice != 0 {
		cmd = exec.CommandContext(ctx, "nice", args...)
	}
	stderr := benchns.NewTailBuffer(4096)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return [32]byte{}, 0, err
	}
	if err := cmd.Start(); err != nil {
		return [32]byte{}, 0, err
	}
	h := sha256.New()
	n, cerr := io.Copy(h, out)
	err = cmd.Wait()
	if err == nil {
		err = cerr
	}
	if err != nil {
		return [32]byte{}, n, fmt.Errorf("%s: %s from %s: %v: %s", c.name, name, s.name, err, strings.TrimSpace(stderr.String()))
	}
	return [32]byte(h.Sum(nil)), n, nil
}

// writeRandom writes n random bytes to path (directories made) and returns
// their SHA-256. The files are world-readable: tftpd-hpa reads them as its
// own user.
func writeRandom(path string, n int64) ([32]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return [32]byte{}, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, n); err != nil {
		f.Close()
		return [32]byte{}, err
	}
	if err := f.Close(); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

func median(v []float64) float64 {
	v = slices.Clone(v)
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
