package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/agent/client"
	"rackd/api"
	"rackd/internal/ipmisim"
	"rackd/internal/netnstest"
)

// solPort is where, inside the lab's namespace, the VM's serial port
// listens for its BMC: QEMU's TCP chardev server, which ipmi_sim connects to
// when SOL is activated.
const solPort = "7023"

// newConsoleVM is newBMCVM with the VM's serial port behind the BMC's
// Serial-over-LAN: a TCP chardev server (still logged to v.serial, which
// the test compares with what rackd shows) that ipmi_sim's sol line
// connects to.
func newConsoleVM(t *testing.T, l *lab, memMB, cpus int) *bmcVM {
	t.Helper()
	netnstest.Tool(t, "ipmi_sim")
	v, argv := newVM(t, l, memMB, cpus, vmDiskBytes(t))
	replaced := false
	for i, a := range argv {
		if strings.HasPrefix(a, "file,id=s0,") {
			argv[i] = "socket,id=s0,host=127.0.0.1,port=" + solPort + ",server=on,wait=off,logfile=" + v.serial + ",logappend=on"
			replaced = true
		}
	}
	if !replaced {
		t.Fatalf("newVM's serial chardev is not where this test expects it: %q", argv)
	}
	v.startIPMI(l, ipmisim.Options{Addr: "127.0.0.1:623", Machine: argv, SOL: "tcp:127.0.0.1:" + solPort})
	return v
}

// TestE2EConsole: a real VM whose serial port is its BMC's SOL (ipmi_sim).
// While it commissions, rackd's console shows what the enlistment
// environment prints (sharing the recorder's session, which lasts the whole
// phase) and the console log keeps the boot; a failed deployment's
// FAILED_DEPLOYMENT event carries the end of the deploy boot's console.
func TestE2EConsole(t *testing.T) {
	requireVM(t)
	img := enlistImage(t)
	requirePhaseModes(t, img)
	requireDiskDrivers(t)
	l := newLab(t, labOptions{})
	l.importImage(img)

	v := newConsoleVM(t, l, 768, 2)

	// First, no rackd in the BMC's way: powered on by hand, the unknown VM
	// enlists, and ipmitool's own SOL client, independent of rackd, shows
	// the enlistment environment as the VM prints it. (It detaches before
	// the VM powers off: ipmi_sim does not give a later session the serial
	// port of the QEMU started by the next power-on when one was active
	// across the power-off.)
	ctx0, cancel0 := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel0()
	if out, err := l.ipmitool(ctx0, v, v.sim.User, v.sim.Password, "chassis", "power", "on"); err != nil {
		t.Fatalf("ipmitool chassis power on: %v\n%s", err, out)
	}
	sol := solClient(t, l, v)
	deadline := time.Now().Add(bootTimeout)
	for !strings.Contains(sol.out.String(), "rackd-enlist: ") {
		if time.Now().After(deadline) {
			t.Fatalf("ipmitool sol activate showed no enlistment line within %v:\n%s", bootTimeout, sol.out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	sol.detach(t)
	if line := firstEnlistLine(sol.out.String()); !strings.Contains(v.text(), line) {
		t.Errorf("ipmitool showed %q, which the VM's serial log lacks", line)
	}
	v.waitPower(false) // it powers off once enlisted
	var ms []api.Machine
	l.call(http.StatusOK, "GET", "/api/v1/machines", nil, &ms)
	var m api.Machine
	for _, x := range ms {
		if len(x.MACs) > 0 && x.MACs[0] == v.mac {
			m = x
		}
	}
	if m.ID == "" {
		t.Fatalf("the VM did not enlist: %+v", ms)
	}
	l.call(http.StatusOK, "PATCH", "/api/v1/machines/"+m.ID, map[string]any{"hostname": "vm1",
		"power": map[string]any{"driver": "ipmi", "address": v.sim.Addr, "username": v.sim.User, "password": v.sim.Password}}, &m)
	l.cli("machines", "commission", "vm1")

	// rackd console, read-only, while the recorder holds the BMC's SOL:
	// it joins that session and shows the environment's progress.
	c := client.New(l.url, l.token, client.WithHTTPClient(l.client))
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	var (
		shown bytes.Buffer
		con   io.ReadWriteCloser
		buf   = make([]byte, 4096)
	)
	for !bytes.Contains(shown.Bytes(), []byte("rackd-enlist: ")) {
		if con == nil {
			var err error
			if con, err = c.Console(ctx, "vm1", false); err != nil {
				if ctx.Err() != nil {
					t.Fatalf("rackd console never attached: %v; it showed:\n%s", err, shown.String())
				}
				time.Sleep(time.Second) // the recorder is still attaching
				continue
			}
		}
		n, err := con.Read(buf)
		shown.Write(buf[:n])
		if err != nil {
			// The BMC dropped the session (an overloaded ipmi_sim
			// stops answering for seconds): attach again, as an
			// operator would.
			t.Logf("rackd console ended (%v); attaching again", err)
			con.Close()
			con = nil
		}
	}
	con.Close()
	// What rackd showed is what the VM printed.
	if line := lastFullLine(shown.String()); line == "" || !strings.Contains(v.text(), line) {
		t.Errorf("rackd console showed %q, which the VM's serial log lacks", line)
	}
	m, _ = l.waitState(m.ID, "READY", "FAILED_COMMISSIONING")
	if list := l.cli("machines", "console-log", "vm1", "--list"); !strings.Contains(list, "commission") {
		t.Errorf("console-log --list after commissioning:\n%s", list)
	}
	// Output before the BMC's SOL reached the VM's serial port (the
	// firmware, the first kernel lines) is not relayed: the environment's
	// own lines are.
	if log := l.cli("machines", "console-log", "vm1"); !strings.Contains(log, "rackd-enlist: claimed the commission credential") || !strings.Contains(log, "rackd-enlist: inventory: ") {
		t.Errorf("the commissioning's console log lacks the environment:\n%s", log)
	}

	// A failed deployment (an image whose bytes rotted in rackd's store):
	// its FAILED_DEPLOYMENT event carries the end of the deploy boot's
	// console, with the environment's own words about the failure.
	badDir, badSHA := rawImage(t, "e2e-raw-bad", corruptMarker, 2)
	l.importImage(badDir)
	blob := filepath.Join(l.state, "images", "sha256", badSHA)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatalf("blob of the bad image: %v", err)
	}
	data[5<<20] ^= 0xFF
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l.waitObservedOff(m.ID)
	l.cli("allocate", "--name", "vm1", "--agent-name", "e2e")
	l.cli("machines", "deploy", "vm1", "--image", "e2e-raw-bad")
	m, _ = l.waitState(m.ID, "FAILED_DEPLOYMENT", "DEPLOYED")
	e := l.lastEvent(m.ID)
	if !strings.Contains(e.Reason, "sha256 mismatch") {
		t.Errorf("the failure event: %+v", e)
	}
	if !strings.Contains(e.Console, "rackd-enlist: ") {
		t.Errorf("the FAILED_DEPLOYMENT event's console tail lacks the deploy environment's lines:\n%s", e.Console)
	} else if !strings.Contains(v.text(), lastFullLine(e.Console)) {
		t.Errorf("the event's console tail ends with %q, which the VM's serial log lacks", lastFullLine(e.Console))
	}
	t.Logf("the failure event's console tail ends:\n%s", tail(e.Console, 5))
}

// firstEnlistLine is the first whole line of s that holds "rackd-enlist: ".
func firstEnlistLine(s string) string {
	for line := range strings.SplitSeq(strings.ReplaceAll(s, "\r", ""), "\n") {
		if i := strings.Index(line, "rackd-enlist: "); i >= 0 {
			return strings.TrimSpace(line[i:])
		}
	}
	return ""
}

// solSession is an ipmitool sol activate running against the VM's BMC.
type solSession struct {
	out  netnstest.Buffer
	in   io.WriteCloser
	done chan error
}

// solClient starts ipmitool's SOL client inside the lab's namespace, where
// the BMC listens (its escape key ~. ends it).
func solClient(t *testing.T, l *lab, v *bmcVM) *solSession {
	t.Helper()
	s := &solSession{done: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	tool := exec.CommandContext(ctx, netnstest.Tool(t, "ipmitool"), "-I", "lanplus", "-C", "3", "-H", v.sim.Host,
		"-p", strconv.Itoa(v.sim.Port), "-U", v.sim.User, "-E", "sol", "activate")
	tool.Env = append(tool.Environ(), "IPMI_PASSWORD="+v.sim.Password)
	tool.Stdout, tool.Stderr = &s.out, &s.out
	var err error
	if s.in, err = tool.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	// Started from a thread inside the namespace, it lives there.
	if err := l.ns.Do(tool.Start); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- tool.Wait() }()
	return s
}

// detach types ipmitool's escape (~. after a newline) and waits for it to
// end.
func (s *solSession) detach(t *testing.T) {
	t.Helper()
	io.WriteString(s.in, "\r~.")
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("ipmitool sol activate: %v\n%s", err, s.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("ipmitool sol activate did not end on ~.:\n%s", s.out.String())
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// lastFullLine is the last non-empty line of s that ends with a newline.
func lastFullLine(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r", ""), "\n")
	for i := len(lines) - 2; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}
