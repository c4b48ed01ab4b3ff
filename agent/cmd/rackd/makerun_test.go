package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeRunConfig: `make run CONFIG=FILE` runs rackd serve on that
// configuration file, whose state directory and address then hold (STATE
// and LISTEN, given too, win). The command make would run is read with
// make -n and run with this test's binary: rackd serves from the file's
// state directory.
func TestMakeRunConfig(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	state := t.TempDir()
	conf := filepath.Join(t.TempDir(), "rackd.toml")
	if err := os.WriteFile(conf, []byte("state_dir = \""+state+"\"\nlisten = \"127.0.0.1:0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serveLine := func(args ...string) []string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-n", "-C", "../../..", "run"}, args...)...)
		cmd.Env = withoutEnv(os.Environ(), "STATE", "LISTEN", "CONFIG")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run %v: %v\n%s", args, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "./bin/rackd" && f[1] == "serve" {
				return f[2:]
			}
		}
		t.Fatalf("make -n run %v runs no ./bin/rackd serve:\n%s", args, out)
		return nil
	}
	got := serveLine("CONFIG=" + conf)
	if strings.Join(got, " ") != "--config "+conf {
		t.Errorf("make run CONFIG=%s runs rackd serve %v, want --config %s alone (the file's state_dir and listen hold)", conf, got, conf)
	}
	if got := serveLine("CONFIG="+conf, "STATE=/elsewhere"); strings.Join(got, " ") != "--config "+conf+" --state-dir /elsewhere" {
		t.Errorf("with STATE too: rackd serve %v", got)
	}
	if got := serveLine(); strings.Join(got, " ") != "--state-dir ./var --listen 127.0.0.1:5240" {
		t.Errorf("make run without CONFIG: rackd serve %v", got)
	}
	// launchDaemon adds --state-dir "" (no flag: the file's holds) and
	// --listen 127.0.0.1:0 (the file's own).
	d := launchDaemon(t, nil, "", got...)
	if !strings.Contains(d.stderr.String(), `"state_dir":"`+state+`"`) {
		t.Errorf("rackd did not serve from the configuration's state directory %s:\n%s", state, d.stderr.String())
	}
	adminToken(t, state)
	d.stop(t)
}

// withoutEnv is env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
