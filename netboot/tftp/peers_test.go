package tftp

// Tests with real TFTP clients on loopback: tftp-hpa's tftp, atftp and
// curl. They need the three programs (Debian packages tftp-hpa, atftp,
// curl); netnstest.Tool fails the test when one is missing as root or in
// CI, and skips it otherwise.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/netboot/files"
)

// bootSource is the fixture tree with a renderer over it, as the agent
// wires it: per-MAC configs from memory, everything else from disk.
func bootSource(t *testing.T, fx *fixture, configs map[string]string) files.Source {
	t.Helper()
	tree, err := files.NewTree(fx.dir)
	must(t, err)
	t.Cleanup(func() { _ = tree.Close() })
	return files.NewOverlay(&fakeRenderer{configs: configs}, tree)
}

var testConfigs = map[string]string{
	"pxelinux.cfg/01-52-54-00-12-34-56": "DEFAULT deploy\nLABEL deploy\n  KERNEL images/kernel\n",
	"grub/grub.cfg-52:54:00:12:34:56":   "set default=0\nmenuentry deploy {\n  linux images/kernel\n}\n",
	"ipxe/52:54:00:12:34:56.ipxe":       "#!ipxe\nkernel http://10.0.0.1/boot/images/kernel\nboot\n",
}

// TestPeersFetch: each client fetches a few MiB of random bytes and each
// rendered config, byte for byte; tftp-hpa with 512-byte blocks (it cannot
// ask for more), atftp and curl with blksize 1468 (an Ethernet MTU's worth).
func TestPeersFetch(t *testing.T) {
	fx := newFixture(t)
	kernel := fx.add(t, "images/kernel", 5<<20+777) // not a multiple of any block size
	ts := startServer(t, Config{}, bootSource(t, fx, testConfigs))
	dir := t.TempDir()

	type client struct {
		name string
		get  func(remote, out string) (string, error)
	}
	clients := []client{
		{"tftp-hpa", func(r, o string) (string, error) { return tftpHPA(t, ts, r, o) }},
		{"atftp", func(r, o string) (string, error) { return atftp(t, ts, r, o, "blksize 1468", "tsize 0") }},
		{"curl", func(r, o string) (string, error) { return curlTFTP(t, ts, r, o, 1468) }},
	}
	transfers := 0
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out := filepath.Join(dir, c.name+"-kernel")
			msg, err := c.get("images/kernel", out)
			checkFile(t, c.name, out, kernel, msg, err)
			t.Logf("%s: %d bytes in %v", c.name, len(kernel), time.Since(start))
			transfers++
			for name, content := range testConfigs {
				out := filepath.Join(dir, c.name+"-"+strings.NewReplacer("/", "_", ":", "_").Replace(name))
				msg, err := c.get(name, out)
				checkFile(t, c.name, out, []byte(content), msg, err)
				transfers++
			}
			// The leading slash some loaders send.
			out = filepath.Join(dir, c.name+"-slash")
			msg, err = c.get("/pxelinux.cfg/01-52-54-00-12-34-56", out)
			checkFile(t, c.name, out, []byte(testConfigs["pxelinux.cfg/01-52-54-00-12-34-56"]), msg, err)
			transfers++
		})
	}
	ts.waitCounter(t, float64(transfers), "rackd_tftp_transfers_total", "outcome", "ok")
	// tsize was always answered: atftp and curl asked for it, and the
	// server set it from Size for the tree's file and the rendered ones.
	for _, name := range []string{"images/kernel", "grub/grub.cfg-52:54:00:12:34:56"} {
		want := fmt.Sprintf("file=%s duration=", name)
		n := 0
		for _, line := range strings.Split(ts.logs.String(), "\n") {
			if strings.Contains(line, want) && strings.Contains(line, "tsize=") && !strings.Contains(line, `tsize=""`) {
				n++
			}
		}
		if n < 2 {
			t.Errorf("%s: %d transfers with tsize in the OACK, want 2 (atftp, curl)", name, n)
		}
	}
}

// TestPeersRefused: unknown names get "File not found" (code 1); names that
// try to leave the tree get "Access violation" (code 2); nothing outside the
// tree is ever written to the client's file; writes are refused.
func TestPeersRefused(t *testing.T) {
	fx := newFixture(t)
	fx.add(t, "pxelinux.0", 1000)
	ts := startServer(t, Config{}, bootSource(t, fx, testConfigs))
	dir := t.TempDir()
	passwd, _ := os.ReadFile("/etc/passwd")

	const notFound, denied = "1: File not found", "2: Access violation" // RFC 1350 error codes and messages
	tests := []struct {
		remote string
		want   string // code and message the server sends
	}{
		{"no-such-file", notFound},
		{"pxelinux.cfg/01-de-ad-be-ef-00-01", notFound}, // an unknown MAC: the renderer declines
		{"../../etc/passwd", denied},
		{"images/../../../etc/passwd", denied},
		{"//etc/passwd", denied},
		// One leading "/" is stripped (firmware sends "/pxelinux.0"), so
		// "/etc/passwd" means etc/passwd inside the tree: not there.
		{"/etc/passwd", notFound},
		{"escape", denied},                 // absolute symlink out
		{"images/escape-rel", denied},      // relative symlink out
		{strings.Repeat("x", 300), denied}, // longer than NAME_MAX
		{`..\..\etc\passwd`, denied},       // backslashes
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			for _, c := range []string{"tftp-hpa", "atftp", "curl"} {
				out := filepath.Join(dir, fmt.Sprintf("%s-%d", c, i))
				var msg string
				var err error
				switch c {
				case "tftp-hpa":
					msg, err = tftpHPA(t, ts, tt.remote, out)
				case "atftp":
					msg, err = atftp(t, ts, tt.remote, out)
				case "curl":
					if strings.Contains(tt.remote, `\`) {
						continue // not a URL path
					}
					msg, err = curlTFTP(t, ts, tt.remote, out, 0)
				}
				got, _ := os.ReadFile(out)
				if len(got) > 0 || (len(passwd) > 0 && bytes.Contains(got, passwd[:min(len(passwd), 16)])) {
					t.Errorf("%s %q: wrote %d bytes: %q", c, tt.remote, len(got), got[:min(len(got), 64)])
				}
				switch c {
				case "tftp-hpa": // exits 0 on errors; prints code and message
					if !strings.Contains(msg, "Error code "+tt.want) {
						t.Errorf("%s %q: %v: %s; want %q", c, tt.remote, err, msg, tt.want)
					}
				case "atftp":
					_, want, _ := strings.Cut(tt.want, ": ")
					if len(tt.remote) > 255 {
						// atftp truncates names to 255
						// bytes: the server sees a valid,
						// unknown name.
						want = "File not found"
					}
					if err == nil || !strings.Contains(msg, "<"+want) {
						t.Errorf("%s %q: %v: %s; want %q", c, tt.remote, err, msg, tt.want)
					}
				case "curl":
					// curl prints no server message; it exits
					// 68 (CURLE_TFTP_NOTFOUND) on code 1 and 69
					// (CURLE_TFTP_PERM) on code 2.
					want := "exit status 68"
					if tt.want == denied {
						want = "exit status 69"
					}
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("%s %q: %v: %s; want %s", c, tt.remote, err, msg, want)
					}
				}
			}
		})
	}
	// Refused: 6 names by 3 clients, less curl's backslash name and
	// atftp's truncated long one.
	ts.waitCounter(t, 6*3-2, "rackd_tftp_transfers_total", "outcome", "refused")

	t.Run("write", func(t *testing.T) {
		local := filepath.Join(dir, "upload")
		must(t, os.WriteFile(local, []byte("payload"), 0o644))
		msg, _ := peer(t, 30*time.Second, peerTool(t, "tftp"), "-m", "binary", ts.host, ts.port, "-c", "put", local, "uploaded")
		if !strings.Contains(msg, "Access violation") {
			t.Errorf("put: %s", msg)
		}
		if _, err := os.Stat(filepath.Join(fx.dir, "uploaded")); err == nil {
			t.Errorf("a write request created a file in the tree")
		}
		ts.waitCounter(t, 1, "rackd_tftp_transfers_total", "outcome", "write_refused")
	})
}

// TestPeersRollover: a file over 32 MiB in 512-byte blocks needs more than
// 65535 blocks, so the block number wraps to 0 (RFC 1350 leaves this
// open; all three clients expect 0).
func TestPeersRollover(t *testing.T) {
	fx := newFixture(t)
	big := fx.add(t, "images/big", 33<<20+5) // 67585 blocks of 512
	ts := startServer(t, Config{}, bootSource(t, fx, nil))
	dir := t.TempDir()
	start := time.Now()
	msg, err := atftp(t, ts, "images/big", filepath.Join(dir, "atftp")) // no options: 512
	checkFile(t, "atftp", filepath.Join(dir, "atftp"), big, msg, err)
	t.Logf("atftp, 512-byte blocks: %d bytes in %v", len(big), time.Since(start))
	start = time.Now()
	msg, err = curlTFTP(t, ts, "images/big", filepath.Join(dir, "curl"), 512)
	checkFile(t, "curl", filepath.Join(dir, "curl"), big, msg, err)
	t.Logf("curl, blksize 512: %d bytes in %v", len(big), time.Since(start))
	start = time.Now()
	msg, err = tftpHPA(t, ts, "images/big", filepath.Join(dir, "hpa"))
	checkFile(t, "tftp-hpa", filepath.Join(dir, "hpa"), big, msg, err)
	t.Logf("tftp-hpa: %d bytes in %v", len(big), time.Since(start))
}

// TestPeersQueued: 60 curl clients at once against 8 transfer slots all get
// their file: the other 52 wait in the queue instead of being refused.
func TestPeersQueued(t *testing.T) {
	const clients, slots = 60, 8
	fx := newFixture(t)
	blob := fx.add(t, "images/initrd", 1<<20+3) // bigger than SmallFileSize: takes a slot
	// A request waits for a slot as long as its client waits for the
	// file (curl's --max-time below): the default QueueTimeout, 10 s, made
	// this a test of how fast the machine moves 60 MiB through 8 slots,
	// and a loaded one answered the last clients busy. QueueTimeout itself
	// is tested in server_test.go.
	const clientWait = 100 * time.Second
	ts := startServer(t, Config{MaxTransfers: slots, QueueTimeout: clientWait}, bootSource(t, fx, nil))
	dir := t.TempDir()
	curl := curlPath(t)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]string, clients)
	for i := range clients {
		wg.Go(func() {
			out := filepath.Join(dir, fmt.Sprintf("c%d", i))
			msg, err := peer(t, clientWait+20*time.Second, curl, "-sS", "--max-time", strconv.Itoa(int(clientWait.Seconds())), "--tftp-blksize", "1468",
				"-o", out, "tftp://"+ts.host+":"+ts.port+"/images/initrd")
			got, _ := os.ReadFile(out)
			if !bytes.Equal(got, blob) {
				errs[i] = fmt.Sprintf("client %d: %d bytes, %v: %s", i, len(got), err, msg)
			}
		})
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
	t.Logf("%d clients x %d bytes through %d slots in %v; %v retransmitted requests ignored",
		clients, len(blob), slots, time.Since(start), ts.counter(t, "rackd_tftp_retransmitted_requests_total"))
	ts.waitCounter(t, clients, "rackd_tftp_transfers_total", "outcome", "ok")
	if p := ts.peak.Load(); p > slots || p < 2 {
		t.Errorf("peak transfers at once = %d, want 2..%d", p, slots)
	}
	for _, o := range []string{outcomeBusy, outcomeTimeout, outcomeError} {
		if n := ts.counter(t, "rackd_tftp_transfers_total", "outcome", o); n != 0 {
			t.Errorf("%v transfers ended %s", n, o)
		}
	}
	if n := ts.counter(t, "rackd_tftp_queue_wait_seconds"); n != clients {
		t.Errorf("queue_wait_seconds has %v samples, want %d", n, clients)
	}
	// Most clients found the 8 slots taken and waited: more than 1 ms (the
	// first bucket) for at least half of them.
	if quick := ts.bucket(t, "rackd_tftp_queue_wait_seconds", 0.001); quick > clients/2 {
		t.Errorf("%v of %d transfers waited under 1ms: the queue was not used", quick, clients)
	}
	if q := ts.counter(t, "rackd_tftp_transfers_queued"); q != 0 {
		t.Errorf("transfers_queued = %v after the storm", q)
	}
}

func curlPath(t *testing.T) string {
	t.Helper()
	return peerTool(t, "curl")
}

// TestPeersShutdown: a transfer in flight when Serve's context ends
// finishes within the grace period; with no grace left, it is aborted with
// an error the client sees, and Serve returns promptly.
func TestPeersShutdown(t *testing.T) {
	peerTool(t, "atftp") // here: the goroutine below may not fail the test
	fx := newFixture(t)
	big := fx.add(t, "images/big", 16<<20)
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		grace    time.Duration
		complete bool
	}{
		{"graceful", 60 * time.Second, true},
		{"grace over", time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := files.NewTree(fx.dir)
			must(t, err)
			defer tree.Close()
			s, err := New(Config{Listen: "127.0.0.1:0", ShutdownGrace: tc.grace}, tree, nil, nil)
			must(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Serve(ctx) }()
			<-s.Ready()
			ts := &testServer{Server: s, host: s.Addr().Addr().String(), port: fmt.Sprint(s.Addr().Port())}
			out := filepath.Join(dir, tc.name)
			got := make(chan string, 1)
			go func() {
				msg, err := atftp(t, ts, "images/big", out) // 512-byte blocks: slow enough
				got <- fmt.Sprintf("%v: %s", err, msg)
			}()
			// Cancel once the transfer is under way.
			deadline := time.Now().Add(10 * time.Second)
			for {
				if fi, err := os.Stat(out); err == nil && fi.Size() > 1<<20 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("transfer did not start")
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			var serveErr error
			select {
			case serveErr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Serve did not return")
			}
			if serveErr != nil {
				t.Errorf("Serve: %v", serveErr)
			}
			msg := <-got
			b, _ := os.ReadFile(out)
			if tc.complete {
				checkFile(t, "atftp", out, big, msg, nil)
			} else if bytes.Equal(b, big) || !strings.Contains(msg, "shutting down") {
				t.Errorf("transfer not aborted: %d bytes; %s", len(b), msg)
			}
		})
	}
}

// errSource fails every Open with the error listed for the name, and
// "not found" for the others.
type errSource map[string]error

func (s errSource) Open(_ context.Context, name string) (files.File, error) {
	if err, ok := s[name]; ok {
		return nil, err
	}
	return nil, &files.Error{Name: name, Kind: files.ErrNotFound}
}

// TestPeersErrorMessages: what a client prints on an error says which file
// and why, as the Source said it: the cause is not only in rackd's log.
func TestPeersErrorMessages(t *testing.T) {
	ts := startServer(t, Config{}, errSource{
		"pxelinux.0": &files.Error{Name: "pxelinux.0", Kind: files.ErrNotFound, Reason: "no bootloader image provides it: make bootloaders"},
		"pxelinux.cfg/default": fmt.Errorf("files: rendering %q: %w", "pxelinux.cfg/default",
			errors.New("bootconf: HTTP base URL \"\": not set\nsecond line")),
		"grub/grub.cfg-x": &files.Error{Name: "grub/grub.cfg-x", Kind: files.ErrRefused, Reason: "not a MAC address"},
	})
	dir := t.TempDir()
	tests := []struct {
		remote string
		code   string // tftp-hpa's "Error code N"
		msg    string // the server's message
	}{
		{"pxelinux.0", "1", "File not found: pxelinux.0: no bootloader image provides it: make bootloaders"},
		{"pxelinux.cfg/C0A80A02", "1", "File not found: pxelinux.cfg/C0A80A02"},
		{"grub/grub.cfg-x", "2", "Access violation: grub/grub.cfg-x: not a MAC address"},
		// Control characters are not sent (the field is netascii).
		{"pxelinux.cfg/default", "0", `Error opening file: files: rendering "pxelinux.cfg/default": bootconf: HTTP base URL "": not set?second line`},
	}
	for i, tt := range tests {
		out := filepath.Join(dir, fmt.Sprint(i))
		msg, err := tftpHPA(t, ts, tt.remote, out+"-hpa")
		if want := "Error code " + tt.code + ": " + tt.msg; !strings.Contains(msg, want) {
			t.Errorf("tftp-hpa %s: %v: %q; want %q", tt.remote, err, msg, want)
		}
		msg, err = atftp(t, ts, tt.remote, out+"-atftp")
		if want := "<" + tt.msg + ">"; err == nil || !strings.Contains(msg, want) {
			t.Errorf("atftp %s: %v: %q; want %q", tt.remote, err, msg, want)
		}
	}
	// A long message is cut to what a client's 512-byte buffer holds.
	long := strings.Repeat("x", 1000)
	ce := &clientError{msg: "File not found", detail: long}
	if w := ce.wire(); len(w) != maxErrMsg || !strings.HasPrefix(w, "File not found: xxx") {
		t.Errorf("long message: %d bytes %q...", len(w), w[:min(len(w), 30)])
	}
}
