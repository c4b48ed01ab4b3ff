package agent

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"rackd/power"
	"rackd/store"
)

// TestManualDriverLogLine: the agent's manual driver tells the operator
// which machine to power, naming the driver once.
func TestManualDriverLogLine(t *testing.T) {
	var logs bytes.Buffer
	a := &Agent{log: slog.New(slog.NewTextHandler(&logs, nil)), powerDrivers: map[string]power.Driver{}}
	if err := a.addDrivers(); err != nil {
		t.Fatal(err)
	}
	defer a.closePower()
	d := a.powerDrivers["manual"]
	if err := d.PowerOn(context.Background(), power.Target{Machine: "web1", Driver: "manual"}); err != nil {
		t.Fatal(err)
	}
	line := logs.String()
	if !strings.Contains(line, "machine=web1") || strings.Count(line, "driver=manual") != 1 || strings.Contains(line, `address=""`) {
		t.Errorf("the manual driver's line should name the machine and the driver once, and no empty address:\n%s", line)
	}
}

// TestManualNotice: what a transition of a manual machine tells the
// operator is a whole instruction: which machine, why, and what to do.
func TestManualNotice(t *testing.T) {
	for _, tc := range []struct {
		state store.State
		want  string
	}{
		{store.StateCommissioning, "machine web1 has the manual power driver, so rackd cannot power it: power it on yourself now, booting from the network (PXE)"},
		{store.StateReady, "machine web1 has the manual power driver, so rackd cannot power it: power it off yourself now"},
		{store.StateDeployed, ""},
	} {
		m := store.Machine{Hostname: "web1", State: tc.state, Power: store.PowerParams{Driver: "manual"}}
		if got := manualNotice(m); got != tc.want {
			t.Errorf("%s: notice %q, want %q", tc.state, got, tc.want)
		}
	}
	if got := manualNotice(store.Machine{Hostname: "web2", State: store.StateCommissioning, Power: store.PowerParams{Driver: "ipmi"}}); got != "" {
		t.Errorf("ipmi machine: notice %q, want none", got)
	}
}
