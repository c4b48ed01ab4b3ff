package agent

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// Without the fake driver linked in (the shipped rackd), [power.fake]
// enabled is refused at start with the reason, not silently ignored.
func TestFakePowerNeedsTestBuild(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.Power.Fake.Enabled = true
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		a.Close()
		t.Fatal("agent.New with [power.fake] enabled and no fake driver succeeded")
	}
	if !strings.Contains(err.Error(), "power.fake.enabled") || !strings.Contains(err.Error(), "rackd_fakepower") {
		t.Errorf("error %q does not say what is wrong and how to get the fake", err)
	}
}
