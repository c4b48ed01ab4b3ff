package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/ipmisim"
	"rackd/internal/seal"
	"rackd/power/powertest"
	"rackd/store"
)

// TestPowerRealBMCSealedPassword: a machine's BMC password is in neither
// the API's answers, the database file nor a backup, and the power queue
// still drives a real BMC (ipmi_sim) with it, before and after a key
// rotation.
func TestPowerRealBMCSealedPassword(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	// A password that no other byte of the database spells by chance.
	sim := ipmisim.Start(t, ipmisim.Options{Password: "Zq8-bmc-pw-41x"})
	ta := startAgent(t, func(c *Config) {
		c.Power.VerifyInterval = Duration(200 * time.Millisecond)
		c.Power.VerifyDeadline = Duration(15 * time.Second)
		c.Power.CommandTimeout = Duration(5 * time.Second)
		c.Power.MinInterval = 0
	})
	ta.addMachine(t, api.CreateMachine{Hostname: "s", MACs: []string{"52:54:00:00:02:01"}, State: "READY",
		Power: &api.PowerParams{Driver: "ipmi", Address: sim.Addr, Username: sim.User, Password: sim.Password, CipherSuite: 3}})
	pw := []byte(sim.Password)
	if len(pw) < 6 {
		t.Fatalf("the simulator's password %q is too short to grep for", pw)
	}
	noPassword := func(what string, b []byte) {
		t.Helper()
		if bytes.Contains(b, pw) {
			t.Errorf("%s holds the BMC password", what)
		}
	}
	_, raw := ta.call(t, ta.admin, "GET", "/api/v1/machines/s", nil, nil)
	noPassword("GET /api/v1/machines/s", raw)
	if bytes.Contains(raw, []byte(`"secrets"`)) {
		t.Errorf("the API shows the sealed secrets: %s", raw)
	}
	_, raw = ta.call(t, ta.admin, "GET", "/api/v1/machines", nil, nil)
	noPassword("GET /api/v1/machines", raw)

	power := func(action string, on bool) {
		t.Helper()
		var r api.PowerRequest
		if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/s/power", api.PowerAction{Action: action}, &r); status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", action, status, raw)
		}
		if r := waitPowerLong(t, ta, r.ID); r.State != "done" {
			t.Fatalf("%s with the sealed password: %+v", action, r)
		}
		if got, err := sim.Power(); err != nil || got != on {
			t.Fatalf("after %s the simulator's power is %v (%v)", action, got, err)
		}
	}
	power("on", true)

	var rot api.KeyRotation
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/keys/rotate", nil, &rot); status != http.StatusOK {
		t.Fatalf("rotate: %d %s", status, raw)
	}
	ring, err := seal.File{Path: ta.SecretsKeyPath()}.Load()
	if err != nil || rot.Resealed != 1 || len(rot.Retired) != 1 || rot.Key != ring.Current().String() || len(ring.IDs()) != 1 ||
		rot.File != ta.SecretsKeyPath() {
		t.Fatalf("rotation %+v; keyring %v %v", rot, ring.IDs(), err)
	}
	if fi, err := os.Stat(ta.SecretsKeyPath()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets.key: %v %v", fi.Mode(), err)
	}
	power("off", false)

	status, backup := ta.call(t, ta.admin, "GET", "/api/v1/backup", nil, nil)
	if status != http.StatusOK || len(backup) == 0 {
		t.Fatalf("backup: %d", status)
	}
	noPassword("the backup", backup)
	if !bytes.Contains(backup, []byte(`"secrets":{"power.password":`)) {
		t.Error("the backup holds no sealed password: the grep above proves nothing")
	}
	file, err := os.ReadFile(filepath.Join(ta.cfg.StateDir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	noPassword("the database file", file)

	// Restored on another host: without the keyring file the start is
	// refused, naming the file; with it, the password opens.
	restore := DefaultConfig()
	restore.StateDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(restore.StateDir, store.FileName), backup, 0o600); err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	missing := filepath.Join(restore.StateDir, SecretsKeyFile)
	if _, err := New(restore, discard, WithFakePowerDriver(powertest.Driver)); err == nil || !strings.Contains(err.Error(), missing+" is missing") ||
		!strings.Contains(err.Error(), "machine(s) (s)") {
		t.Fatalf("restore without %s: %v", SecretsKeyFile, err)
	}
	keyring, _ := os.ReadFile(ta.SecretsKeyPath())
	os.WriteFile(missing, keyring, 0o600)
	b, err := New(restore, discard, WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatalf("restore with %s: %v", SecretsKeyFile, err)
	}
	defer b.Close()
	if m, err := b.store.MachineForPower("s"); err != nil || m.Power.Password != sim.Password {
		t.Fatalf("restored with the keyring: %q %v", m.Power.Password, err)
	}

	// A user may not rotate.
	tok := ta.addUser(t, "u", false)
	status, raw = ta.call(t, tok, "POST", "/api/v1/keys/rotate", nil, nil)
	wantError(t, status, raw, http.StatusForbidden, api.CodeForbidden)
}

// TestSecretsKeyMissingAtStart: a state directory whose secrets.key is gone
// (a database restored alone) does not start, and says which file is
// missing and whose passwords it cannot open; with accept_lost_secrets it
// starts, and the power read of such a machine names it.
func TestSecretsKeyMissingAtStart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := New(cfg, log, WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.CreateMachine(context.Background(), store.System, store.NewMachine{Hostname: "node7",
		MACs: []string{"52:54:00:00:02:07"}, Power: store.PowerParams{Driver: "ipmi", Address: "10.0.0.7", Password: "x-Secret-1"}}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	key := filepath.Join(cfg.StateDir, SecretsKeyFile)
	saved, err := os.ReadFile(key)
	if err != nil {
		t.Fatalf("no %s after the first start: %v", SecretsKeyFile, err)
	}
	os.Remove(key)
	_, err = New(cfg, log, WithFakePowerDriver(powertest.Driver))
	for _, want := range []string{key + " is missing", "node7", "--accept-lost-secrets"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("start without %s: %v (want %q)", SecretsKeyFile, err, want)
		}
	}
	// Put back, it starts and opens the password.
	os.WriteFile(key, saved, 0o600)
	a, err = New(cfg, log, WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := a.store.MachineForPower("node7"); err != nil || m.Power.Password != "x-Secret-1" {
		t.Fatalf("with the key put back: %q %v", m.Power.Password, err)
	}
	a.Close()
	os.Remove(key)
	cfg.Store.AcceptLostSecrets = true
	a, err = New(cfg, log, WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatalf("start accepting the lost secrets: %v", err)
	}
	defer a.Close()
	_, err = a.store.MachineForPower("node7")
	if !errors.Is(err, store.ErrSecretUnreadable) || !strings.Contains(err.Error(), "machine node7") {
		t.Fatalf("power read of a lost password: %v", err)
	}
}
