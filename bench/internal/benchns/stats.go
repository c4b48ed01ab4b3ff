package benchns

import (
	"context"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Uptime is uptime(1)'s line (the load averages a benchmark prints at its
// start and end), or /proc/loadavg's figures when uptime cannot run.
func Uptime(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "uptime").Output()
	if err != nil {
		return "load average " + Loadavg()
	}
	return strings.TrimSpace(string(out))
}

// Loadavg is /proc/loadavg's 1, 5 and 15 minute load averages.
func Loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Median is the median of v, NaNs counted as 0 (0 for none).
func Median(v []float64) float64 {
	v = slices.Clone(v)
	for i := range v {
		if math.IsNaN(v[i]) {
			v[i] = 0
		}
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// Div is a/b, 0 when either is 0.
func Div(a, b float64) float64 {
	if b == 0 || a == 0 {
		return 0
	}
	return a / b
}
