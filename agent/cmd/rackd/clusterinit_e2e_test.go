package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
)

// node is one appliance of a cluster test: its state directory and
// the ports of its etcd member and cluster TLS listener.
type node struct {
	name, state           string
	client, peer, tlsPort int
	d                     *daemon
}

func newNode(t *testing.T, name string) *node {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return &node{name: name, state: filepath.Join(t.TempDir(), name), client: ports[0], peer: ports[1], tlsPort: ports[2]}
}

func (p *node) memberArgs() []string {
	return []string{"--state-dir", p.state, "--name", p.name, "--advertise", "127.0.0.1",
		"--client-port", strconv.Itoa(p.client), "--peer-port", strconv.Itoa(p.peer), "--tls-port", strconv.Itoa(p.tlsPort)}
}

func (p *node) tlsURL() string { return fmt.Sprintf("https://127.0.0.1:%d", p.tlsPort) }

// runRackd runs a local rackd verb to its end (bounded: it starts and
// stops an etcd member) and returns its output; it must succeed.
func runRackd(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(rackdBinary(t), args...)
	cmd.Env = append(cmd.Environ(), env...)
	var out netnstest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rackd %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("rackd %s did not finish within 90s:\n%s", strings.Join(args, " "), out.String())
	}
	return out.String()
}

// TestClusterInitJoin forms a cluster of three appliances on loopback as an
// operator would, with the real binary: init on the first (its database
// moves into its new member), two joins through its TLS listener; the
// store is the same through every agent; one appliance killed, the two
// others still write; its member removed, a replacement joins in its place.
func TestClusterInitJoin(t *testing.T) {
	netnstest.Tool(t, "etcd")
	hc := &http.Client{Timeout: 30 * time.Second}
	a, b, c := newNode(t, "a"), newNode(t, "b"), newNode(t, "c")

	// The first appliance has a database of its own already.
	d := startDaemon(t, a.state)
	token := adminToken(t, a.state)
	if st, raw, err := d.api(hc, token, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "before", MACs: []string{"52:54:00:00:10:01"}}, nil); err != nil || st != 201 {
		t.Fatalf("create: %d %s %v", st, raw, err)
	}
	if out := mustCLI(t, d, []string{"RACKD_TOKEN=" + token}, "cluster", "status"); !strings.Contains(out, "Single appliance, no cluster") {
		t.Fatalf("cluster status on a database file:\n%s", out)
	}
	d.stop(t)

	out := runRackd(t, nil, append([]string{"cluster", "init"}, a.memberArgs()...)...)
	m := regexp.MustCompile(`--ca-sha256 ([0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "Checked: every invariant holds") {
		t.Fatalf("cluster init said:\n%s", out)
	}
	fp := m[1]
	a.d = startDaemon(t, a.state)
	if !strings.Contains(a.d.stderr.String(), "etcd member started") {
		t.Fatalf("rackd on a did not start its member:\n%s", a.d.stderr.String())
	}

	// A join over the plain API is refused: the answer carries the keys.
	if st, raw, _ := a.d.api(hc, token, "POST", "/api/v1/cluster/members", api.ClusterJoin{Name: "x"}, nil); st != 403 {
		t.Fatalf("join over plain HTTP: %d %s, want 403", st, raw)
	}
	// A wrong pin, or a wrong token, joins nothing.
	bad := strings.Repeat("0", 64)
	if code, o, e := runCLI(t, a.d, nil, append([]string{"cluster", "join", a.tlsURL(), "--ca-sha256", bad, "--token", token}, b.memberArgs()...)...); code == 0 || !strings.Contains(o+e, "fingerprint") {
		t.Fatalf("join with a wrong pin: exit %d\n%s%s", code, o, e)
	}
	if code, o, e := runCLI(t, a.d, nil, append([]string{"cluster", "join", a.tlsURL(), "--ca-sha256", fp, "--token", "nope"}, b.memberArgs()...)...); code == 0 || !strings.Contains(o+e, "invalid token") {
		t.Fatalf("join with a wrong token: exit %d\n%s%s", code, o, e)
	}

	join := func(p, through *node) {
		t.Helper()
		out := runRackd(t, nil, append([]string{"cluster", "join", through.tlsURL(), "--ca-sha256", fp, "--token", token}, p.memberArgs()...)...)
		if !strings.Contains(out, "Joined as "+p.name) {
			t.Fatalf("join %s:\n%s", p.name, out)
		}
		p.d = startDaemon(t, p.state)
		// The token joined with is the appliance's admin token now.
		if got := adminToken(t, p.state); got != token {
			t.Fatalf("%s's admin.token is not the cluster's", p.name)
		}
	}
	join(b, a)
	join(c, b) // any member's agent can add the next

	for _, p := range []*node{a, b, c} {
		var got api.Machine
		if st, raw, err := p.d.api(hc, token, "GET", "/api/v1/machines/before", nil, &got); err != nil || st != 200 {
			t.Fatalf("the migrated machine through %s: %d %s %v", p.name, st, raw, err)
		}
	}
	if st, raw, err := c.d.api(hc, token, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "on-c", MACs: []string{"52:54:00:00:10:02"}}, nil); err != nil || st != 201 {
		t.Fatalf("create through c: %d %s %v", st, raw, err)
	}
	if st, raw, err := a.d.api(hc, token, "GET", "/api/v1/machines/on-c", nil, nil); err != nil || st != 200 {
		t.Fatalf("c's machine through a: %d %s %v", st, raw, err)
	}

	// An image imported on a is served by b: the registry is shared, the
	// blobs are fetched from a peer, checked, on demand.
	curl := netnstest.Tool(t, "curl")
	kernel := make([]byte, 3<<20)
	rand.Read(kernel)
	initrd := []byte("an initrd that a will spoil")
	dir := t.TempDir()
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	manifest, _ := json.Marshal(map[string]any{"name": "peer-test", "arch": "amd64", "purpose": "commission", "files": []map[string]any{
		{"path": "vmlinuz", "role": "kernel", "sha256": sum(kernel), "size": len(kernel)},
		{"path": "initrd.img", "role": "initrd", "sha256": sum(initrd), "size": len(initrd)}}})
	for n, b := range map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd, "rackd-image.json": manifest} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustCLI(t, a.d, []string{"RACKD_TOKEN=" + token}, "images", "import", dir)
	got := filepath.Join(t.TempDir(), "vmlinuz")
	if out, err := exec.Command(curl, "-fsS", "-o", got, b.d.url+"/boot/images/"+sum(kernel)).CombinedOutput(); err != nil {
		t.Fatalf("curl the kernel from b: %v\n%s\n%s", err, out, b.d.stderr.String())
	}
	if back, _ := os.ReadFile(got); !bytes.Equal(back, kernel) {
		t.Fatalf("b served %d bytes, not the kernel imported on a", len(back))
	}
	if _, err := os.Stat(filepath.Join(b.state, "images", "sha256", sum(kernel))); err != nil {
		t.Fatalf("the kernel is not in b's blob store: %v", err)
	}
	// a's copy of the initrd rots: b refuses a's bytes (and c has none).
	rotten := filepath.Join(a.state, "images", "sha256", sum(initrd))
	os.Chmod(rotten, 0o644)
	if err := os.WriteFile(rotten, []byte("an initrd that a has spoilt"), 0o444); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(curl, "-fsS", "-o", "/dev/null", b.d.url+"/boot/images/"+sum(initrd)).CombinedOutput(); err == nil || !strings.Contains(string(out), "404") {
		t.Fatalf("curl of the initrd only a has, rotten: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(b.state, "images", "sha256", sum(initrd))); err == nil {
		t.Fatal("a's rotten initrd entered b's blob store")
	}
	metrics := mustGet(t, hc, b.d.url+"/metrics")
	for _, want := range []string{`rackd_images_peer_fetches_total{outcome="ok"} 1`, `rackd_images_peer_fetches_total{outcome="refused"} 1`,
		"rackd_images_peer_fetch_bytes_total " + strconv.FormatFloat(float64(len(kernel)), 'g', -1, 64)} {
		if !strings.Contains(metrics, want) {
			t.Errorf("b's /metrics lacks %s", want)
		}
	}
	// The peer route is for the cluster's agents only.
	if st, _, _ := a.d.api(hc, token, "GET", "/api/v1/cluster/blobs/"+sum(kernel), nil, nil); st != 401 {
		t.Fatalf("a blob over the plain API: %d, want 401", st)
	}
	// The image deleted on a: b, told by the registry's watch, removes the
	// copy it fetched.
	if st, raw, err := a.d.api(hc, token, "DELETE", "/api/v1/images/peer-test/amd64", nil, nil); err != nil || st != 200 {
		t.Fatalf("delete the image on a: %d %s %v", st, raw, err)
	}
	fetched := filepath.Join(b.state, "images", "sha256", sum(kernel))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(fetched); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b kept the blob of the image deleted on a:\n%s", b.d.stderr.String())
		}
	}

	// c dies (its member with it): a and b keep a quorum and write.
	c.d.kill()
	for i, p := range []*node{a, b} {
		host := fmt.Sprintf("after-%d", i)
		if st, raw, err := p.d.api(hc, token, "POST", "/api/v1/machines", api.CreateMachine{Hostname: host, MACs: []string{fmt.Sprintf("52:54:00:00:11:%02x", i)}}, nil); err != nil || st != 201 {
			t.Fatalf("create through %s with c dead: %d %s %v", p.name, st, raw, err)
		}
	}
	// An agent does not remove its own member; another's does.
	if code, o, e := runCLI(t, b.d, []string{"RACKD_TOKEN=" + token}, "cluster", "remove", "b"); code == 0 {
		t.Fatalf("b removed its own member:\n%s%s", o, e)
	}
	mustCLI(t, b.d, []string{"RACKD_TOKEN=" + token}, "cluster", "remove", "c")

	// A replacement for c, under the same name, on a fresh appliance.
	c2 := newNode(t, "c")
	join(c2, a)
	for _, host := range []string{"before", "on-c", "after-0", "after-1"} {
		if st, raw, err := c2.d.api(hc, token, "GET", "/api/v1/machines/"+host, nil, nil); err != nil || st != 200 {
			t.Fatalf("%s through the replacement: %d %s %v", host, st, raw, err)
		}
	}
	// Status: three agents, three voting members, three healthy endpoints
	// (an agent's client follows the member list).
	var st api.ClusterStatus
	waitUntil(t, "three agents and three healthy voting members in cluster status", func() bool {
		out := mustCLI(t, a.d, []string{"RACKD_TOKEN=" + token}, "cluster", "status", "--json")
		st = api.ClusterStatus{}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("cluster status --json: %v\n%s", err, out)
		}
		healthy := 0
		for _, e := range st.Endpoints {
			if e.Healthy {
				healthy++
			}
		}
		voting := 0
		for _, m := range st.Members {
			if !m.Learner {
				voting++
			}
		}
		return st.Clustered && len(st.Agents) == 3 && voting == 3 && len(st.Members) == 3 && healthy == 3
	})
	table := mustCLI(t, a.d, []string{"RACKD_TOKEN=" + token}, "cluster", "status")
	for _, want := range []string{"AGENT", "MEMBER", "ENDPOINT", c2.tlsURL(), "healthy"} {
		if !strings.Contains(table, want) {
			t.Fatalf("cluster status lacks %q:\n%s", want, table)
		}
	}
}

func mustGet(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}
