package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// bmcCmd is one rackd-lab BMC command running in the test, as an operator
// runs it: Run with its arguments, until the context ends.
type bmcCmd struct {
	line   string // the first line it printed
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	code   int           // what it returned
	pidf   string        // where the machine writes its PID when the power goes on
}

// startBMC runs rackd-lab KIND --listen LISTEN with a machine that writes
// its PID into a file and sleeps, and waits for the line saying where it
// listens.
func startBMC(t *testing.T, kind, listen string, extra ...string) *bmcCmd {
	t.Helper()
	b := &bmcCmd{done: make(chan struct{}), pidf: filepath.Join(t.TempDir(), "machine.pid")}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	pr, pw := io.Pipe()
	args := append([]string{kind, "--listen", listen, "--user", "op", "--password", "pw-" + kind}, extra...)
	args = append(args, "--", "sh", "-c", "echo $$ >"+b.pidf+"; exec sleep 600")
	go func() {
		b.code = Run(ctx, args, pw, pw)
		pw.Close()
		close(b.done)
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
			t.Logf("rackd-lab %s: %s", kind, sc.Text())
		}
		if first {
			close(lines)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.done:
		case <-time.After(20 * time.Second):
			t.Errorf("rackd-lab %s did not stop within 20s of its context's end", kind)
		}
	})
	select {
	case l, ok := <-lines:
		if !ok {
			<-b.done
			t.Fatalf("rackd-lab %s exited (%d) before saying where it listens", kind, b.code)
		}
		b.line = l
	case <-time.After(30 * time.Second):
		t.Fatalf("rackd-lab %s said nothing within 30s", kind)
	}
	return b
}

// machinePID is the running machine's PID (0 when it never started).
func (b *bmcCmd) machinePID() int {
	raw, err := os.ReadFile(b.pidf)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid
}

func running(pid int) bool { return pid > 0 && procStart(pid) != "" }

// stop ends the command as SIGTERM does (its context) and checks that it
// exits 0 and takes its machine with it.
func (b *bmcCmd) stop(t *testing.T) {
	t.Helper()
	pid := b.machinePID()
	b.cancel()
	select {
	case <-b.done:
		if b.code != 0 {
			t.Fatalf("exit status %d after SIGTERM, want 0", b.code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop within 20s")
	}
	if running(pid) {
		t.Fatalf("the machine (pid %d) outlived its BMC", pid)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 15s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRedfishCommand: the Redfish BMC an operator starts with rackd-lab
// redfish answers DMTF's redfishtool and curl (with its certificate as the
// CA, so the address it listens on is in the certificate); its power runs
// the machine, and SIGTERM stops both.
func TestRedfishCommand(t *testing.T) {
	rt := netnstest.Tool(t, "redfishtool")
	curl := netnstest.Tool(t, "curl")
	b := startBMC(t, "redfish", "127.0.0.1:0")
	m := regexp.MustCompile(`at https://(\S+) \(user op\), certificate sha256 ([0-9a-f]{64}), power Off`).FindStringSubmatch(b.line)
	if m == nil {
		t.Fatalf("first line %q: want the URL, the user, the certificate's fingerprint and the power", b.line)
	}
	addr := m[1]
	tool := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		argv := append([]string{"-r", addr, "-u", "op", "-p", "pw-redfish", "-S", "Always", "-T", "10", "-A", "Session"}, args...)
		out, err := exec.CommandContext(ctx, rt, argv...).CombinedOutput()
		if err != nil {
			t.Fatalf("redfishtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tool("Systems", "-1", "setBootOverride", "Once", "Pxe")
	tool("Systems", "-1", "reset", "On")
	waitFor(t, "the machine started by power on", func() bool { return running(b.machinePID()) })
	first := b.machinePID()

	// curl, checking the certificate against itself as the CA.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pem, err := exec.CommandContext(ctx, "sh", "-c", "echo | openssl s_client -connect "+addr+" 2>/dev/null | openssl x509").Output()
	if err != nil || len(pem) == 0 {
		t.Fatalf("the BMC's certificate through openssl s_client: %v", err)
	}
	if err := os.WriteFile(ca, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, curl, "-sS", "--fail", "--cacert", ca, "-u", "op:pw-redfish", "https://"+addr+"/redfish/v1/Systems/1").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	var sys struct {
		PowerState string
		Boot       struct{ BootSourceOverrideEnabled, BootSourceOverrideTarget string }
	}
	if err := json.Unmarshal(out, &sys); err != nil {
		t.Fatalf("curl's answer: %v: %s", err, out)
	}
	if sys.PowerState != "On" || sys.Boot.BootSourceOverrideEnabled != "Disabled" {
		t.Fatalf("curl says %+v: want On, the one-time override used by the power-on", sys)
	}
	out, _ = exec.CommandContext(ctx, curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", ca, "-u", "op:wrong", "https://"+addr+"/redfish/v1/Systems/1").CombinedOutput()
	if string(out) != "401" {
		t.Fatalf("curl with a wrong password: %s, want 401", out)
	}

	tool("Systems", "-1", "reset", "ForceOff")
	waitFor(t, "the machine stopped by power off", func() bool { return !running(first) })
	tool("Systems", "-1", "reset", "On")
	waitFor(t, "the machine started again", func() bool { p := b.machinePID(); return p != first && running(p) })
	b.stop(t)
}

// TestIPMICommand: the ipmi_sim BMC an operator starts with rackd-lab
// ipmi answers ipmitool; its power runs the machine, and SIGTERM stops
// both.
func TestIPMICommand(t *testing.T) {
	netnstest.Tool(t, "ipmi_sim")
	it := netnstest.Tool(t, "ipmitool")
	host := fmt.Sprintf("127.0.9.%d", 2+rand.IntN(250))
	b := startBMC(t, "ipmi", host+":623")
	if !strings.Contains(b.line, "at "+host+":623 (user op") {
		t.Fatalf("first line %q: want the address and the user", b.line)
	}
	tool := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, it, append([]string{"-I", "lanplus", "-C", "3", "-H", host, "-U", "op", "-E"}, args...)...)
		cmd.Env = append(os.Environ(), "IPMI_PASSWORD=pw-ipmi")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ipmitool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := tool("chassis", "power", "status"); !strings.Contains(out, "is off") {
		t.Fatalf("power status at start: %s", out)
	}
	tool("chassis", "bootdev", "pxe")
	tool("chassis", "power", "on")
	waitFor(t, "the machine started by power on", func() bool { return running(b.machinePID()) })
	if out := tool("chassis", "power", "status"); !strings.Contains(out, "is on") {
		t.Fatalf("power status after on: %s", out)
	}
	first := b.machinePID()
	tool("chassis", "power", "off")
	waitFor(t, "the machine stopped by power off", func() bool { return !running(first) })
	tool("chassis", "power", "on")
	waitFor(t, "the machine started again", func() bool { p := b.machinePID(); return p != first && running(p) })
	b.stop(t)
}

// TestBMCUsage: command lines that cannot run say why, exit 2, and start
// nothing.
func TestBMCUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"redfish", "--nosuch"},
		{"redfish", "qemu"},
		{"up", "--machines", "0"},
		{"up", "--accel", "hvf"},
		{"ra", "--interface", "br0", "--prefix", "10.0.0.0/24"},
	} {
		var out strings.Builder
		if code := Run(context.Background(), args, &out, &out); code != 2 {
			t.Errorf("rackd-lab %q: exit %d, want 2\n%s", args, code, out.String())
		}
		if !strings.Contains(out.String(), "usage:") {
			t.Errorf("rackd-lab %q: no usage in %q", args, out.String())
		}
	}
}
