package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
	"rackd/store"
)

// runCLI runs a rackd client verb against d with the environment an operator
// would have, and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, d *daemon, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(rackdBinary(t), args...)
	cmd.Env = append(append(os.Environ(), "RACKD_URL="+d.url), env...)
	var out, errb netnstest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// mustCLI is runCLI for a verb that must succeed: it fails the test with the
// verb's output otherwise, and returns its stdout.
func mustCLI(t *testing.T, d *daemon, env []string, args ...string) string {
	t.Helper()
	code, out, errs := runCLI(t, d, env, args...)
	if code != 0 {
		t.Fatalf("rackd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// TestCLIAgainstDaemon drives the CLI with the real binary:
// the CLI finds the admin token in the state directory, adds machines and a
// user, allocates and hands over, and takes an online backup while writers
// keep writing.
func TestCLIAgainstDaemon(t *testing.T) {
	state := t.TempDir()
	d := startDaemon(t, state)
	asAdmin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	must := func(env []string, args ...string) string { t.Helper(); return mustCLI(t, d, env, args...) }
	for i := 1; i <= 3; i++ {
		must(asAdmin, "machines", "add", "--hostname", fmt.Sprintf("node%02d", i), "--mac", fmt.Sprintf("52:54:00:00:00:%02x", i),
			"--cpu", "8", "--memory-mb", "16384", "--state", "READY")
	}
	if out := must(asAdmin, "machines", "list"); !strings.Contains(out, "node03") || !strings.Contains(out, "READY") {
		t.Fatalf("machines list:\n%s", out)
	}
	var user api.User
	if err := json.Unmarshal([]byte(must(asAdmin, "users", "add", "installer", "--json")), &user); err != nil || user.Token == "" {
		t.Fatalf("users add --json: %v %+v", err, user)
	}
	asInstaller := []string{"RACKD_TOKEN=" + user.Token}
	var alloc api.Allocation
	if err := json.Unmarshal([]byte(must(asInstaller, "allocate", "--name", "node01", "--agent-name", "U", "--json")), &alloc); err != nil || alloc.Token == "" {
		t.Fatalf("allocate: %v %+v", err, alloc)
	}
	must(asInstaller, "allocate", "--name", "node01", "--agent-name", "U")
	code, _, errs := runCLI(t, d, asInstaller, "allocate", "--name", "node01", "--agent-name", "V")
	if code != 1 || !strings.Contains(errs, "allocated") {
		t.Fatalf("allocate as V: exit %d, %q; want exit 1 saying allocated", code, errs)
	}
	must(asAdmin, "allocate", "--name", "node01", "--agent-name", "V", "--token", alloc.Token)
	if out := must(asAdmin, "machines", "show", "node01"); !strings.Contains(out, "adopt") {
		t.Fatalf("machines show lacks the adoption:\n%s", out)
	}
	code, _, errs = runCLI(t, d, asAdmin, "machines", "deploy", "node02")
	if code != 1 || !strings.Contains(errs, "READY -> DEPLOYING") {
		t.Fatalf("illegal deploy: exit %d, %q", code, errs)
	}
	if code, _, _ := runCLI(t, d, asAdmin, "machines", "frobnicate", "node02"); code != 2 {
		t.Fatalf("unknown verb: exit %d, want 2", code)
	}

	// An online backup while writers keep committing.
	token := adminToken(t, state)
	client := &http.Client{Timeout: 10 * time.Second}
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		written atomic.Int64
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && i < 500; i++ {
				status, _, err := d.api(client, token, "POST", "/api/v1/machines", api.CreateMachine{
					Hostname: fmt.Sprintf("w%d-%d", w, i), MACs: []string{fmt.Sprintf("52:54:00:%02x:%02x:%02x", 0x10+w, i>>8, i&255)}}, nil)
				if err != nil || status != 201 {
					return
				}
				written.Add(1)
			}
		}()
	}
	for written.Load() < 20 {
		time.Sleep(5 * time.Millisecond)
	}
	backup := filepath.Join(t.TempDir(), "rackd-backup.db")
	must(asAdmin, "backup", backup)
	stop.Store(true)
	wg.Wait()
	s, err := store.Open(backup, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open the backup: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("backup is inconsistent:\n%v", err)
	}
	ms, err := s.ListMachines(store.Filter{})
	if err != nil || len(ms) < 3+20 {
		t.Fatalf("backup holds %d machines (%v); want the 3 of the tour and the 20+ written before it", len(ms), err)
	}
	if m, err := s.Machine("node01"); err != nil || m.Owner != "admin" || m.AgentName != "V" {
		t.Fatalf("backup's node01: %+v %v", m, err)
	}
	t.Logf("backup holds %d machines; %d were written in all", len(ms), written.Load()+3)
}
