// Command enlist is the uinit of rackd's enlistment initramfs. It loads the
// NIC drivers, gets an address with DHCP, reads the machine's inventory,
// asks rackd whether the machine is known (whoami) and then enlists it and
// powers off, reboots, or powers off, as rackd says. The rackd URL comes
// from the kernel command line (rackd.url=http://HOST:PORT) or -url.
//
// Booted by rackd with rackd.mode=commission, deploy or erase (and
// rackd.machine=), it claims the phase's credential from rackd (once, from
// the address of its DHCP lease) and does that phase's work instead: send
// the full inventory; stream the raw disk image of rackd.image= to the
// disk, verifying rackd.image_sha256=; or wipe the first and last MiB of
// the disks. It reports to rackd with the credential and powers off, or
// reboots into the deployed system.
//
// Every console line starts with "rackd-enlist: "; the final lines, which
// tests watch the serial console for, are listed in package rackd/enlist.
//
// Usage (all flags optional on a machine booted by rackd):
//
//	enlist [-url URL] [-modules FILE] [-dhcp=true] [-dhcp-timeout 30s]
//	       [-nic-wait 15s] [-tries 0] [-retry-max 30s] [-attempt-timeout 15s]
//	       [-interfaces eth0,eth1] [-mode enlist|commission|deploy|erase]
//	       [-disk auto|NAME] [-dry-run]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"rackd/enlist"
	"rackd/enlist/bmc"
	"rackd/enlist/inventory"
)

// DefaultModulesFile lists the kernel modules to load, one per line, in the
// initramfs; rackd.modules=a,b on the command line adds more.
const DefaultModulesFile = "/etc/rackd-enlist/modules"

// powerer acts on the machine. The real one is the reboot system call, so
// tests hand in a fake.
type powerer interface {
	Reboot() error
	PowerOff() error
}

// network brings an interface up with DHCP.
type network interface {
	// Up gets a lease on one of nics and configures it; it returns the
	// interface it configured.
	Up(ctx context.Context, nics []inventory.NIC, timeout time.Duration) (inventory.NIC, error)
}

// system is everything run touches outside the process.
type system struct {
	stdout io.Writer
	// root is the machine's file system: proc/cmdline, sys/..., and the
	// modules file (paths without the leading slash).
	root    fs.FS
	power   powerer
	net     network
	modules func(name string) error
	// bmc reads the BMC's address in-band; nil or an error means unknown.
	bmc func() (string, error)
	// bmcSetup creates or updates rackd's user on the BMC in-band
	// (commissioning, when rackd asks); nil: no in-band IPMI here.
	bmcSetup func() (bmc.Result, error)
	sleep    func(context.Context, time.Duration) error
	arch     string
	// openDisk opens /dev/<name> for writing (deploy and erase modes).
	openDisk func(name string) (disk, error)
}

type options struct {
	url            string
	modulesFile    string
	dhcp           bool
	dhcpTimeout    time.Duration
	nicWait        time.Duration
	tries          int
	retryMax       time.Duration
	attemptTimeout time.Duration
	dryRun         bool
	interfaces     []string
	mode           string
	disk           string
}

// run is the whole program. It prints progress and, at the end, exactly one
// of the final lines of package enlist; it returns only when it could not
// act (or with -dry-run).
func run(ctx context.Context, args []string, sys system) error {
	say := func(format string, a ...any) { fmt.Fprintf(sys.stdout, enlist.Prefix+format+"\n", a...) }
	err := run1(ctx, args, sys, say)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(sys.stdout, enlist.MarkerFailed+oneLine(err.Error()))
	}
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fl := flag.NewFlagSet("enlist", flag.ContinueOnError)
	fl.SetOutput(out)
	fl.StringVar(&o.url, "url", "", "rackd's URL (default: rackd.url= from the kernel command line)")
	fl.StringVar(&o.modulesFile, "modules", DefaultModulesFile, "file listing the kernel modules to load, one per line (missing: none)")
	fl.BoolVar(&o.dhcp, "dhcp", true, "bring the network up with DHCP (false: it is up already)")
	fl.DurationVar(&o.dhcpTimeout, "dhcp-timeout", 30*time.Second, "time one round of DHCP on all interfaces may take")
	fl.DurationVar(&o.nicWait, "nic-wait", 15*time.Second, "how long to wait for network interfaces to appear after loading drivers")
	fl.IntVar(&o.tries, "tries", 0, "attempts per step while rackd or DHCP does not answer (0: until it does)")
	fl.DurationVar(&o.retryMax, "retry-max", enlist.DefaultBackoff.Max, "longest pause between attempts (jittered)")
	fl.DurationVar(&o.attemptTimeout, "attempt-timeout", enlist.DefaultBackoff.Attempt, "time one request to rackd may take")
	fl.BoolVar(&o.dryRun, "dry-run", false, "say what would be done, but neither reboot nor power off")
	fl.StringVar(&o.mode, "mode", "", "enlist, commission, deploy or erase (default: rackd.mode= from the kernel command line, else enlist)")
	fl.StringVar(&o.disk, "disk", "", "target disk rule of deploy and erase: auto or a kernel disk name (default: rackd.disk=, else auto)")
	fl.Func("interfaces", "comma-separated interfaces to use, physical or not (default: every physical one)", func(s string) error {
		o.interfaces = nil
		for n := range strings.SplitSeq(s, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.interfaces = append(o.interfaces, n)
			}
		}
		return nil
	})
	if err := fl.Parse(args); err != nil {
		return o, err
	}
	if fl.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fl.Args())
	}
	return o, nil
}

// run1 is run's steps in order: read the flags and the kernel command
// line, choose the mode, bring the network up, take the inventory, then
// either do the phase rackd booted the machine for or ask rackd about it
// (enlisting it when unknown), and act on the answer.
func run1(ctx context.Context, args []string, sys system, say func(string, ...any)) error {
	o, err := parseFlags(args, sys.stdout)
	if err != nil {
		return err
	}
	sys = sys.withDefaults()
	start := time.Now()
	say("starting (%s)", sys.arch)
	cmdline := readCmdline(sys.root)

	base, err := rackdURL(o.url, cmdline)
	if err != nil {
		return err
	}
	say("rackd is %s", base)
	mode, phase, err := chooseMode(o, cmdline, say)
	if err != nil {
		return err
	}

	loadModules(sys, o.modulesFile, cmdline, say)
	backoff := enlist.Backoff{Initial: time.Second, Max: o.retryMax, Attempt: o.attemptTimeout, Tries: o.tries}
	nics, bootMAC, leaseMAC, err := bringUpNetwork(ctx, sys, o, backoff, cmdline, say)
	if err != nil {
		return err
	}
	inv, err := takeInventory(sys, nics, bootMAC, say)
	if err != nil {
		return err
	}

	client := &enlist.Client{Base: base, Backoff: backoff, Sleep: sys.sleep,
		Progress: func(msg string) { say("%s", msg) }}
	var final string
	var action enlist.Action
	if mode != enlist.ModeEnlist {
		final, action, err = runPhase(ctx, sys, phase, leaseMAC, base, client, inv, say)
	} else {
		final, action, err = askRackd(ctx, client, inv, say)
	}
	if err != nil {
		return err
	}
	return finish(sys, o, start, final, action, say)
}

// withDefaults fills in what a test may leave out: the real sleep and the
// running architecture.
func (sys system) withDefaults() system {
	if sys.sleep == nil {
		sys.sleep = sleepCtx
	}
	if sys.arch == "" {
		sys.arch = runtime.GOARCH
	}
	return sys
}

// readCmdline is the kernel command line, "" when it cannot be read.
func readCmdline(root fs.FS) string {
	b, err := fs.ReadFile(root, "proc/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// chooseMode takes -mode, else rackd.mode= of the command line, else
// enlist; the phase modes need their arguments from the command line.
func chooseMode(o options, cmdline string, say func(string, ...any)) (string, phaseArgs, error) {
	mode := o.mode
	if mode == "" {
		mode, _ = inventory.ParseCmdline(cmdline, "rackd.mode")
	}
	switch mode {
	case "", enlist.ModeEnlist:
		return enlist.ModeEnlist, phaseArgs{}, nil
	case enlist.ModeCommission, enlist.ModeDeploy, enlist.ModeErase:
		phase, err := parsePhaseArgs(mode, cmdline, o.disk)
		if err != nil {
			return "", phaseArgs{}, err
		}
		say("mode %s for machine %s", mode, phase.machine)
		return mode, phase, nil
	default:
		return "", phaseArgs{}, fmt.Errorf("rackd.mode=%q: want enlist, commission, deploy or erase", mode)
	}
}

// bringUpNetwork waits for the interfaces and, unless -dhcp=false, gets a
// lease on one. The boot MAC is BOOTIF= of the command line, else the
// interface that got the lease ("" when neither says). The lease MAC is
// the interface that got the lease, whose address the requests to rackd
// come from; without DHCP it is the boot MAC, or the only interface.
func bringUpNetwork(ctx context.Context, sys system, o options, backoff enlist.Backoff, cmdline string,
	say func(string, ...any)) (nics []inventory.NIC, bootMAC, leaseMAC string, err error) {
	nics, err = waitNICs(ctx, sys, o.nicWait, o.interfaces)
	if err != nil {
		return nil, "", "", err
	}
	names := make([]string, len(nics))
	for i, n := range nics {
		names[i] = n.Name + "=" + n.MAC
	}
	say("network interfaces: %s", strings.Join(names, " "))

	bootMAC = inventory.BootMAC(cmdline)
	leaseMAC = bootMAC
	if leaseMAC == "" && len(nics) == 1 {
		leaseMAC = nics[0].MAC
	}
	if o.dhcp {
		nic, err := dhcp(ctx, sys, nics, o, backoff, say)
		if err != nil {
			return nil, "", "", err
		}
		if bootMAC == "" {
			bootMAC = nic.MAC
		}
		leaseMAC = nic.MAC
	}
	return nics, bootMAC, leaseMAC, nil
}

// takeInventory reads the machine's inventory, with the boot MAC first and
// the in-band BMC address when there is one.
func takeInventory(sys system, nics []inventory.NIC, bootMAC string, say func(string, ...any)) (enlist.Inventory, error) {
	inv, warnings, err := inventory.CollectNICs(sys.root, sys.arch, nics)
	if err != nil {
		return enlist.Inventory{}, fmt.Errorf("inventory: %w", err)
	}
	for _, w := range warnings {
		say("warning: %v", w)
	}
	// The boot interface first: rackd treats the first MAC as the one the
	// machine boots from.
	if i := slices.Index(inv.MACs, bootMAC); i > 0 {
		inv.MACs = append(append([]string{bootMAC}, inv.MACs[:i]...), inv.MACs[i+1:]...)
	}
	if sys.bmc != nil {
		if addr, err := sys.bmc(); err == nil && addr != "" {
			inv.BMCAddress = addr
		} else if err != nil {
			say("no in-band BMC address: %v", err)
		}
	}
	say("inventory: %s", summary(inv))
	return inv, nil
}

// askRackd is the enlistment mode's exchange: whoami, and enlist when rackd
// does not know the machine. It returns the final line and what to do.
func askRackd(ctx context.Context, client *enlist.Client, inv enlist.Inventory, say func(string, ...any)) (string, enlist.Action, error) {
	who, err := client.WhoAmI(ctx, inv.MACs)
	if err != nil {
		return "", "", fmt.Errorf("whoami: %w", err)
	}
	if who.Action != enlist.ActionEnlist {
		return enlist.MarkerKnown + who.State + "), " + who.Action.Doing(), who.Action, nil
	}
	say("rackd does not know this machine: enlisting")
	res, known, err := client.Enlist(ctx, inv)
	if err != nil {
		return "", "", fmt.Errorf("enlist: %w", err)
	}
	if known {
		return enlist.MarkerAlreadyKnown + res.Action.Doing(), res.Action, nil
	}
	return enlist.MarkerEnlisted + res.ID + ", " + res.Action.Doing(), res.Action, nil
}

// finish prints the final line and acts.
func finish(sys system, o options, start time.Time, final string, action enlist.Action, say func(string, ...any)) error {
	say("done in %s", time.Since(start).Round(time.Millisecond))
	fmt.Fprintln(sys.stdout, final)
	if o.dryRun {
		say("dry run: not acting")
		return nil
	}
	var err error
	if action == enlist.ActionReboot {
		err = sys.power.Reboot()
	} else {
		err = sys.power.PowerOff()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", action.Doing(), err)
	}
	return nil // only a fake returns from a successful reboot call
}

// rackdURL takes -url, else rackd.url= of the kernel command line.
func rackdURL(flagURL, cmdline string) (*url.URL, error) {
	s := flagURL
	if s == "" {
		var ok bool
		if s, ok = inventory.ParseCmdline(cmdline, "rackd.url"); !ok || s == "" {
			return nil, errors.New("no rackd URL: boot with rackd.url=http://HOST:PORT on the kernel command line, or pass -url")
		}
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("rackd URL %q: want http://HOST:PORT", s)
	}
	return u, nil
}

// moduleList reads the modules file (comments with #) and rackd.modules=.
func moduleList(root fs.FS, file, cmdline string) []string {
	var mods []string
	if file != "" {
		if b, err := fs.ReadFile(root, strings.TrimPrefix(path.Clean(file), "/")); err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				line, _, _ = strings.Cut(line, "#")
				mods = append(mods, strings.Fields(line)...)
			}
		}
	}
	if v, ok := inventory.ParseCmdline(cmdline, "rackd.modules"); ok {
		for m := range strings.SplitSeq(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				mods = append(mods, m)
			}
		}
	}
	out := mods[:0]
	for _, m := range mods {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// loadModules loads the listed drivers. A failure is worth a line but not
// an abort: the driver may be built in, or another NIC may do.
func loadModules(sys system, file, cmdline string, say func(string, ...any)) {
	mods := moduleList(sys.root, file, cmdline)
	if len(mods) == 0 || sys.modules == nil {
		return
	}
	var loaded, failed []string
	for _, m := range mods {
		if err := sys.modules(m); err != nil {
			failed = append(failed, m)
			say("module %s: %v", m, err)
			continue
		}
		loaded = append(loaded, m)
	}
	say("modules loaded: %s", strings.Join(loaded, " "))
}

// nicPoll is how often waitNICs looks.
const nicPoll = 200 * time.Millisecond

// waitNICs polls /sys/class/net until a physical interface shows up:
// drivers create their interfaces a moment after they load.
func waitNICs(ctx context.Context, sys system, wait time.Duration, names []string) ([]inventory.NIC, error) {
	deadline := time.Now().Add(wait)
	for {
		nics, err := inventory.NICs(sys.root)
		if len(names) > 0 {
			nics, err = inventory.NamedNICs(sys.root, names)
		}
		if err == nil && len(nics) > 0 {
			return nics, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("none found")
			}
			return nil, fmt.Errorf("no physical network interface after %s (is the NIC's driver in the modules list?): %w", wait, err)
		}
		if err := sys.sleep(ctx, nicPoll); err != nil {
			return nil, err
		}
	}
}

// dhcp brings the network up, round after round with backoff until a lease
// comes (or the tries run out).
func dhcp(ctx context.Context, sys system, nics []inventory.NIC, o options, b enlist.Backoff, say func(string, ...any)) (inventory.NIC, error) {
	wait := b.Initial
	for n := 1; ; n++ {
		say("DHCP on %d interface(s), attempt %d", len(nics), n)
		nic, err := sys.net.Up(ctx, nics, o.dhcpTimeout)
		if err == nil {
			say("network up on %s (%s)", nic.Name, nic.MAC)
			return nic, nil
		}
		if ctx.Err() != nil || (b.Tries > 0 && n >= b.Tries) {
			return inventory.NIC{}, fmt.Errorf("dhcp: no lease after %d attempt(s): %w", n, err)
		}
		say("no DHCP lease: %v; retrying in %s", err, wait)
		if err := sys.sleep(ctx, wait); err != nil {
			return inventory.NIC{}, err
		}
		wait = min(2*wait, b.Max)
	}
}

// summary is the inventory in one console line.
func summary(inv enlist.Inventory) string {
	var disks []string
	for _, d := range inv.Disks {
		disks = append(disks, fmt.Sprintf("%s %.1fG", d.Name, float64(d.SizeBytes)/(1<<30)))
	}
	s := fmt.Sprintf("macs %s, %s, %d CPUs, %d MiB, disks [%s]", strings.Join(inv.MACs, " "), inv.Arch,
		inv.CPUCount, inv.MemoryMB, strings.Join(disks, ", "))
	if id := strings.TrimSpace(inv.DMI.Vendor + " " + inv.DMI.Product); id != "" {
		s += ", " + id
	}
	if inv.DMI.UUID != "" {
		s += ", uuid " + inv.DMI.UUID
	}
	if inv.BMCAddress != "" {
		s += ", BMC " + inv.BMCAddress
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
