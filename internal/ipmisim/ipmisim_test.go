package ipmisim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// needSim requires the real peers: ipmi_sim (the BMC) and ipmitool (the
// client the simulator and the driver are checked against). Root is not
// needed: without it the simulators listen above port 1024.
func needSim(t *testing.T) {
	t.Helper()
	netnstest.Tool(t, "ipmi_sim")
	netnstest.Tool(t, "ipmitool")
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// The harness's BMC powers on and off through real IPMI, the hook keeps the
// state, and a hang / restart behave like a real BMC's.
func TestSimPowerHangRestart(t *testing.T) {
	needSim(t)
	s := Start(t, Options{})
	if on, err := s.Power(); err != nil || on {
		t.Fatalf("initial power = %v, %v; want off", on, err)
	}
	for _, step := range []struct {
		args []string
		want string
		on   bool
	}{
		{[]string{"chassis", "power", "on"}, "Up/On", true},
		{[]string{"chassis", "power", "status"}, "Chassis Power is on", true},
		{[]string{"chassis", "power", "off"}, "Down/Off", false},
		{[]string{"chassis", "power", "status"}, "Chassis Power is off", false},
	} {
		out, err := s.Ipmitool(ctx(t), step.args...)
		if err != nil || !strings.Contains(out, step.want) {
			t.Fatalf("ipmitool %v = %q, %v; want %q", step.args, out, err, step.want)
		}
		if on, err := s.Power(); err != nil || on != step.on {
			t.Fatalf("after %v: hook power = %v, %v; want %v", step.args, on, err, step.on)
		}
	}
	if out, err := s.Ipmitool(ctx(t), "chassis", "bootdev", "pxe"); err != nil {
		t.Fatalf("bootdev pxe: %q, %v", out, err)
	}
	if dev, _ := s.BootDevice(); dev != "pxe" {
		t.Fatalf("boot device = %q, want pxe", dev)
	}
	if n, err := s.ActiveSessions(ctx(t)); err != nil || n != 0 {
		t.Fatalf("active sessions besides ours = %d, %v; want 0 (ipmitool closes its sessions)", n, err)
	}

	if err := s.Hang(); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := Ping(c, s.Addr)
	cancel()
	if err == nil {
		t.Fatal("a SIGSTOPped simulator answered")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	c, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	err = Ping(c, s.Addr)
	cancel()
	if err != nil {
		t.Fatalf("resumed simulator: %v", err)
	}

	// The host keeps its power across a BMC restart.
	if _, err := s.Ipmitool(ctx(t), "chassis", "power", "on"); err != nil {
		t.Fatal(err)
	}
	oldPID := s.PID()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.PID() == oldPID || s.PID() == 0 {
		t.Fatalf("restart kept pid %d", oldPID)
	}
	if out, err := s.Ipmitool(ctx(t), "chassis", "power", "status"); err != nil || !strings.Contains(out, "is on") {
		t.Fatalf("after restart: %q, %v", out, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = Ping(c, s.Addr)
	cancel()
	if err == nil {
		t.Fatal("a stopped simulator answered")
	}
}

// Several simulators at once get distinct addresses and keep distinct state.
func TestSimSeveral(t *testing.T) {
	needSim(t)
	a := Start(t, Options{})
	b := Start(t, Options{PowerOn: true, Password: "other"})
	if a.Addr == b.Addr {
		t.Fatalf("two simulators on %s", a.Addr)
	}
	if out, err := a.Ipmitool(ctx(t), "chassis", "power", "status"); err != nil || !strings.Contains(out, "is off") {
		t.Fatalf("a: %q, %v", out, err)
	}
	if out, err := b.Ipmitool(ctx(t), "chassis", "power", "status"); err != nil || !strings.Contains(out, "is on") {
		t.Fatalf("b: %q, %v", out, err)
	}
	// a's password does not open b.
	wrong := &Sim{Host: b.Host, Port: b.Port, User: b.User, Password: a.Password}
	if out, err := wrong.Ipmitool(ctx(t), "chassis", "power", "status"); err == nil {
		t.Fatalf("wrong password accepted: %q", out)
	}
	// An address in use is refused.
	if _, err := New(Options{Addr: a.Addr}); err == nil {
		t.Fatalf("second simulator on %s started", a.Addr)
	}
}

// Machine makes power on start a process and power off stop it; OnCmd and
// OffCmd run on each change and a failing one is a BMC error.
func TestSimMachineAndHooks(t *testing.T) {
	needSim(t)
	marks := t.TempDir()
	s := Start(t, Options{
		Machine: []string{"sleep", "300"},
		OnCmd:   []string{"touch", filepath.Join(marks, "on")},
		OffCmd:  []string{"sh", "-c", "touch " + filepath.Join(marks, "off") + "; test ! -e " + filepath.Join(marks, "refuse")},
	})
	if _, err := s.Ipmitool(ctx(t), "chassis", "power", "on"); err != nil {
		t.Fatal(err)
	}
	if s.MachinePID() == 0 {
		t.Fatal("power on started no machine")
	}
	pid := strconv.Itoa(s.MachinePID())
	// setsid execs the machine in place (same PID); it may not have yet.
	var cmdline []byte
	for range 50 {
		if cmdline, _ = os.ReadFile("/proc/" + pid + "/cmdline"); strings.HasPrefix(string(cmdline), "sleep\x00300") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(string(cmdline), "sleep\x00300") {
		t.Fatalf("machine pid %s runs %q", pid, cmdline)
	}
	if _, err := os.Stat(filepath.Join(marks, "on")); err != nil {
		t.Fatalf("OnCmd did not run: %v", err)
	}
	// The machine dies by itself: the power reads off.
	exec.Command("kill", pid).Run()
	waitPower(t, s, false)
	if out, err := s.Ipmitool(ctx(t), "chassis", "power", "status"); err != nil || !strings.Contains(out, "is off") {
		t.Fatalf("after the machine exited: %q, %v", out, err)
	}
	if _, err := s.Ipmitool(ctx(t), "chassis", "power", "on"); err != nil {
		t.Fatal(err)
	}
	waitPower(t, s, true)
	// A BMC restart leaves the machine running and rebinds the port (the
	// machine must not have inherited the simulator's socket).
	t0 := time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Ipmitool(ctx(t), "chassis", "power", "status"); err != nil || !strings.Contains(out, "is on") {
		t.Fatalf("after a BMC restart: %q, %v", out, err)
	}
	t.Logf("restart took %v", time.Since(t0))
	// A refusing OffCmd is an error and the machine keeps running.
	os.WriteFile(filepath.Join(marks, "refuse"), nil, 0o644)
	if out, err := s.Ipmitool(ctx(t), "chassis", "power", "off"); err == nil {
		t.Fatalf("power off with a failing OffCmd succeeded: %q", out)
	}
	if on, _ := s.Power(); !on {
		t.Fatal("machine stopped although OffCmd refused")
	}
	os.Remove(filepath.Join(marks, "refuse"))
	if _, err := s.Ipmitool(ctx(t), "chassis", "power", "off"); err != nil {
		t.Fatal(err)
	}
	waitPower(t, s, false)
}

func waitPower(t *testing.T, s *Sim, want bool) {
	t.Helper()
	for range 50 {
		if on, err := s.Power(); err == nil && on == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("power never became %v; hook log:\n%s", want, s.HookLog())
}
