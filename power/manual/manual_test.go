package manual

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"rackd/power"
	"rackd/power/powertest"
)

func TestConformance(t *testing.T) {
	powertest.Conformance(t, func(t *testing.T) powertest.Subject {
		return powertest.Subject{
			Driver: New(slog.New(slog.DiscardHandler), 0),
			Target: power.Target{Driver: "manual", Address: "rack 3 slot 7"},
			Blind:  true,
		}
	})
}

// Every request is kept, in order, and told to the operator in the log.
func TestRecordsAndWarns(t *testing.T) {
	var logs bytes.Buffer
	d := New(slog.New(slog.NewTextHandler(&logs, nil)), 3)
	tg := power.Target{Address: "r1"}
	ctx := power.WithRequestID(context.Background(), "req-9")
	steps := []struct {
		call func() error
		want string
	}{
		{func() error { return d.PowerOn(ctx, tg) }, "power on"},
		{func() error { return d.SetNextBoot(ctx, tg, power.BootPXE) }, "next boot pxe"},
		{func() error { return d.PowerCycle(ctx, tg) }, "power cycle"},
		{func() error { return d.PowerOff(ctx, tg) }, "power off"},
	}
	for _, s := range steps {
		if err := s.call(); err != nil {
			t.Fatalf("%s: %v", s.want, err)
		}
	}
	got := d.Requests()
	// keep = 3: the oldest went.
	want := []string{"next boot pxe", "power cycle", "power off"}
	if len(got) != len(want) {
		t.Fatalf("requests = %+v, want %v", got, want)
	}
	for i, r := range got {
		if r.Action != want[i] || r.Address != "r1" || r.RequestID != "req-9" || r.At.IsZero() {
			t.Errorf("request %d = %+v, want %s for r1 req-9", i, r, want[i])
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 4 {
		t.Errorf("%d warnings, want 4:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `action="power cycle"`) || !strings.Contains(logs.String(), "request=req-9") {
		t.Errorf("warning lacks the action or request id:\n%s", logs.String())
	}
	// A cancelled request is not recorded.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.PowerOn(cctx, tg); err == nil {
		t.Fatal("PowerOn with a cancelled ctx succeeded")
	}
	if len(d.Requests()) != 3 || d.Requests()[2].Action != "power off" {
		t.Fatalf("cancelled request recorded: %+v", d.Requests())
	}
}

// The operator is told which machine, with the driver named once, and the
// address only when the machine has one (a manual machine often has none).
func TestLogNamesMachine(t *testing.T) {
	for _, tc := range []struct {
		address string
		want    []string
		not     []string
	}{
		{"", []string{"machine=web1", `action="power on"`, "request=pr-7"}, []string{"address="}},
		{"rack 3 slot 7", []string{"machine=web1", `address="rack 3 slot 7"`}, nil},
	} {
		var logs bytes.Buffer
		d := New(slog.New(slog.NewTextHandler(&logs, nil)), 0)
		tg := power.Target{Machine: "web1", Driver: "manual", Address: tc.address}
		if err := d.PowerOn(power.WithRequestID(context.Background(), "pr-7"), tg); err != nil {
			t.Fatal(err)
		}
		line := logs.String()
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("log line lacks %s:\n%s", w, line)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(line, n) {
				t.Errorf("log line has %s:\n%s", n, line)
			}
		}
		if n := strings.Count(line, "driver=manual"); n != 1 {
			t.Errorf("driver=manual %d times, want once:\n%s", n, line)
		}
		if r := d.Requests(); len(r) != 1 || r[0].Machine != "web1" {
			t.Errorf("recorded %+v, want machine web1", r)
		}
	}
}
