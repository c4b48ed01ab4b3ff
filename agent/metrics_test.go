package agent

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"rackd/api"
	"rackd/internal/netnstest"
	"rackd/power/powertest"
)

func scrape(t *testing.T, ta *testAgent) string {
	t.Helper()
	resp, err := http.Get(ta.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	return string(body)
}

// lintMetrics lints an exposition with Prometheus' promtool, in a subtest of
// its own: without promtool only the lint is skipped, not the assertions
// made in-process beside it.
func lintMetrics(t *testing.T, text string) {
	t.Helper()
	t.Run("promtool", func(t *testing.T) {
		promtool := netnstest.Tool(t, "promtool")
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
		}
	})
}

// TestMetrics checks the series a dashboard relies on, and lints the whole
// exposition with Prometheus' promtool.
func TestMetrics(t *testing.T) {
	ta := startAgent(t)
	ta.addMachine(t, readyMachine(1))
	bob := ta.addUser(t, "bob", false)
	ta.call(t, bob, "POST", "/api/v1/allocations", api.AllocateRequest{AgentName: "x"}, nil)
	ta.call(t, bob, "POST", "/api/v1/allocations", api.AllocateRequest{AgentName: "x"}, nil)
	ta.call(t, "", "GET", "/api/v1/machines", nil, nil)
	ta.call(t, ta.admin, "GET", "/api/v1/machines/m-nosuch", nil, nil)
	text := scrape(t, ta)
	for _, want := range []string{
		`rackd_http_requests_total{code="201",method="POST",route="POST /api/v1/allocations"} 1`,
		`rackd_http_requests_total{code="409",method="POST",route="POST /api/v1/allocations"} 1`,
		`rackd_http_requests_total{code="401",method="GET",route="GET /api/v1/machines"} 1`,
		`rackd_http_requests_total{code="404",method="GET",route="GET /api/v1/machines/{id}"} 1`,
		`rackd_http_request_duration_seconds_bucket{method="POST",route="POST /api/v1/allocations",le="+Inf"} 2`,
		`rackd_allocation_requests_total{outcome="created"} 1`,
		`rackd_allocation_requests_total{outcome="no_available_machine"} 1`,
		`rackd_machines{state="ALLOCATED"} 1`,
		`rackd_machines{state="READY"} 0`,
		`rackd_build_info{`,
		`rackd_store_commits_total`,
		`rackd_process_resident_memory_bytes`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// No series may be labelled with a raw path (ids would explode the set).
	if strings.Contains(text, "m-nosuch") {
		t.Errorf("a raw path leaked into a label")
	}
	lintMetrics(t, text)
}

// TestWatchdogSweepsCounted: every watchdog sweep is counted by outcome, and
// one whose store fails is counted as an error (a watchdog that cannot do
// its job must show, not only log).
func TestWatchdogSweepsCounted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a.sweep(ctx)
	a.sweep(ctx)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.sweep(ctx) // the store is closed: every step fails
	for outcome, want := range map[string]float64{"ok": 2, "error": 1} {
		if got := testutil.ToFloat64(a.metrics.watchdogSweeps.WithLabelValues(outcome)); got != want {
			t.Errorf("rackd_watchdog_sweeps_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}
