package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func runDown(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseUp("down", args, stderr)
	if err != nil {
		return err
	}
	if err := requireRoot(); err != nil {
		return err
	}
	return down(ctx, f.dir, stdout)
}

// down removes what up made: the processes it recorded (by PID, each
// checked to still be the process up started), any other process left in
// the lab's namespace (started there by one of them: a VM), the host's
// link (its route goes with it), the namespace (its bridge, taps and
// addresses go with it) and the lab's directory. Each step is skipped when
// there is nothing to remove, so down can be run again.
func down(ctx context.Context, dir string, w io.Writer) error {
	st, err := loadState(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	removed := 0
	var errs []error
	if st != nil {
		// The machines' BMCs first (each stops its VM), then the rest.
		procs := slices.Clone(st.Procs)
		slices.Reverse(procs)
		for _, p := range procs {
			if !procIs(p) {
				continue
			}
			say(w, "stopping %s (pid %d)", p.Name, p.PID)
			if err := stopPID(p.PID, func() bool { return procIs(p) }); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
			}
			removed++
		}
	}
	if nsExists() {
		for _, pid := range nsPIDs(ctx) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			say(w, "stopping pid %d, left in the namespace %s: %s", pid, NetNS, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
			start := procStart(pid)
			if err := stopPID(pid, func() bool { return procStart(pid) == start && start != "" }); err != nil {
				errs = append(errs, err)
			}
			removed++
		}
	}
	if linkExists(HostVeth) {
		say(w, "removing the host's link %s (and its route %s)", HostVeth, HostRoute)
		if err := ip(ctx, "link", "del", HostVeth); err != nil {
			errs = append(errs, err)
		}
		removed++
	}
	if nsExists() {
		say(w, "removing the network namespace %s (its bridge, taps and addresses)", NetNS)
		if err := ip(ctx, "netns", "del", NetNS); err != nil {
			errs = append(errs, err)
		}
		removed++
	}
	if st != nil {
		say(w, "removing %s (rackd's state, the disks, consoles and logs)", dir)
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
		removed++
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if removed == 0 {
		say(w, "no lab is up (nothing recorded in %s, no namespace %s, no link %s): nothing to remove", dir, NetNS, HostVeth)
		return nil
	}
	say(w, "the lab is down")
	return nil
}

// stopPID sends SIGTERM to pid, waits up to 15 s for it to go (same says
// whether pid is still the process meant), then sends SIGKILL.
func stopPID(pid int, same func() bool) error {
	if !same() {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !same() {
			return nil
		}
	}
	if same() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !same() {
			return nil
		}
	}
	return fmt.Errorf("pid %d still runs after SIGKILL", pid)
}

// nsPIDs lists the processes inside the lab's namespace, zombies left out.
func nsPIDs(ctx context.Context) []int {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", NetNS).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, s := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(s); err == nil && procStart(pid) != "" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStart is a live (not zombie) process's start time, from
// /proc/PID/stat: with the PID, it names one process for good ("" when
// none).
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is the state, fields[19] the start time (field 22).
	if len(fields) < 20 || fields[0] == "Z" || fields[0] == "X" {
		return ""
	}
	return fields[19]
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseUp("status", args, stderr)
	if err != nil {
		return err
	}
	st, err := loadState(f.dir)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stdout, "no lab recorded in %s (make lab builds one)\n", f.dir)
		if nsExists() {
			fmt.Fprintf(stdout, "but the network namespace %s exists: rackd-lab down --dir DIR removes it\n", NetNS)
		}
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range st.Procs {
		state := "running"
		if !procIs(p) {
			state = "NOT RUNNING"
		}
		fmt.Fprintf(stdout, "%-10s pid %-8d %-12s log %s\n", p.Name, p.PID, state, p.Log)
	}
	if !st.Complete {
		fmt.Fprintf(stdout, "up did not finish: make lab-down, then make lab\n")
		return nil
	}
	st.summary(stdout)
	return nil
}
