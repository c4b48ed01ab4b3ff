package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
	"rackd/store"
)

// makeRunAddr is where make run's rackd listens, as the tour writes it.
const makeRunAddr = "127.0.0.1:5240"

// readmeTour is the README's five-minute tour: the first sh block of its
// "## A five-minute tour" section, as it stands, and the README's line
// number of the block's first line.
func readmeTour(t *testing.T) (string, int) {
	t.Helper()
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## A five-minute tour\n")
	if !ok {
		t.Fatal(`README.md has no "## A five-minute tour" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	_, block, ok := strings.Cut(section, "\n```sh\n")
	if !ok {
		t.Fatal("the README's tour has no ```sh block")
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatal("the README's tour's sh block does not end")
	}
	first := strings.Count(string(readme)[:strings.Index(string(readme), block)], "\n") + 1
	return block + "\n", first
}

// expectedExits reads, from the tour's comments, the commands that must
// fail: "(exit N" in a command's own trailing comment, or in the comment
// line right above it, says that command exits N. It returns them by line
// (1-based), as bash's LINENO counts.
func expectedExits(t *testing.T, script string) map[int]int {
	t.Helper()
	exitRE := regexp.MustCompile(`\(exit (\d+)`)
	lines := strings.Split(script, "\n")
	want := map[int]int{}
	for i, line := range lines {
		m := exitRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		at := i
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			at = i + 1
			if at >= len(lines) || strings.HasPrefix(strings.TrimSpace(lines[at]), "#") || strings.TrimSpace(lines[at]) == "" {
				t.Fatalf("line %d of the README's tour says %q but no command follows it", i+1, m[0])
			}
		}
		want[at+1] = n
	}
	return want
}

// TestReadmeTour runs the README's five-minute tour verbatim and in order,
// as an operator does in a second terminal next to make run's var/: one
// bash, in a directory holding bin/rackd (the binary under test) and var/
// (the state directory of a real rackd serving it). Two things differ from
// make run, both because a test may not take port 5240: rackd listens on a
// free loopback port, given to the CLI as RACKD_URL, and the tour's
// 127.0.0.1:5240 (its curl commands) is rewritten to that address.
//
// Every command must exit 0 but those whose comment says "(exit N": bash's
// ERR trap reports each failing command with its line and status, and
// pipefail makes a failure anywhere in a pipeline or $(...) count. Then
// what the tour did is read back from rackd: a tour whose commands "work"
// without doing what it says fails too.
func TestReadmeTour(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "awk", "sha256sum", "stat", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Geteuid() == 0 {
				t.Fatalf("%s is not installed (scripts/test-deps.sh installs the test peers): %v", tool, err)
			}
			t.Skipf("%s is not installed; run as root via make test, which installs it", tool)
		}
	}
	script, first := readmeTour(t)
	// at names a line of the tour (1-based) as README.md's line.
	at := func(line int) string { return fmt.Sprintf("README.md:%d", first+line-1) }
	want := expectedExits(t, script)
	if len(want) == 0 {
		t.Fatal(`the tour marks no command "(exit N": its refused allocation is no longer marked`)
	}

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rackdBinary(t), filepath.Join(dir, "bin", "rackd")); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "var")
	d := startDaemon(t, state)
	addr := strings.TrimPrefix(d.url, "http://")
	if strings.Count(script, makeRunAddr) < 3 {
		t.Fatalf("the tour names %s %d times; it reaches rackd's /boot/, /metadata/ and /metrics with curl", makeRunAddr, strings.Count(script, makeRunAddr))
	}
	script = strings.ReplaceAll(script, makeRunAddr, addr)
	tour := filepath.Join(dir, "tour.sh")
	if err := os.WriteFile(tour, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// BASH_ENV is read before the script, so the script's lines keep
	// their numbers.
	bashEnv := filepath.Join(dir, "tour-env.sh")
	if err := os.WriteFile(bashEnv, []byte("set -o pipefail\ntrap 'echo \"@@exit $LINENO $?\" >&2' ERR\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", tour)
	cmd.Dir = dir
	cmd.Env = append(withoutEnv(os.Environ(), "RACKD_URL", "RACKD_TOKEN", "RACKD_STATE_DIR", "RACKD_CONFIG", "BASH_ENV", "ENV"),
		"RACKD_URL="+d.url, "BASH_ENV="+bashEnv)
	// The tour's commands run in bash's process group, ended by its id
	// (never by name) if the tour outlives its deadline.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out netnstest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the tour did not run to its end: %v\n%s", err, out.String())
	}
	output := out.String()
	t.Logf("the tour's output:\n%s", output)

	lines := strings.Split(script, "\n")
	got := map[int]int{}
	for _, m := range regexp.MustCompile(`(?m)^@@exit (\d+) (\d+)$`).FindAllStringSubmatch(output, -1) {
		line, _ := strconv.Atoi(m[1])
		code, _ := strconv.Atoi(m[2])
		got[line] = code
		if w, ok := want[line]; !ok || w != code {
			t.Errorf("%s exited %d: %s", at(line), code, lines[line-1])
		}
	}
	for line, code := range want {
		if got[line] != code {
			t.Errorf("%s should exit %d (its comment says so) but exited %d: %s", at(line), code, got[line], lines[line-1])
		}
	}

	// What the tour says it does, read back from rackd.
	asAdmin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	machine := func(name string) api.Machine {
		t.Helper()
		var m api.Machine
		if err := json.Unmarshal([]byte(mustCLI(t, d, asAdmin, "machines", "show", name, "--json")), &m); err != nil {
			t.Fatalf("machines show %s: %v", name, err)
		}
		return m
	}
	if m := machine("node01"); m.State != "READY" || m.Owner != "" {
		t.Errorf("node01 after its release: %s owned by %q, want READY and free", m.State, m.Owner)
	}
	if m := machine("node03"); m.State != "COMMISSIONING" || m.Power.Driver != "manual" {
		t.Errorf("node03: %s, power driver %q; want COMMISSIONING with the manual driver", m.State, m.Power.Driver)
	}
	if m := machine("node02"); m.State != "READY" || !slices.ContainsFunc(m.IPs, func(ip api.IP) bool { return ip.IP == "10.77.0.20" }) {
		t.Errorf("node02: %s with %+v; want READY with 10.77.0.20", m.State, m.IPs)
	}
	var events []api.Event
	if err := json.Unmarshal([]byte(mustCLI(t, d, asAdmin, "machines", "events", "node01", "--json")), &events); err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, e := range events {
		trail = append(trail, e.Actor+" "+e.Action)
	}
	for _, step := range []string{"installer allocate", "installer adopt", "admin release"} {
		if !slices.Contains(trail, step) {
			t.Errorf("node01's events lack %q (the installer's token in RACKD_TOKEN, the hand-over, the release): %v", step, trail)
		}
	}
	var tokens []api.Token
	if err := json.Unmarshal([]byte(mustCLI(t, d, asAdmin, "tokens", "list", "--user", "installer", "--json")), &tokens); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tokens {
		if tk.Name == "ci" {
			t.Errorf("the ci token is still there after its revocation: %+v", tk)
		}
	}
	if len(tokens) != 1 {
		t.Errorf("installer holds %d tokens; want its default one alone: %+v", len(tokens), tokens)
	}
	for _, want := range []string{
		"hello from rackd", // the image's file over /boot/
		"#!ipxe",           // an unknown machine's boot script
		`"state":"READY"`,  // whoami of node01
		`rackd_machines{state="COMMISSIONING"} 1`, // /metrics
	} {
		if !strings.Contains(output, want) {
			t.Errorf("the tour's output lacks %q", want)
		}
	}
	backup := filepath.Join(dir, "build", "rackd-backup.db")
	s, err := store.Open(backup, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the tour's backup: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Errorf("the tour's backup is inconsistent: %v", err)
	}
	if ms, err := s.ListMachines(store.Filter{}); err != nil || len(ms) != 3 {
		t.Errorf("the tour's backup holds %d machines (%v); want its 3", len(ms), err)
	}
}
