package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"rackd/internal/vmtest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
)

// The lab's addresses, inside the test's own namespace.
var (
	labServer = netip.MustParseAddr("10.79.0.1")
	labULA    = netip.MustParsePrefix("fd00:79::1/64")
)

const (
	labHTTPPort = 5240
	// bootTimeout bounds every wait on a VM: TCG boots take 15-25 s
	// alone, several times that on two loaded cores.
	bootTimeout = 300 * time.Second
)

func TestMain(m *testing.M) { os.Exit(vmtest.Main(m)) }

var (
	imageOnce sync.Once
	imageDir  string
	imageErr  error
)

// enlistImage returns the directory of the enlistment image (kernel,
// initramfs, rackd-image.json), building it with scripts/initramfs.sh
// --if-stale, which returns at once when the image there was built from this
// checkout's sources and rebuilds it otherwise: an image left from an older
// checkout carries an enlist client that may speak an older protocol.
// RACKD_E2E_IMAGE names another directory.
func enlistImage(t testing.TB) string {
	t.Helper()
	imageOnce.Do(func() {
		if d := os.Getenv("RACKD_E2E_IMAGE"); d != "" {
			imageDir = d
			return
		}
		root := vmtest.RepoRoot(t)
		imageDir = filepath.Join(root, "build", "initramfs", "image")
		start := time.Now()
		out, err := vmtest.Script(t, 15*time.Minute, nil, "scripts/initramfs.sh", "--if-stale")
		if err != nil {
			imageErr = fmt.Errorf("scripts/initramfs.sh --if-stale: %v\n%s", err, out)
			return
		}
		if len(out) == 0 {
			return // up to date
		}
		t.Logf("built the enlistment image in %v", time.Since(start).Round(time.Second))
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageDir
}

// lab is one namespace with a bridge, rackd serving DHCP, TFTP and HTTP on
// it, and router advertisements so that iPXE's IPv6 configuration ends at
// once instead of timing out.
type lab struct {
	t      *testing.T
	ns     *netnstest.NS
	br     string
	dir    string
	state  string
	rackd  *netnstest.Proc
	url    string // rackd's HTTP base, as the VMs reach it
	token  string
	client *http.Client
	logs   []string // rackd's output before each restart
}

// labOptions change a lab's rackd configuration.
type labOptions struct {
	tftp             bool   // serve TFTP on the bridge (UEFI PXE needs it)
	defaultFirst     int    // boot.default_first
	noDHCP           bool   // serve no DHCP (machines keep what they were given)
	deployingTimeout string // lifecycle.deploying_timeout, when set
}

// newLab builds the namespace and starts rackd in it with a subnet for the
// bridge. The namespace and every process in it are removed when the test
// ends.
func newLab(t *testing.T, o labOptions) *lab {
	t.Helper()
	netnstest.Require(t)
	ns := netnstest.New(t)
	br := ns.Bridge()
	ns.AddAddr(br, netip.PrefixFrom(labServer, 24))
	ns.AddAddr(br, labULA)
	dir := t.TempDir()
	l := &lab{t: t, ns: ns, br: br, dir: dir, state: filepath.Join(dir, "state"),
		url: fmt.Sprintf("http://%s:%d", labServer, labHTTPPort)}
	l.client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		// rackd listens inside the namespace: dial there.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(l.client.CloseIdleConnections)
	l.startRackd(o)
	tok, err := os.ReadFile(filepath.Join(l.state, "admin.token"))
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	l.token = strings.TrimSpace(string(tok))
	l.call(http.StatusCreated, "POST", "/api/v1/subnets", api.Subnet{
		CIDR: "10.79.0.0/24", Gateway: labServer.String(), DNSServers: []string{labServer.String()},
		Domain: "e2e.test", LeaseSeconds: 600,
		DynamicRanges: []api.Range{{Start: "10.79.0.100", End: "10.79.0.199"}}}, nil)
	startRAs(t, ns, br)
	return l
}

// startRackd writes rackd's configuration for o and starts it on the lab's
// state directory, waiting until it is healthy.
func (l *lab) startRackd(o labOptions) {
	l.t.Helper()
	cfg := "[dhcp]\n"
	if !o.noDHCP {
		cfg += fmt.Sprintf("interfaces = [%q]\nprobe_timeout = \"0s\"\n", l.br)
	} else {
		cfg += "interfaces = []\n"
	}
	if o.tftp {
		cfg += fmt.Sprintf("[tftp]\nlisten = \"%s:69\"\n", labServer)
	}
	if o.defaultFirst > 0 {
		cfg += fmt.Sprintf("[boot]\ndefault_first = %d\n", o.defaultFirst)
	}
	if o.deployingTimeout != "" {
		cfg += fmt.Sprintf("[lifecycle]\ndeploying_timeout = %q\n", o.deployingTimeout)
	}
	cfgPath := filepath.Join(l.dir, "rackd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		l.t.Fatal(err)
	}
	l.rackd = l.ns.Start(vmtest.Rackd(l.t), "serve", "--config", cfgPath, "--state-dir", l.state,
		"--listen", fmt.Sprintf("%s:%d", labServer, labHTTPPort), "--log-format", "json", "--log-level", "debug")
	p := l.rackd
	l.t.Cleanup(func() {
		// A failed test may have waited on a rackd that stopped
		// answering: SIGQUIT makes it print every goroutine's stack
		// into its output (logged by netnstest) as it exits.
		if l.t.Failed() {
			select {
			case <-p.Done():
			default:
				_ = p.Signal(syscall.SIGQUIT)
				_ = p.Wait(10 * time.Second)
			}
		}
	})
	l.waitHealthy()
}

// restart stops rackd and starts it again on the same state with the
// configuration of o; what it logged before is kept in logs.
func (l *lab) restart(o labOptions) {
	l.t.Helper()
	if err := l.rackd.Stop(30 * time.Second); err != nil {
		l.t.Logf("rackd stopped: %v", err)
	}
	l.logs = append(l.logs, l.rackd.Output())
	l.client.CloseIdleConnections()
	l.startRackd(o)
}

// log returns everything rackd logged in this lab, across restarts.
func (l *lab) log() string { return strings.Join(append(slices.Clone(l.logs), l.rackd.Output()), "") }

// waitHealthy waits until rackd answers /healthz.
func (l *lab) waitHealthy() {
	l.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := l.client.Get(l.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-l.rackd.Done():
			l.t.Fatalf("rackd exited: %v\n%s", l.rackd.Wait(0), l.rackd.Output())
		default:
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("rackd not healthy after 30s (%v):\n%s", err, l.rackd.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// call makes an API call that must answer want; out receives the body.
func (l *lab) call(want int, method, path string, body, out any) {
	l.t.Helper()
	l.callAs(l.token, want, method, path, body, out)
}

// callAs is call with another user's token.
func (l *lab) callAs(token string, want int, method, path string, body, out any) {
	l.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			l.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, l.url+path, rd)
	if err != nil {
		l.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		l.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		l.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			l.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
}

// cli runs the rackd CLI inside the namespace against the lab's rackd, as
// an operator on the appliance would, and returns its output.
func (l *lab) cli(args ...string) string {
	l.t.Helper()
	return l.cliAs(l.token, args...)
}

// cliAs is cli with another user's token.
func (l *lab) cliAs(token string, args ...string) string {
	l.t.Helper()
	return l.cliFor(2*time.Minute, token, args...)
}

// cliFor is cliAs bounded by d.
func (l *lab) cliFor(d time.Duration, token string, args ...string) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	args = append(args, "--url", l.url, "--api-token", token)
	out, err := l.ns.Exec(ctx, vmtest.Rackd(l.t), args...)
	if err != nil {
		l.t.Fatalf("rackd %s: %v\n%s", strings.Join(args[:len(args)-4], " "), err, out)
	}
	return string(out)
}

// importImage imports an image directory with `rackd images import`.
func (l *lab) importImage(dir string) {
	l.t.Helper()
	start := time.Now()
	// An import of a compressed disk decompresses it once to check it:
	// minutes for an xz image of a GiB on a busy machine.
	l.cliFor(10*time.Minute, l.token, "images", "import", dir)
	l.t.Logf("imported %s in %v", dir, time.Since(start).Round(time.Millisecond))
}

// machines lists the machines with `rackd machines list --json`.
func (l *lab) machines() []api.Machine {
	l.t.Helper()
	var ms []api.Machine
	out := l.cli("machines", "list", "--json")
	if err := json.Unmarshal([]byte(out), &ms); err != nil {
		l.t.Fatalf("machines list --json: %v\n%s", err, out)
	}
	return ms
}

// waitMachine waits until rackd has a machine with mac, polling the API,
// and returns how long after the VM's start it first saw it. It fails the
// test when the enlist client gives up, when QEMU has exited without the
// machine appearing, or after bootTimeout.
func (l *lab) waitMachine(v *vm, mac string) (api.Machine, time.Duration) {
	l.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		var ms []api.Machine
		l.call(http.StatusOK, "GET", "/api/v1/machines", nil, &ms)
		for _, m := range ms {
			for _, x := range m.MACs {
				if strings.EqualFold(x, mac) {
					return m, time.Since(v.start)
				}
			}
		}
		v.failed()
		select {
		case <-v.proc.Done():
			// It may have enlisted just before powering off: one
			// more look.
			l.call(http.StatusOK, "GET", "/api/v1/machines", nil, &ms)
			for _, m := range ms {
				if slices.ContainsFunc(m.MACs, func(x string) bool { return strings.EqualFold(x, mac) }) {
					return m, time.Since(v.start)
				}
			}
			l.t.Fatalf("QEMU exited (%v) and rackd has no machine with MAC %s", v.proc.Wait(time.Second), mac)
		default:
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("no machine with MAC %s in rackd within %v", mac, bootTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// machineByMAC returns the machine with mac, if any.
func (l *lab) machineByMAC(mac string) (api.Machine, bool) {
	l.t.Helper()
	for _, m := range l.machines() {
		for _, x := range m.MACs {
			if strings.EqualFold(x, mac) {
				return m, true
			}
		}
	}
	return api.Machine{}, false
}

// metric returns the sum of the samples of a counter family whose labels
// contain every one of match (`type="ACK"`), read from /metrics.
func (l *lab) metric(name string, match ...string) float64 {
	l.t.Helper()
	resp, err := l.client.Get(l.url + "/metrics")
	if err != nil {
		l.t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var sum float64
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// copyImage copies the image directory src into a new directory with its
// manifest's name and purpose replaced: the same kernel and initramfs as
// another environment (a deploy image, say).
func copyImage(t *testing.T, src, name, purpose string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(src, "rackd-image.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s/rackd-image.json: %v", src, err)
	}
	m["name"], m["purpose"] = name, purpose
	dst := t.TempDir()
	files, _ := m["files"].([]any)
	for _, f := range files {
		p, _ := f.(map[string]any)["path"].(string)
		b, err := os.ReadFile(filepath.Join(src, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dst, "rackd-image.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

var (
	loadersOnce sync.Once
	loadersDir  string
	loadersErr  error
)

// bootloaders returns the amd64 bootloader image directory that `make
// bootloaders` builds from Debian's packages (shim, GRUB, iPXE, pxelinux),
// building it into build/e2e-bootloaders when it is missing (the .debs are
// cached where make bootloaders caches them).
func bootloaders(t testing.TB) string {
	t.Helper()
	loadersOnce.Do(func() {
		root := vmtest.RepoRoot(t)
		dest := filepath.Join(root, "build", "e2e-bootloaders")
		loadersDir = filepath.Join(dest, "amd64")
		_, err1 := os.Stat(filepath.Join(loadersDir, "rackd-image.json"))
		_, err2 := os.Stat(filepath.Join(dest, "grub-amd64", "rackd-image.json"))
		if err1 == nil && err2 == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "scripts/bootloaders.sh", "--image",
			"--cache", filepath.Join(root, "build", "bootloaders-cache"), dest)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			loadersErr = fmt.Errorf("scripts/bootloaders.sh: %v\n%s", err, out)
		}
	})
	if loadersErr != nil {
		t.Fatal(loadersErr)
	}
	return loadersDir
}
