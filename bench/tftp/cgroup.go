package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroup is a cgroup v2 directory the bench made for one server. Its
// cpu.stat counts the CPU of every process in it, children included, which
// is the only fair measure for tftpd-hpa: it forks a child per transfer,
// and a child's CPU reaches its parent's /proc figures only once reaped.
type cgroup struct {
	dir string
	f   *os.File // the open directory, for CLONE_INTO_CGROUP
}

// cgroup2Root finds where the unified (v2) hierarchy is mounted: at
// /sys/fs/cgroup on a pure v2 system, /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		l := sc.Text()
		pre, post, ok := strings.Cut(l, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) >= 5 {
			return fields[4], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup2 hierarchy mounted (server CPU is measured with cgroup v2's cpu.stat)")
}

// newCgroup makes parent/name (parent made if needed).
func newCgroup(parent, name string) (*cgroup, error) {
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	c := &cgroup{dir: dir, f: f}
	if _, err := c.usage(); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

func (c *cgroup) fd() int { return int(c.f.Fd()) }

// usage is the CPU time of everything that ran in the cgroup so far.
func (c *cgroup) usage() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cgroup: %s/cpu.stat: %q", c.dir, l)
			}
			return time.Duration(n) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("cgroup: %s/cpu.stat has no usage_usec", c.dir)
}

// remove deletes the cgroup, which must be empty by then: its processes
// were stopped and reaped first. A process that is reaped leaves its cgroup
// a moment later, so it retries for a while.
func (c *cgroup) remove() error {
	c.f.Close()
	var err error
	for range 50 {
		if err = syscall.Rmdir(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("cgroup: rmdir %s: %w", c.dir, err)
}
