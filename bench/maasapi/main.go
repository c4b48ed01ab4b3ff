// Command maasapi measures MAAS's API 2.0 as rackd serves it against
// rackd's own API, on one real rackd (the binary, as a child process, on
// loopback), in the same run (`make bench-maas-api`). It prints progress,
// then one line:
//
//		RESULT maas_alloc_release_per_s=<n> native_alloc_release_per_s=<n> ratio=<maas/native> maas_list_1000_p99_ms=<n> native_list_1000_p99_ms=<n> list_ratio=<maas/native> maas_layer_ratio=<kept/native> conn_per_request_ratio=<fresh/native>
//
//	  - Allocate and release: one client allocates a READY machine by name
//	    under an agent name and releases it, -rounds times through each API,
//	    interleaved one for one on the same machines: through Juju's own
//	    client (gomaasapi: AllocateMachine, ReleaseMachines, which open a
//	    connection a request as that client does) and through /api/v1
//	    (POST /api/v1/allocations, DELETE /api/v1/allocations/{id}, on one
//	    kept-alive connection). The rates are round trips a second of each.
//	    Two more clients, interleaved too, make gomaasapi's calls on MAAS's
//	    API from a plain client: on a kept-alive connection (maas_layer_ratio:
//	    the MAAS layer's own cost against /api/v1's) and on a new connection
//	    a request, as gomaasapi sends them (conn_per_request_ratio: what that
//	    costs; the rest of ratio's gap is gomaasapi's own decoding).
//	  - Listing: -machines machines, all but the pool enlisted with an
//	    inventory (two NICs, two disks each), are listed whole, -requests times each, interleaved: GET
//	    machines/ (OAuth PLAINTEXT, every machine with its interface_set and
//	    block devices) against GET /api/v1/machines. The time is the whole
//	    answer's, from the request's start to its last byte; p99 of each.
//
// The machine's load (uptime) before and after is printed before the
// RESULT line. Every loop is bounded in count and time, only loopback is
// used, and the rackd child (by its PID) and its state directory are
// removed at the end.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/juju/gomaasapi/v2"

	"rackd/bench/internal/benchns"
	"rackd/bench/internal/benchrackd"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-maas-api:", err)
		os.Exit(1)
	}
}

type options struct {
	rackd    string
	machines int
	pool     int
	rounds   int
	requests int
	duration time.Duration
	dir      string
}

func run() error {
	var o options
	flag.StringVar(&o.rackd, "rackd", "bin/rackd", "the rackd binary to measure")
	flag.IntVar(&o.machines, "machines", 1000, "machines listed: all but the pool enlisted with an inventory")
	flag.IntVar(&o.pool, "pool", 16, "READY machines allocated and released in turn")
	flag.IntVar(&o.rounds, "rounds", 400, "allocate+release round trips through each API")
	flag.IntVar(&o.requests, "requests", 60, "list requests through each API")
	flag.DurationVar(&o.duration, "duration", 90*time.Second, "time bound of each measured phase")
	flag.StringVar(&o.dir, "dir", "bench/out", "scratch directory")
	flag.Parse()
	if o.pool < 1 || o.machines <= o.pool {
		return fmt.Errorf("want 1 <= -pool < -machines")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	fmt.Printf("bench-maas-api: uptime before: %s\n", benchns.Uptime(ctx))
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.dir, "maas-api-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	r, err := benchrackd.Start(ctx, o.rackd, work,
		"log_level = \"warn\"\nname = \"bench\"\n[enlist]\nrate_limit = 1e12\nrate_burst = 1000000000\n", 30*time.Second)
	if err != nil {
		return err
	}
	defer r.Stop()
	fmt.Printf("bench-maas-api: rackd %s (pid %d) serving on %s\n", o.rackd, r.PID, strings.TrimPrefix(r.Base, "http://"))
	raw, err := os.ReadFile(filepath.Join(work, "state", "admin.token"))
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	n := &native{base: r.Base, token: strings.TrimSpace(string(raw)),
		http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	key, err := n.maasKey(ctx)
	if err != nil {
		return err
	}

	start := time.Now()
	if err := n.populate(ctx, o); err != nil {
		return err
	}
	fmt.Printf("bench-maas-api: %d machines enlisted and %d READY ones added in %s\n", o.machines-o.pool, o.pool, time.Since(start).Round(time.Millisecond))

	ctrl, err := gomaasapi.NewController(gomaasapi.ControllerArgs{BaseURL: r.Base + "/MAAS/", APIKey: key})
	if err != nil {
		return fmt.Errorf("gomaasapi NewController: %w", err)
	}
	ar, err := allocRelease(ctx, o, ctrl, n, key)
	if err != nil {
		return err
	}
	maasP99, nativeP99, err := lists(ctx, o, n, key)
	if err != nil {
		return err
	}
	fmt.Printf("bench-maas-api: uptime after: %s\n", benchns.Uptime(ctx))
	fmt.Printf("RESULT maas_alloc_release_per_s=%.0f native_alloc_release_per_s=%.0f ratio=%.3f maas_list_1000_p99_ms=%.2f native_list_1000_p99_ms=%.2f list_ratio=%.3f"+
		" maas_layer_ratio=%.3f conn_per_request_ratio=%.3f\n",
		ar.maas, ar.native, benchns.Div(ar.maas, ar.native), maasP99, nativeP99, benchns.Div(maasP99, nativeP99),
		benchns.Div(ar.kept, ar.native), benchns.Div(ar.fresh, ar.native))
	return nil
}

// native is rackd's own API, with the admin's token.
type native struct {
	base, token string
	http        *http.Client
}

func (n *native) call(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+n.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(resp.Body)
	return resp.StatusCode, msg, err
}

// form POSTs an urlencoded form to MAAS's API with key, as gomaasapi signs
// it: on the native client's kept-alive connections, or with fresh on a
// new connection closed after the answer, as gomaasapi sends every request.
func (n *native) form(ctx context.Context, key, path string, form url.Values, fresh bool) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", n.base+"/MAAS/api/2.0/"+path, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", oauth(key))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Close = fresh
	resp, err := n.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(resp.Body)
	return resp.StatusCode, msg, err
}

// maasKey makes a token of the admin's and returns it as a MAAS API key.
func (n *native) maasKey(ctx context.Context) (string, error) {
	st, msg, err := n.call(ctx, "POST", "/api/v1/tokens", map[string]any{"name": "bench-maas-api"})
	if err != nil || st != http.StatusCreated {
		return "", fmt.Errorf("create a token: %d %s %v", st, msg, err)
	}
	var tk struct {
		Key string `json:"maas_api_key"`
	}
	if err := json.Unmarshal(msg, &tk); err != nil || tk.Key == "" {
		return "", fmt.Errorf("the new token has no MAAS API key: %s", msg)
	}
	return tk.Key, nil
}

func mac(kind, i, nic int) string {
	return fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", kind, nic, i>>8&0xff, i&0xff)
}

// populate enlists the listed machines, as the enlistment environment does
// (an inventory with two NICs and two disks each), and adds the READY pool
// through /api/v1/machines; 32 requests at a time.
func (n *native) populate(ctx context.Context, o options) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	total := o.machines
	enlisted := o.machines - o.pool
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				var st int
				var msg []byte
				var err error
				if i < enlisted {
					inv := map[string]any{"hostname": fmt.Sprintf("list%04d", i), "arch": "amd64", "cpu_count": 16, "memory_mb": 65536,
						"macs": []string{mac(0x20, i, 0), mac(0x20, i, 1)},
						"disks": []map[string]any{{"name": "sda", "size_bytes": 480 << 30, "model": "SSD 480", "serial": fmt.Sprintf("S%06dA", i)},
							{"name": "nvme0n1", "size_bytes": 1920 << 30, "model": "NVMe 1.92T", "serial": fmt.Sprintf("N%06dB", i)}},
						"dmi": map[string]any{"vendor": "Bench", "product": "B1", "serial": fmt.Sprintf("SN%06d", i)}}
					st, msg, err = n.call(ctx, "POST", "/metadata/v1/enlist", inv)
					if err == nil && st == http.StatusOK {
						st = http.StatusCreated
					}
				} else {
					j := i - enlisted
					st, msg, err = n.call(ctx, "POST", "/api/v1/machines", map[string]any{"hostname": fmt.Sprintf("pool%03d", j),
						"arch": "amd64", "macs": []string{mac(0x30, j, 0)}, "cpu_count": 8, "memory_mb": 16384, "state": "READY"})
				}
				if err != nil || st != http.StatusCreated {
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

// rates are allocate+release round trips a second: through gomaasapi,
// through /api/v1, and gomaasapi's calls from a plain client on kept-alive
// connections and on a new connection a request.
type rates struct{ maas, native, kept, fresh float64 }

// allocRelease times allocate+release round trips through gomaasapi and
// through /api/v1, interleaved one for one on the pool's machines, and the
// same calls as gomaasapi's from a plain client, kept alive and not.
func allocRelease(ctx context.Context, o options, ctrl gomaasapi.Controller, n *native, key string) (rates, error) {
	var maasTime, nativeTime, keptTime, freshTime time.Duration
	done := 0
	deadline := time.Now().Add(o.duration)
	maasRound := func(name string) error {
		m, _, err := ctrl.AllocateMachine(gomaasapi.AllocateMachineArgs{Hostname: name, AgentName: "bench"})
		if err != nil {
			return fmt.Errorf("gomaasapi allocate %s: %w", name, err)
		}
		if err := ctrl.ReleaseMachines(gomaasapi.ReleaseMachinesArgs{SystemIDs: []string{m.SystemID()}}); err != nil {
			return fmt.Errorf("gomaasapi release %s: %w", name, err)
		}
		return nil
	}
	// The same calls on MAAS's API from a plain client, on one kept-alive
	// connection (what rackd's MAAS layer costs against /api/v1, apart
	// from gomaasapi's own work) and on a new connection a request, as
	// gomaasapi makes them (what that costs, apart from gomaasapi's
	// schema checks of the machine).
	rawRound := func(name string, fresh bool) error {
		st, msg, err := n.form(ctx, key, "machines/?op=allocate", url.Values{"name": {name}, "agent_name": {"bench"}}, fresh)
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("MAAS allocate %s: %d %s %v", name, st, msg, err)
		}
		var m struct {
			ID string `json:"system_id"`
		}
		if err := json.Unmarshal(msg, &m); err != nil || m.ID == "" {
			return fmt.Errorf("MAAS allocate %s: no system_id in %.200s", name, msg)
		}
		st, msg, err = n.form(ctx, key, "machines/?op=release", url.Values{"machines": {m.ID}}, fresh)
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("MAAS release %s: %d %s %v", name, st, msg, err)
		}
		return nil
	}
	nativeRound := func(name string) error {
		st, msg, err := n.call(ctx, "POST", "/api/v1/allocations", map[string]any{"name": name, "agent_name": "bench"})
		if err != nil || st != http.StatusCreated {
			return fmt.Errorf("native allocate %s: %d %s %v", name, st, msg, err)
		}
		var a struct {
			Machine struct {
				ID string `json:"id"`
			} `json:"machine"`
		}
		if err := json.Unmarshal(msg, &a); err != nil || a.Machine.ID == "" {
			return fmt.Errorf("native allocate %s: no machine id in %s", name, msg)
		}
		st, msg, err = n.call(ctx, "DELETE", "/api/v1/allocations/"+a.Machine.ID, nil)
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("native release %s: %d %s %v", name, st, msg, err)
		}
		return nil
	}
	// A few of each first, not counted: connections, caches.
	for i := -4; i < o.rounds; i++ {
		if ctx.Err() != nil {
			return rates{}, ctx.Err()
		}
		if i >= 0 && time.Now().After(deadline) {
			break
		}
		// A release ends once rackd's releaser has the machine READY
		// again, after the answer: each round starts on a READY machine
		// and no release of an earlier round still under way, waited for
		// outside the time measured.
		name := fmt.Sprintf("pool%03d", (i+4)%o.pool)
		if err := n.waitReady(ctx, name); err != nil {
			return rates{}, err
		}
		t0 := time.Now()
		if err := maasRound(name); err != nil {
			return rates{}, err
		}
		dm := time.Since(t0)
		if err := n.waitReady(ctx, name); err != nil {
			return rates{}, err
		}
		t1 := time.Now()
		if err := nativeRound(name); err != nil {
			return rates{}, err
		}
		dn := time.Since(t1)
		if err := n.waitReady(ctx, name); err != nil {
			return rates{}, err
		}
		var dr [2]time.Duration
		for j, fresh := range []bool{false, true} {
			t2 := time.Now()
			if err := rawRound(name, fresh); err != nil {
				return rates{}, err
			}
			dr[j] = time.Since(t2)
			// And ends READY: the releaser's commit of one round must
			// not run during the next round, which it would slow.
			if err := n.waitReady(ctx, name); err != nil {
				return rates{}, err
			}
		}
		if i >= 0 {
			maasTime += dm
			nativeTime += dn
			keptTime += dr[0]
			freshTime += dr[1]
			done++
		}
	}
	if done == 0 {
		return rates{}, fmt.Errorf("no round trip finished within %s", o.duration)
	}
	rate := func(d time.Duration) float64 { return float64(done) / d.Seconds() }
	r := rates{maas: rate(maasTime), native: rate(nativeTime), kept: rate(keptTime), fresh: rate(freshTime)}
	fmt.Printf("bench-maas-api: allocate+release, %d round trips each: gomaasapi %.0f/s (%.2f ms each), /api/v1 %.0f/s (%.2f ms each)\n",
		done, r.maas, ms(maasTime)/float64(done), r.native, ms(nativeTime)/float64(done))
	fmt.Printf("bench-maas-api: gomaasapi's calls from a plain client: kept alive %.0f/s (%.2f ms each, %.3f of /api/v1's rate: the MAAS layer's own cost),"+
		" a new connection a request as gomaasapi %.0f/s (%.2f ms each, %.3f)\n",
		r.kept, ms(keptTime)/float64(done), benchns.Div(r.kept, r.native), r.fresh, ms(freshTime)/float64(done), benchns.Div(r.fresh, r.native))
	return r, nil
}

// waitReady waits (30 s at most) until machine name is READY.
func (n *native) waitReady(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, msg, err := n.call(ctx, "GET", "/api/v1/machines/"+name, nil)
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("machine %s: %d %s %v", name, st, msg, err)
		}
		var m struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(msg, &m); err != nil {
			return err
		}
		if m.State == "READY" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("machine %s is still %s 30 s after its release", name, m.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// oauth is the Authorization header gomaasapi sends for a key.
func oauth(key string) string {
	p := strings.SplitN(key, ":", 3)
	return fmt.Sprintf(`OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT", oauth_consumer_key="%s", oauth_token="%s", oauth_signature="%%26%s", oauth_nonce="bench", oauth_timestamp="%d"`,
		p[0], p[1], p[2], time.Now().Unix())
}

// timedGet is one GET's whole answer time; the answer must be 200 and hold
// want.
func timedGet(ctx context.Context, c *http.Client, u, auth string, want []byte) (time.Duration, int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	req.Header.Set("Authorization", auth)
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

// lists times the whole machine list through each API, interleaved.
func lists(ctx context.Context, o options, n *native, key string) (maasP99, nativeP99 float64, err error) {
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{}}
	last := []byte(fmt.Sprintf(`"list%04d"`, o.machines-o.pool-1))
	var maas, nat []float64
	var maasBytes, natBytes int
	deadline := time.Now().Add(o.duration)
	for i := -2; i < o.requests; i++ {
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		if i >= 0 && time.Now().After(deadline) {
			break
		}
		dm, nm, err := timedGet(ctx, c, n.base+"/MAAS/api/2.0/machines/", oauth(key), last)
		if err != nil {
			return 0, 0, err
		}
		dn, nn, err := timedGet(ctx, c, n.base+"/api/v1/machines", "Bearer "+n.token, last)
		if err != nil {
			return 0, 0, err
		}
		if i >= 0 {
			maas, nat = append(maas, ms(dm)), append(nat, ms(dn))
			maasBytes, natBytes = nm, nn
		}
	}
	if len(maas) == 0 {
		return 0, 0, fmt.Errorf("no list finished within %s", o.duration)
	}
	fmt.Printf("bench-maas-api: GET machines/ (%d bytes, %d machines): median %.2f ms, p99 %.2f ms over %d\n",
		maasBytes, o.machines, pct(maas, 50), pct(maas, 99), len(maas))
	fmt.Printf("bench-maas-api: GET /api/v1/machines (%d bytes): median %.2f ms, p99 %.2f ms over %d\n",
		natBytes, pct(nat, 50), pct(nat, 99), len(nat))
	return pct(maas, 99), pct(nat, 99), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile (nearest rank).
func pct(v []float64, p int) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
