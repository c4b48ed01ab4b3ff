package etcdmember

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/netnstest"
)

// member is one appliance's directory and member in a test.
type member struct {
	Member
	dir  string
	proc *Process
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
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
	return ports
}

func newMember(t *testing.T, root, name string) *member {
	p := freePorts(t, 2)
	return &member{dir: filepath.Join(root, name, "cluster"), Member: Member{Name: name,
		PeerURL:   fmt.Sprintf("https://127.0.0.1:%d", p[0]),
		ClientURL: fmt.Sprintf("https://127.0.0.1:%d", p[1])}}
}

// issueFrom gives m certificates signed by the CA in caDir, as a join does:
// m makes its keys, the CA signs the public halves, m gets the CA too.
func issueFrom(t *testing.T, caDir string, m *member) {
	t.Helper()
	ca, err := LoadCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(caDir, CAKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteCA(m.dir, ca.PEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	pubs, err := GenerateKeys(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds {
		pub, err := ParsePublicKey(pubs[k])
		if err != nil {
			t.Fatal(err)
		}
		c, err := ca.Issue(k, m.Name, pub, m.Hosts())
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteCert(m.dir, k, c); err != nil {
			t.Fatal(err)
		}
	}
}

func (m *member) start(t *testing.T, initial map[string]string, existing bool) {
	t.Helper()
	path, err := Settings{Member: m.Member, Dir: m.dir, DataDir: filepath.Join(filepath.Dir(m.dir), DataDir),
		InitialCluster: initial, Existing: existing, Token: "test"}.Write()
	if err != nil {
		t.Fatal(err)
	}
	tc, err := ClientTLS(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	m.proc = &Process{ConfigFile: path, ClientURL: m.ClientURL, TLS: tc, MaxBackoff: time.Second,
		Log: slog.New(slog.NewTextHandler(testWriter{t, m.Name}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := m.proc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.proc.Stop() })
}

func (m *member) client(t *testing.T) *clientv3.Client {
	t.Helper()
	tc, err := ClientTLS(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, TLS: tc, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s: %s", w.name, strings.TrimSpace(string(b)))
	return len(b), nil
}

func put(ctx context.Context, cli *clientv3.Client, k, v string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := cli.Put(ctx, k, v)
	return err
}

func get(t *testing.T, cli *clientv3.Client, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return ""
	}
	return string(r.Kvs[0].Value)
}

// TestThreeMembers forms a TLS cluster as rackd cluster init and two joins
// do (a CA on the first, keys made by each joiner and signed by it, Add,
// then a start on the initial cluster Add returned), reads through every
// member, then loses one member and keeps writing through the two others.
func TestThreeMembers(t *testing.T) {
	netnstest.Tool(t, "etcd")
	root := t.TempDir()
	ctx := context.Background()
	m0 := newMember(t, root, "a")
	if _, err := CreateCA(m0.dir, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateCA(m0.dir, "test"); err == nil {
		t.Fatal("a second CA replaced the first")
	}
	if err := IssueLocal(m0.dir, m0.Name, m0.Hosts()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CAKey, KeyFile(Server), KeyFile(Peer), KeyFile(Client)} {
		fi, err := os.Stat(filepath.Join(m0.dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", f, fi.Mode(), err)
		}
	}
	m0.start(t, map[string]string{m0.Name: m0.PeerURL}, false)
	c0 := m0.client(t)
	if err := put(ctx, c0, "k", "v0"); err != nil {
		t.Fatal(err)
	}

	ms := []*member{m0}
	for _, name := range []string{"b", "c"} {
		m := newMember(t, root, name)
		issueFrom(t, m0.dir, m)
		initial, err := Add(ctx, c0, m.Member)
		if err != nil {
			t.Fatal(err)
		}
		if len(initial) != len(ms)+1 || initial[m.Name] != m.PeerURL {
			t.Fatalf("initial cluster for %s: %v", m.Name, initial)
		}
		m.start(t, initial, true)
		if err := Promote(ctx, c0, m.Member); err != nil {
			t.Fatal(err)
		}
		// Promoted means the member itself serves as a voter: a client
		// that picks it is answered at once.
		if st, err := c0.Status(ctx, m.ClientURL); err != nil || st.IsLearner {
			t.Fatalf("%s after Promote: %v, still a learner by its own status; want a voter", m.Name, err)
		}
		ms = append(ms, m)
	}
	if _, err := Add(ctx, c0, ms[1].Member); err == nil {
		t.Fatal("a second member named b was added")
	}
	list, err := c0.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 3 {
		t.Fatalf("%d members, want 3", len(list.Members))
	}
	var clients []*clientv3.Client
	for _, m := range ms {
		c := m.client(t)
		clients = append(clients, c)
		if got := get(t, c, "k"); got != "v0" {
			t.Fatalf("through %s: k=%q, want v0", m.Name, got)
		}
	}

	// One member down: the two others keep a quorum.
	if err := ms[2].proc.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients[:2] {
		if err := put(ctx, c, "k", fmt.Sprintf("after%d", i)); err != nil {
			t.Fatalf("write through %s with c down: %v", ms[i].Name, err)
		}
	}
	if got := get(t, clients[1], "k"); got != "after1" {
		t.Fatalf("k=%q, want after1", got)
	}
	// Replacing it: remove, then a new member under the same name.
	if err := Remove(ctx, c0, "c"); err != nil {
		t.Fatal(err)
	}
	if err := Remove(ctx, c0, "c"); !errors.Is(err, ErrNoMember) {
		t.Fatalf("second remove: %v, want ErrNoMember", err)
	}
	repl := newMember(t, filepath.Join(root, "new"), "c")
	issueFrom(t, ms[1].dir, repl) // any member's CA will do: they are one
	initial, err := Add(ctx, clients[1], repl.Member)
	if err != nil {
		t.Fatal(err)
	}
	// Promote asked before the learner has published its name (as a
	// loaded machine's rackd serve can): it finds the learner by its peer
	// URL and waits for it to catch up.
	promoted := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		promoted <- Promote(pctx, clients[1], repl.Member)
	}()
	time.Sleep(time.Second)
	repl.start(t, initial, true)
	if err := <-promoted; err != nil {
		t.Fatal(err)
	}
	if st, err := clients[1].Status(ctx, repl.ClientURL); err != nil || st.IsLearner {
		t.Fatalf("the replacement after Promote: %v, still a learner by its own status; want a voter", err)
	}
	if got := get(t, repl.client(t), "k"); got != "after1" {
		t.Fatalf("through the replacement: k=%q, want after1", got)
	}
}

// TestRestartOnExit: a member that dies is started again by its Process;
// Stop ends it for good.
func TestRestartOnExit(t *testing.T) {
	netnstest.Tool(t, "etcd")
	m := newMember(t, t.TempDir(), "a")
	if _, err := CreateCA(m.dir, "test"); err != nil {
		t.Fatal(err)
	}
	if err := IssueLocal(m.dir, m.Name, m.Hosts()); err != nil {
		t.Fatal(err)
	}
	m.start(t, map[string]string{m.Name: m.PeerURL}, false)
	cli := m.client(t)
	if err := put(context.Background(), cli, "k", "1"); err != nil {
		t.Fatal(err)
	}
	pid := m.proc.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Bounded: the back-off is at most a second here; a start is seconds.
	deadline := time.Now().Add(60 * time.Second)
	for m.proc.Restarts() == 0 || m.proc.PID() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the member was not started again within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m.proc.PID() == pid {
		t.Fatal("same pid after a restart")
	}
	var err error
	for range 100 {
		if err = put(context.Background(), cli, "k", "2"); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("write after the restart: %v", err)
	}
	last := m.proc.PID()
	if err := m.proc.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(last, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d still there after Stop: %v", last, err)
	}
}

// TestPinnedTLS: a joiner trusts the agent whose chain holds the pinned CA,
// and refuses another CA's server or a wrong pin.
func TestPinnedTLS(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a")
	ca, err := CreateCA(a, "one")
	if err != nil {
		t.Fatal(err)
	}
	if err := IssueLocal(a, "a", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "other")
	otherCA, err := CreateCA(other, "two")
	if err != nil {
		t.Fatal(err)
	}
	if err := IssueLocal(other, "x", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	serve := func(dir string) string {
		tc, err := ServerTLS(dir)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tls.Listen("tcp", "127.0.0.1:0", tc)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
				fmt.Fprint(w, "peer "+r.TLS.VerifiedChains[0][0].Subject.CommonName)
				return
			}
			fmt.Fprint(w, "anonymous")
		})}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return "https://" + l.Addr().String()
	}
	ua, uo := serve(a), serve(other)
	try := func(url string, tc *tls.Config) (string, error) {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, err = fmt.Fprint(&b, resp.Status)
		buf := make([]byte, 100)
		n, _ := resp.Body.Read(buf)
		return string(buf[:n]), err
	}
	if got, err := try(ua, PinnedTLS(ca.Fingerprint())); err != nil || got != "anonymous" {
		t.Fatalf("pinned to the right CA: %q %v", got, err)
	}
	if _, err := try(uo, PinnedTLS(ca.Fingerprint())); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("another cluster's agent was trusted: %v", err)
	}
	if _, err := try(ua, PinnedTLS(otherCA.Fingerprint())); err == nil {
		t.Fatal("a wrong pin was accepted")
	}
	// A member's client certificate identifies it; another CA's does not.
	mine, err := ClientTLS(a)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := try(ua, mine); err != nil || got != "peer a" {
		t.Fatalf("with a's client certificate: %q %v", got, err)
	}
	theirs, err := ClientTLS(other)
	if err != nil {
		t.Fatal(err)
	}
	theirs.RootCAs = mine.RootCAs
	// (Go's client sends no certificate the server's CAs did not sign.)
	if got, err := try(ua, theirs); err == nil && got != "anonymous" {
		t.Fatalf("a client certificate of another CA was taken for a member: %q", got)
	}
	// A certificate for another key is not installed.
	pubs, err := GenerateKeys(filepath.Join(root, "b"))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := ParsePublicKey(pubs[Server])
	c, err := ca.Issue(Server, "b", pub, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteCert(a, Server, c); err == nil {
		t.Fatal("a certificate for another key was installed")
	}
}
