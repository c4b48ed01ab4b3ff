package main

// The operator's boot path as firmware walks it: a real rackd listening on
// every address of a server namespace, as the appliance's rackd.toml has
// it, and TFTP-only clients (tftp-hpa, atftp) in a client namespace across
// a veth pair, fetching what BIOS pxelinux and UEFI GRUB fetch. Root only
// (network namespaces).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
)

// bootLab is rackd in a server namespace and a client namespace joined to
// it by a veth pair: 10.79.0.1 (rackd) and 10.79.0.2 (the client).
type bootLab struct {
	srv, cl *netnstest.NS
	state   string
	client  *http.Client
}

var bootLabServer = netip.MustParseAddr("10.79.0.1")

func newBootLab(t *testing.T) *bootLab {
	t.Helper()
	netnstest.Require(t)
	l := &bootLab{srv: netnstest.New(t), cl: netnstest.New(t), state: filepath.Join(t.TempDir(), "state")}
	ifS, ifC := netnstest.Veth(t, l.srv, l.cl)
	l.srv.AddAddr(ifS, netip.PrefixFrom(bootLabServer, 24))
	l.cl.AddAddr(ifC, netip.MustParsePrefix("10.79.0.2/24"))
	l.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := l.srv.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(l.client.CloseIdleConnections)
	return l
}

// start runs rackd in the server namespace with config (TOML) on the lab's
// state directory; --listen is the config's own, given again because the
// test daemon's default flag would override it.
func (l *bootLab) start(t *testing.T, listen, config string) *daemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rackd.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemonIn(t, l.srv.Name, l.state, "--config", path, "--listen", listen)
	// The API as an operator on the box reaches it (the serving line
	// says [::] for every address).
	_, port, _ := net.SplitHostPort(listen)
	d.url = "http://127.0.0.1:" + port
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rackd log:\n%s", d.stderr.String())
		}
	})
	return d
}

// importEnlist imports a small enlistment image and returns its kernel's
// sha256 (its path in the boot tree is images/<sha256>).
func (l *bootLab) importEnlist(t *testing.T, d *daemon) string {
	t.Helper()
	dir := t.TempDir()
	kernel, initrd := []byte(strings.Repeat("KERNEL", 1000)), []byte(strings.Repeat("INITRD", 1000))
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	m, _ := json.Marshal(map[string]any{"name": "enlist", "arch": "amd64", "purpose": "enlist", "files": []map[string]any{
		{"path": "vmlinuz", "role": "kernel", "sha256": sum(kernel), "size": len(kernel)},
		{"path": "initrd.img", "role": "initrd", "sha256": sum(initrd), "size": len(initrd)},
	}})
	for n, b := range map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd, "rackd-image.json": m} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status, raw, err := d.api(l.client, adminToken(t, l.state), "POST", "/api/v1/images/import", api.ImportImage{Dir: dir}, nil)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("import: %d %s (%v)", status, raw, err)
	}
	return sum(kernel)
}

// tftpGet fetches name from rackd's TFTP server with a real client from the
// client namespace and returns the file, or fails with what the client
// printed.
func (l *bootLab) tftpGet(t *testing.T, client, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "got")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := bootLabServer.String()
	var msg []byte
	var err error
	switch client {
	case "tftp-hpa":
		// tftp-hpa exits 0 on a TFTP error and reads a colon in a
		// bare name as a host separator: host:name, see the tftp
		// package's peer tests.
		msg, err = l.cl.Exec(ctx, netnstest.Tool(t, "tftp"), "-m", "binary", srv, "69", "-c", "get", srv+":"+name, out)
	case "atftp":
		msg, err = l.cl.Exec(ctx, netnstest.Tool(t, "atftp"), "--option", "blksize 1468", "-g", "-r", name, "-l", out, srv, "69")
	default:
		t.Fatalf("unknown client %s", client)
	}
	got, rerr := os.ReadFile(out)
	if err != nil || rerr != nil || len(got) == 0 {
		t.Fatalf("%s get %s: %v, %v; it said: %s", client, name, err, rerr, msg)
	}
	return string(got)
}

// TestE2EBootTFTPAnyAddress: with the default dhcp.http_url (empty) and
// rackd listening on every address, what BIOS pxelinux (pxelinux.cfg/...)
// and UEFI GRUB (grub/grub.cfg-...) fetch over TFTP points at the address
// the client reached rackd by; an http_url set by hand still wins.
func TestE2EBootTFTPAnyAddress(t *testing.T) {
	l := newBootLab(t)
	const port = "5240" // the namespace is the test's own: any port is free
	d := l.start(t, "0.0.0.0:"+port, "listen = \"0.0.0.0:"+port+"\"\n[tftp]\nlisten = \"0.0.0.0:69\"\n")
	kernel := l.importEnlist(t, d)
	base := "http://" + bootLabServer.String() + ":" + port
	const mac = "52:54:00:79:00:02"
	for _, tt := range []struct{ client, name, want string }{
		{"tftp-hpa", "pxelinux.cfg/default", "rackd.url=" + base},
		{"atftp", "pxelinux.cfg/01-52-54-00-79-00-02", "rackd.url=" + base},
		{"tftp-hpa", "grub/grub.cfg-default-amd64", "(http," + bootLabServer.String() + ":" + port + ")/boot"},
		{"atftp", "grub/grub.cfg-" + mac, "rackd.url=" + base},
		{"atftp", "ipxe/" + mac + ".ipxe", base + "/boot/images/" + kernel},
	} {
		got := l.tftpGet(t, tt.client, tt.name)
		if !strings.Contains(got, tt.want) || !strings.Contains(got, kernel) {
			t.Errorf("%s %s: want %q and the enlistment kernel in:\n%s", tt.client, tt.name, tt.want, got)
		}
	}
	d.stop(t)

	// Set by hand, dhcp.http_url is what TFTP-served configs point at.
	const fixed = "http://rackd-boot.test:8080"
	l.start(t, "0.0.0.0:"+port, fmt.Sprintf("listen = \"0.0.0.0:%s\"\n[dhcp]\nhttp_url = %q\n[tftp]\nlisten = \"0.0.0.0:69\"\n", port, fixed))
	for _, c := range []string{"tftp-hpa", "atftp"} {
		got := l.tftpGet(t, c, "pxelinux.cfg/default")
		if !strings.Contains(got, "rackd.url="+fixed) || strings.Contains(got, base) {
			t.Errorf("%s with http_url %s:\n%s", c, fixed, got)
		}
	}
}

// TestServeWarnsUnreachableBoot: rackd serve with DHCP on and HTTP and TFTP
// out of the machines' reach (the defaults: loopback, TFTP off) says so on
// its output, with the fix, before it announces that it serves.
func TestServeWarnsUnreachableBoot(t *testing.T) {
	// A relay-only DHCP socket on loopback is enough to turn DHCP on.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dhcpAddr := pc.LocalAddr().String()
	pc.Close()
	path := filepath.Join(t.TempDir(), "rackd.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("[dhcp]\nlisten = [%q]\n", dhcpAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, t.TempDir(), "--config", path)
	out := d.stderr.String()
	var warned []string
	for _, line := range strings.Split(out, "\n") {
		var l struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == "WARN" {
			warned = append(warned, l.Msg)
		}
	}
	want := []string{"HTTP (boot files, kernels, /metadata/ for the enlistment environment) listens on loopback only", `Fix: listen = "0.0.0.0:`,
		"TFTP is off", `Fix: [tftp] listen = "0.0.0.0:69"`}
	all := strings.Join(warned, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("rackd serve did not warn %q; its output:\n%s", w, out)
		}
	}
	d.stop(t)
}
