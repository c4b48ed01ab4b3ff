package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"rackd/internal/vmtest"
)

// The lab's names and addresses. They are fixed, so that the guide's
// commands (docs/GETTING-STARTED.md) can name them: one lab per machine.
const (
	NetNS    = "rackd-lab"  // the network namespace
	Bridge   = "rklab-br"   // the rack's network, inside NetNS
	HostVeth = "rklab-host" // the host's end of the link to NetNS
	NSVeth   = "rklab-ns"   // NetNS's end
	TapBase  = "rklab-tap"  // + the machine's number

	Subnet     = "10.80.0.0/24" // the machines' network
	Server     = "10.80.0.1"    // rackd, on Bridge
	Dynamic    = "10.80.0.100-10.80.0.199"
	Domain     = "lab"
	ULA        = "fd00:80::1/64" // on Bridge, advertised so that iPXE does not wait for a router
	BMCNet     = "10.80.1."      // + the machine's number: its BMC, on NetNS's loopback
	HostRoute  = "10.80.0.0/23"  // Subnet and the BMCs, from the host through NetNS
	HostAddr   = "10.80.255.1/30"
	NSAddr     = "10.80.255.2/30"
	NSGateway  = "10.80.255.1"
	RackdPort  = 5240
	MACPrefix  = "52:54:00:4c:00:" // + the machine's number in hex
	BMCUser    = "admin"
	BMCPass    = "lab"
	MemoryMB   = 1024
	CPUs       = 2
	DiskBytes  = 4 << 30
	MaxMachine = 9
)

// URL is rackd's API and web UI, as the host reaches it.
var URL = fmt.Sprintf("http://%s:%d", Server, RackdPort)

// Machine is one of the lab's machines.
type Machine struct {
	Name    string `json:"name"`
	MAC     string `json:"mac"`
	Driver  string `json:"driver"` // ipmi or redfish
	Address string `json:"address"`
	Tap     string `json:"tap"`
	Disk    string `json:"disk"`
	Console string `json:"console"`
}

// Proc is a process the lab started: Marker is a string its command line
// holds, so that a PID reused by another process is never signalled.
type Proc struct {
	Name   string `json:"name"`
	PID    int    `json:"pid"`
	Marker string `json:"marker"`
	Log    string `json:"log"`
}

// State is what up made, kept in DIR/lab.json for down.
type State struct {
	Dir      string    `json:"dir"`
	Procs    []Proc    `json:"procs"`
	Machines []Machine `json:"machines"`
	Token    string    `json:"token"`
	Complete bool      `json:"complete"` // up finished
}

func statePath(dir string) string { return filepath.Join(dir, "lab.json") }

func loadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(dir), err)
	}
	return &st, nil
}

func (st *State) save() error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(st.Dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, statePath(st.Dir))
}

// MachineFor returns the lab's machine number i (1-based): odd numbers
// sit behind an ipmi_sim BMC, even ones behind the Redfish BMC.
func MachineFor(dir string, i int) Machine {
	m := Machine{Name: fmt.Sprintf("lab%d", i), MAC: fmt.Sprintf("%s%02x", MACPrefix, i),
		Tap: fmt.Sprintf("%s%d", TapBase, i), Disk: filepath.Join(dir, fmt.Sprintf("lab%d.disk", i)),
		Console: filepath.Join(dir, fmt.Sprintf("lab%d.console", i))}
	if i%2 == 1 {
		m.Driver, m.Address = "ipmi", fmt.Sprintf("%s%d:623", BMCNet, i)
	} else {
		m.Driver, m.Address = "redfish", fmt.Sprintf("https://%s%d", BMCNet, i)
	}
	return m
}

// AddCommand is the rackd command that adds machine m with its BMC.
func (m Machine) AddCommand() string {
	return fmt.Sprintf("rackd machines add --hostname %s --mac %s --power-driver %s --power-address %s --power-user %s --power-password %s",
		m.Name, m.MAC, m.Driver, m.Address, BMCUser, BMCPass)
}

// upFlags are up's, down's and status's flags.
type upFlags struct {
	dir, rackd, image, loaders string
	machines                   int
	accel                      string
}

func parseUp(name string, args []string, stderr io.Writer) (upFlags, error) {
	var f upFlags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dir, "dir", envOr("RACKD_LAB_DIR", "var/lab"), "the lab's state: rackd's state, disks, consoles, logs, lab.json")
	if name == "up" {
		fs.IntVar(&f.machines, "machines", 2, "how many machines (odd ones behind IPMI, even ones behind Redfish)")
		fs.StringVar(&f.rackd, "rackd", "bin/rackd", "the rackd binary")
		fs.StringVar(&f.image, "image", os.Getenv("RACKD_LAB_IMAGE"), "the enlistment image directory (default: build/initramfs/image, built or rebuilt by scripts/initramfs.sh --if-stale)")
		fs.StringVar(&f.loaders, "bootloaders", "build/bootloaders", "where scripts/bootloaders.sh puts the bootloader images (built when missing)")
		fs.StringVar(&f.accel, "accel", envOr("RACKD_LAB_ACCEL", "tcg"), "QEMU's accelerator: tcg or kvm")
	}
	if err := fs.Parse(args); err != nil {
		return f, usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return f, usageError(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if name == "up" && (f.machines < 1 || f.machines > MaxMachine) {
		return f, usageError(fmt.Sprintf("--machines %d: want 1 to %d", f.machines, MaxMachine))
	}
	if name == "up" && f.accel != "tcg" && f.accel != "kvm" {
		return f, usageError(fmt.Sprintf("--accel %q: want tcg or kvm", f.accel))
	}
	abs, err := filepath.Abs(f.dir)
	if err != nil {
		return f, err
	}
	f.dir = abs
	return f, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// say prints one line of progress.
func say(w io.Writer, format string, a ...any) { fmt.Fprintf(w, "lab: "+format+"\n", a...) }

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it makes a network namespace, a bridge and taps (run it as root, or with sudo)")
	}
	return nil
}

func requireTools(names ...string) error {
	var missing []string
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (bash scripts/test-deps.sh installs them: Debian's iproute2, qemu-system-x86, openipmi)", strings.Join(missing, ", "))
	}
	return nil
}

func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f, err := parseUp("up", args, stderr)
	if err != nil {
		return err
	}
	made := false
	defer func() {
		if err != nil && made {
			// Nothing half made is left: what up made goes, logs too
			// (the error carries the end of the log that matters).
			say(stdout, "up failed: removing what it made")
			if derr := down(context.Background(), f.dir, stdout); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	if err := requireRoot(); err != nil {
		return err
	}
	if err := requireTools("ip", "qemu-system-x86_64", "ipmi_sim", "bash"); err != nil {
		return err
	}
	if st, err := loadState(f.dir); err == nil {
		if st.Complete && st.alive() == nil && nsExists() {
			say(stdout, "the lab in %s is up already", f.dir)
			st.summary(stdout)
			return nil
		}
		why := "up did not finish"
		if err := st.alive(); err != nil {
			why = err.Error()
		}
		say(stdout, "the lab in %s is partly up (%s): taking it down first", f.dir, why)
		if err := down(ctx, f.dir, stdout); err != nil {
			return err
		}
	} else if nsExists() {
		return fmt.Errorf("a network namespace %s exists but %s does not record it: another lab (another --dir) is up, or one was left behind; rackd-lab down --dir DIR removes it", NetNS, statePath(f.dir))
	}
	rackd, err := filepath.Abs(f.rackd)
	if err != nil {
		return err
	}
	if _, err := os.Stat(rackd); err != nil {
		return fmt.Errorf("rackd binary: %w (make build makes bin/rackd)", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	st := &State{Dir: f.dir}
	if err := st.save(); err != nil {
		return err
	}
	made = true
	start := time.Now()

	// The images rackd boots: built here (cached), imported below.
	image := f.image
	if image == "" {
		image = "build/initramfs/image"
		if err := step(ctx, stdout, "the enlistment image (build/initramfs/image; minutes when it is missing or its sources changed)",
			filepath.Join(f.dir, "initramfs.log"), "bash", "scripts/initramfs.sh", "--if-stale"); err != nil {
			return err
		}
	}
	loaders := f.loaders
	if _, err := os.Stat(filepath.Join(loaders, "amd64", "rackd-image.json")); err != nil {
		if err := step(ctx, stdout, "the bootloaders ("+loaders+", from Debian's packages, cached in build/bootloaders-cache)",
			filepath.Join(f.dir, "bootloaders.log"), "bash", "scripts/bootloaders.sh", "--image", "--cache", "build/bootloaders-cache", loaders); err != nil {
			return err
		}
	}

	// The network.
	say(stdout, "network: namespace %s, bridge %s (%s, rackd at %s), link %s to the host (route %s)", NetNS, Bridge, Subnet, Server, HostVeth, HostRoute)
	if err := makeNetwork(ctx); err != nil {
		return err
	}

	// rackd.
	rstate := filepath.Join(f.dir, "rackd")
	cfg := fmt.Sprintf(`# written by rackd-lab up: rackd serving the lab's rack network
listen = "%s:%d"
state_dir = %q
name = "lab"

[dhcp]
interfaces = [%q]

[tftp]
listen = "%s:69"

[dns]
listen = "%s:53"
`, Server, RackdPort, rstate, Bridge, Server, Server)
	cfgPath := filepath.Join(f.dir, "rackd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	say(stdout, "rackd: %s serve --config %s (log %s)", rackd, cfgPath, filepath.Join(f.dir, "rackd.log"))
	if err := st.start("rackd", rackd, cfgPath, filepath.Join(f.dir, "rackd.log"), rackd, "serve", "--config", cfgPath); err != nil {
		return err
	}
	if err := waitHealthy(ctx, st, 60*time.Second); err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(rstate, "admin.token"))
	if err != nil {
		return fmt.Errorf("rackd's admin token: %w", err)
	}
	st.Token = strings.TrimSpace(string(tok))
	if err := st.save(); err != nil {
		return err
	}
	if err := writeEnv(f.dir, st.Token, filepath.Dir(rackd)); err != nil {
		return err
	}
	cli := func(what string, args ...string) error {
		return step(ctx, stdout, what, filepath.Join(f.dir, "setup.log"), rackd, append(args, "--url", URL, "--token", st.Token)...)
	}
	if err := cli("the rack's subnet: rackd subnets add "+Subnet, "subnets", "add", Subnet, "--gateway", Server, "--dns", Server,
		"--domain", Domain, "--dynamic", Dynamic); err != nil {
		return err
	}
	for _, dir := range []string{image, filepath.Join(loaders, "amd64")} {
		if err := cli("import "+dir, "images", "import", dir); err != nil {
			return err
		}
	}

	// Router advertisements on the bridge.
	if err := st.start("ra", self, "rackd-lab ra", filepath.Join(f.dir, "ra.log"), self, "ra", "--interface", Bridge, "--prefix", ULA); err != nil {
		return err
	}

	// The machines, each behind its BMC, powered off.
	accel := vmtest.TCG
	if f.accel == "kvm" {
		accel = vmtest.KVM
	}
	for i := 1; i <= f.machines; i++ {
		m := MachineFor(f.dir, i)
		if err := startMachine(ctx, st, self, m, accel); err != nil {
			return err
		}
		st.Machines = append(st.Machines, m)
		if err := st.save(); err != nil {
			return err
		}
		say(stdout, "%s: %s, behind its %s BMC at %s (user %s, password %s), powered off; console %s", m.Name, m.MAC, m.Driver, m.Address, BMCUser, BMCPass, m.Console)
	}
	st.Complete = true
	if err := st.save(); err != nil {
		return err
	}
	say(stdout, "up in %s", time.Since(start).Round(time.Second))
	st.summary(stdout)
	return nil
}

// step runs one command of up (output to log), saying what it does and,
// every 30 s, that it still does it.
func step(ctx context.Context, w io.Writer, what, log string, name string, args ...string) error {
	say(w, "%s ...", what)
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "\n$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// A build is a tree of processes: its own group, all ended on cancel.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s: %w; the end of %s:\n%s", what, err, log, tail(log, 20))
			}
			if d := time.Since(start); d > 5*time.Second {
				say(w, "%s: done in %s", what, d.Round(time.Second))
			}
			return nil
		case <-tick.C:
			say(w, "  ... %s so far (log %s): %s", time.Since(start).Round(time.Second), log, lastLine(log))
		}
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func lastLine(path string) string {
	l := tail(path, 1)
	if len(l) > 100 {
		l = l[:100] + "..."
	}
	return l
}

// ip runs ip(8) with args.
func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func nsExists() bool {
	_, err := os.Stat("/var/run/netns/" + NetNS)
	return err == nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// makeNetwork makes the namespace, the bridge, the host link and the
// routes.
func makeNetwork(ctx context.Context) error {
	n := func(args ...string) []string { return append([]string{"-n", NetNS}, args...) }
	steps := [][]string{
		{"netns", "add", NetNS},
		n("link", "set", "lo", "up"),
		n("link", "add", Bridge, "type", "bridge"),
		n("addr", "add", Server+"/24", "dev", Bridge),
		n("addr", "add", ULA, "dev", Bridge),
		n("link", "set", Bridge, "up"),
		{"link", "add", HostVeth, "type", "veth", "peer", "name", NSVeth, "netns", NetNS},
		{"addr", "add", HostAddr, "dev", HostVeth},
		{"link", "set", HostVeth, "up"},
		n("addr", "add", NSAddr, "dev", NSVeth),
		n("link", "set", NSVeth, "up"),
		n("route", "add", "default", "via", NSGateway),
		{"route", "add", HostRoute, "via", strings.TrimSuffix(NSAddr, "/30")},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	// The namespace routes between the host link and the rack network
	// (ssh from the host to a machine); its own setting, not the host's.
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", NetNS, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip_forward in %s: %v: %s", NetNS, err, out)
	}
	return nil
}

// start starts a long-running process inside the namespace, detached (its
// own session, output in log), and records it.
func (st *State) start(name, marker, display, log string, argv ...string) error {
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	// ip netns exec execs the command in place: the PID is the command's.
	cmd := exec.Command("ip", append([]string{"netns", "exec", NetNS}, argv...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", display, err)
	}
	st.Procs = append(st.Procs, Proc{Name: name, PID: cmd.Process.Pid, Marker: marker, Log: log})
	if err := st.save(); err != nil {
		return err
	}
	// Reaped by init once up exits; until then, a goroutine reaps it so
	// that an early exit is seen (alive).
	go cmd.Wait()
	return nil
}

// alive says which recorded process is not running (nil: all are).
func (st *State) alive() error {
	for _, p := range st.Procs {
		if !procIs(p) {
			return fmt.Errorf("%s (pid %d) is not running", p.Name, p.PID)
		}
	}
	return nil
}

// procIs says whether p.PID is still the process the lab started: alive,
// not a zombie, its command line holding p.Marker.
func procIs(p Proc) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil || len(b) == 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
		return false
	}
	return bytes.Contains(bytes.ReplaceAll(b, []byte{0}, []byte{' '}), []byte(p.Marker))
}

func waitHealthy(ctx context.Context, st *State, bound time.Duration) error {
	p := st.Procs[len(st.Procs)-1]
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(bound)
	for {
		resp, err := c.Get(URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !procIs(p) {
			return fmt.Errorf("rackd exited at start; the end of %s:\n%s", p.Log, tail(p.Log, 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rackd not healthy at %s after %v (%v); the end of %s:\n%s", URL, bound, err, p.Log, tail(p.Log, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeEnv writes DIR/env, which a shell sources to talk to the lab's
// rackd: its URL and admin token, and bin on PATH.
func writeEnv(dir, token, bin string) error {
	env := fmt.Sprintf(`# written by rackd-lab up; source it: . %s/env
export RACKD_URL=%s
export RACKD_TOKEN=%s
case ":$PATH:" in *":%s:"*) ;; *) export PATH="%s:$PATH" ;; esac
`, dir, URL, token, bin, bin)
	return os.WriteFile(filepath.Join(dir, "env"), []byte(env), 0o600)
}

// startMachine makes the machine's tap and disk and starts its BMC, which
// runs QEMU while the machine's power is on.
func startMachine(ctx context.Context, st *State, self string, m Machine, accel []string) error {
	if err := ip(ctx, "-n", NetNS, "tuntap", "add", "dev", m.Tap, "mode", "tap"); err != nil {
		return err
	}
	if err := ip(ctx, "-n", NetNS, "link", "set", m.Tap, "master", Bridge, "up"); err != nil {
		return err
	}
	host := strings.TrimPrefix(m.Address, "https://")
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	if err := ip(ctx, "-n", NetNS, "addr", "add", host+"/32", "dev", "lo"); err != nil {
		return err
	}
	df, err := os.Create(m.Disk)
	if err != nil {
		return err
	}
	if err := df.Truncate(DiskBytes); err != nil {
		df.Close()
		return err
	}
	df.Close()
	qemu := append([]string{"qemu-system-x86_64"}, accel...)
	qemu = append(qemu, "-name", m.Name, "-m", fmt.Sprint(MemoryMB), "-smp", fmt.Sprint(CPUs),
		"-nographic", "-monitor", "none",
		"-chardev", "file,id=s0,append=on,path="+m.Console, "-serial", "chardev:s0",
		// Entropy for the guest from the host, beside -cpu max's RDRAND.
		"-object", "rng-random,id=rng0,filename=/dev/urandom", "-device", "virtio-rng-pci,rng=rng0",
		"-netdev", "tap,id=n0,ifname="+m.Tap+",script=no,downscript=no",
		// Network first, then the disk: rackd's "boot from local disk"
		// answer (iPXE's exit) hands over to the next boot device.
		"-device", "virtio-net-pci,netdev=n0,bootindex=1,mac="+m.MAC,
		"-drive", "if=none,id=d0,format=raw,file="+m.Disk,
		"-device", "virtio-blk-pci,drive=d0,bootindex=2")
	listen := host + ":623"
	if m.Driver == "redfish" {
		listen = host + ":443"
	}
	log := filepath.Join(st.Dir, m.Name+"-bmc.log")
	argv := append([]string{self, m.Driver, "--listen", listen, "--user", BMCUser, "--password", BMCPass, "--"}, qemu...)
	if err := st.start(m.Name+"-bmc", "rackd-lab "+m.Driver+" --listen "+listen, "the BMC of "+m.Name, log, argv...); err != nil {
		return err
	}
	p := st.Procs[len(st.Procs)-1]
	// Ready when it says where it listens.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if bytes.Contains(b, []byte(" BMC ")) {
			return nil
		}
		if !procIs(p) || time.Now().After(deadline) {
			return fmt.Errorf("the BMC of %s did not start; the end of %s:\n%s", m.Name, log, tail(log, 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// summary prints how to reach the lab and what to do next.
func (st *State) summary(w io.Writer) {
	fmt.Fprintf(w, "\nThe lab is up: %d machines, each behind its own BMC.\n\n", len(st.Machines))
	fmt.Fprintf(w, "  web UI and API  %s/\n", URL)
	fmt.Fprintf(w, "  admin token     %s\n", st.Token)
	fmt.Fprintf(w, "  shell settings  %s/env (RACKD_URL, RACKD_TOKEN, bin/ on PATH)\n\n", st.Dir)
	fmt.Fprintf(w, "  %-6s %-18s %-8s %-20s %s\n", "NAME", "MAC", "BMC", "BMC ADDRESS", "CONSOLE")
	for _, m := range st.Machines {
		fmt.Fprintf(w, "  %-6s %-18s %-8s %-20s %s\n", m.Name, m.MAC, m.Driver, m.Address, m.Console)
	}
	fmt.Fprintf(w, "  (BMC user %s, password %s)\n\nNext (docs/GETTING-STARTED.md goes on from there):\n\n", BMCUser, BMCPass)
	rel := st.Dir
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, st.Dir); err == nil && !strings.HasPrefix(r, "..") {
			rel = r
		}
	}
	fmt.Fprintf(w, "  . %s/env\n", rel)
	if len(st.Machines) > 0 {
		fmt.Fprintf(w, "  %s\n", st.Machines[0].AddCommand())
		fmt.Fprintf(w, "  rackd machines commission %s\n", st.Machines[0].Name)
	}
	fmt.Fprintf(w, "\nmake lab-down removes it all.\n")
}
