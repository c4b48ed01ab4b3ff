package agent

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"rackd/internal/netnstest"
	"rackd/power/powertest"
	"rackd/store"
)

// openFiles lists this process's descriptors that New could have leaked:
// files under dir (the store, the boot tree, a power log) and packet
// sockets (the ARP probers), each as "fd N -> target".
func openFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // closed since ReadDir (ReadDir's own descriptor)
		}
		fd, _ := strconv.Atoi(e.Name())
		switch {
		case target == dir || strings.HasPrefix(target, dir+"/"):
		case strings.HasPrefix(target, "socket:"):
			if d, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || d != unix.AF_PACKET {
				continue
			}
			target = "packet " + target
		default:
			continue
		}
		out["fd "+e.Name()+" -> "+target] = true
	}
	return out
}

// assertReleased checks that nothing of an agent on dir is open any more:
// no descriptor (beyond those in before), the store's lock free, and the
// store opens again at once.
func assertReleased(t *testing.T, dir string, before map[string]bool) {
	t.Helper()
	for f := range openFiles(t, dir) {
		if !before[f] {
			t.Errorf("still open: %s", f)
		}
	}
	path := filepath.Join(dir, store.FileName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open store file: %v", err)
	}
	// bbolt holds flock on its file while open; a held lock would make the
	// Open below wait forever.
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	f.Close()
	if err != nil {
		t.Fatalf("the store's lock is still held: %v", err)
	}
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatalf("reopen store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

// A step of New that fails after others have opened things (the store, the
// boot tree, ARP probers on a real interface, a power driver's log) closes
// them all: the store's file lock is free at once and no descriptor stays.
func TestNewFailureReleases(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The probers need an Ethernet interface: a veth end in a namespace of
	// the test's own, where New then runs (as root; otherwise without
	// DHCP, and the other steps are still checked).
	var ns *netnstest.NS
	var ifname string
	if os.Geteuid() == 0 {
		ns = netnstest.New(t)
		ifname, _ = netnstest.Veth(t, ns, netnstest.New(t))
	} else {
		t.Log("not root: without a DHCP interface (no ARP probers to check)")
	}
	withDHCP := func(c *Config) {
		if ns != nil {
			c.DHCP.Interfaces = []string{ifname}
		}
	}
	tests := map[string]struct {
		setup   func(t *testing.T, c *Config)
		errWant string
	}{
		"unusable DHCP interface": {
			setup:   func(t *testing.T, c *Config) { c.DHCP.Interfaces = []string{"rknone0"} },
			errWant: "dhcp: arp",
		},
		"power driver fails": {
			setup: func(t *testing.T, c *Config) {
				withDHCP(c)
				c.Power.Fake.Enabled = true
				c.Power.Fake.Log = filepath.Join(c.StateDir, "log-is-a-directory")
				if err := os.Mkdir(c.Power.Fake.Log, 0o700); err != nil {
					t.Fatal(err)
				}
			},
			errWant: "power",
		},
		"admin token cannot be written": {
			setup: func(t *testing.T, c *Config) {
				withDHCP(c)
				c.Power.Fake.Enabled = true
				c.Power.Fake.Log = filepath.Join(c.StateDir, "power.log")
				if err := os.Mkdir(filepath.Join(c.StateDir, AdminTokenFile), 0o700); err != nil {
					t.Fatal(err)
				}
			},
			errWant: "write admin token",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.StateDir = t.TempDir()
			tc.setup(t, &cfg)
			before := openFiles(t, cfg.StateDir)
			newAgent := func() error {
				a, err := New(cfg, quiet, WithFakePowerDriver(powertest.Driver))
				if err == nil {
					a.Close()
				}
				return err
			}
			var err error
			if ns != nil {
				err = ns.Do(newAgent)
			} else {
				err = newAgent()
			}
			if err == nil || !strings.Contains(err.Error(), tc.errWant) {
				t.Fatalf("New: %v, want an error with %q", err, tc.errWant)
			}
			assertReleased(t, cfg.StateDir, before)
		})
	}
}

// rackd serve whose API port is taken fails before it opens anything; one
// that fails after it opened the agent (the TFTP port taken: bound as
// Serve starts) closes what it had opened and removes what it wrote in
// the state directory, which it found empty.
func TestServePortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer heldUDP.Close()
	logs := t.TempDir()
	conf := filepath.Join(t.TempDir(), "rackd.toml")
	if err := os.WriteFile(conf, []byte("[power.fake]\nenabled = true\nlog = \""+filepath.Join(logs, "power.log")+"\"\n"+
		"[tftp]\nlisten = \""+heldUDP.LocalAddr().String()+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "GOGC" {
			return "100" // keep serve from changing this test binary's GC
		}
		return ""
	}
	empty := func(dir string) {
		t.Helper()
		if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
			t.Errorf("state directory after the failed start: %d entries (%v), want none", len(es), err)
		}
	}

	state := t.TempDir()
	err = serve(context.Background(), []string{"--config", conf, "--state-dir", state, "--listen", held.Addr().String()}, io.Discard, io.Discard, getenv, WithFakePowerDriver(powertest.Driver))
	if err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("serve on a taken port: %v", err)
	}
	empty(state)
	if _, err := os.Stat(filepath.Join(logs, "power.log")); err == nil {
		t.Errorf("the agent was opened although the API's port was taken")
	}

	before, beforeLogs := openFiles(t, state), openFiles(t, logs)
	err = serve(context.Background(), []string{"--config", conf, "--state-dir", state, "--listen", "127.0.0.1:0"}, io.Discard, io.Discard, getenv, WithFakePowerDriver(powertest.Driver))
	if err == nil || !strings.Contains(err.Error(), "tftp") {
		t.Fatalf("serve with the TFTP port taken: %v", err)
	}
	if _, err := os.Stat(filepath.Join(logs, "power.log")); err != nil {
		t.Fatalf("the fake power log was never opened, so the test shows nothing: %v", err)
	}
	for dir, had := range map[string]map[string]bool{state: before, logs: beforeLogs} {
		for f := range openFiles(t, dir) {
			if !had[f] {
				t.Errorf("still open: %s", f)
			}
		}
	}
	empty(state)
}

// TestServeWritesWhereTold: rackd serve writes its output to the stdout it
// is handed and reads the environment only through getenv.
func TestServeWritesWhereTold(t *testing.T) {
	var stdout, stderr bytes.Buffer
	asked := map[string]bool{}
	getenv := func(k string) string { asked[k] = true; return "" }
	if err := serve(context.Background(), []string{"--print-default-config"}, &stdout, &stderr, getenv); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != DefaultConfigTOML || stderr.Len() != 0 {
		t.Errorf("stdout %d bytes (want the %d of the default configuration), stderr %q", stdout.Len(), len(DefaultConfigTOML), stderr.String())
	}
	if !asked["RACKD_CONFIG"] {
		t.Error("serve did not read RACKD_CONFIG through getenv")
	}
}
