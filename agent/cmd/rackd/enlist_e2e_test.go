package main

// The enlist program (enlist/cmd/enlist), built as it goes into the
// initramfs, run in a client network namespace against the real rackd
// binary: u-root's DHCP client gets its lease from rackd's DHCP server over
// a veth, reads the machine's /sys and /proc, asks whoami, enlists. It runs
// with -dry-run AND in a PID namespace of its own (unshare --pid), where
// even a reboot call would only end that namespace: a test must never
// power off the machine it runs on. The real-VM tests boot it for real.
//
// NEEDS ROOT (network namespaces); skips otherwise.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/netnstest"
)

var (
	enlistOnce sync.Once
	enlistBin  string
	enlistErr  error
)

// enlistBinary builds the enlist program once, static as in the initramfs.
func enlistBinary(t *testing.T) string {
	t.Helper()
	enlistOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rackd-enlist-bin-")
		if err != nil {
			enlistErr = err
			return
		}
		enlistBin = filepath.Join(dir, "enlist")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", enlistBin, "rackd/enlist/cmd/enlist")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			enlistErr = fmt.Errorf("go build enlist: %v\n%s", err, out)
		}
	})
	if enlistErr != nil {
		t.Fatal(enlistErr)
	}
	return enlistBin
}

func TestE2EEnlistClient(t *testing.T) {
	netnstest.Require(t)
	unshare := netnstest.Tool(t, "unshare")
	bin := enlistBinary(t) // built once per process, removed by TestMain

	// The server side: rackd with DHCP on a bridge, its API on every
	// address of its namespace so that the client reaches it at 10.77.0.1.
	srv := netnstest.New(t)
	br := srv.Bridge()
	srv.AddAddr(br, netip.PrefixFrom(e2eServer, 24))
	dir := t.TempDir()
	l := &e2eLab{srv: srv, br: br, state: filepath.Join(dir, "state"), config: filepath.Join(dir, "rackd.toml")}
	if err := os.WriteFile(l.config, []byte(fmt.Sprintf("[dhcp]\ninterfaces = [%q]\nprobe_timeout = \"0s\"\n", br)), 0o644); err != nil {
		t.Fatal(err)
	}
	l.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := srv.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(l.client.CloseIdleConnections)
	l.d = startDaemonIn(t, srv.Name, l.state, "--config", l.config, "--listen", "0.0.0.0:0")
	u, err := url.Parse(l.d.url) // "http://[::]:PORT": the address it bound, not one to dial
	if err != nil {
		t.Fatal(err)
	}
	l.d.url = "http://" + net.JoinHostPort("127.0.0.1", u.Port())
	rackdURL := "http://" + net.JoinHostPort(e2eServer.String(), u.Port())
	l.token = adminToken(t, l.state)
	l.createSubnet(t, e2eSubnet())

	// The machine: a namespace on the bridge. Its veth looks virtual in
	// /sys, hence -interfaces.
	ns, ifname := l.newClient(t)
	mac := ns.MAC(ifname).String()
	runEnlist := func() string {
		t.Helper()
		p := ns.Start(unshare, "--pid", "--fork", "--kill-child", bin, "-url", rackdURL, "-interfaces", ifname,
			"-dry-run", "-modules", "", "-tries", "5", "-dhcp-timeout", "30s", "-attempt-timeout", "10s")
		if err := p.Wait(120 * time.Second); err != nil {
			t.Fatalf("enlist: %v\n%s", err, p.Output())
		}
		return p.Output()
	}
	out := runEnlist()
	t.Logf("enlist's console:\n%s", out)
	final := finalLine(out)
	id, ok := strings.CutPrefix(final, enlist.MarkerEnlisted)
	id, ok2 := strings.CutSuffix(id, ", "+enlist.SuffixPowerOff)
	if !ok || !ok2 || !strings.Contains(out, enlist.Prefix+"network up on "+ifname) ||
		!strings.Contains(out, enlist.Prefix+"dry run: not acting") {
		t.Fatalf("final line %q:\n%s", final, out)
	}
	var m api.Machine
	l.call(t, http.StatusOK, "GET", "/api/v1/machines/"+id, nil, &m)
	if m.State != "NEW" || len(m.MACs) != 1 || m.MACs[0] != mac || m.CPUCount < 1 || m.MemoryMB < 1 || m.Arch != runtime.GOARCH {
		t.Errorf("enlisted machine %+v", m)
	}
	if _, ok := l.leaseOf(t, ns.MAC(ifname)); !ok {
		t.Errorf("no lease for %s after the enlist program's DHCP", mac)
	}

	// Booted into the enlistment environment again: known, idle.
	out = runEnlist()
	if got := finalLine(out); got != enlist.MarkerKnown+"NEW), "+enlist.SuffixPowerOff {
		t.Errorf("second boot: final line %q:\n%s", got, out)
	}
	var all []api.Machine
	l.call(t, http.StatusOK, "GET", "/api/v1/machines", nil, &all)
	if len(all) != 1 {
		t.Errorf("%d machines after two boots", len(all))
	}
}

// finalLine is the enlist program's final console line.
func finalLine(out string) string {
	for _, line := range strings.Split(out, "\n") {
		for _, p := range []string{enlist.MarkerEnlisted, enlist.MarkerKnown, enlist.MarkerAlreadyKnown, enlist.MarkerFailed} {
			if strings.HasPrefix(line, p) {
				return line
			}
		}
	}
	return ""
}
