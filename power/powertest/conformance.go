package powertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"rackd/power"
)

// Subject is what the conformance suite drives: a driver, a machine it
// controls, and what the test can do to that machine's BMC.
type Subject struct {
	Driver power.Driver
	Target power.Target
	// Blind drivers cannot observe the machine (manual): Status must say
	// StateUnknown and the power checks only require the request to be
	// accepted.
	Blind bool
	// BadPassword, when set, is Target with a wrong password: every method
	// must fail with ErrAuth, and the text must not contain the password.
	BadPassword *power.Target
	// Hang, when set, makes the BMC stop answering; the returned function
	// undoes it. Used to check that ctx bounds every method.
	Hang func(t *testing.T) (resume func())
	// Settle bounds how long the status may lag a command (a cycle's off
	// phase, a slow BMC). Default 15 s.
	Settle time.Duration
}

// Conformance is the behaviour every power.Driver shares. newSubject is
// called once per subtest and must give a machine that is off.
//
//	func TestConformance(t *testing.T) {
//		powertest.Conformance(t, func(t *testing.T) powertest.Subject { ... })
//	}
func Conformance(t *testing.T, newSubject func(t *testing.T) Subject) {
	t.Run("OnOffStatus", func(t *testing.T) {
		s := setup(t, newSubject)
		ctx := callCtx(t)
		if err := s.Driver.PowerOn(ctx, s.Target); err != nil {
			t.Fatalf("PowerOn: %v", err)
		}
		waitState(t, s, power.StateOn)
		// On is idempotent.
		if err := s.Driver.PowerOn(ctx, s.Target); err != nil {
			t.Fatalf("second PowerOn: %v", err)
		}
		waitState(t, s, power.StateOn)
		if err := s.Driver.PowerOff(ctx, s.Target); err != nil {
			t.Fatalf("PowerOff: %v", err)
		}
		waitState(t, s, power.StateOff)
		if err := s.Driver.PowerOff(ctx, s.Target); err != nil {
			t.Fatalf("second PowerOff: %v", err)
		}
		waitState(t, s, power.StateOff)
	})

	t.Run("CycleEndsOn", func(t *testing.T) {
		s := setup(t, newSubject)
		ctx := callCtx(t)
		// From off...
		if err := s.Driver.PowerCycle(ctx, s.Target); err != nil {
			t.Fatalf("PowerCycle from off: %v", err)
		}
		waitState(t, s, power.StateOn)
		// ...and from on.
		if err := s.Driver.PowerCycle(ctx, s.Target); err != nil {
			t.Fatalf("PowerCycle from on: %v", err)
		}
		waitState(t, s, power.StateOn)
	})

	t.Run("SetNextBoot", func(t *testing.T) {
		s := setup(t, newSubject)
		ctx := callCtx(t)
		for _, dev := range []power.BootDevice{power.BootPXE, power.BootDisk, power.BootPXE} {
			if err := s.Driver.SetNextBoot(ctx, s.Target, dev); err != nil {
				t.Fatalf("SetNextBoot(%v): %v", dev, err)
			}
		}
		err := s.Driver.SetNextBoot(ctx, s.Target, power.BootDevice(99))
		if !errors.Is(err, power.ErrUnsupported) {
			t.Fatalf("SetNextBoot(99) = %v, want ErrUnsupported", err)
		}
	})

	t.Run("StatusIsAState", func(t *testing.T) {
		s := setup(t, newSubject)
		st, err := s.Driver.Status(callCtx(t), s.Target)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if s.Blind && st != power.StateUnknown {
			t.Fatalf("blind driver's Status = %v, want unknown", st)
		}
		if !s.Blind && st != power.StateOff {
			t.Fatalf("new machine's Status = %v, want off", st)
		}
	})

	t.Run("WrongPassword", func(t *testing.T) {
		s := setup(t, newSubject)
		if s.BadPassword == nil {
			t.Skip("driver has no credentials")
		}
		bad := *s.BadPassword
		ctx := callCtx(t)
		calls := map[string]func() error{
			"Status":      func() error { _, err := s.Driver.Status(ctx, bad); return err },
			"PowerOn":     func() error { return s.Driver.PowerOn(ctx, bad) },
			"PowerOff":    func() error { return s.Driver.PowerOff(ctx, bad) },
			"PowerCycle":  func() error { return s.Driver.PowerCycle(ctx, bad) },
			"SetNextBoot": func() error { return s.Driver.SetNextBoot(ctx, bad, power.BootPXE) },
		}
		for name, call := range calls {
			err := call()
			if !errors.Is(err, power.ErrAuth) {
				t.Errorf("%s with a wrong password = %v, want ErrAuth", name, err)
				continue
			}
			if bad.Password != "" && strings.Contains(err.Error(), bad.Password) {
				t.Errorf("%s: error text holds the password: %v", name, err)
			}
			if s.Target.Password != "" && strings.Contains(err.Error(), s.Target.Password) {
				t.Errorf("%s: error text holds the right password: %v", name, err)
			}
		}
		// The machine was not touched and the right password still works.
		if st, err := s.Driver.Status(ctx, s.Target); err != nil || st != power.StateOff {
			t.Fatalf("Status with the right password after refused logins = %v, %v; want off", st, err)
		}
	})

	t.Run("ContextBoundsAHungBMC", func(t *testing.T) {
		s := setup(t, newSubject)
		if s.Hang == nil {
			t.Skip("no way to hang this driver's BMC")
		}
		resume := s.Hang(t)
		defer resume()
		for name, call := range map[string]func(context.Context) error{
			"Status":     func(ctx context.Context) error { _, err := s.Driver.Status(ctx, s.Target); return err },
			"PowerOn":    func(ctx context.Context) error { return s.Driver.PowerOn(ctx, s.Target) },
			"PowerCycle": func(ctx context.Context) error { return s.Driver.PowerCycle(ctx, s.Target) },
		} {
			// A deadline...
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			cancel()
			if err == nil {
				t.Errorf("%s against a hung BMC succeeded", name)
			} else if k := power.ErrorKind(err); k != "timeout" && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s against a hung BMC = %v (kind %s), want a timeout", name, err, k)
			}
			// Generous: the bound is the point, not the speed (loaded CI).
			if took > 5*time.Second {
				t.Errorf("%s ignored its 300ms deadline: returned after %v", name, took)
			}
			// ...and a cancel.
			ctx, cancel = context.WithCancel(context.Background())
			timer := time.AfterFunc(200*time.Millisecond, cancel)
			start = time.Now()
			err = call(ctx)
			took = time.Since(start)
			timer.Stop()
			cancel()
			if err == nil {
				t.Errorf("%s against a hung BMC with a cancelled ctx succeeded", name)
			}
			if took > 5*time.Second {
				t.Errorf("%s ignored the cancel: returned after %v", name, took)
			}
		}
		resume()
		// The driver recovers when the BMC does.
		waitState(t, s, power.StateOff)
	})
}

func setup(t *testing.T, newSubject func(t *testing.T) Subject) Subject {
	t.Helper()
	s := newSubject(t)
	if s.Driver == nil {
		t.Fatal("newSubject gave no driver")
	}
	if s.Settle <= 0 {
		s.Settle = 15 * time.Second
	}
	return s
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitState polls Status until it says want (or, for a blind driver,
// checks that it says unknown), within s.Settle.
func waitState(t *testing.T, s Subject, want power.State) {
	t.Helper()
	deadline := time.Now().Add(s.Settle)
	var st power.State
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err = s.Driver.Status(ctx, s.Target)
		cancel()
		if s.Blind {
			if err != nil || st != power.StateUnknown {
				t.Fatalf("blind driver's Status = %v, %v; want unknown", st, err)
			}
			return
		}
		if err == nil && st == want {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Status never became %v within %v: last %v, %v", want, s.Settle, st, err)
}
