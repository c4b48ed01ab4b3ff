package redfish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/internal/redfishsim"
	"rackd/power"
	"rackd/power/powertest"
)

func newDriver(t *testing.T, opts Options) *Driver {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout == 0 {
		// The simulator shares a loaded CI machine; the tests' own
		// contexts bound the calls that are about time.
		opts.Timeout = 20 * time.Second
	}
	d := New(opts)
	t.Cleanup(func() { d.Close() })
	return d
}

func target(s *redfishsim.Sim) power.Target {
	return power.Target{Driver: "redfish", Address: s.URL, Username: s.User, Password: s.Password}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// quirkModes are the BMC behaviours every test of the driver's contract
// runs against.
var quirkModes = []struct {
	name   string
	quirks redfishsim.Quirks
}{
	{"plain", redfishsim.Quirks{}},
	{"if-match", redfishsim.Quirks{RequireIfMatch: true}},
	{"settings-object", redfishsim.Quirks{SettingsObject: true}},
	{"boot-mode-echo", redfishsim.Quirks{RequireBootMode: true}},
	{"slow-power", redfishsim.Quirks{PowerDelay: 300 * time.Millisecond}},
	{"flakes", redfishsim.Quirks{FlakeEvery: 3}},
	{"no-powercycle", redfishsim.Quirks{ResetTypes: []string{"On", "ForceOff", "GracefulShutdown"}}},
	{"no-forceoff", redfishsim.Quirks{ResetTypes: []string{"On", "GracefulShutdown", "PowerCycle"}}},
	{"basic-auth-only", redfishsim.Quirks{NoSessions: true}},
	{"all-at-once", redfishsim.Quirks{RequireIfMatch: true, SettingsObject: true, RequireBootMode: true,
		PowerDelay: 200 * time.Millisecond, FlakeEvery: 4, ResetTypes: []string{"On", "GracefulShutdown"}}},
}

func TestConformance(t *testing.T) {
	for _, m := range quirkModes {
		t.Run(m.name, func(t *testing.T) {
			d := newDriver(t, Options{})
			powertest.Conformance(t, func(t *testing.T) powertest.Subject {
				s := redfishsim.Start(t, redfishsim.Options{Quirks: m.quirks})
				tg := target(s)
				bad := tg
				bad.Password = "not-the-password"
				return powertest.Subject{
					Driver: d, Target: tg, BadPassword: &bad,
					Hang: func(t *testing.T) func() {
						s.Hang()
						return s.Resume
					},
				}
			})
		})
	}
}

// TestResetTypeChoice: what the BMC saw for each command, by what it
// allows.
func TestResetTypeChoice(t *testing.T) {
	for _, tc := range []struct {
		name     string
		allowed  []string
		graceful bool
		from     bool
		do       string
		want     []string
	}{
		{"off is ForceOff", nil, false, true, "off", []string{"ForceOff"}},
		{"graceful off", nil, true, true, "off", []string{"GracefulShutdown"}},
		{"graceful off without it", []string{"On", "ForceOff"}, true, true, "off", []string{"ForceOff"}},
		{"off without ForceOff", []string{"On", "GracefulShutdown"}, false, true, "off", []string{"GracefulShutdown"}},
		{"off when off", nil, false, false, "off", nil},
		{"on when on", nil, false, true, "on", nil},
		{"on", nil, false, false, "on", []string{"On"}},
		{"on by ForceOn", []string{"ForceOn", "ForceOff"}, false, false, "on", []string{"ForceOn"}},
		{"cycle", nil, false, true, "cycle", []string{"PowerCycle"}},
		{"cycle from off", nil, false, false, "cycle", []string{"On"}},
		{"cycle without PowerCycle", []string{"On", "ForceOff"}, false, true, "cycle", []string{"ForceOff", "On"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redfishsim.Start(t, redfishsim.Options{PowerOn: tc.from, Quirks: redfishsim.Quirks{ResetTypes: tc.allowed}})
			d := newDriver(t, Options{GracefulOff: tc.graceful})
			ctx := testCtx(t)
			var err error
			switch tc.do {
			case "on":
				err = d.PowerOn(ctx, target(s))
			case "off":
				err = d.PowerOff(ctx, target(s))
			case "cycle":
				err = d.PowerCycle(ctx, target(s))
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Stats().Resets; !slices.Equal(got, tc.want) {
				t.Fatalf("resets %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("nothing to power off with", func(t *testing.T) {
		s := redfishsim.Start(t, redfishsim.Options{PowerOn: true, Quirks: redfishsim.Quirks{ResetTypes: []string{"On", "Nmi"}}})
		d := newDriver(t, Options{})
		err := d.PowerOff(testCtx(t), target(s))
		if !errors.Is(err, power.ErrUnsupported) || !strings.Contains(err.Error(), "On, Nmi") {
			t.Fatalf("PowerOff = %v, want ErrUnsupported naming what the BMC allows", err)
		}
	})
}

// TestOneTimePXE: the override is Pxe, Once, in the machine's mode, and the
// next boot uses it.
func TestOneTimePXE(t *testing.T) {
	for _, tc := range []struct {
		name, simMode, targetMode, want string
		quirks                          redfishsim.Quirks
	}{
		{"echoes the BMC's mode", "Legacy", "", "Legacy", redfishsim.Quirks{RequireBootMode: true}},
		{"uefi as the machine needs", "Legacy", "uefi", "UEFI", redfishsim.Quirks{}},
		{"legacy through the settings object", "UEFI", "legacy", "Legacy", redfishsim.Quirks{SettingsObject: true, RequireIfMatch: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redfishsim.Start(t, redfishsim.Options{BootMode: tc.simMode, Quirks: tc.quirks})
			d := newDriver(t, Options{})
			tg := target(s)
			tg.BootMode = tc.targetMode
			ctx := testCtx(t)
			if err := d.SetNextBoot(ctx, tg, power.BootPXE); err != nil {
				t.Fatal(err)
			}
			b := s.Boot()
			if p := s.PendingBoot(); p != nil {
				b = *p
			}
			if b.Target != "Pxe" || b.Enabled != "Once" || b.Mode != tc.want {
				t.Fatalf("boot override %+v, want Pxe Once %s", b, tc.want)
			}
			if err := d.PowerOn(ctx, tg); err != nil {
				t.Fatal(err)
			}
			if last, _ := s.LastBoot(); last != "Pxe" {
				t.Fatalf("booted from %q, want Pxe", last)
			}
		})
	}
	t.Run("a BMC without Pxe", func(t *testing.T) {
		s := redfishsim.Start(t, redfishsim.Options{Quirks: redfishsim.Quirks{BootTargets: []string{"None", "Hdd"}}})
		d := newDriver(t, Options{})
		err := d.SetNextBoot(testCtx(t), target(s), power.BootPXE)
		if !errors.Is(err, power.ErrUnsupported) || !strings.Contains(err.Error(), "None, Hdd") {
			t.Fatalf("SetNextBoot(pxe) = %v, want ErrUnsupported naming the BMC's targets", err)
		}
	})
}

func TestWrongPassword(t *testing.T) {
	for _, q := range []redfishsim.Quirks{{}, {NoSessions: true}} {
		s := redfishsim.Start(t, redfishsim.Options{Quirks: q})
		d := newDriver(t, Options{})
		tg := target(s)
		tg.Password = "hunter2-wrong"
		_, err := d.Status(testCtx(t), tg)
		if !errors.Is(err, power.ErrAuth) || power.ErrorKind(err) != "auth" {
			t.Fatalf("Status with a wrong password = %v, want ErrAuth", err)
		}
		if !strings.Contains(err.Error(), "wrong user or password") || strings.Contains(err.Error(), tg.Password) {
			t.Fatalf("error text %q: want it to say wrong user or password, without the password", err)
		}
		before := s.Stats().Unauthorized
		// Asked again at once: refused without reaching the BMC.
		if _, err := d.Status(testCtx(t), tg); !errors.Is(err, power.ErrAuth) || !strings.Contains(err.Error(), "not asking again") {
			t.Fatalf("second Status = %v", err)
		}
		if s.Stats().Unauthorized != before {
			t.Fatal("the second refused login reached the BMC")
		}
	}
}

// TestCertificatePinning: trust on first use (reported through Pin), then
// enforced; a changed certificate is refused naming both fingerprints; the
// explicit opt-out checks nothing.
func TestCertificatePinning(t *testing.T) {
	s := redfishsim.Start(t, redfishsim.Options{})
	d := newDriver(t, Options{})
	ctx := testCtx(t)
	var mu sync.Mutex
	var pinned []string
	tg := target(s)
	tg.Pin = func(_ context.Context, fp string) error {
		mu.Lock()
		defer mu.Unlock()
		pinned = append(pinned, fp)
		return nil
	}
	if _, err := d.Status(ctx, tg); err != nil {
		t.Fatal(err)
	}
	first := s.Fingerprint()
	if !slices.Equal(pinned, []string{first}) {
		t.Fatalf("pinned %v, want [%s]", pinned, first)
	}
	// As the store gives it back: pinned.
	tg.Pin, tg.TLSFingerprint = nil, strings.ToUpper(first)
	if _, err := d.Status(ctx, tg); err != nil {
		t.Fatalf("Status with the pinned certificate: %v", err)
	}
	if err := s.RotateCertificate(); err != nil {
		t.Fatal(err)
	}
	_, err := d.Status(ctx, tg)
	if !errors.Is(err, power.ErrAuth) || !strings.Contains(err.Error(), first) || !strings.Contains(err.Error(), s.Fingerprint()) ||
		!strings.Contains(err.Error(), "certificate changed") {
		t.Fatalf("Status after the certificate changed = %v; want a refusal naming both fingerprints", err)
	}
	if err := d.PowerOn(ctx, tg); err == nil || s.Power() != "Off" {
		t.Fatalf("PowerOn through a changed certificate = %v, power %s", err, s.Power())
	}
	// The opt-out.
	tg.TLSFingerprint, tg.InsecureTLS = "", true
	if err := d.PowerOn(ctx, tg); err != nil {
		t.Fatalf("PowerOn with InsecureTLS: %v", err)
	}
	// No Pin and no fingerprint: the driver pins by itself.
	d2 := newDriver(t, Options{})
	tg.InsecureTLS = false
	if _, err := d2.Status(ctx, tg); err != nil {
		t.Fatal(err)
	}
	s.RotateCertificate()
	if _, err := d2.Status(ctx, tg); !errors.Is(err, power.ErrAuth) || !strings.Contains(err.Error(), "certificate changed") {
		t.Fatalf("driver-pinned certificate changed: %v", err)
	}
	// A Pin that fails refuses the command.
	d3 := newDriver(t, Options{})
	tg.Pin = func(context.Context, string) error { return errors.New("store is read-only") }
	if err := d3.PowerOff(ctx, tg); err == nil || !strings.Contains(err.Error(), "store is read-only") {
		t.Fatalf("PowerOff with a failing Pin = %v", err)
	}
	if s.Power() != "On" {
		t.Fatal("the command ran although its certificate could not be recorded")
	}
}

// TestSessions: one session per BMC and user, reused; replaced when the BMC
// forgets it; deleted on Close; basic auth where there are none.
func TestSessions(t *testing.T) {
	s := redfishsim.Start(t, redfishsim.Options{})
	d := New(Options{Logger: slog.New(slog.DiscardHandler), Timeout: 20 * time.Second})
	ctx := testCtx(t)
	for range 5 {
		if _, err := d.Status(ctx, target(s)); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.SessionsCreated != 1 || st.BasicAuth != 0 || s.Sessions() != 1 {
		t.Fatalf("five calls: %+v, %d open", st, s.Sessions())
	}
	s.ForgetSessions()
	if _, err := d.Status(ctx, target(s)); err != nil {
		t.Fatalf("Status after the BMC forgot the session: %v", err)
	}
	if st := s.Stats(); st.SessionsCreated != 2 {
		t.Fatalf("after a forgotten session: %+v", st)
	}
	d.Close()
	if n := s.Sessions(); n != 0 {
		t.Fatalf("%d sessions open after Close", n)
	}
	if _, err := d.Status(ctx, target(s)); err == nil {
		t.Fatal("Status after Close succeeded")
	}

	nb := redfishsim.Start(t, redfishsim.Options{Quirks: redfishsim.Quirks{NoSessions: true}})
	d2 := newDriver(t, Options{})
	if err := d2.PowerOn(ctx, target(nb)); err != nil {
		t.Fatal(err)
	}
	if st := nb.Stats(); st.BasicAuth == 0 || d2.Stats().BasicFallback != 1 {
		t.Fatalf("basic fallback: %+v, %+v", st, d2.Stats())
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in, base, system, err string
	}{
		{in: "10.0.0.1", base: "https://10.0.0.1"},
		{in: "10.0.0.1:8443", base: "https://10.0.0.1:8443"},
		{in: "https://bmc.example/", base: "https://bmc.example"},
		{in: "https://[fd00::1]:443/redfish/v1/Systems/2", base: "https://[fd00::1]:443", system: "/redfish/v1/Systems/2"},
		{in: "http://10.0.0.1", err: "only https"},
		{in: "https://u:p@10.0.0.1", err: "want https"},
		{in: "https://10.0.0.1/other", err: "may only name a system"},
		{in: "https://10.0.0.1/redfish/v1/Systems/1/Bios", err: "may only name a system"},
		{in: "", err: "no BMC address"},
		{in: "10.0.0.1:99999", err: "want a number from 1 to 65535"},
		{in: "https://10.0.0.1:0", err: "want a number from 1 to 65535"},
		{in: "https://bmc_ex ample", err: "invalid character"},
		{in: "https://10.0.0.300", err: "neither an IP address nor a DNS name"},
	} {
		ep, err := parseAddress(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseAddress(%q) = %v, want error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || ep.base.String() != tc.base || ep.system != tc.system {
			t.Errorf("parseAddress(%q) = %v %q, %v; want %s %q", tc.in, ep.base, ep.system, err, tc.base, tc.system)
		}
	}
	for in, want := range map[string]string{
		"SHA256:AB:" + strings.Repeat("cd:", 30) + "EF": "ab" + strings.Repeat("cd", 30) + "ef",
		strings.Repeat("0", 64):                         strings.Repeat("0", 64),
	} {
		if got, err := power.NormalizeFingerprint(in); err != nil || got != want {
			t.Errorf("power.NormalizeFingerprint(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := power.NormalizeFingerprint("abc"); err == nil {
		t.Error("a short fingerprint was accepted")
	}
}

// hostile is a BMC that answers every authenticated request with fn.
func hostile(t *testing.T, fn http.HandlerFunc) power.Target {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redfish/v1/":
			fmt.Fprint(w, `{"Systems":{"@odata.id":"/redfish/v1/Systems"}}`)
		case "/redfish/v1/SessionService/Sessions":
			w.WriteHeader(http.StatusMethodNotAllowed)
		case "/redfish/v1/Systems":
			fmt.Fprint(w, `{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}]}`)
		default:
			fn(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return power.Target{Driver: "redfish", Address: srv.URL, Username: "u", Password: "hostile-secret", InsecureTLS: true}
}

// TestHostileAnswers: malformed JSON, redirects, huge bodies, links to
// other hosts, a BMC that hangs up mid-answer: clear errors, nothing stuck.
func TestHostileAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   http.HandlerFunc
		want string
	}{
		{"malformed JSON", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"PowerState": "On"`) }, "malformed JSON"},
		{"not a power state", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"PowerState": "Sideways"}`) }, `PowerState "Sideways"`},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/redfish/v1/Systems/1", http.StatusFound)
		}, "redirects are not followed"},
		{"100 MB", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"PowerState":"On","x":"`))
			chunk := []byte(strings.Repeat("a", 1<<20))
			for range 100 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}, "larger than"},
		{"a link to another host", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"@odata.id":"https://evil.example/redfish/v1/Systems/1","PowerState":"On"}`)
		}, "not a Redfish path"},
		{"hangs up mid-answer", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.Write([]byte(`{"PowerState":`))
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}, "unexpected EOF"},
		{"500 with a Redfish message", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
			fmt.Fprint(w, `{"error":{"code":"Base.1.8.InternalError","message":"x","@Message.ExtendedInfo":[{"MessageId":"Base.1.8.InternalError","Message":"the BMC is having a bad day"}]}}`)
		}, "HTTP 500: the BMC is having a bad day"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, Options{Timeout: 10 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := d.Status(ctx, hostile(t, tc.fn))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Status = %v, want an error saying %q", err, tc.want)
			}
			if ctx.Err() != nil {
				t.Fatal("the call ran to the test's deadline")
			}
		})
	}
}

// TestNotRedfish: a port that is no TLS server, and one that is closed.
func TestNotRedfish(t *testing.T) {
	d := newDriver(t, Options{Timeout: 5 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = d.Status(testCtx(t), power.Target{Address: addr, Username: "u", Password: "some-secret"})
	if !errors.Is(err, power.ErrUnreachable) {
		t.Fatalf("Status of a closed port = %v, want ErrUnreachable", err)
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	_, err = d.Status(testCtx(t), power.Target{Address: strings.TrimPrefix(plain.URL, "http://"), Username: "u", Password: "some-secret"})
	if !errors.Is(err, power.ErrUnreachable) || !strings.Contains(err.Error(), "not a TLS server") {
		t.Fatalf("Status of a plain-HTTP port = %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"@odata.id":"/redfish/v1/Systems/1","PowerState":"On","Boot":{"BootSourceOverrideMode":"UEFI","BootSourceOverrideTarget@Redfish.AllowableValues":["Pxe"]},"Actions":{"#ComputerSystem.Reset":{"target":"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset","ResetType@Redfish.AllowableValues":["On","ForceOff"]}},"@Redfish.Settings":{"SettingsObject":{"@odata.id":"/redfish/v1/Systems/1/Settings"}}}`))
	f.Add([]byte(`{"Systems":{"@odata.id":"/redfish/v1/Systems"},"Links":{"Sessions":{"@odata.id":"/redfish/v1/SessionService/Sessions"}}}`))
	f.Add([]byte(`{"Members":[{"@odata.id":"/redfish/v1/Systems/1"}]}`))
	f.Add([]byte(`{"error":{"message":"m","@Message.ExtendedInfo":[{"MessageId":"Base.1.8.X","Message":"y"}]}}`))
	f.Add([]byte(`{"@odata.id":"//evil/redfish","PowerState":7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := decodeSystem(b); err == nil {
			for _, p := range []string{s.path, s.Actions.Reset.Target, s.Settings.SettingsObject.ID} {
				if checkLink("x", p) != nil {
					t.Fatalf("decoded system kept a bad link %q", p)
				}
			}
			stateOf(s.PowerState)
			chooseReset(s.Actions.Reset.Allowed, "On", "ForceOn")
		}
		if r, err := decodeServiceRoot(b); err == nil && (r.Systems.ID == "" || checkLink("x", r.Systems.ID) != nil) {
			t.Fatalf("service root with a bad Systems link %q accepted", r.Systems.ID)
		}
		if c, err := decodeCollection(b); err == nil {
			for _, m := range c.Members {
				if m.ID == "" || checkLink("x", m.ID) != nil {
					t.Fatalf("collection member %q accepted", m.ID)
				}
			}
		}
		if m := redfishMessage(b); len(m) > 303 || strings.ContainsAny(m, "\n\r") {
			t.Fatalf("message %q: too long or several lines", m)
		}
	})
}
