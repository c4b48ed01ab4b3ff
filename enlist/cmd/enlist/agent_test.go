package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/agent"
	"rackd/enlist"
	"rackd/store"
	"rackd/store/storetest"
)

// These tests run the whole program against a real rackd (the agent's HTTP
// handler on a loopback port), over a fake /sys and /proc, with fake DHCP
// and a fake reboot call.

// startRackd runs a rackd on ln; with serve false it only returns the
// function that starts it (for a rackd that comes up late).
func startRackd(t *testing.T, ln net.Listener, tweak func(*agent.Config)) (*agent.Agent, func()) {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.StateDir = t.TempDir()
	if tweak != nil {
		tweak(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	a, err := agent.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var once sync.Once
	serve := func() { once.Do(func() { go func() { done <- a.Serve(ctx, ln) }() }) }
	t.Cleanup(func() {
		serve() // Serve closes the store, also for a rackd that never came up
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rackd: %v", err)
		}
	})
	return a, serve
}

func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, "http://" + ln.Addr().String()
}

func TestRunEnlistsThenPowersOff(t *testing.T) {
	ln, url := listen(t)
	a, serve := startRackd(t, ln, nil)
	serve()
	var h harness
	h.bmcAddr = "10.0.0.13"
	root := machineFS("console=ttyS0 rackd.url=" + url)
	if err := run(t.Context(), nil, h.system(root)); err != nil {
		t.Fatalf("run: %v\n%s", err, h.out.String())
	}
	out := h.out.String()
	final := lastLine(out)
	id, ok := strings.CutPrefix(final, enlist.MarkerEnlisted)
	id, ok2 := strings.CutSuffix(id, ", "+enlist.SuffixPowerOff)
	if !ok || !ok2 || !reflect.DeepEqual(h.power.actions(), []string{"poweroff"}) {
		t.Fatalf("final line %q, actions %v\n%s", final, h.power.actions(), out)
	}
	for _, want := range []string{enlist.Prefix + "rackd is " + url, "modules loaded: virtio_net", "module e1000: fake",
		"network up on eth1", "inventory: macs 52:54:00:00:10:02 52:54:00:00:10:01, amd64, 2 CPUs, 256 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, enlist.Prefix) {
			t.Errorf("line without the prefix: %q", line)
		}
	}
	m, err := a.Store().Machine(id)
	if err != nil {
		t.Fatal(err)
	}
	// The interface that got the lease is the boot interface: first.
	if m.State != store.StateNew || !reflect.DeepEqual(m.MACs, []string{"52:54:00:00:10:02", "52:54:00:00:10:01"}) ||
		m.CPUCount != 2 || m.MemoryMB != 256 || m.SystemUUID != "5c7a1f2e-0b3d-4e5f-8a9b-0c1d2e3f4a5b" ||
		m.Inventory == nil || m.Inventory.BMCAddress != "10.0.0.13" || len(m.Inventory.Disks) != 1 ||
		m.Inventory.Disks[0].SizeBytes != 20971520*512 || m.Inventory.Vendor != "QEMU" {
		t.Errorf("machine %+v, inventory %+v", m, m.Inventory)
	}

	// The same machine boots the enlistment environment again: it is
	// known and idle, so it just powers off.
	var h2 harness
	run(t.Context(), nil, h2.system(root))
	if got := lastLine(h2.out.String()); got != enlist.MarkerKnown+"NEW), powering off" {
		t.Errorf("second run: %q\n%s", got, h2.out.String())
	}
	if ms, _ := a.Store().ListMachines(store.Filter{}); len(ms) != 1 {
		t.Errorf("%d machines", len(ms))
	}
}

// TestRunSeed001 is the seed's case: a machine DEPLOYING lands in the
// enlistment environment and must reboot, not power off.
func TestRunSeed001(t *testing.T) {
	ln, url := listen(t)
	a, serve := startRackd(t, ln, nil)
	serve()
	ctx := t.Context()
	s := a.Store()
	if _, err := s.CreateMachine(ctx, store.System, store.NewMachine{Hostname: "web1", MACs: []string{"52:54:00:00:10:01"}, State: store.StateReady}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Allocate(ctx, store.System, store.AllocateRequest{Name: "web1", AgentName: "juju"}); err != nil {
		t.Fatal(err)
	}
	storetest.DeployImages(t, s, "amd64", "noble")
	if _, err := s.Transition(ctx, store.System, store.TransitionRequest{Machine: "web1", Action: store.ActionDeploy, Image: "noble"}); err != nil {
		t.Fatal(err)
	}
	var h harness
	run(ctx, []string{"-dhcp=false"}, h.system(machineFS("rackd.url="+url)))
	if got := lastLine(h.out.String()); got != enlist.MarkerKnown+"DEPLOYING), rebooting" || !reflect.DeepEqual(h.power.actions(), []string{"reboot"}) {
		t.Errorf("final %q, actions %v\n%s", got, h.power.actions(), h.out.String())
	}
	if m, _ := s.Machine("web1"); m.State != store.StateDeploying || h.net.calls != 0 {
		t.Errorf("state %s, %d DHCP rounds", m.State, h.net.calls)
	}
}

// TestRunWaitsForRackd: rackd answers nothing at first (the port accepts
// but nobody serves); the program retries until it does.
func TestRunWaitsForRackd(t *testing.T) {
	ln, url := listen(t)
	_, serve := startRackd(t, ln, func(c *agent.Config) { c.Enlist.AutoCommission = true })
	var h harness
	sys := h.system(machineFS("rackd.url=" + url))
	waits := 0
	sys.sleep = func(ctx context.Context, d time.Duration) error {
		if d != nicPoll { // a backoff wait
			if waits++; waits == 2 {
				serve()
			}
		}
		return ctx.Err()
	}
	run(t.Context(), []string{"-attempt-timeout", "300ms", "-tries", "30"}, sys)
	out := h.out.String()
	final := lastLine(out)
	if !strings.HasPrefix(final, enlist.MarkerEnlisted) || !strings.HasSuffix(final, ", "+enlist.SuffixReboot) {
		t.Fatalf("final %q\n%s", final, out)
	}
	// Two attempts fail before rackd serves; on a loaded machine a third
	// may time out while it starts.
	if n := strings.Count(out, "whoami attempt"); n < 2 || n != waits {
		t.Errorf("%d failed whoami attempts reported after %d waits, want 2 or more:\n%s", n, waits, out)
	}
}

func TestRunGivesUp(t *testing.T) {
	_, url := listen(t) // accepts, never answers
	var h harness
	err := run(t.Context(), []string{"-tries", "2", "-attempt-timeout", "100ms", "-dhcp=false"}, h.system(machineFS("rackd.url="+url)))
	if err == nil || !strings.Contains(err.Error(), "giving up after 2 attempts") || len(h.power.actions()) != 0 {
		t.Fatalf("err %v, actions %v", err, h.power.actions())
	}
	if got := lastLine(h.out.String()); !strings.HasPrefix(got, enlist.MarkerFailed+"whoami") {
		t.Errorf("final %q", got)
	}
}

func TestRunDryRun(t *testing.T) {
	ln, url := listen(t)
	_, serve := startRackd(t, ln, nil)
	serve()
	var h harness
	if err := run(t.Context(), []string{"-dry-run", "-url", url}, h.system(machineFS(""))); err != nil {
		t.Fatal(err)
	}
	if len(h.power.actions()) != 0 || !strings.HasPrefix(lastLine(h.out.String()), enlist.MarkerEnlisted) {
		t.Errorf("actions %v\n%s", h.power.actions(), h.out.String())
	}
}
