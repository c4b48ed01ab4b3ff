package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/ipmisim"
	"rackd/internal/netnstest"
)

// serialLine stands for a machine's serial port behind its BMC: ipmi_sim
// connects to it when SOL is activated (as to QEMU's "-serial
// tcp:...,server"), the test prints as the guest and reads what was typed.
type serialLine struct {
	ln    net.Listener
	conns chan net.Conn
}

func newSerialLine(t *testing.T) *serialLine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &serialLine{ln: ln, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-s.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return s
}

// guest waits for the BMC's next connection (an SOL activation).
func (s *serialLine) guest(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(60 * time.Second):
		t.Fatal("the BMC never connected to the serial port (no SOL session)")
		return nil
	}
}

// printUntil has the guest print line until seen says it arrived: output
// before SOL is up is not relayed, so the guest repeats itself.
func printUntil(t *testing.T, c net.Conn, line string, seen func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !seen() {
		if time.Now().After(deadline) {
			t.Fatalf("%q never arrived", line)
		}
		if _, err := c.Write([]byte(line + "\r\n")); err != nil {
			t.Fatalf("guest write: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readUntil reads what was typed to the guest until want shows, and
// returns it all.
func readUntil(t *testing.T, c net.Conn, want string) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 256)
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for !bytes.Contains(got, []byte(want)) {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("guest: waiting for %q, got %q: %v", want, got, err)
		}
	}
	return string(got)
}

// consoleCLI is one `rackd console` process.
type consoleCLI struct {
	cmd         *exec.Cmd
	in          io.WriteCloser
	out, errOut netnstest.Buffer
	done        chan struct{}
}

func startConsoleCLI(t *testing.T, d *daemon, env []string, args ...string) *consoleCLI {
	t.Helper()
	c := &consoleCLI{cmd: exec.Command(rackdBinary(t), append([]string{"console"}, args...)...), done: make(chan struct{})}
	c.cmd.Env = append(append(os.Environ(), "RACKD_URL="+d.url), env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.errOut
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Signal(syscall.SIGKILL) // by its PID
			<-c.done
		}
	})
	return c
}

func (c *consoleCLI) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		t.Fatalf("rackd console did not exit:\n%s%s", c.out.String(), c.errOut.String())
		return -1
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConsoleRealBMC drives rackd console and the console log with the real
// binary against a real BMC (ipmi_sim, its SOL wired to a serial port the
// test plays the guest on) and ipmitool: the guest's output reaches rackd
// console, --write types, a second user is refused naming the first, power
// still answers, ~. detaches and frees the BMC's SOL (ipmitool sol activate
// gets it), a manual machine has no console; during commissioning the
// recorder keeps the console in the log, rackd console shares its session,
// the failure event carries the log's tail, the log survives a restart and
// goes with the machine.
func TestConsoleRealBMC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for ipmi_sim (port 623) and ipmitool; run as root or via make test")
	}
	for _, bin := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (scripts/test-deps.sh installs openipmi and ipmitool)", bin)
		}
	}
	serial := newSerialLine(t)
	sim := ipmisim.Start(t, ipmisim.Options{SOL: "tcp:" + serial.ln.Addr().String()})
	state := t.TempDir()
	config := filepath.Join(t.TempDir(), "rackd.toml")
	os.WriteFile(config, []byte(`
[lifecycle]
watchdog_interval = "1s"
[metadata]
credential_binding = "none"
[power]
verify_interval = "200ms"
command_timeout = "5s"
min_interval = "0s"
`), 0o600)
	d := startDaemon(t, state, "--config", config)
	admin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	mustCLI(t, d, admin, "machines", "add", "--hostname", "m1", "--mac", "52:54:00:0c:00:01",
		"--power-driver", "ipmi", "--power-address", sim.Addr, "--power-user", sim.User, "--power-password", sim.Password)
	mustCLI(t, d, admin, "machines", "add", "--hostname", "man1", "--mac", "52:54:00:0c:00:02", "--power-driver", "manual", "--state", "READY")

	// A machine whose driver has no console: a clear refusal.
	if code, _, errs := runCLI(t, d, admin, "console", "man1"); code != 1 || !strings.Contains(errs, "no serial console") || !strings.Contains(errs, "no_console") {
		t.Errorf("console of a manual machine: exit %d: %s", code, errs)
	}
	// Another user (not its owner, not an admin) may not see it.
	var bob api.User
	json.Unmarshal([]byte(mustCLI(t, d, admin, "--json", "users", "add", "bob")), &bob)
	if code, _, errs := runCLI(t, d, []string{"RACKD_TOKEN=" + bob.Token}, "console", "m1"); code != 1 || !strings.Contains(errs, "forbidden") {
		t.Errorf("console as another user: exit %d: %s", code, errs)
	}

	// Attach for writing: the guest's output shows, keys reach the guest.
	rw := startConsoleCLI(t, d, admin, "m1", "--write")
	g := serial.guest(t)
	printUntil(t, g, "rackd enlist: step 1 of 3", func() bool { return strings.Contains(rw.out.String(), "rackd enlist: step 1 of 3") })
	if !strings.Contains(rw.errOut.String(), "attached to the console of m1, read-write") {
		t.Errorf("attach message: %q", rw.errOut.String())
	}
	io.WriteString(rw.in, "root\r")
	readUntil(t, g, "root\r")

	// One user at a time: the second is told who holds it.
	if code, _, errs := runCLI(t, d, admin, "console", "m1"); code != 1 || !strings.Contains(errs, "in use by admin (read-write") ||
		!strings.Contains(errs, "console_busy") {
		t.Errorf("second attach: exit %d: %s", code, errs)
	}
	// Power still answers, through its own session.
	if out := mustCLI(t, d, admin, "power", "status", "m1", "--wait", "--timeout", "60s"); !strings.Contains(out, "off") {
		t.Errorf("power status while attached:\n%s", out)
	}

	// ~. after a newline detaches; rackd lets go of the BMC's SOL.
	io.WriteString(rw.in, "\r~.")
	if code := rw.wait(t); code != 0 || !strings.Contains(rw.errOut.String(), "detached from the console of m1") {
		t.Fatalf("detach: exit %d: %s", code, rw.errOut.String())
	}
	if strings.Contains(rw.out.String(), "~.") {
		t.Error("the detach sequence reached the console")
	}
	g.Close()
	ipmitoolSOL(t, sim, serial)

	// Commissioning: the recorder holds the console and records it.
	mustCLI(t, d, admin, "machines", "commission", "m1")
	g = serial.guest(t)
	printUntil(t, g, "commissioning: probing disks", func() bool {
		code, out, _ := runCLI(t, d, admin, "machines", "console-log", "m1")
		return code == 0 && strings.Contains(out, "commissioning: probing disks")
	})
	// rackd console shares the recorder's session (the BMC has one).
	ro := startConsoleCLI(t, d, admin, "m1")
	waitUntil(t, "the read-only attach", func() bool { return strings.Contains(ro.errOut.String(), "read-only") })
	printUntil(t, g, "commissioning: seen live", func() bool { return strings.Contains(ro.out.String(), "commissioning: seen live") })
	io.WriteString(ro.in, "typed while read-only\n~.\n")
	if code := ro.wait(t); code != 0 {
		t.Fatalf("read-only detach: exit %d: %s", code, ro.errOut.String())
	}

	// The environment reports a failure: its event carries the console,
	// up to what it printed just before it reported (still in flight
	// through the BMC when the report lands).
	var m api.Machine
	json.Unmarshal([]byte(mustCLI(t, d, admin, "--json", "machines", "show", "m1")), &m)
	var cred enlist.Credential
	if status, raw, err := d.api(http.DefaultClient, "", "POST", "/metadata/v1/credential",
		enlist.CredentialRequest{Machine: m.ID, MAC: "52:54:00:0c:00:01"}, &cred); status != 200 {
		t.Fatalf("credential: %d %s %v", status, raw, err)
	}
	if _, err := g.Write([]byte("commissioning: no disks found; reporting to rackd\r\n")); err != nil {
		t.Fatal(err)
	}
	if status, raw, _ := d.api(http.DefaultClient, cred.Token, "POST", "/metadata/v1/commissioned",
		enlist.Report{Machine: m.ID, Error: "no disks found"}, nil); status != 200 {
		t.Fatalf("report: %d %s", status, raw)
	}

	var evs []api.Event
	json.Unmarshal([]byte(mustCLI(t, d, admin, "--json", "machines", "events", "m1")), &evs)
	last := evs[len(evs)-1]
	if last.To != "FAILED_COMMISSIONING" || !strings.Contains(last.Console, "commissioning: probing disks") ||
		!strings.Contains(last.Console, "no disks found; reporting to rackd") || len(last.Console) > 4096 {
		t.Fatalf("failure event: %+v", last)
	}
	if _, out, _ := runCLI(t, d, []string{"RACKD_TOKEN=" + bob.Token}, "--json", "machines", "events", "m1"); strings.Contains(out, "probing disks") {
		t.Error("another user sees the console tail")
	}
	if code, _, errs := runCLI(t, d, []string{"RACKD_TOKEN=" + bob.Token}, "machines", "console-log", "m1"); code != 1 || !strings.Contains(errs, "forbidden") {
		t.Errorf("console-log as another user: exit %d: %s", code, errs)
	}
	list := mustCLI(t, d, admin, "machines", "console-log", "m1", "--list")
	if !strings.Contains(list, "commission") {
		t.Errorf("console-log --list:\n%s", list)
	}

	// Commissioned again at once: a new boot, on a new SOL session (the
	// BMC links its serial line again).
	g.Close() // the machine powered off: its serial line is gone
	mustCLI(t, d, admin, "machines", "commission", "m1")
	g = serial.guest(t)
	printUntil(t, g, "second commissioning", func() bool {
		code, out, _ := runCLI(t, d, admin, "machines", "console-log", "m1")
		return code == 0 && strings.Contains(out, "second commissioning") && !strings.Contains(out, "probing disks")
	})
	if list := mustCLI(t, d, admin, "machines", "console-log", "m1", "--list"); strings.Count(list, "commission") != 2 {
		t.Errorf("console-log --list after a second commissioning:\n%s", list)
	}

	// A restart keeps the log; deleting the machine (forced: it is
	// commissioning) removes it.
	d.stop(t)
	d = startDaemon(t, state, "--config", config)
	if out := mustCLI(t, d, admin, "machines", "console-log", "m1", "--boot", "1"); !strings.Contains(out, "commissioning: probing disks") {
		t.Errorf("console log after a restart:\n%s", out)
	}
	if code, _, errs := runCLI(t, d, admin, "machines", "console-log", "m1", "--boot", "99"); code != 1 || !strings.Contains(errs, "not_found") {
		t.Errorf("a boot not kept: exit %d: %s", code, errs)
	}
	mustCLI(t, d, admin, "machines", "rm", "m1", "--force")
	waitUntil(t, "the console log to go with the machine", func() bool {
		_, err := os.Stat(filepath.Join(state, "console", m.ID))
		return os.IsNotExist(err)
	})
}

// ipmitoolSOL checks that the BMC's SOL is free: ipmitool, an independent
// client, activates it, sees the guest and detaches.
func ipmitoolSOL(t *testing.T, sim *ipmisim.Sim, serial *serialLine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tool := exec.CommandContext(ctx, "ipmitool", "-I", "lanplus", "-C", "3", "-H", sim.Host,
		"-p", strconv.Itoa(sim.Port), "-U", sim.User, "-E", "sol", "activate")
	tool.Env = append(tool.Environ(), "IPMI_PASSWORD="+sim.Password)
	var out netnstest.Buffer
	tool.Stdout, tool.Stderr = &out, &out
	in, err := tool.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tool.Wait() }()
	g := serial.guest(t)
	printUntil(t, g, "seen by ipmitool", func() bool { return strings.Contains(out.String(), "seen by ipmitool") })
	io.WriteString(in, "\r~.")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ipmitool sol activate after rackd's detach: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		tool.Process.Kill()
		t.Fatalf("ipmitool did not detach:\n%s", out.String())
	}
	g.Close()
}
