package ipmi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/internal/ipmisim"
	"rackd/power"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serialPort stands for the machine's serial port: QEMU's "-serial
// tcp:...,server" is a TCP listener the BMC connects to when SOL is
// activated. The test writes what the guest prints and reads what was typed.
type serialPort struct {
	ln    net.Listener
	conns chan net.Conn
}

func newSerialPort(t *testing.T) *serialPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &serialPort{ln: ln, conns: make(chan net.Conn, 8)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-p.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return p
}

// attach waits for the BMC to connect to the serial port.
func (p *serialPort) attach(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-p.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the BMC never connected to the serial port (SOL not relayed)")
		return nil
	}
}

// readUntil reads from c until what has the text want.
func readUntil(t *testing.T, c net.Conn, want string) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 512)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for !bytes.Contains(got, []byte(want)) {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("serial port: waiting for %q, got %q: %v", want, got, err)
		}
	}
	return string(got)
}

type consoleRun struct {
	out  lockedBuffer
	in   *io.PipeWriter
	done chan error
}

func startConsole(ctx context.Context, d *Driver, tg power.Target, write bool) *consoleRun {
	r := &consoleRun{done: make(chan error, 1)}
	var in io.Reader
	if write {
		pr, pw := io.Pipe()
		in, r.in = pr, pw
	}
	go func() { r.done <- d.Console(ctx, tg, in, &r.out) }()
	return r
}

func (r *consoleRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("console did not end")
		return nil
	}
}

// TestConsoleSOL drives rackd's console against ipmi_sim's real SOL, with a
// serial port the test plays the guest on: output reaches the console,
// typed keys reach the guest, a second attach while one is active is refused
// with ErrConsoleBusy, power commands run beside it, a detach releases SOL
// (ipmitool's own "sol activate" gets it next, then rackd again).
func TestConsoleSOL(t *testing.T) {
	needSim(t)
	port := newSerialPort(t)
	sim := ipmisim.Start(t, ipmisim.Options{SOL: "tcp:" + port.ln.Addr().String()})
	tg := power.Target{Driver: "ipmi", Address: sim.Addr, Username: sim.User, Password: sim.Password}
	d := New(Options{Timeout: testTimeout})
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	first := startConsole(ctx, d, tg, true)
	guest := port.attach(t)
	waitFor(t, "guest output on the console", 30*time.Second, func() bool {
		// Output the BMC gets before SOL is up is not relayed: the guest
		// repeats itself until it is seen.
		if _, err := guest.Write([]byte("rackd enlist: step 1 of 3\r\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-first.done:
			t.Logf("ipmi_sim log: %s", sim.Dir)
			t.Fatalf("console ended: %v (output %q)", err, first.out.String())
		default:
		}
		return strings.Contains(first.out.String(), "rackd enlist: step 1 of 3")
	})
	if _, err := first.in.Write([]byte("root\r")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, guest, "root\r")

	// The BMC has one SOL session: a second attach is told so.
	busyCtx, busyCancel := context.WithTimeout(ctx, time.Minute)
	err := d.Console(busyCtx, tg, nil, io.Discard)
	busyCancel()
	if !errors.Is(err, ErrConsoleBusy) {
		t.Fatalf("second attach: got %v, want ErrConsoleBusy", err)
	}
	// Power commands are not kept from the BMC while SOL is active.
	if _, err := d.Status(ctx, tg); err != nil {
		t.Fatalf("power status during SOL: %v", err)
	}

	first.in.Close() // detach
	if err := first.wait(t); err != nil {
		t.Fatalf("console after detach: %v", err)
	}
	guest.Close()

	// ipmitool, an independent client, gets SOL after the detach.
	tool := exec.CommandContext(ctx, "ipmitool", "-I", "lanplus", "-C", "3", "-H", sim.Host,
		"-p", strconv.Itoa(sim.Port), "-U", sim.User, "-E", "sol", "activate")
	tool.Env = append(tool.Environ(), "IPMI_PASSWORD="+sim.Password)
	var toolOut lockedBuffer
	tool.Stdout, tool.Stderr = &toolOut, &toolOut
	toolIn, err := tool.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.Start(); err != nil {
		t.Fatal(err)
	}
	toolDone := make(chan error, 1)
	go func() { toolDone <- tool.Wait() }()
	guest2 := port.attach(t)
	waitFor(t, "ipmitool's SOL session", 30*time.Second, func() bool {
		guest2.Write([]byte("seen by ipmitool\r\n"))
		return strings.Contains(toolOut.String(), "seen by ipmitool")
	})
	toolIn.Write([]byte("\r~.")) // ipmitool's detach
	select {
	case err := <-toolDone:
		if err != nil {
			t.Fatalf("ipmitool sol activate: %v\n%s", err, toolOut.String())
		}
	case <-time.After(30 * time.Second):
		tool.Process.Kill()
		t.Fatalf("ipmitool did not detach:\n%s", toolOut.String())
	}
	guest2.Close()

	// And rackd again, read-only this time, until its context ends.
	third, thirdCancel := context.WithCancel(ctx)
	ro := startConsole(third, d, tg, false)
	guest3 := port.attach(t)
	waitFor(t, "output on a read-only console", 30*time.Second, func() bool {
		guest3.Write([]byte("third\r\n"))
		return strings.Contains(ro.out.String(), "third")
	})
	thirdCancel()
	if err := ro.wait(t); err != nil {
		t.Fatalf("read-only console after cancel: %v", err)
	}
	// No session of ours is left on the BMC.
	waitFor(t, "the console sessions to close", 30*time.Second, func() bool {
		n, err := sim.ActiveSessions(ctx)
		return err == nil && n <= d.Stats().Opened-d.Stats().Closed
	})
}
