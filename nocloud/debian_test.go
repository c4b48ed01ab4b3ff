package nocloud

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestPeerDebianBoot boots a stock Debian 12 cloud image (stock cloud-init
// 22.4, no change to its cloud.cfg) from its own disk with our seed image as
// a second disk, on QEMU's user network, and checks what the OS became:
// cloud-init took the seed from NoCloud, set the host name and the FQDN
// (hostname -f), installed the SSH key for the default user, ran the
// user-data, configured the address statically with the gateway, DNS and
// search domain, phoned home with the instance-id, and its webhook reported
// the final stage's success and no failure. Opt-in: it takes minutes under
// TCG. RACKD_TEST_DEBIAN_IMAGE names the raw image (make image-debian builds
// one; the e2e tests boot it through rackd's whole deployment).
func TestPeerDebianBoot(t *testing.T) {
	raw := os.Getenv("RACKD_TEST_DEBIAN_IMAGE")
	if raw == "" {
		t.Skip("set RACKD_TEST_DEBIAN_IMAGE to a raw Debian 12 cloud image (make image-debian builds one) to boot it with a seed")
	}
	need(t, "qemu-system-x86_64", "qemu-img")
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.qcow2") // the image stays unchanged under it
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", raw, disk).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v\n%s", err, out)
	}

	// rackd's side: phone_home and the webhook, on the host's loopback,
	// which QEMU's user network shows the guest as 10.0.2.2.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []map[string]any
	phoned := make(chan url.Values, 8)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		switch {
		case strings.HasSuffix(r.URL.Path, "/phone-home"):
			v, _ := url.ParseQuery(string(b))
			phoned <- v
		case strings.HasSuffix(r.URL.Path, "/events"):
			var ev map[string]any
			if json.Unmarshal(b, &ev) == nil {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			}
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	base := fmt.Sprintf("http://10.0.2.2:%d/metadata/v1/os/test-token", ln.Addr().(*net.TCPAddr).Port)

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	signer, _ := ssh.NewSignerFromKey(priv)
	const mac = "52:54:00:ab:cd:ef"
	id := Identity{
		InstanceID: "i-debianboot",
		Hostname:   "seedtest.rack.example",
		SSHKeys:    []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " test"},
		UserData:   []byte("#cloud-config\nruncmd:\n  - [sh, -c, 'echo from-user-data > /var/tmp/marker']\n"),
		Interfaces: []Interface{{
			MAC:       mac,
			Addresses: []netip.Prefix{netip.MustParsePrefix("10.0.2.15/24")},
			Gateway:   netip.MustParseAddr("10.0.2.2"),
			DNS:       []netip.Addr{netip.MustParseAddr("10.0.2.3")},
			Search:    []string{"rack.example"},
		}},
		PhoneHomeURL: base + "/phone-home",
		EventsURL:    base + "/events",
	}
	img, err := render(t, id).Image()
	if err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(dir, "seed.img")
	write(t, seed, img)

	sshLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sshAddr := sshLn.Addr().String()
	sshLn.Close() // QEMU forwards this port to the guest's 22
	serial := filepath.Join(dir, "serial.log")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-accel", "tcg", "-cpu", "max", "-m", "1024", "-smp", "2", "-no-reboot",
		"-nographic", "-monitor", "none", "-serial", "file:"+serial,
		"-netdev", "user,id=n0,hostfwd=tcp:"+sshAddr+"-:22",
		"-device", "virtio-net-pci,netdev=n0,romfile=,mac="+mac,
		"-drive", "if=none,id=d0,format=qcow2,file="+disk, "-device", "virtio-blk-pci,drive=d0,bootindex=1",
		"-drive", "if=none,id=d1,format=raw,readonly=on,file="+seed, "-device", "virtio-blk-pci,drive=d1")
	start := time.Now()
	if err := qemu.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- qemu.Wait() }()
	t.Cleanup(func() {
		qemu.Process.Kill() // ours, by its PID
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(serial)
			t.Logf("serial console:\n%s", b)
		}
	})

	var form url.Values
	select {
	case form = <-phoned:
		t.Logf("phone_home %.0f s after power on", time.Since(start).Seconds())
	case err := <-exited:
		t.Fatalf("QEMU exited before the OS phoned home: %v", err)
	case <-ctx.Done():
		t.Fatal("no phone_home within 15 minutes")
	}
	if form.Get("instance_id") != id.InstanceID || form.Get("hostname") != "seedtest" || form.Get("fqdn") != id.Hostname {
		t.Errorf("phone_home posted %v", form)
	}

	// SSH is up by the time the final stage phones home; retry briefly
	// for the forwarded port all the same.
	cfg := &ssh.ClientConfig{User: "debian", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 30 * time.Second}
	var client *ssh.Client
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if client, err = ssh.Dial("tcp", sshAddr, cfg); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ssh debian@%s with the seed's key: %v", sshAddr, err)
		}
		time.Sleep(time.Second)
	}
	defer client.Close()
	sh := func(cmd string) string {
		t.Helper()
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		out, err := sess.CombinedOutput(cmd)
		if err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := sh("hostname -f"); got != id.Hostname {
		t.Errorf("hostname -f: %q", got)
	}
	if got := sh("cat /var/tmp/marker"); got != "from-user-data" {
		t.Errorf("the user-data's marker: %q", got)
	}
	addrs := sh("ip -o -4 addr show scope global")
	if !strings.Contains(addrs, "inet 10.0.2.15/24") || strings.Contains(addrs, "dynamic") {
		t.Errorf("the address is not static 10.0.2.15/24:\n%s", addrs)
	}
	if got := sh("ip -4 route show default"); !strings.HasPrefix(got, "default via 10.0.2.2 ") {
		t.Errorf("default route: %q", got)
	}
	if rc := sh("cat /etc/resolv.conf"); !hasFields(rc, "nameserver 10.0.2.3") || !hasFields(rc, "search rack.example") {
		t.Errorf("/etc/resolv.conf:\n%s", rc)
	}
	if st := sh("cloud-init status --long"); !strings.Contains(st, "status: done") || !strings.Contains(st, "DataSourceNoCloud") {
		t.Errorf("cloud-init status:\n%s", st)
	}

	// The webhook posts the final stage's finish after phone_home: wait
	// for it (bounded), then look at every event.
	finished := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range events {
			if ev["name"] == "modules-final" && ev["event_type"] == "finish" && ev["result"] == "SUCCESS" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(2 * time.Minute); !finished(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Error("no modules-final finish SUCCESS among the webhook's events")
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range events {
		if r := ev["result"]; r == "FAIL" || r == "WARN" {
			t.Errorf("cloud-init reported %v", ev)
		}
	}
	t.Logf("%d webhook events", len(events))
}
