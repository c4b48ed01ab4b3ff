// Command ui measures rackd's web UI (`make bench-ui`) on a real rackd (the
// binary, as a child process, on loopback) holding 10,000 machines. It
// prints progress, then one line:
//
//		RESULT machines_page_10k_p99_ms=<n> api_list_10k_p99_ms=<n> ratio=<page/api> live_update_p99_ms=<n> sse_clients=<n>
//
//	  - The machine list's first page (GET /machines, logged in, 100 rows of
//	    10,000) against the JSON GET /api/v1/machines (all 10,000) in the
//	    same run, requests interleaved one for one on one connection each;
//	    the time is the whole answer's, from the request's start to its last
//	    byte. ratio is the page's median over the API's median.
//	  - Live updates: -clients streams of /events stay connected; each of
//	    -changes state changes (mark-broken, mark-fixed in turn, through the
//	    API) is timed from the start of its API request to the moment the
//	    last of the streams has its event; the p99 of those.
//	  - rackd's resident memory with the streams connected, and the machine's
//	    load (uptime) before and after, are printed before the RESULT line.
//
// Every loop is bounded in count and time, only loopback is used, and the
// rackd child (by its PID) and its state directory are removed at the end.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"rackd/bench/internal/benchrackd"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-ui:", err)
		os.Exit(1)
	}
}

type options struct {
	rackd    string
	machines int
	requests int
	clients  int
	changes  int
	dir      string
}

func run() error {
	var o options
	flag.StringVar(&o.rackd, "rackd", "bin/rackd", "the rackd binary to measure")
	flag.IntVar(&o.machines, "machines", 10000, "machines in the store")
	flag.IntVar(&o.requests, "requests", 100, "requests of each kind (page, API list), interleaved")
	flag.IntVar(&o.clients, "clients", 100, "connected /events streams")
	flag.IntVar(&o.changes, "changes", 200, "timed state changes")
	flag.StringVar(&o.dir, "dir", "bench/out", "scratch directory")
	flag.Parse()
	fmt.Printf("bench-ui: uptime before: %s\n", uptime())
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.dir, "ui-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	base, pid, stop, err := startRackd(ctx, o.rackd, work)
	if err != nil {
		return err
	}
	defer stop()
	raw, err := os.ReadFile(filepath.Join(work, "state", "admin.token"))
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	start := time.Now()
	if err := populate(ctx, base, token, o.machines); err != nil {
		return err
	}
	fmt.Printf("bench-ui: %d machines added in %s\n", o.machines, time.Since(start).Round(time.Millisecond))

	jar, err := login(ctx, base, token)
	if err != nil {
		return err
	}
	pageP99, apiP99, ratio, err := lists(ctx, o, base, token, jar)
	if err != nil {
		return err
	}
	liveP99, clients, rss, err := live(ctx, o, base, token, jar, pid)
	if err != nil {
		return err
	}
	fmt.Printf("bench-ui: rackd RSS with %d streams connected: %.1f MiB\n", clients, float64(rss)/(1<<20))
	fmt.Printf("bench-ui: uptime after: %s\n", uptime())
	fmt.Printf("RESULT machines_page_10k_p99_ms=%.2f api_list_10k_p99_ms=%.2f ratio=%.3f live_update_p99_ms=%.2f sse_clients=%d\n",
		pageP99, apiP99, ratio, liveP99, clients)
	return nil
}

func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		b, _ := os.ReadFile("/proc/loadavg")
		return "loadavg " + strings.TrimSpace(string(b))
	}
	return strings.TrimSpace(string(out))
}

// startRackd runs the rackd binary on a free loopback port until stop.
func startRackd(ctx context.Context, bin, work string) (string, int, func(), error) {
	r, err := benchrackd.Start(ctx, bin, work, "log_level = \"warn\"\nname = \"bench\"\n", 30*time.Second)
	if err != nil {
		return "", 0, nil, err
	}
	fmt.Printf("bench-ui: rackd %s (pid %d) serving on %s\n", bin, r.PID, strings.TrimPrefix(r.Base, "http://"))
	return r.Base, r.PID, r.Stop, nil
}

// state spreads the machines over the states rackd creates directly.
func state(i int) string { return []string{"NEW", "READY", "DEPLOYED"}[i%3] }

// populate adds the machines through the API, 32 at a time.
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
				body, _ := json.Marshal(map[string]any{"hostname": fmt.Sprintf("bench%05d", i),
					"macs":      []string{fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", 0x10, i>>16&0xff, i>>8&0xff, i&0xff)},
					"cpu_count": 8, "memory_mb": 16384, "state": state(i), "tags": []string{fmt.Sprintf("row%d", i%20)}})
				if st, msg, err := apiCall(ctx, base, token, "POST", "/api/v1/machines", body); err != nil || st != http.StatusCreated {
					errs <- fmt.Errorf("add machine %d: %d %s %v", i, st, msg, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func apiCall(ctx context.Context, base, token, method, path string, body []byte) (int, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, msg, nil
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login opens a UI session with the admin token, as the login form does.
func login(ctx context.Context, base, token string) (http.CookieJar, error) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/login", nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfRE.FindSubmatch(page)
	if m == nil {
		return nil, errors.New("the login page has no csrf field")
	}
	form := url.Values{"csrf": {string(m[1])}, "token": {token}}
	req, _ = http.NewRequestWithContext(ctx, "POST", base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = c.Do(req)
	if err != nil {
		return nil, err
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(page, []byte("data-csrf")) {
		return nil, fmt.Errorf("login: %d", resp.StatusCode)
	}
	return jar, nil
}

// timedGet is one GET's whole answer time; the answer must be 200 and hold
// want.
func timedGet(ctx context.Context, c *http.Client, u string, header http.Header, want []byte) (time.Duration, int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, want) {
		return 0, 0, fmt.Errorf("GET %s: %d %.200s", u, resp.StatusCode, body)
	}
	return d, len(body), nil
}

// lists times the machine list's first page and the API's list,
// interleaved.
func lists(ctx context.Context, o options, base, token string, jar http.CookieJar) (pageP99, apiP99, ratio float64, err error) {
	pageClient := &http.Client{Jar: jar, Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	apiClient := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{}}
	auth := http.Header{"Authorization": {"Bearer " + token}}
	var pages, apis []float64
	var pageBytes, apiBytes int
	// Two of each first, not counted: connections, caches.
	for i := -2; i < o.requests; i++ {
		if ctx.Err() != nil {
			return 0, 0, 0, ctx.Err()
		}
		dp, np, err := timedGet(ctx, pageClient, base+"/machines", nil, []byte(`id="machine-`))
		if err != nil {
			return 0, 0, 0, err
		}
		da, na, err := timedGet(ctx, apiClient, base+"/api/v1/machines", auth, []byte(fmt.Sprintf(`"bench%05d"`, o.machines-1)))
		if err != nil {
			return 0, 0, 0, err
		}
		if i >= 0 {
			pages, apis = append(pages, ms(dp)), append(apis, ms(da))
			pageBytes, apiBytes = np, na
		}
	}
	fmt.Printf("bench-ui: machine list's first page (%d bytes, 100 rows of %d): median %.2f ms, p99 %.2f ms over %d\n",
		pageBytes, o.machines, pct(pages, 50), pct(pages, 99), len(pages))
	fmt.Printf("bench-ui: GET /api/v1/machines (%d bytes, all %d): median %.2f ms, p99 %.2f ms over %d\n",
		apiBytes, o.machines, pct(apis, 50), pct(apis, 99), len(apis))
	return pct(pages, 99), pct(apis, 99), pct(pages, 50) / pct(apis, 50), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile (nearest rank).
func pct(v []float64, p int) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

// live connects the streams, then times each state change to the last
// stream's receipt of it.
func live(ctx context.Context, o options, base, token string, jar http.CookieJar, pid int) (p99 float64, clients int, rss int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// arrivals[k] counts the streams that have change k's event; done[k]
	// is when the last one had it.
	arrivals := make([]atomic.Int32, o.changes)
	done := make([]atomic.Int64, o.changes)
	reasonRE := regexp.MustCompile(`"reason":"bench-(\d+)"`)
	tr := &http.Transport{MaxIdleConnsPerHost: o.clients + 10}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range o.clients {
		c := &http.Client{Jar: jar, Transport: tr}
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("connect a stream: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return 0, 0, 0, fmt.Errorf("/events: %d", resp.StatusCode)
		}
		wg.Go(func() {
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line := sc.Bytes()
				if !bytes.HasPrefix(line, []byte("data: ")) {
					continue
				}
				m := reasonRE.FindSubmatch(line)
				if m == nil {
					continue
				}
				var k int
				fmt.Sscan(string(m[1]), &k)
				if k >= 0 && k < o.changes && int(arrivals[k].Add(1)) == o.clients {
					done[k].Store(time.Now().UnixNano())
				}
			}
		})
	}
	// Every stream is subscribed once rackd has answered its request; a
	// first change, not timed, checks they all get events.
	const machine = "bench00001" // READY: mark-broken and mark-fixed in turn
	var lat []float64
	for k := range o.changes {
		action := "mark-broken"
		if k%2 == 1 {
			action = "mark-fixed"
		}
		body, _ := json.Marshal(map[string]string{"reason": fmt.Sprintf("bench-%d", k)})
		t0 := time.Now()
		st, msg, err := apiCall(ctx, base, token, "POST", "/api/v1/machines/"+machine+"/"+action, body)
		if err != nil || st != http.StatusOK {
			return 0, 0, 0, fmt.Errorf("%s: %d %s %v", action, st, msg, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for done[k].Load() == 0 {
			if time.Now().After(deadline) {
				return 0, 0, 0, fmt.Errorf("change %d reached %d of %d streams within 10s", k, arrivals[k].Load(), o.clients)
			}
			time.Sleep(200 * time.Microsecond)
		}
		if k > 0 {
			lat = append(lat, ms(time.Duration(done[k].Load()-t0.UnixNano())))
		}
		if k == o.changes/2 {
			rss = rssOf(pid)
		}
	}
	fmt.Printf("bench-ui: %d state changes to %d streams: median %.2f ms, p99 %.2f ms, max %.2f ms (API request start to the last stream's receipt)\n",
		len(lat), o.clients, pct(lat, 50), pct(lat, 99), pct(lat, 100))
	return pct(lat, 99), o.clients, rss, nil
}

// rssOf is a process's resident memory in bytes.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}
