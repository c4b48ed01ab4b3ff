package powertest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"rackd/power"
)

func TestFakeStateFailuresAndLog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "power.log")
	f, err := OpenFake(path)
	if err != nil {
		t.Fatal(err)
	}
	a := power.Target{Address: "bmc1", Username: "m1"}
	b := power.Target{Address: "bmc1", Username: "m2"}
	if err := f.PowerOn(power.WithRequestID(ctx, "r1"), a); err != nil {
		t.Fatal(err)
	}
	if err := f.PowerCycle(power.WithRequestID(ctx, "r2"), b); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.Status(ctx, a); s != power.StateOn {
		t.Errorf("a after on: %v", s)
	}
	f.Fail("bmc1", 1, power.ErrAuth)
	if err := f.PowerOff(ctx, a); !errors.Is(err, power.ErrAuth) {
		t.Errorf("failing off: %v, want ErrAuth", err)
	}
	if err := f.PowerOff(ctx, a); err != nil {
		t.Errorf("off after the one failure: %v", err)
	}
	if got := f.Count(Key(a), CmdOff); got != 2 {
		t.Errorf("off count %d, want 2", got)
	}
	f.Close()

	g, err := OpenFake(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.State(Key(a)) != power.StateOff || g.State(Key(b)) != power.StateOn || g.Cycles("r2") != 1 {
		t.Errorf("replayed state a=%v b=%v cycles(r2)=%d", g.State(Key(a)), g.State(Key(b)), g.Cycles("r2"))
	}
	log, err := ReadLog(path)
	if err != nil || len(log) != 3 || log[1].Cmd != CmdCycle || log[1].Request != "r2" {
		t.Errorf("log %+v, %v", log, err)
	}
}

func TestFakeHangEndsWithContextOrRelease(t *testing.T) {
	f := NewFake()
	tg := power.Target{Address: "bmc9"}
	f.Hang("bmc9")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := f.Status(ctx, tg); !errors.Is(err, power.ErrTimeout) {
		t.Errorf("hung status: %v, want ErrTimeout", err)
	}
	done := make(chan error, 1)
	go func() { done <- f.PowerOn(context.Background(), tg) }()
	for deadline := time.Now().Add(10 * time.Second); f.InFlight() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hung command never started")
		}
	}
	f.Release("bmc9")
	if err := <-done; err != nil {
		t.Errorf("released on: %v", err)
	}
	if f.MaxInFlightAddr("bmc9") != 1 || f.State("bmc9") != power.StateOn {
		t.Errorf("max in flight %d, state %v", f.MaxInFlightAddr("bmc9"), f.State("bmc9"))
	}
}

// HangAfter: once that many commands took effect, every command that would
// change something gets no answer until its ctx ends, and nothing more is
// logged; status still answers; the commands replayed from the log do not
// count.
func TestFakeHangAfter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "power.log")
	old, err := OpenFake(path)
	if err != nil {
		t.Fatal(err)
	}
	a := power.Target{Address: "bmc1", Username: "m1"}
	if err := old.PowerOn(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	old.Close()

	drv, closeFn, err := Driver(0, path, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	f := drv.(*Fake)
	for _, do := range []func(context.Context, power.Target) error{f.PowerOff, f.PowerOn} {
		if err := do(context.Background(), a); err != nil {
			t.Fatalf("before the limit: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := f.PowerCycle(ctx, a); !errors.Is(err, power.ErrTimeout) {
		t.Fatalf("after the limit: %v, want ErrTimeout", err)
	}
	if s, err := f.Status(context.Background(), a); err != nil || s != power.StateOn {
		t.Fatalf("status after the limit: %v, %v; want on", s, err)
	}
	log, err := ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 {
		t.Fatalf("log holds %d commands, want the replayed one and 2: %v", len(log), log)
	}
}
