package redfishsim

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// The simulator is checked against two independent Redfish clients from
// Debian: DMTF's redfishtool and Ironic's sushy. Where they disagree with
// it, the simulator is wrong.

func redfishtool(t *testing.T, s *Sim, user, password string, args ...string) (string, error) {
	t.Helper()
	bin := netnstest.Tool(t, "redfishtool")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{"-r", s.Addr, "-u", user, "-p", password, "-S", "Always", "-T", "10"}, args...)
	out, err := exec.CommandContext(ctx, bin, argv...).CombinedOutput()
	return string(out), err
}

func TestRedfishtool(t *testing.T) {
	for _, tc := range []struct {
		name   string
		quirks Quirks
		auth   string
	}{
		{name: "plain", auth: "Basic"},
		{name: "session", auth: "Session"},
		{name: "if-match", quirks: Quirks{RequireIfMatch: true}, auth: "Basic"},
		{name: "slow-power", quirks: Quirks{PowerDelay: 200 * time.Millisecond}, auth: "Session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Start(t, Options{Quirks: tc.quirks})
			run := func(args ...string) string {
				t.Helper()
				out, err := redfishtool(t, s, s.User, s.Password, append([]string{"-A", tc.auth}, args...)...)
				if err != nil {
					t.Fatalf("redfishtool %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			run("Systems", "-1", "reset", "On")
			waitPower(t, s, "On")
			run("Systems", "-1", "setBootOverride", "Once", "Pxe")
			if b := s.Boot(); b.Enabled != "Once" || b.Target != "Pxe" {
				t.Fatalf("after redfishtool setBootOverride Once Pxe: %+v", b)
			}
			run("Systems", "-1", "reset", "PowerCycle")
			waitPower(t, s, "On")
			if last, _ := s.LastBoot(); last != "Pxe" {
				t.Fatalf("the cycle booted from %q, want the one-time Pxe", last)
			}
			run("Systems", "-1", "reset", "ForceOff")
			waitPower(t, s, "Off")
			out := run("raw", "GET", "/redfish/v1/Systems/1")
			var sys struct {
				PowerState string
				Boot       struct{ BootSourceOverrideEnabled string }
			}
			if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &sys); err != nil {
				t.Fatalf("redfishtool raw GET: %v\n%s", err, out)
			}
			if sys.PowerState != "Off" || sys.Boot.BootSourceOverrideEnabled != "Disabled" {
				t.Fatalf("raw GET says %+v, want Off and the override used up", sys)
			}
			st := s.Stats()
			if !slices.Equal(st.Resets, []string{"On", "PowerCycle", "ForceOff"}) {
				t.Fatalf("resets the BMC saw: %v", st.Resets)
			}
			if tc.auth == "Session" {
				if st.SessionsCreated == 0 || st.BasicAuth != 0 {
					t.Fatalf("redfishtool -A Session: %+v", st)
				}
				if n := s.Sessions(); n != 0 {
					t.Errorf("redfishtool left %d sessions open", n)
				}
			}
			if tc.quirks.RequireIfMatch && st.PatchesWithMatch == 0 {
				t.Fatal("the PATCH passed without If-Match")
			}
		})
	}

	t.Run("restricted-reset-types", func(t *testing.T) {
		s := Start(t, Options{PowerOn: true, Quirks: Quirks{ResetTypes: []string{"On", "GracefulShutdown"}}})
		out, err := redfishtool(t, s, s.User, s.Password, "Systems", "-1", "reset", "PowerCycle")
		if err == nil {
			t.Fatalf("redfishtool PowerCycle on a BMC without it succeeded:\n%s", out)
		}
		if !strings.Contains(out, "not supported") {
			t.Errorf("redfishtool's refusal: %s", out)
		}
		if out, err := redfishtool(t, s, s.User, s.Password, "Systems", "-1", "reset", "GracefulShutdown"); err != nil {
			t.Fatalf("redfishtool GracefulShutdown: %v\n%s", err, out)
		}
		waitPower(t, s, "Off")
		if st := s.Stats(); !slices.Equal(st.Resets, []string{"GracefulShutdown"}) {
			t.Fatalf("resets the BMC saw: %v", st.Resets)
		}
	})

	t.Run("wrong-password", func(t *testing.T) {
		s := Start(t, Options{})
		for _, auth := range []string{"Basic", "Session"} {
			out, err := redfishtool(t, s, s.User, "wrong", "-A", auth, "Systems", "-1", "reset", "On")
			if err == nil {
				t.Fatalf("redfishtool -A %s with a wrong password succeeded:\n%s", auth, out)
			}
		}
		if st := s.Stats(); st.Unauthorized < 2 || len(st.Resets) != 0 || s.Power() != "Off" {
			t.Fatalf("after refused logins: %+v, power %s", st, s.Power())
		}
	})
}

// sushyScript drives one system with sushy, which checks the BMC's
// certificate against the CA file it is given: each argument is reset:TYPE,
// boot:TARGET,ENABLED,MODE (MODE may be empty) or state; it prints what
// state saw as JSON.
const sushyScript = `
import json, sys, warnings
warnings.filterwarnings("ignore")
import sushy
url, user, password, cafile = sys.argv[1:5]
root = sushy.Sushy(url + "/redfish/v1", username=user, password=password, verify=cafile)
system = root.get_system("/redfish/v1/Systems/1")
out = {}
for cmd in sys.argv[5:]:
    if cmd.startswith("reset:"):
        system.reset_system(sushy.ResetType(cmd[len("reset:"):]))
    elif cmd.startswith("boot:"):
        target, enabled, mode = cmd[len("boot:"):].split(",")
        system.set_system_boot_options(target=sushy.BootSource(target), enabled=sushy.BootSourceOverrideEnabled(enabled),
                                       mode=sushy.BootSourceOverrideMode(mode) if mode else None)
    elif cmd == "state":
        system.refresh()
        out["power"] = str(system.power_state.value)
        out["allowed"] = sorted(str(v.value) for v in system.get_allowed_reset_system_values())
        out["boot_target"] = str(system.boot.target.value) if system.boot.target else ""
    system.refresh()
print(json.dumps(out))
`

type sushyState struct {
	Power      string   `json:"power"`
	Allowed    []string `json:"allowed"`
	BootTarget string   `json:"boot_target"`
}

func sushy(t *testing.T, s *Sim, password string, cmds ...string) (sushyState, string, error) {
	t.Helper()
	// Debian's python3, the one python3-sushy installs into (a python3
	// earlier in PATH may be another).
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = netnstest.Tool(t, "python3")
	}
	if err := exec.Command(py, "-c", "import sushy").Run(); err != nil {
		netnstest.Tool(t, "sushy (Debian package python3-sushy)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ca := filepath.Join(t.TempDir(), "bmc.pem")
	if err := os.WriteFile(ca, s.CertificatePEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", sushyScript, s.URL, s.User, password, ca}, cmds...)...)
	// requests lets these override the CA file sushy passes.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REQUESTS_CA_BUNDLE=") && !strings.HasPrefix(kv, "CURL_CA_BUNDLE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	var st sushyState
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return st, string(ee.Stderr), err
		}
		return st, "", err
	}
	if jerr := json.Unmarshal(out, &st); jerr != nil {
		return st, string(out), jerr
	}
	return st, string(out), nil
}

func TestSushy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		quirks Quirks
		mode   string
	}{
		{name: "plain"},
		{name: "if-match", quirks: Quirks{RequireIfMatch: true}},
		{name: "settings-object-and-mode-echo", quirks: Quirks{SettingsObject: true, RequireBootMode: true}, mode: "UEFI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Start(t, Options{Quirks: tc.quirks})
			st, out, err := sushy(t, s, s.Password, "state", "boot:Pxe,Once,"+tc.mode, "reset:On", "state")
			if err != nil {
				t.Fatalf("sushy: %v\n%s", err, out)
			}
			if st.Power != "on" && st.Power != "On" {
				t.Fatalf("sushy saw power %q after reset On", st.Power)
			}
			if !slices.Equal(st.Allowed, slices.Sorted(slices.Values(AllResetTypes))) {
				t.Fatalf("sushy's allowed reset values %v", st.Allowed)
			}
			if s.Power() != "On" {
				t.Fatalf("BMC power %s after sushy reset On", s.Power())
			}
			if last, _ := s.LastBoot(); last != "Pxe" {
				t.Fatalf("boot after sushy's override: %q, want Pxe", last)
			}
			if _, out, err := sushy(t, s, s.Password, "reset:ForceOff"); err != nil {
				t.Fatalf("sushy ForceOff: %v\n%s", err, out)
			}
			if s.Power() != "Off" {
				t.Fatalf("BMC power %s after sushy ForceOff", s.Power())
			}
			if tc.quirks.RequireIfMatch && s.Stats().PatchesWithMatch == 0 {
				t.Fatal("the PATCH passed without If-Match")
			}
		})
	}

	t.Run("restricted-reset-types", func(t *testing.T) {
		s := Start(t, Options{PowerOn: true, Quirks: Quirks{ResetTypes: []string{"On", "GracefulShutdown"}}})
		st, out, err := sushy(t, s, s.Password, "state")
		if err != nil {
			t.Fatalf("sushy: %v\n%s", err, out)
		}
		if !slices.Equal(st.Allowed, []string{"GracefulShutdown", "On"}) {
			t.Fatalf("sushy's allowed reset values %v", st.Allowed)
		}
		if _, out, err := sushy(t, s, s.Password, "reset:ForceOff"); err == nil {
			t.Fatalf("sushy ForceOff on a BMC without it succeeded: %s", out)
		}
		if len(s.Stats().Resets) != 0 || s.Power() != "On" {
			t.Fatalf("a refused reset reached the BMC: %v", s.Stats().Resets)
		}
	})

	t.Run("wrong-password", func(t *testing.T) {
		s := Start(t, Options{})
		if _, out, err := sushy(t, s, "wrong", "reset:On"); err == nil {
			t.Fatalf("sushy with a wrong password succeeded: %s", out)
		} else if !strings.Contains(out, "401") && !strings.Contains(strings.ToLower(out), "auth") {
			t.Errorf("sushy's error does not say authentication: %s", out)
		}
		if s.Power() != "Off" {
			t.Fatal("power changed")
		}
	})
}

func waitPower(t *testing.T, s *Sim, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Power() != want {
		if time.Now().After(deadline) {
			t.Fatalf("power %s, want %s", s.Power(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
