package agent_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rackd/agent"
	"rackd/agent/cli"
	"rackd/internal/etcdtest"
	"rackd/power/powertest"
	"rackd/store"
)

// TestStoreOnEtcd: an agent's database file, with a machine whose BMC
// password is sealed, moves into a real 3-member etcd cluster with `rackd
// store migrate`; an agent started on the cluster (store.url) has the
// machine and opens its password with the state directory's secrets.key;
// it writes there and not into a file; a second migration into the same
// cluster is refused.
func TestStoreOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, 3)
	url := "etcd://" + strings.Join(trimScheme(c.Endpoints()), ",")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()

	cfg := agent.DefaultConfig()
	cfg.StateDir = t.TempDir()
	a, err := agent.New(cfg, log, agent.WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store().CreateMachine(ctx, store.System, store.NewMachine{Hostname: "web1", MACs: []string{"52:54:00:00:e7:01"},
		State: store.StateReady, Power: store.PowerParams{Driver: "ipmi", Address: "10.0.0.9", Username: "admin", Password: "s3cret-bmc"}}); err != nil {
		t.Fatal(err)
	}
	a.Close()

	migrate := func() (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(ctx, []string{"store", "migrate", "--from", filepath.Join(cfg.StateDir, store.FileName), "--to", url}, &out, &errOut, nil)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := migrate()
	if code != 0 || !strings.Contains(out, "Checked: every invariant holds") || !strings.Contains(out, "(1 machines)") {
		t.Fatalf("store migrate: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("store migrate:\n%s", out)

	// An agent on the cluster, with the same keys in its state directory.
	cfg2 := agent.DefaultConfig()
	cfg2.StateDir = t.TempDir()
	for _, f := range []string{agent.SecretsKeyFile, "credential.key"} {
		b, err := os.ReadFile(filepath.Join(cfg.StateDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg2.StateDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg2.Store.URL = url
	b, err := agent.New(cfg2, log, agent.WithFakePowerDriver(powertest.Driver))
	if err != nil {
		t.Fatalf("agent on etcd: %v", err)
	}
	defer b.Close()
	m, err := b.Store().MachineForPower("web1")
	if err != nil {
		t.Fatalf("the migrated machine: %v", err)
	}
	if m.Power.Password != "s3cret-bmc" {
		t.Errorf("the migrated BMC password opens as %q", m.Power.Password)
	}
	if _, err := b.Store().CreateMachine(ctx, store.System, store.NewMachine{Hostname: "web2", MACs: []string{"52:54:00:00:e7:02"}}); err != nil {
		t.Fatalf("a write on etcd: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg2.StateDir, store.FileName)); err == nil {
		t.Error("the agent on etcd made a database file")
	}
	if err := b.Store().Check(); err != nil {
		t.Error(err)
	}
	if code, out, errOut := migrate(); code == 0 || !strings.Contains(errOut, "already holds rackd data") {
		t.Errorf("a second migration into the same cluster: exit %d\n%s%s", code, out, errOut)
	}
}

func trimScheme(eps []string) []string {
	var out []string
	for _, e := range eps {
		out = append(out, strings.TrimPrefix(e, "http://"))
	}
	return out
}
