package ipmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/internal/ipmisim"
	"rackd/internal/netnstest"
	"rackd/power"
	"rackd/power/powertest"
)

// needSim requires the real peers: ipmi_sim (the BMC) and ipmitool (the
// client the simulator and the driver are checked against). Root is not
// needed: without it the simulators listen above port 1024.
func needSim(t *testing.T) {
	t.Helper()
	netnstest.Tool(t, "ipmi_sim")
	netnstest.Tool(t, "ipmitool")
}

// testTimeout is the driver's Timeout in tests that are not about timeouts.
// DefaultTimeout is a bound for a real BMC, which answers in milliseconds;
// ipmi_sim is a process on a CI machine that other work may starve for
// seconds, and there DefaultTimeout made every test a test of the machine's
// load. The tests' own contexts still bound every call.
const testTimeout = 20 * time.Second

func newDriver(t *testing.T, opts Options) *Driver {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	d := New(opts)
	t.Cleanup(func() { d.Close() })
	return d
}

func target(s *ipmisim.Sim) power.Target {
	return power.Target{Driver: "ipmi", Address: s.Addr, Username: s.User, Password: s.Password}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	needSim(t)
	for _, version := range []string{"", "1.5"} {
		t.Run("version="+version, func(t *testing.T) {
			powertest.Conformance(t, func(t *testing.T) powertest.Subject {
				sim := ipmisim.Start(t, ipmisim.Options{Password: "s3cret-pw"})
				d := newDriver(t, Options{Version: version})
				bad := target(sim)
				bad.Password = "wr0ng-pw-4711"
				return powertest.Subject{
					Driver:      d,
					Target:      target(sim),
					BadPassword: &bad,
					Hang: func(t *testing.T) func() {
						if err := sim.Hang(); err != nil {
							t.Fatal(err)
						}
						return func() { sim.Resume() }
					},
				}
			})
		})
	}
}

// On, off, cycle, status and next boot on several BMCs at once, each
// cross-checked with ipmitool and with the power bit the simulator keeps.
func TestSeveralBMCsCrossChecked(t *testing.T) {
	needSim(t)
	const n = 4
	sims := make([]*ipmisim.Sim, n)
	for i := range sims {
		sims[i] = ipmisim.Start(t, ipmisim.Options{Password: fmt.Sprintf("pw-%d", i)})
	}
	d := newDriver(t, Options{})
	ctx := testCtx(t)

	check := func(s *ipmisim.Sim, want power.State) error {
		// The cycle's off phase: poll (bounded) until the driver says want.
		var st power.State
		var err error
		for range 100 {
			if st, err = d.Status(ctx, target(s)); err == nil && st == want {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || st != want {
			return fmt.Errorf("%s: driver status %v, %v; want %v", s.Addr, st, err, want)
		}
		out, err := s.Ipmitool(ctx, "chassis", "power", "status")
		if err != nil || !strings.Contains(out, "Chassis Power is "+want.String()) {
			return fmt.Errorf("%s: ipmitool says %q, %v; want %v", s.Addr, out, err, want)
		}
		if on, err := s.Power(); err != nil || on != (want == power.StateOn) {
			return fmt.Errorf("%s: hook power bit %v, %v; want %v", s.Addr, on, err, want)
		}
		return nil
	}
	steps := []struct {
		name string
		do   func(power.Target) error
		want power.State
	}{
		{"on", func(tg power.Target) error { return d.PowerOn(ctx, tg) }, power.StateOn},
		{"off", func(tg power.Target) error { return d.PowerOff(ctx, tg) }, power.StateOff},
		{"cycle from off", func(tg power.Target) error { return d.PowerCycle(ctx, tg) }, power.StateOn},
		{"cycle from on", func(tg power.Target) error { return d.PowerCycle(ctx, tg) }, power.StateOn},
		{"off again", func(tg power.Target) error { return d.PowerOff(ctx, tg) }, power.StateOff},
	}
	for _, step := range steps {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, s := range sims {
			wg.Go(func() {
				if err := step.do(target(s)); err != nil {
					errs[i] = fmt.Errorf("%s: %w", s.Addr, err)
					return
				}
				errs[i] = check(s, step.want)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
	}
	// The cycle from on went through off (the hook saw power 0 then 1).
	if log := sims[0].HookLog(); strings.Count(log, "set power 0") < 3 {
		t.Errorf("hook log shows no off phase of the cycle:\n%s", log)
	}

	for _, s := range sims {
		if err := d.SetNextBoot(ctx, target(s), power.BootPXE); err != nil {
			t.Fatal(err)
		}
		if dev, _ := s.BootDevice(); dev != "pxe" {
			t.Fatalf("%s: boot device %q after SetNextBoot(pxe)", s.Addr, dev)
		}
		out, err := s.Ipmitool(ctx, "chassis", "bootparam", "get", "5")
		if err != nil || !strings.Contains(out, "Force PXE") {
			t.Fatalf("%s: ipmitool bootparam 5 = %q, %v; want Force PXE", s.Addr, out, err)
		}
		if err := d.SetNextBoot(ctx, target(s), power.BootDisk); err != nil {
			t.Fatal(err)
		}
		out, err = s.Ipmitool(ctx, "chassis", "bootparam", "get", "5")
		if err != nil || !strings.Contains(out, "Force Boot from default Hard-Drive") {
			t.Fatalf("%s: ipmitool bootparam 5 = %q, %v; want hard drive", s.Addr, out, err)
		}
	}
}

// A BMC that refuses set-boot-device (ipmi_sim whose hook refuses boot
// changes, as BMCs without boot options do) gives ErrBMC with the completion
// code, on one line; the boot device is unchanged and other commands work.
func TestSetNextBootRefused(t *testing.T) {
	needSim(t)
	refuse := filepath.Join(t.TempDir(), "refuse")
	if err := os.WriteFile(refuse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sim := ipmisim.Start(t, ipmisim.Options{BootCmd: []string{"test", "!", "-e", refuse}})
	d := newDriver(t, Options{})
	ctx := testCtx(t)
	err := d.SetNextBoot(ctx, target(sim), power.BootPXE)
	if !errors.Is(err, power.ErrBMC) || !strings.Contains(err.Error(), "completion code 0xff") || strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("refused set-boot-device: %q, want ErrBMC with the completion code on one line", err)
	}
	if dev, _ := sim.BootDevice(); dev != "default" {
		t.Fatalf("boot device %q after a refused set-boot-device", dev)
	}
	if st, err := d.Status(ctx, target(sim)); err != nil || st != power.StateOff {
		t.Fatalf("status beside the refusal: %v, %v", st, err)
	}
	os.Remove(refuse)
	if err := d.SetNextBoot(ctx, target(sim), power.BootPXE); err != nil {
		t.Fatalf("set-boot-device once the BMC accepts it: %v", err)
	}
	if dev, _ := sim.BootDevice(); dev != "pxe" {
		t.Fatalf("boot device %q, want pxe", dev)
	}
}

// A wrong password is a clear ErrAuth whose text names neither password, the
// driver does not hammer the BMC with the same wrong password (each refused
// login holds one of its 63 session slots for 30 s), and the right password
// works right after.
func TestWrongPassword(t *testing.T) {
	needSim(t)
	sim := ipmisim.Start(t, ipmisim.Options{Password: "Right-Pass-123"})
	logs := &lockedBuffer{}
	d := newDriver(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := testCtx(t)
	bad := target(sim)
	bad.Password = "Wrong-Pass-456"
	for i := range 100 {
		_, err := d.Status(ctx, bad)
		if !errors.Is(err, power.ErrAuth) {
			t.Fatalf("attempt %d: %v, want ErrAuth", i, err)
		}
		msg := err.Error()
		if strings.Contains(msg, bad.Password) || strings.Contains(msg, sim.Password) {
			t.Fatalf("error text holds a password: %s", msg)
		}
		if i == 0 && (!strings.Contains(msg, "password") || !strings.Contains(msg, sim.Addr) || !strings.Contains(msg, "admin")) {
			t.Fatalf("error does not say what to fix: %s", msg)
		}
		// One line that says what happened first, then the library's
		// details (go-ipmi's own text has newlines in it).
		if want := "ipmi " + sim.Addr + " (user admin): chassis status: authentication failed (wrong user or password"; !strings.HasPrefix(msg, want) || strings.ContainsAny(msg, "\n\r\t") {
			t.Fatalf("attempt %d: error text %q, want one line starting %q", i, msg, want)
		}
	}
	if st, err := d.Status(ctx, target(sim)); err != nil || st != power.StateOff {
		t.Fatalf("right password after 100 refused: %v, %v", st, err)
	}
	// A wrong user name is an auth error too.
	nobody := target(sim)
	nobody.Username = "nobody"
	if _, err := d.Status(ctx, nobody); !errors.Is(err, power.ErrAuth) {
		t.Fatalf("unknown user: %v, want ErrAuth", err)
	}
	d.Close() // background session closes log too
	if strings.Contains(logs.String(), sim.Password) || strings.Contains(logs.String(), bad.Password) {
		t.Fatalf("a password reached the log:\n%s", logs.String())
	}
	// Nor does the password reach any process's argv: the driver runs none,
	// but check ours and our children's anyway.
	if b, _ := os.ReadFile("/proc/self/cmdline"); bytes.Contains(b, []byte(sim.Password)) {
		t.Fatal("password in our argv")
	}
}

// A refused login is not repeated for AuthRetryAfter, and asking during
// that time does not prolong it.
func TestRefusalExpires(t *testing.T) {
	needSim(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	d := newDriver(t, Options{AuthRetryAfter: 2 * time.Second})
	ctx := testCtx(t)
	bad := target(sim)
	bad.Password = "nope"
	_, err := d.Status(ctx, bad)
	if !errors.Is(err, power.ErrAuth) || strings.Contains(err.Error(), "not asking again") {
		t.Fatalf("first refusal: %v", err)
	}
	opened := d.Stats().Opened
	start := time.Now()
	for time.Since(start) < time.Second {
		if _, err := d.Status(ctx, bad); !errors.Is(err, power.ErrAuth) || !strings.Contains(err.Error(), "not asking again") {
			t.Fatalf("within AuthRetryAfter: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.Stats().Opened != opened {
		t.Fatalf("the BMC was asked again within AuthRetryAfter: %+v", d.Stats())
	}
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond)))
	if _, err := d.Status(ctx, bad); !errors.Is(err, power.ErrAuth) || strings.Contains(err.Error(), "not asking again") {
		t.Fatalf("after AuthRetryAfter the BMC must be asked again: %v", err)
	}
	if d.Stats().Opened != opened+1 {
		t.Fatalf("stats %+v: want one more login", d.Stats())
	}
}

// A hung BMC (SIGSTOP) gives ErrTimeout within the driver's timeout, and
// other BMCs keep answering meanwhile, including one that shares nothing but
// the driver.
func TestHungBMC(t *testing.T) {
	needSim(t)
	hung := ipmisim.Start(t, ipmisim.Options{})
	ok := ipmisim.Start(t, ipmisim.Options{})
	// Long enough for the healthy simulator to answer on a loaded machine,
	// and well inside testCtx's minute, which would also end the calls.
	const timeout = 8 * time.Second
	d := newDriver(t, Options{Timeout: timeout})
	ctx := testCtx(t)
	// Open sessions to both first: the hung one must fail on a reused
	// session too (and not wait twice for the reconnect).
	for _, s := range []*ipmisim.Sim{hung, ok} {
		if _, err := d.Status(ctx, target(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := hung.Hang(); err != nil {
		t.Fatal(err)
	}
	defer hung.Resume()

	stop := make(chan struct{})
	var okCalls int
	var okErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 1000 {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := d.Status(ctx, target(ok)); err != nil {
				okErr = err
				return
			}
			okCalls++
		}
	})
	for _, call := range []func() error{
		func() error { _, err := d.Status(ctx, target(hung)); return err },
		func() error { return d.PowerOn(ctx, target(hung)) },
	} {
		start := time.Now()
		err := call()
		took := time.Since(start)
		if !errors.Is(err, power.ErrTimeout) || power.ErrorKind(err) != "timeout" {
			t.Fatalf("hung BMC: %v, want ErrTimeout", err)
		}
		// The bound is the driver's timeout, not testCtx's minute; as
		// much again as slack for a loaded CI box.
		if took > 2*timeout {
			t.Errorf("hung BMC answered after %v, timeout %v", took, timeout)
		}
	}
	close(stop)
	wg.Wait()
	if okErr != nil || okCalls == 0 {
		t.Fatalf("the healthy BMC failed while the other hung: %d calls, %v", okCalls, okErr)
	}
	t.Logf("healthy BMC answered %d status calls while the other hung", okCalls)
	hung.Resume()
	if st, err := d.Status(ctx, target(hung)); err != nil || st != power.StateOff {
		t.Fatalf("resumed BMC: %v, %v", st, err)
	}
}

// A BMC restart forgets our session; the driver notices, opens a new one
// and the command succeeds, without the caller seeing an error.
func TestBMCRestartReconnects(t *testing.T) {
	needSim(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	d := newDriver(t, Options{})
	ctx := testCtx(t)
	if err := d.PowerOn(ctx, target(sim)); err != nil {
		t.Fatal(err)
	}
	before := d.Stats()
	if err := sim.Restart(); err != nil {
		t.Fatal(err)
	}
	st, err := d.Status(ctx, target(sim))
	if err != nil || st != power.StateOn {
		t.Fatalf("after a BMC restart: %v, %v; want on", st, err)
	}
	after := d.Stats()
	if after.Reconnects != before.Reconnects+1 || after.Opened != before.Opened+1 {
		t.Fatalf("stats before %+v after %+v: want one reconnect", before, after)
	}
	if err := d.PowerOff(ctx, target(sim)); err != nil {
		t.Fatal(err)
	}
	// A stopped BMC on loopback answers ICMP port unreachable: ErrUnreachable.
	if err := sim.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Status(ctx, target(sim)); !errors.Is(err, power.ErrUnreachable) {
		t.Fatalf("stopped BMC: %v, want ErrUnreachable", err)
	}
}

// Many machines behind one BMC address and user (blades in a chassis) share
// one session and take turns; nothing races, no session leaks, and Close
// ends every session on the BMC.
func TestSharedBMCNoLeak(t *testing.T) {
	needSim(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	other := ipmisim.Start(t, ipmisim.Options{})
	// A generous timeout: on a loaded CI box a timeout would also cost a
	// session.
	d := New(Options{Logger: slog.New(slog.DiscardHandler), Timeout: testTimeout})
	ctx := testCtx(t)
	// The BMC counts our session while it is fresh: the janitor retires an
	// idle one only after most of SessionMaxAge, so asking after the storm
	// below raced it whenever the storm took that long (a loaded machine).
	if _, err := d.Status(ctx, target(sim)); err != nil {
		t.Fatal(err)
	}
	if n, err := sim.ActiveSessions(ctx); err != nil || n != 1 {
		t.Fatalf("BMC holds %d sessions besides ipmitool's, %v; want our one", n, err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			s := sim
			if g%4 == 3 {
				s = other
			}
			for i := range 25 {
				var err error
				switch i % 3 {
				case 0:
					_, err = d.Status(ctx, target(s))
				case 1:
					err = d.SetNextBoot(ctx, target(s), power.BootPXE)
				case 2:
					err = d.PowerOn(ctx, target(s))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// 200 commands: sessions are reused, one per BMC and per
	// SessionMaxAge the run lasted (the janitor retires an idle session
	// after three quarters of it; a slow machine makes the run long).
	st := d.Stats()
	ages := 1 + int(time.Since(start)/(DefaultSessionMaxAge*3/4))
	if st.Opened < 2 || st.Opened > 2*ages {
		t.Errorf("opened %d sessions for 2 BMCs and 200 commands in %v, want one each per %v, reused",
			st.Opened, time.Since(start), DefaultSessionMaxAge)
	}
	// The janitor may close sessions meanwhile, never open one.
	if n, err := sim.ActiveSessions(ctx); err != nil || n > st.Opened-st.Closed {
		t.Errorf("BMC holds %d sessions besides ipmitool's, %v; want at most our open ones (stats %+v)", n, err, st)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st := d.Stats(); st.Opened != st.Closed {
		t.Errorf("stats %+v: sessions opened != closed", st)
	}
	for _, s := range []*ipmisim.Sim{sim, other} {
		if n, err := s.ActiveSessions(ctx); err != nil || n != 0 {
			t.Errorf("%s: %d sessions left after Close, %v", s.Addr, n, err)
		}
	}
	if _, err := d.Status(ctx, target(sim)); err == nil {
		t.Error("Status after Close succeeded")
	}
}

// Sessions are retired after SessionMaxAge: the janitor closes idle ones on
// the BMC, and a busy one is replaced before its next command.
func TestSessionMaxAge(t *testing.T) {
	needSim(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	d := newDriver(t, Options{SessionMaxAge: 800 * time.Millisecond})
	ctx := testCtx(t)
	if _, err := d.Status(ctx, target(sim)); err != nil {
		t.Fatal(err)
	}
	// Idle: the janitor ends it (bounded wait).
	for i := 0; ; i++ {
		if st := d.Stats(); st.Closed == 1 {
			break
		}
		if i == 100 {
			t.Fatalf("idle session never retired: %+v", d.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, err := sim.ActiveSessions(ctx); err != nil || n != 0 {
		t.Fatalf("retired session still on the BMC: %d, %v", n, err)
	}
	if _, err := d.Status(ctx, target(sim)); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Opened != 2 {
		t.Fatalf("stats %+v: want a second session", st)
	}
	// A BMC nobody asks about is forgotten (5 x SessionMaxAge idle)...
	for i := 0; ; i++ {
		d.mu.Lock()
		n := len(d.clients)
		d.mu.Unlock()
		if n == 0 {
			break
		}
		if i == 200 {
			t.Fatalf("idle BMC never forgotten: %d entries", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// ...and works again when asked.
	if _, err := d.Status(ctx, target(sim)); err != nil {
		t.Fatal(err)
	}
}

// A completion code from the BMC is ErrBMC and names the code.
func TestBMCRefuses(t *testing.T) {
	needSim(t)
	sim := ipmisim.Start(t, ipmisim.Options{OnCmd: []string{"false"}})
	d := newDriver(t, Options{})
	err := d.PowerOn(testCtx(t), target(sim))
	if !errors.Is(err, power.ErrBMC) || !strings.Contains(err.Error(), "completion code") {
		t.Fatalf("refused power on: %v, want ErrBMC with a completion code", err)
	}
	if power.ErrorKind(err) != "bmc" {
		t.Fatalf("kind %q", power.ErrorKind(err))
	}
	// The session survives a refused command.
	if st, err := d.Status(testCtx(t), target(sim)); err != nil || st != power.StateOff {
		t.Fatalf("status after a refusal: %v, %v", st, err)
	}
	if d.Stats().Opened != 1 {
		t.Fatalf("stats %+v: a refusal must not cost the session", d.Stats())
	}
}

// Cipher suites: 3 works on ipmi_sim; an unencrypted suite is refused
// before anything is sent (go-ipmi would send mislabelled packets, which
// kill ipmi_sim with suite 2); a suite the BMC lacks (17 on ipmi_sim) is a
// clear BMC error.
func TestCipherSuites(t *testing.T) {
	needSim(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	d := newDriver(t, Options{})
	ctx := testCtx(t)
	for _, tc := range []struct {
		suite int
		want  error
	}{
		{0, nil}, {3, nil}, {1, power.ErrUnsupported}, {2, power.ErrUnsupported}, {17, power.ErrBMC},
	} {
		tg := target(sim)
		tg.CipherSuite = tc.suite
		opened := d.Stats().Opened
		_, err := d.Status(ctx, tg)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("cipher suite %d: %v, want %v", tc.suite, err, tc.want)
		}
		if tc.want == power.ErrUnsupported && d.Stats().Opened != opened {
			t.Errorf("cipher suite %d: a session was attempted", tc.suite)
		}
		if tc.suite == 17 && err != nil && !strings.Contains(err.Error(), "cipher suite") {
			t.Errorf("cipher suite 17: error does not point at the suite: %v", err)
		}
	}
	// The BMC survived all of it.
	if out, err := sim.Ipmitool(ctx, "chassis", "power", "status"); err != nil {
		t.Fatalf("simulator after the cipher suite tests: %q, %v", out, err)
	}
}

// The address forms a machine's BMC field may hold.
func TestSplitAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
		bad  bool
	}{
		{"10.0.0.1", "10.0.0.1", 623, false},
		{"10.0.0.1:6230", "10.0.0.1", 6230, false},
		{"bmc.example:623", "bmc.example", 623, false},
		{"[fe80::1]:623", "fe80::1", 623, false},
		{"fe80::1", "fe80::1", 623, false},
		{"10.0.0.1:0", "", 0, true},
		{"10.0.0.1:x", "", 0, true},
		{"10.0.0.1:99999", "", 0, true},
		{"10.0.0.300", "", 0, true},
		{"https://10.0.0.1", "", 0, true},
		{"10.0.0.1:623:1", "", 0, true},
		{"", "", 0, true},
	} {
		host, port, err := splitAddr(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && (host != tc.host || port != tc.port)) {
			t.Errorf("splitAddr(%q) = %q, %d, %v", tc.in, host, port, err)
		}
	}
}

// The password is cut out of error text, should a library ever echo it.
func TestRedact(t *testing.T) {
	err := redact(errors.New("login as admin/hunter2 failed"), "hunter2")
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "<redacted>") {
		t.Fatalf("redact: %v", err)
	}
	orig := errors.New("x")
	if redact(orig, "hunter2") != orig || redact(orig, "") != orig {
		t.Fatal("redact changed an error without the password")
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
