//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"rackd/appliance"
	"rackd/appliance/boot"
	"rackd/internal/gpt"
)

// DefaultModulesFile is where the appliance's initramfs lists the kernel
// modules to load, one a line.
const DefaultModulesFile = "/etc/rackd/modules"

type options struct {
	root        string
	modulesFile string
	rackd       string
	mke2fs      string
	mount       bool
	reboot      bool
	healthPoll  time.Duration
	deviceWait  time.Duration
	dhcpWait    time.Duration
}

func parseFlags(args []string) (options, error) {
	var o options
	fl := flag.NewFlagSet("rackd-init", flag.ContinueOnError)
	fl.StringVar(&o.root, "root", "/", "the root every path is under (tests: a directory of proc, sys, dev, ...)")
	fl.StringVar(&o.modulesFile, "modules", DefaultModulesFile, "file listing the kernel modules to load, one a line (missing: none)")
	fl.StringVar(&o.rackd, "rackd", "/bin/rackd", "the rackd binary")
	fl.StringVar(&o.mke2fs, "mke2fs", "/sbin/mke2fs", "the mke2fs binary")
	fl.BoolVar(&o.mount, "mount", true, "mount the slot, the ESP and the data partition (false: ROOT/slot, ROOT/esp, ROOT/data are directories already)")
	fl.BoolVar(&o.reboot, "reboot", true, "reboot when rackd asks or a trial fails (false: exit with code 100 instead)")
	fl.DurationVar(&o.healthPoll, "health-poll", 2*time.Second, "how often /healthz is asked while rackd is not healthy")
	fl.DurationVar(&o.deviceWait, "device-wait", 30*time.Second, "how long to wait for the disk's partitions and the NICs to appear")
	fl.DurationVar(&o.dhcpWait, "dhcp-wait", 30*time.Second, "how long rackd's start waits for the management interface's lease (DHCP goes on after)")
	if err := fl.Parse(args); err != nil {
		return o, err
	}
	if fl.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	return o, nil
}

// system is what run does to the machine: the real one on the appliance,
// a root directory's stand-ins in tests (realSystem honours -mount and
// -reboot).
type system interface {
	LoadModule(name string) error
	// Devices returns the modaliases of the devices present and the
	// kernel's module aliases (nil, nil: load every listed module).
	Devices() (modaliases []string, aliases boot.ModuleAliases, err error)
	Mount(source, target, fstype string, readOnly bool) error
	Unmount(target string) error
	// DiskSize is a block device's (or an image file's) size in bytes.
	DiskSize(path string) (int64, error)
	// ResizePartition tells the kernel partition number of disk now spans
	// start to start+length (bytes): the table changed under a disk whose
	// other partitions are in use.
	ResizePartition(disk string, number int, start, length int64) error
	Sync()
	Reboot() error
	PowerOff() error
}

// exitReboot is run's exit code when it would have rebooted with
// -reboot=false.
const exitReboot = appliance.ExitReboot

// initState is one boot's facts, gathered as run goes.
type initState struct {
	o       options
	sys     system
	out     io.Writer
	say     func(format string, a ...any)
	cmdline boot.Cmdline
	booted  appliance.Slot
	parts   map[string]boot.Partition
	data    boot.Data
	cfg     boot.Config
	version string
	build   int64
	first   bool
	nics    boot.Interfaces
	mounted []string
	// closeLog stops the init's and rackd's output going to the data
	// partition's log, before it is unmounted.
	closeLog func()
	// disarmWatchdog stops petting the hardware watchdog and disarms it.
	disarmWatchdog func()
}

// path is p under the root.
func (s *initState) path(p string) string { return filepath.Join(s.o.root, p) }

func run(ctx context.Context, o options, sys system) int {
	var mu sync.Mutex
	var logw io.Writer = io.Discard
	out := os.Stdout
	say := func(format string, a ...any) {
		line := fmt.Sprintf("rackd-init: "+format+"\n", a...)
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(out, line)
		io.WriteString(logw, line)
	}
	s := &initState{o: o, sys: sys, out: out, say: say}
	code, err := s.boot(ctx, func(w io.Writer) { mu.Lock(); logw = w; mu.Unlock() })
	if err != nil {
		say("FAILED: %s", oneLine(err.Error()))
		if code == 0 {
			code = 1
		}
	}
	return code
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// boot is the whole boot, in order. It returns the exit code (after a
// shutdown) or an error that stops the appliance from serving.
func (s *initState) boot(ctx context.Context, setLog func(io.Writer)) (int, error) {
	s.say("starting")
	raw, _ := os.ReadFile(s.path("proc/cmdline"))
	c, err := boot.ParseCmdline(string(raw))
	if err != nil {
		return 0, err
	}
	s.cmdline = c
	s.booted = appliance.Slot(c.Slot)
	if !s.booted.Valid() {
		s.say("the kernel command line names no slot (rackd.slot=a|b): taking slot a")
		s.booted = appliance.SlotA
	}
	s.loadModules()
	if !entropyReady() {
		s.say("the kernel's random number generator is not seeded yet: DHCP and rackd's first start wait for it (a VM wants virtio-rng, or a CPU with RDRAND)")
	}

	if err := s.findPartitions(ctx); err != nil {
		return 0, err
	}
	if err := s.mountSlotAndESP(); err != nil {
		return 0, err
	}
	s.readManifest()
	s.say("rackd appliance %s (build %d), slot %s%s", s.version, s.build, s.booted, map[bool]string{true: " (trial)"}[c.Trial])

	if err := s.prepareData(ctx); err != nil {
		return 0, err
	}
	rot := &boot.RotatingFile{Path: s.data.Path(boot.LogFile), Max: int64(s.cfg.Log.MaxMB) << 20, Keep: s.cfg.Log.Keep}
	setLog(rot)
	s.closeLog = func() { setLog(io.Discard); rot.Close() }
	defer s.closeLog()

	netCtx, stopNet := context.WithCancel(ctx)
	defer stopNet()
	mgmtReady := s.networks(netCtx)
	descriptor := s.path("run/rackd/appliance.json")
	if wrote, err := s.data.WriteRackdConfig(rackNames(s.nics), descriptor); err != nil {
		return 0, fmt.Errorf("write rackd.toml: %w", err)
	} else if wrote {
		s.say("wrote %s (DHCP on %s)", s.data.Path(boot.RackdConfigFile), orNone(rackNames(s.nics)))
	}
	if err := s.writeDescriptor(descriptor); err != nil {
		return 0, err
	}
	outcome := s.afterBoot()

	if restored, err := restoreForRollback(s.data.Path(boot.StateDir)); err != nil {
		s.say("database rollback: %v", err)
	} else if restored {
		s.say("the database was newer than this build: put back the copy kept before its migration (the newer file is kept aside in %s as rackd.db.schema-N.rolled-back; what it had since is not in the copy)", s.data.Path(boot.StateDir))
	}

	select {
	case <-mgmtReady:
	case <-time.After(s.o.dhcpWait):
		s.say("no lease on %s yet: starting rackd anyway (DHCP goes on)", s.nics.Management)
	case <-ctx.Done():
	}
	return s.serve(ctx, rot, outcome)
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func rackNames(n boot.Interfaces) []string {
	var out []string
	for _, r := range n.Rack {
		out = append(out, r.Name)
	}
	return out
}

// loadModules loads the listed modules a driver of which has a device here
// (boot.ModulesFor), pass after pass as the buses' drivers make their
// devices appear, and every listed module that drives no device. A failure
// is worth a line but not an abort: the driver may be built in, or another
// will do.
func (s *initState) loadModules() {
	var mods []string
	if b, err := os.ReadFile(s.path(s.o.modulesFile)); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			line, _, _ = strings.Cut(line, "#")
			mods = append(mods, strings.Fields(line)...)
		}
	}
	var loaded, slow []string
	tried := map[string]bool{}
	start := time.Now()
	load := func(m string) {
		tried[strings.ReplaceAll(m, "-", "_")] = true
		t := time.Now()
		if err := s.sys.LoadModule(m); err != nil {
			s.say("module %s: %v", m, err)
			return
		}
		loaded = append(loaded, m)
		// A driver whose load takes long is boot time worth naming.
		if d := time.Since(t); d >= 100*time.Millisecond {
			slow = append(slow, fmt.Sprintf("%s %s", m, d.Round(10*time.Millisecond)))
		}
	}
	// What the kernel command line names is loaded whatever is present.
	for _, m := range s.cmdline.Modules {
		load(m)
	}
	// Each pass can only add modules, and there are finitely many.
	for {
		modaliases, aliases, err := s.sys.Devices()
		if err != nil {
			s.say("devices: %v: loading every listed module", err)
			aliases = nil
		}
		next := boot.ModulesFor(mods, aliases, modaliases, tried)
		if len(next) == 0 {
			break
		}
		for _, m := range next {
			load(m)
		}
	}
	if len(loaded) > 0 {
		s.say("modules loaded in %s: %s", time.Since(start).Round(10*time.Millisecond), strings.Join(loaded, " "))
	}
	if len(slow) > 0 {
		s.say("slow to load: %s", strings.Join(slow, ", "))
	}
}

// findPartitions waits for the disk's partitions: its driver probes it a
// moment after it loads.
func (s *initState) findPartitions(ctx context.Context) error {
	deadline := time.Now().Add(s.o.deviceWait)
	for {
		parts, err := boot.FindPartitions(s.path("sys"), string(s.booted))
		if err == nil {
			s.parts = parts
			d := parts[boot.PartData]
			s.say("disk %s: esp %s, slots %s and %s, data %s", d.Disk, parts[boot.PartESP].Dev, parts[boot.PartSlotA].Dev, parts[boot.PartSlotB].Dev, d.Dev)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the appliance's partitions after %s: %w", s.o.deviceWait, err)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

func (s *initState) dev(p boot.Partition) string { return s.path(p.DevPath()) }

func (s *initState) mountSlotAndESP() error {
	slotPart := s.parts[boot.PartSlotA]
	if s.booted == appliance.SlotB {
		slotPart = s.parts[boot.PartSlotB]
	}
	if err := s.mount(s.dev(slotPart), "slot", "squashfs", true); err != nil {
		return err
	}
	return s.mount(s.dev(s.parts[boot.PartESP]), "esp", "vfat", false)
}

func (s *initState) mount(dev, at, fstype string, ro bool) error {
	target := s.path(at)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := s.sys.Mount(dev, target, fstype, ro); err != nil {
		return fmt.Errorf("mount %s (%s) at %s: %w", dev, fstype, target, err)
	}
	s.mounted = append(s.mounted, target)
	return nil
}

// readManifest reads the slot's version and build; a slot without one
// still boots (its version is "unknown").
func (s *initState) readManifest() {
	s.version = "unknown"
	b, err := os.ReadFile(s.path("slot/manifest.json"))
	if err != nil {
		s.say("slot manifest: %v", err)
		return
	}
	var m struct {
		Version string `json:"version"`
		Build   int64  `json:"build"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		s.say("slot manifest: %v", err)
		return
	}
	if m.Version != "" {
		s.version = m.Version
	}
	s.build = m.Build
}

// prepareData makes the data partition ready: formatted at first boot or
// on a factory reset (grown to the disk's end first), mounted, its
// directories and default config files there.
func (s *initState) prepareData(ctx context.Context) error {
	dataPart := s.parts[boot.PartData]
	dev := s.dev(dataPart)
	f, err := os.Open(dev)
	if err != nil {
		return fmt.Errorf("data partition: %w", err)
	}
	hasFS, err := boot.HasExtFS(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("data partition %s: %w", dev, err)
	}
	// GRUB turns rackd_reset=1 into rackd.factory_reset=1 and clears it; a
	// GRUB that could not save its environment leaves it set, and it still
	// asks for the reset (once: it is cleared below).
	envPath := s.path("esp/grub/grubenv")
	env, envErr := appliance.ReadEnvFile(envPath)
	resetInEnv := envErr == nil && appliance.ResetRequested(env)
	switch {
	case s.cmdline.FactoryReset || resetInEnv:
		s.say("factory reset: formatting the data partition %s", dataPart.Dev)
		s.first = true
	case !hasFS:
		s.say("first boot: the data partition %s is blank", dataPart.Dev)
		s.first = true
	}
	if s.first {
		if err := s.growData(dataPart); err != nil {
			return err
		}
		if err := boot.Format(ctx, s.o.mke2fs, dev); err != nil {
			return err
		}
		if !s.o.mount {
			// ROOT/data stands for the new file system: empty.
			if err := emptyDir(s.path("data")); err != nil {
				return err
			}
		}
		s.say("made an ext4 file system (label %s) on %s", boot.DataLabel, dataPart.Dev)
		if resetInEnv {
			if _, err := appliance.UpdateEnvFile(envPath, func(e *appliance.Env) error {
				e.Unset(appliance.EnvReset)
				return nil
			}); err != nil {
				s.say("GRUB environment: clear %s: %v", appliance.EnvReset, err)
			}
		}
	}
	if err := s.mount(dev, "data", "ext4", false); err != nil {
		return err
	}
	s.data = boot.Data{Dir: s.path("data")}
	if wrote, err := s.data.Prepare(s.path("esp/grub/appliance.toml")); err != nil {
		s.say("appliance.toml: %v (the defaults apply)", err)
	} else if wrote {
		s.say("wrote %s", s.data.Path(boot.ApplianceConfigFile))
	}
	cfg, err := s.data.LoadConfig()
	if err != nil {
		// A broken config must not make the appliance unreachable: the
		// defaults bring it up, and the console says what to fix.
		s.say("%v: booting with the defaults", err)
		cfg = boot.Defaults()
	}
	s.cfg = cfg
	return nil
}

// growData grows the data partition to the disk's end, and tells the
// kernel its new size.
func (s *initState) growData(p boot.Partition) error {
	disk := s.path(p.DiskPath())
	size, err := s.sys.DiskSize(disk)
	if err != nil {
		return fmt.Errorf("size of %s: %w", disk, err)
	}
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	e, grown, err := gpt.Grow(f, size, boot.PartData)
	if err != nil {
		return fmt.Errorf("grow the data partition on %s: %w", disk, err)
	}
	if !grown {
		return nil
	}
	if err := f.Sync(); err != nil {
		return err
	}
	start, length := int64(e.First)*512, int64(e.Last-e.First+1)*512
	if err := s.sys.ResizePartition(disk, p.Number, start, length); err != nil {
		return fmt.Errorf("tell the kernel %s grew: %w", p.Dev, err)
	}
	s.say("grew the data partition %s to the disk's end (%d MiB)", p.Dev, length>>20)
	return nil
}

// networks brings the rack interfaces up with their addresses and the
// management interface by DHCP (in the background, the lease kept renewed)
// or statically. The channel is closed once the management interface has
// its address.
func (s *initState) networks(ctx context.Context) <-chan struct{} {
	ready := make(chan struct{})
	var names []string
	deadline := time.Now().Add(s.o.deviceWait)
	for {
		nics, err := boot.NICs(s.path("sys"))
		names = boot.Names(nics)
		if err == nil && len(names) > 0 && (s.cfg.Management.Interface == "" || slices.Contains(names, s.cfg.Management.Interface)) {
			break
		}
		if time.Now().After(deadline) || sleep(ctx, 250*time.Millisecond) != nil {
			break
		}
	}
	ifs, err := s.cfg.Assign(names)
	if err != nil {
		s.say("network: %v", err)
		close(ready)
		return ready
	}
	s.nics = ifs
	for _, r := range ifs.Rack {
		if err := staticUp(r.Name, r.Address, netip.Addr{}); err != nil {
			s.say("rack interface: %v", err)
			continue
		}
		s.say("rack interface %s: %s", r.Name, r.Address)
	}
	m := s.cfg.Management
	if m.Mode == "static" {
		addr := netip.MustParsePrefix(m.Address)
		gw, _ := netip.ParseAddr(m.Gateway)
		if err := staticUp(ifs.Management, addr, gw); err != nil {
			s.say("management interface: %v", err)
		} else {
			s.say("management interface %s: %s (static)", ifs.Management, addr)
		}
		var dns []netip.Addr
		for _, d := range m.DNS {
			dns = append(dns, netip.MustParseAddr(d))
		}
		if len(dns) > 0 {
			if err := writeResolvConf(s.path("etc/resolv.conf"), dns, ""); err != nil {
				s.say("resolv.conf: %v", err)
			}
		}
		close(ready)
		return ready
	}
	go func() {
		s.say("management interface %s: DHCP", ifs.Management)
		if err := dhcpUp(ctx, ifs.Management, s.path("etc/resolv.conf"), s.say, func() { close(ready) }); err != nil && ctx.Err() == nil {
			s.say("management interface %s: %v", ifs.Management, err)
		}
	}()
	return ready
}

func (s *initState) writeDescriptor(path string) error {
	d := appliance.Descriptor{
		Booted: s.booted, Trial: s.cmdline.Trial, Version: s.version, Build: s.build,
		Slots:      map[appliance.Slot]string{appliance.SlotA: s.dev(s.parts[boot.PartSlotA]), appliance.SlotB: s.dev(s.parts[boot.PartSlotB])},
		GrubEnv:    s.path("esp/grub/grubenv"),
		PublicKey:  s.path("slot/bundle.pub"),
		StatusFile: s.data.Path(boot.StatusFile),
		DataDevice: s.dev(s.parts[boot.PartData]),
	}
	if err := appliance.SaveDescriptor(path, d); err != nil {
		return fmt.Errorf("write the appliance descriptor: %w", err)
	}
	return nil
}

// afterBoot applies the boot-count rules: the GRUB environment and the
// status file say what this boot is.
func (s *initState) afterBoot() appliance.BootOutcome {
	envPath := s.path("esp/grub/grubenv")
	env, err := appliance.ReadEnvFile(envPath)
	if err != nil {
		s.say("GRUB environment: %v (updates cannot be armed)", err)
		env = appliance.NewEnv()
	}
	outcome, failed, newEnv := appliance.AfterBoot(env, s.booted, s.cmdline.Trial)
	if !equalEnv(env, newEnv) && err == nil {
		if err := appliance.WriteEnvFile(envPath, newEnv); err != nil {
			s.say("GRUB environment: %v", err)
		}
	}
	statusPath := s.data.Path(boot.StatusFile)
	if _, err := appliance.LoadStatus(statusPath); err != nil {
		s.say("status file: %v (starting a new one)", err)
		if err := appliance.SaveStatus(statusPath, appliance.Status{}); err != nil {
			s.say("status file: %v", err)
		}
	}
	st, err := appliance.UpdateStatus(statusPath, func(st *appliance.Status) error {
		*st = appliance.RecordBoot(*st, s.booted, s.version, s.build, outcome, failed, time.Now().UTC())
		return nil
	})
	if err != nil {
		s.say("status file: %v", err)
	}
	switch outcome {
	case appliance.BootTryFailed:
		reason := ""
		if st.LastUpdate != nil {
			reason = st.LastUpdate.Reason
		}
		s.say("the update in slot %s failed: %s; slot %s stays the good one", failed, reason, s.booted)
	case appliance.BootTrial:
		s.say("trial boot of slot %s: it becomes the good slot once rackd is healthy", s.booted)
	}
	return outcome
}

func equalEnv(a, b *appliance.Env) bool {
	am, bm := a.Map(), b.Map()
	if len(am) != len(bm) {
		return false
	}
	for k, v := range am {
		if bm[k] != v {
			return false
		}
	}
	return true
}

// serve supervises rackd and acts on its health and its exit.
func (s *initState) serve(ctx context.Context, rot *boot.RotatingFile, outcome appliance.BootOutcome) (int, error) {
	tail := &boot.Tail{Lines: 5}
	supCtx, stopSup := context.WithCancel(ctx)
	defer stopSup()
	// A trial slot whose rackd keeps exiting fails without waiting for
	// the health window (TrialExitLimit).
	crashLoop := make(chan struct{}, 1)
	sup := &boot.Supervisor{
		OnExit: func(n int) {
			if n >= TrialExitLimit {
				select {
				case crashLoop <- struct{}{}:
				default:
				}
			}
		},
		Command: func(ctx context.Context) *exec.Cmd {
			cmd := exec.CommandContext(ctx, s.o.rackd, "serve", "--config", s.data.Path(boot.RackdConfigFile))
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
			cmd.WaitDelay = 20 * time.Second
			return cmd
		},
		Out:      io.MultiWriter(s.out, rot, tail),
		Backoff:  boot.DefaultBackoff,
		StopCode: appliance.ExitReboot,
		Log:      s.say,
	}
	start := time.Now()
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Run(supCtx) }()

	window := s.cfg.HealthWindow()
	if s.cmdline.HealthWindow > 0 {
		window = s.cmdline.HealthWindow
	}
	healthCtx, stopHealth := context.WithCancel(ctx)
	defer stopHealth()
	// trialDecided: the trial slot became the good one (or failed): later
	// exits are those of a good slot's rackd, restarted for ever.
	trialDecided := false
	// failTrial records why (the status file's reason) and reboots to the
	// good slot; seen is what the console says was seen.
	failTrial := func(seen, why string) (int, error) {
		trialDecided = true
		s.say("trial of slot %s failed: %s: %s", s.booted, seen, why)
		if _, err := appliance.UpdateStatus(s.data.Path(boot.StatusFile), func(st *appliance.Status) error {
			*st = appliance.RecordTrialFailed(*st, s.booted, why, time.Now().UTC())
			return nil
		}); err != nil {
			s.say("status file: %v", err)
		}
		// rackd stops before the file systems it writes are unmounted.
		stopHealth()
		stopSup()
		<-supDone
		return s.shutdown(haltReboot)
	}
	port := listenPort(s.data.Path(boot.RackdConfigFile))
	s.disarmWatchdog = s.startWatchdog(ctx, start, window, port)
	powerKey := s.watchPowerKey()
	healthDone := make(chan error, 1)
	client := &http.Client{Timeout: 10 * time.Second}
	go func() {
		healthDone <- boot.WaitHealthy(healthCtx, client, boot.HealthURL(port), start, window, s.o.healthPoll)
	}()

	for {
		select {
		case err := <-supDone:
			stopHealth()
			if errors.Is(err, boot.ErrStopCode) {
				s.say("rackd asked for a reboot")
				return s.shutdown(haltReboot)
			}
			s.say("stopping: %v", err)
			return s.shutdown(haltExit)
		case <-powerKey:
			s.say("power button: stopping rackd, then powering off")
			stopHealth()
			stopSup()
			<-supDone
			return s.shutdown(haltPowerOff)
		case err := <-healthDone:
			healthDone = nil
			if err == nil {
				trialDecided = true
				s.healthy(ctx, port, outcome)
				continue
			}
			why := s.whyUnhealthy(err, sup, tail)
			if outcome != appliance.BootTrial {
				// The slot is the good one: there is nothing to fall
				// back to, so rackd keeps being restarted, and the
				// subnet, images and banner follow once it is healthy.
				s.say("rackd is not healthy %s after boot: %s", window, why)
				healthDone = make(chan error, 1)
				go func() {
					healthDone <- boot.WaitHealthy(healthCtx, client, boot.HealthURL(port), time.Now(), 100*365*24*time.Hour, s.o.healthPoll)
				}()
				continue
			}
			return failTrial(fmt.Sprintf("not healthy within %s", window), why)
		case <-crashLoop:
			if outcome != appliance.BootTrial || trialDecided {
				continue
			}
			n, last := sup.Exits()
			return failTrial(fmt.Sprintf("rackd exited %d times without becoming healthy", n),
				oneLine(fmt.Sprintf("rackd exited %d times (last: %s): %s", n, last, tail.String())))
		}
	}
}

// TrialExitLimit is how many times a trial slot's rackd may exit before it
// was ever healthy: at that many the trial fails at once instead of
// waiting out the health window. A rackd that exits at start (a schema it
// cannot open, a config it refuses) does so on every restart, and the
// backoff's pauses (1+2+4+8 s) already gave it a quarter of a minute to
// come up; waiting minutes more only keeps the rack without its agent.
const TrialExitLimit = 5

// whyUnhealthy is the status file's reason for a rackd that did not become
// healthy: how often it exited and its last lines, else /healthz's answer.
func (s *initState) whyUnhealthy(err error, sup *boot.Supervisor, tail *boot.Tail) string {
	why := err.Error()
	if n, last := sup.Exits(); n > 0 {
		why = fmt.Sprintf("rackd exited %d times (last: %s): %s", n, last, tail.String())
	}
	return oneLine(why)
}

// healthy: a trial slot becomes the good one; the rack subnet and the
// slot's images are put in place; the banner is printed.
func (s *initState) healthy(ctx context.Context, port int, outcome appliance.BootOutcome) {
	s.say("rackd is healthy")
	if outcome == appliance.BootTrial {
		envPath := s.path("esp/grub/grubenv")
		if _, err := appliance.UpdateEnvFile(envPath, func(e *appliance.Env) error {
			*e = *appliance.MarkGood(e, s.booted)
			return nil
		}); err != nil {
			s.say("mark slot %s good: %v", s.booted, err)
		} else {
			if _, err := appliance.UpdateStatus(s.data.Path(boot.StatusFile), func(st *appliance.Status) error {
				*st = appliance.RecordTrialGood(*st, s.booted, time.Now().UTC())
				return nil
			}); err != nil {
				s.say("status file: %v", err)
			}
			s.say("slot %s (%s) is the good slot now", s.booted, s.version)
		}
	}
	token, err := os.ReadFile(s.data.Path(boot.AdminTokenFile))
	if err != nil {
		s.say("admin token: %v", err)
	}
	api := boot.API{Base: fmt.Sprintf("http://127.0.0.1:%d", port), Token: strings.TrimSpace(string(token)), Client: &http.Client{Timeout: 10 * time.Minute}}
	for _, r := range s.nics.Rack {
		created, err := api.EnsureSubnet(ctx, r.Address)
		switch {
		case err != nil:
			s.say("rack subnet of %s: %v", r.Name, err)
		case created:
			cidr, lo, hi, _ := boot.RackSubnet(r.Address)
			s.say("created the rack subnet %s (DHCP %s-%s) on %s", cidr, lo, hi, r.Name)
		}
	}
	dirs, err := boot.ImageDirs(s.path("slot/images"))
	if err != nil {
		s.say("slot images: %v", err)
	}
	if len(dirs) > 0 {
		imported, err := api.ImportImages(ctx, dirs)
		if len(imported) > 0 {
			s.say("imported %s", strings.Join(imported, ", "))
		}
		if err != nil {
			s.say("images: %s", oneLine(err.Error()))
		}
	}
	s.banner(port, strings.TrimSpace(string(token)))
}

func (s *initState) banner(port int, token string) {
	addr := "<no address yet>"
	if a := addr4(s.nics.Management); a.IsValid() {
		addr = a.String()
	}
	url := fmt.Sprintf("http://%s:%d/", addr, port)
	if s.first && token != "" {
		s.say("rackd appliance %s (slot %s): API %s — admin token: %s (also in /data/%s)", s.version, s.booted, url, token, boot.AdminTokenFile)
		return
	}
	s.say("rackd appliance %s (slot %s): API %s (admin token in /data/%s)", s.version, s.booted, url, boot.AdminTokenFile)
}

// listenPort is the port of rackd.toml's listen address (the default's
// when it cannot be read).
func listenPort(path string) int {
	port := boot.RackdListenPort
	b, err := os.ReadFile(path)
	if err != nil {
		return port
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != "listen" {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if ap, err := netip.ParseAddrPort(v); err == nil {
			return int(ap.Port())
		}
		return port
	}
	return port
}

// halt is what shutdown ends with.
type halt int

const (
	haltExit     halt = iota // return (a stop by signal)
	haltReboot               // rackd asked, or a trial failed
	haltPowerOff             // the power button
)

// shutdown syncs, unmounts what it mounted (data and ESP first) and
// reboots or powers off; with -reboot=false it says so and returns
// exitReboot (or 0 for a power off) instead.
func (s *initState) shutdown(how halt) (int, error) {
	s.sys.Sync()
	if s.closeLog != nil {
		s.closeLog()
	}
	for i := len(s.mounted) - 1; i >= 0; i-- {
		if err := s.sys.Unmount(s.mounted[i]); err != nil {
			s.say("unmount %s: %v", s.mounted[i], err)
		}
	}
	s.sys.Sync()
	// Before a reboot or power off the watchdog stays armed: one that
	// hangs is reset by the hardware.
	if s.disarmWatchdog != nil && (how == haltExit || !s.o.reboot) {
		s.disarmWatchdog()
	}
	switch {
	case how == haltExit:
		return 0, nil
	case !s.o.reboot && how == haltReboot:
		s.say("reboot (not done: -reboot=false)")
		return exitReboot, nil
	case !s.o.reboot:
		s.say("power off (not done: -reboot=false)")
		return 0, nil
	case how == haltPowerOff:
		s.say("powering off")
		return 0, s.sys.PowerOff()
	}
	s.say("rebooting")
	return 0, s.sys.Reboot()
}

func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
