package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"rackd/internal/netnstest"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"rackd/agent"
	"rackd/agent/client"
	"rackd/api"
	"rackd/power"
	"rackd/power/powertest"
)

// prometheusSeries are the series Prometheus makes itself for every target.
var prometheusSeries = map[string][]string{"up": nil}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job"}

// exposition is what one /metrics answer says: each series name and the
// label names it has.
type exposition map[string]map[string]bool

// parseExposition reads the Prometheus text format: "name{l="v",...} value".
func parseExposition(text string) (exposition, error) {
	out := exposition{}
	for n, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			return nil, fmt.Errorf("line %d: %q", n+1, line)
		}
		name := line[:end]
		labels := out[name]
		if labels == nil {
			labels = map[string]bool{}
			out[name] = labels
		}
		if line[end] != '{' {
			continue
		}
		names, _, err := matchers(line, end)
		if err != nil {
			return nil, fmt.Errorf("line %d: %q: %w", n+1, line, err)
		}
		for _, l := range names {
			labels[l] = true
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no series")
	}
	return out, nil
}

// freeUDPPort is a loopback UDP port nobody holds now.
func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// scrapeRackd starts a real rackd in this process on loopback, with every
// service that has series (DHCP on a loopback relay socket, TFTP, DNS, the
// fake power driver), drives it until the series that exist only once
// something happened are there (a BMC command's time, a failing BMC, a
// subnet's pool), and returns its /metrics.
func scrapeRackd(t *testing.T) exposition {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.DHCP.Listen = []string{fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))}
	cfg.DHCP.ProbeTimeout = 0
	cfg.TFTP.Listen = "127.0.0.1:0"
	cfg.DNS.Listen = "127.0.0.1:0"
	cfg.Power.Fake.Enabled = true
	cfg.Power.Retries = 0
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	a, err := agent.New(cfg, log, agent.WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatalf("agent.New: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	token, err := os.ReadFile(filepath.Join(cfg.StateDir, agent.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	c := client.New(base, strings.TrimSpace(string(token)))
	fake := a.FakePower().(*powertest.Fake)
	fake.Fail("bmc-broken", -1, power.ErrUnreachable)
	for i, bmc := range []string{"bmc-ok", "bmc-broken"} {
		m, err := c.CreateMachine(ctx, api.CreateMachine{Hostname: "node" + bmc[4:], Arch: "amd64", State: "READY",
			MACs: []string{fmt.Sprintf("52:54:00:00:00:%02x", i+1)}, Power: &api.PowerParams{Driver: "fake", Address: bmc, Username: "u"}})
		if err != nil {
			t.Fatalf("create machine: %v", err)
		}
		if _, err := c.RequestPower(ctx, m.ID, api.PowerAction{Action: "on"}); err != nil {
			t.Fatalf("power on: %v", err)
		}
	}
	if _, err := c.CreateSubnet(ctx, api.Subnet{CIDR: "10.99.0.0/24",
		DynamicRanges: []api.Range{{Start: "10.99.0.100", End: "10.99.0.199"}}}); err != nil {
		t.Fatalf("create subnet: %v", err)
	}
	// A bound for a loaded machine, not a speed target.
	deadline := time.Now().Add(time.Minute)
	for {
		exp, err := scrape(base)
		if err != nil {
			t.Fatal(err)
		}
		missing := ""
		for _, name := range []string{"rackd_power_command_duration_seconds_bucket", "rackd_power_bmc_consecutive_failures",
			"rackd_ipam_pool_addresses", "rackd_dhcp_queue_length", "rackd_tftp_transfers_total", "rackd_dns_queries_total"} {
			if exp[name] == nil {
				missing = name
				break
			}
		}
		if missing == "" {
			return exp
		}
		if time.Now().After(deadline) {
			t.Fatalf("rackd's /metrics still lacks %s after a minute", missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func scrape(base string) (exposition, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseExposition(string(body))
}

// query is one query of the rules or the dashboard, and where it is.
type query struct{ where, expr string }

func ruleQueries(t *testing.T) (qs []query, recorded map[string]bool) {
	recorded = map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Record != "" {
			recorded[r.Record] = true
			qs = append(qs, query{rulesFile + " record " + r.Record, r.Expr})
		} else {
			qs = append(qs, query{rulesFile + " alert " + r.Alert, r.Expr})
		}
	}
	return qs, recorded
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens the rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func dashboardQueries(t *testing.T, d dashboard) []query {
	var qs []query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			q.Query = s
		}
		qs = append(qs, query{dashboardFile + " variable " + v.Name, q.Query})
	}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("%s panel %q", dashboardFile, p.Title), tg.Expr})
		}
	}
	return qs
}

// TestQueriesNameExportedSeries fails when a query of the rules or of the
// dashboard names a series a real rackd does not export, or selects on a
// label that series does not have: a renamed metric must be renamed in them
// too. Histograms count with their _bucket, _sum and _count, recording
// rules by their names, and Prometheus' own up.
func TestQueriesNameExportedSeries(t *testing.T) {
	qs, recorded := ruleQueries(t)
	qs = append(qs, dashboardQueries(t, loadDashboard(t))...)
	exp := scrapeRackd(t)
	used := 0
	for _, q := range qs {
		sels, err := selectors(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q names no series", q.where, q.expr)
		}
		for _, s := range sels {
			used++
			var known []string
			switch labels, ok := exp[s.name]; {
			case ok:
				for l := range labels {
					known = append(known, l)
				}
			case recorded[s.name]:
				continue // labels: whatever its rule keeps
			default:
				known, ok = prometheusSeries[s.name]
				if !ok {
					t.Errorf("%s: %s is not a series rackd exports (nor a recording rule)", q.where, s.name)
					continue
				}
			}
			for _, l := range s.labels {
				if !slices.Contains(known, l) && !slices.Contains(targetLabels, l) {
					t.Errorf("%s: %s has no label %q (it has %v)", q.where, s.name, l, known)
				}
			}
		}
	}
	t.Logf("%d queries, %d series selectors checked against %d exported series names", len(qs), used, len(exp))
}

// TestDashboard checks what Grafana needs to import the dashboard and a
// reader to find their way in it: the data source is a variable, panels have
// unique ids and titles, every query panel has queries, and the areas of the
// rack each have panels.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want a current one (39)", d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error("no datasource variable DS_PROMETHEUS")
	}
	ids := map[int]bool{}
	titles := map[string]bool{}
	var all strings.Builder
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || titles[p.Title] {
			t.Errorf("panel title %q empty or used twice", p.Title)
		}
		titles[p.Title] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, ds := range append([]json.RawMessage{p.Datasource}, func() (r []json.RawMessage) {
			for _, tg := range p.Targets {
				r = append(r, tg.Datasource)
			}
			return r
		}()...) {
			if !strings.Contains(string(ds), "${DS_PROMETHEUS}") {
				t.Errorf("panel %q: data source %s, want ${DS_PROMETHEUS}", p.Title, ds)
			}
		}
		for _, tg := range p.Targets {
			all.WriteString(tg.Expr + "\n")
		}
	}
	// The areas an operator looks at, by a series each must show.
	for _, name := range []string{"rackd_machines", "rackd_power_queue_depth", "rackd_power_commands_in_flight",
		"rackd_power_requests_total", "rackd_power_circuit_breakers_open", "rackd_dhcp_replies_total",
		"rackd_dhcp_drops_total", "rackd_dhcp_reply_duration_seconds_bucket", "rackd_tftp_transfers_total",
		"rackd_httpboot_requests_total", "rackd_store_commit_duration_seconds_bucket", "rackd_ipam_pool_used_addresses"} {
		if !strings.Contains(all.String(), name) {
			t.Errorf("no panel queries %s", name)
		}
	}
}

// grafanaVariables are the dashboard's variables as a query sees them once
// Grafana has replaced them.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m",
	`"$instance"`, `".*"`)

// TestDashboardQueriesParse has promtool parse every query of the dashboard
// (its variables replaced as Grafana would), as the expressions of a rule
// file: a query Prometheus cannot parse shows no data and no error until
// someone opens the panel.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := netnstest.Tool(t, "promtool")
	var rules []map[string]string
	where := map[string]string{}
	for i, q := range dashboardQueries(t, loadDashboard(t)) {
		expr := q.expr
		if m := labelValues.FindStringSubmatch(expr); m != nil {
			expr = m[1]
		}
		expr = grafanaVariables.Replace(expr)
		if strings.Contains(expr, "$") {
			t.Errorf("%s: %q uses a variable this test does not know", q.where, q.expr)
			continue
		}
		name := fmt.Sprintf("dashboard:query_%03d:check", i) // no name a prefix of another
		where[name] = q.where
		rules = append(rules, map[string]string{"record": name, "expr": expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		msg := string(out)
		for name, w := range where {
			msg = strings.ReplaceAll(msg, name, name+" ("+w+")")
		}
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s", err, msg)
	}
	if !strings.Contains(string(out), fmt.Sprintf("%d rules found", len(rules))) {
		t.Errorf("promtool did not check the %d queries:\n%s", len(rules), out)
	}
}
