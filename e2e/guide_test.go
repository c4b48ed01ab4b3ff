package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rackd/internal/vmtest"
	rlab "rackd/lab"
)

// guideBlocks returns the commands of a Markdown guide: the bodies of its
// ```sh blocks, in order.
func guideBlocks(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```sh\n(.*?)^```\n").FindAllStringSubmatch(string(raw), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// runGuide runs blocks as one bash script (set -eu, so the first failing
// command stops it; one shell, so what a block sets holds in the next) in
// the repository's root, bounded by d, as a process group of its own. It
// returns the output; each block starts with a line "### guide block N".
func runGuide(t *testing.T, root, home string, d time.Duration, first int, blocks []string) (string, error) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -eu\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "echo '### guide block %d'\n%s\n", first+i, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = root
	// A home of its own (the SSH key the guide makes), but Go's caches
	// where they are: under the new home they would start empty, and every
	// run would download the modules and build everything again.
	env := os.Environ()
	goenv, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	for i, v := range strings.Split(strings.TrimSpace(string(goenv)), "\n") {
		env = append(env, []string{"GOCACHE=", "GOMODCACHE=", "GOPATH="}[i]+v)
	}
	cmd.Env = append(env, "HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (killed at its %v bound)", err, d)
	}
	t.Logf("guide blocks %d-%d ran in %v", first, first+len(blocks)-1, time.Since(start).Round(time.Second))
	return out.String(), err
}

// TestE2EGettingStarted runs docs/GETTING-STARTED.md's commands, verbatim
// and in order, against the lab they build (make lab: rackd in a network
// namespace, a VM behind ipmi_sim and one behind the Redfish BMC command):
// both machines commissioned, the Debian image deployed to the IPMI one,
// an SSH login to it. Then make lab-down, the guide's last command, must
// leave nothing behind: the processes make lab recorded, the VMs, the
// namespace, the host's link and route, the lab's directory.
func TestE2EGettingStarted(t *testing.T) {
	requireDeployOS(t)
	requireVM(t)
	root := vmtest.RepoRoot(t)
	blocks := guideBlocks(t, filepath.Join(root, "docs", "GETTING-STARTED.md"))
	if len(blocks) < 5 || strings.TrimSpace(blocks[len(blocks)-1]) != "make lab-down" {
		t.Fatalf("docs/GETTING-STARTED.md: %d sh blocks, the last %q: want the lab's steps ending with make lab-down", len(blocks), blocks[len(blocks)-1])
	}
	dir := filepath.Join(root, "var", "lab")
	if _, err := os.Stat(filepath.Join(dir, "lab.json")); err == nil {
		t.Skipf("a lab is up in %s (make lab-down removes it): the guide builds its own there", dir)
	}
	if _, err := os.Stat("/var/run/netns/" + rlab.NetNS); err == nil {
		t.Skipf("a network namespace %s exists (another lab is up): the guide makes its own", rlab.NetNS)
	}
	// Whatever happens, nothing of the lab outlives the test.
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, "lab.json")); err == nil {
			out, err := exec.Command(filepath.Join(root, "bin", "rackd-lab"), "down", "--dir", dir).CombinedOutput()
			t.Logf("rackd-lab down after the test: %v\n%s", err, out)
		}
	})
	home := t.TempDir()

	out, err := runGuide(t, root, home, 40*time.Minute, 1, blocks[:len(blocks)-1])
	if err != nil {
		for _, f := range []string{"rackd.log", "lab1.console", "lab2.console", "lab1-bmc.log", "lab2-bmc.log"} {
			if b, rerr := os.ReadFile(filepath.Join(dir, f)); rerr == nil {
				t.Logf("the end of var/lab/%s:\n%s", f, tailLines(string(b), 40))
			}
		}
		t.Fatalf("the guide's commands: %v\n%s", err, out)
	}
	t.Logf("the guide's output:\n%s", out)
	// The SSH login printed the machine's name.
	ssh := out[strings.LastIndex(out, fmt.Sprintf("### guide block %d", len(blocks)-1)):]
	if !regexp.MustCompile(`(?m)^lab1$`).MatchString(ssh) {
		t.Fatalf("the SSH login did not print the machine's name lab1:\n%s", ssh)
	}

	// What the lab made, before it is taken down.
	var st rlab.State
	raw, err := os.ReadFile(filepath.Join(dir, "lab.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if !st.Complete || len(st.Machines) != 2 || len(st.Procs) < 4 {
		t.Fatalf("lab.json: %+v", st)
	}
	for _, m := range []struct{ name, state, driver string }{{"lab1", "DEPLOYED", "ipmi"}, {"lab2", "READY", "redfish"}} {
		show := cliLab(t, root, st.Token, "machines", "show", m.name)
		if !regexp.MustCompile(`(?m)^State: +`+m.state+` `).MatchString(show) || !strings.Contains(show, "Power:") || !strings.Contains(show, m.driver+" at ") {
			t.Errorf("%s: want %s behind %s:\n%s", m.name, m.state, m.driver, show)
		}
	}
	// make lab again, while the lab is up: it says so and changes nothing.
	again, err := runGuide(t, root, home, 10*time.Minute, 0, []string{"make lab"})
	if err != nil || !strings.Contains(again, "is up already") || !strings.Contains(again, st.Token) {
		t.Errorf("make lab on a lab that is up: %v, want that it is up already, with its token\n%s", err, again)
	}
	if raw2, _ := os.ReadFile(filepath.Join(dir, "lab.json")); !bytes.Equal(raw2, raw) {
		t.Errorf("make lab on a lab that is up changed lab.json:\n%s", raw2)
	}
	qemus := labPIDs(t, "qemu-system")
	if len(qemus) == 0 {
		t.Error("no QEMU of the lab runs before make lab-down (lab1 is deployed and on)")
	}

	out, err = runGuide(t, root, home, 5*time.Minute, len(blocks), blocks[len(blocks)-1:])
	if err != nil {
		t.Fatalf("make lab-down: %v\n%s", err, out)
	}
	t.Logf("make lab-down:\n%s", out)
	for _, p := range st.Procs {
		if alive(p.PID) {
			t.Errorf("%s (pid %d) runs after make lab-down", p.Name, p.PID)
		}
	}
	for _, pid := range qemus {
		if alive(pid) {
			t.Errorf("the lab's QEMU (pid %d) runs after make lab-down", pid)
		}
	}
	if left := labPIDs(t, ""); len(left) > 0 {
		t.Errorf("processes naming the lab run after make lab-down: %v", left)
	}
	if _, err := os.Stat("/var/run/netns/" + rlab.NetNS); err == nil {
		t.Errorf("the namespace %s is left", rlab.NetNS)
	}
	if _, err := os.Stat("/sys/class/net/" + rlab.HostVeth); err == nil {
		t.Errorf("the host's link %s is left", rlab.HostVeth)
	}
	if r, _ := exec.Command("ip", "route", "show", rlab.HostRoute).Output(); len(bytes.TrimSpace(r)) > 0 {
		t.Errorf("the route %s is left: %s", rlab.HostRoute, r)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s is left", dir)
	}
	// Run again, it says there is nothing to remove.
	out, err = runGuide(t, root, home, time.Minute, len(blocks), blocks[len(blocks)-1:])
	if err != nil || !strings.Contains(out, "nothing to remove") {
		t.Errorf("make lab-down again: %v\n%s", err, out)
	}
}

// cliLab runs bin/rackd against the lab's rackd.
func cliLab(t *testing.T, root, token string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "bin", "rackd"), append(args, "--url", rlab.URL, "--token", token)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rackd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// labPIDs lists the live processes whose command line names the lab's
// taps or directory (QEMU, the BMCs, rackd), and prefix, when set.
func labPIDs(t *testing.T, prefix string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 || !alive(pid) {
			continue
		}
		cl := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		if (strings.Contains(cl, rlab.TapBase) || strings.Contains(cl, "/var/lab/")) && strings.HasPrefix(filepath.Base(strings.Fields(cl)[0]), prefix) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive says whether pid is a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
