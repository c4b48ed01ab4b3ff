package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfStat counts, with perf stat, the system calls and context switches
// of a running server (all its threads): per DORA they depend on how the
// server is built, not on what else runs on the machine, as CPU time does.
type perfStat struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

// perfEvents are software events and tracepoints, which work in VMs without
// hardware counters.
const perfEvents = "raw_syscalls:sys_enter,context-switches"

func startPerfStat(pid int) (*perfStat, error) {
	p := &perfStat{}
	p.cmd = exec.Command("perf", "stat", "-x", ",", "-e", perfEvents, "-p", strconv.Itoa(pid))
	p.cmd.Stderr = &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf stat: %w", err)
	}
	return p, nil
}

// stop ends the count (perf stat prints its counts on SIGINT) and returns
// the system calls and context switches counted.
func (p *perfStat) stop() (syscalls, switches int64, err error) {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return 0, 0, fmt.Errorf("perf stat did not stop: %s", p.out.String())
	}
	return parsePerfStat(p.out.String())
}

// parsePerfStat reads perf stat -x, output: "value,unit,event,...".
func parsePerfStat(out string) (syscalls, switches int64, err error) {
	found := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		n, perr := strconv.ParseInt(f[0], 10, 64)
		if perr != nil {
			continue // "<not counted>", comments
		}
		switch f[2] {
		case "raw_syscalls:sys_enter":
			syscalls = n
			found++
		case "context-switches":
			switches = n
			found++
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("perf stat: no counts in %q", out)
	}
	return syscalls, switches, nil
}
