// Package ipmisim runs real BMCs for tests and benchmarks: one ipmi_sim
// process (Debian package openipmi) per BMC, each with its own lan.conf,
// emulator file, chassis_control hook and fresh state directory, listening on
// its own loopback address (127.0.1.N:623 unless told otherwise).
//
// The hook keeps the chassis power bit and the boot device in files, so
// on/off/cycle/status and "next boot" are real and can be cross-checked
// without IPMI (Sim.Power, Sim.BootDevice). A test can also plug in what the
// machine is (Options.Machine: a process that runs while the power is on, the
// way ipmi_sim's startcmd powers a VM) or commands run on each power change
// (Options.OnCmd, Options.OffCmd; a failing command makes the BMC answer with
// an error completion code).
//
// Typical use:
//
//	sim := ipmisim.Start(t, ipmisim.Options{})   // stopped in t.Cleanup
//	target := power.Target{Driver: "ipmi", Address: sim.Addr, Username: sim.User, Password: sim.Password}
//	sim.Hang(); ...; sim.Resume()                // SIGSTOP / SIGCONT: a hung BMC
//	sim.Restart()                                // a BMC reboot; power state survives
//
// Facts and pitfalls (from the project's shared notes on ipmi_sim): use
// cipher suite 3; 63 session slots; -n and -s are required; readiness needs
// a real packet, not a sleep.
package ipmisim

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options configures one simulated BMC. The zero value is a BMC with user
// "admin", password "secret", power off, on a free 127.0.1.N:623 (a port
// above 1024 when not root).
type Options struct {
	// Addr is host:port to listen on; empty picks a free 127.0.1.N:623 (not
	// root: 127.0.1.N:16623)
	// (spilling over to 127.0.2-8.N), locked against other users of this
	// package in the same network namespace (that of the calling thread)
	// for the life of the Sim.
	Addr string
	// User and Password of the BMC's admin user (IPMI user 2).
	User, Password string
	// PowerOn is the chassis power state at the first start.
	PowerOn bool
	// Machine, when set, is started (in its own session, output in
	// Dir/hook/machine.log, PID from MachinePID) when the power goes on; the power reads on while it
	// runs; power off sends its process group SIGTERM, then SIGKILL after
	// 3 s. Stop and t.Cleanup kill it too. This is ipmi_sim's startcmd done
	// through the hook, so a test can power a real process (a QEMU VM).
	Machine []string
	// OnCmd and OffCmd, when set, run synchronously (output in
	// Dir/hook/hook.log, with the hook's own record of every get and set)
	// before the power bit changes; a non-zero exit makes the BMC refuse the
	// command. With Machine, they run before it is started or stopped.
	OnCmd, OffCmd []string
	// BootCmd, when set, runs the same way before the boot device changes
	// (a set-boot-device command); a non-zero exit makes the BMC refuse it,
	// as BMCs that do not support boot options do.
	BootCmd []string
	// StartTimeout bounds the wait for readiness (default 10 s).
	StartTimeout time.Duration
	// SOL, when set, is the machine's serial port behind the BMC's
	// Serial-over-LAN, in ipmi_sim's form "tcp:HOST:PORT": the BMC connects
	// to it when a client activates SOL (a QEMU "-serial
	// tcp:HOST:PORT,server=on,wait=off", or a test's own listener standing
	// for one) and relays the bytes both ways.
	SOL string
	// VMSerial, when set (HOST:PORT), is where the BMC listens for a
	// virtual machine's in-band IPMI interface (ipmi_sim's "serial 15 ...
	// codec VM"): QEMU's "-chardev socket,host=HOST,port=PORT" with
	// "-device ipmi-bmc-extern" and "-device isa-ipmi-kcs" connects there,
	// and the guest's /dev/ipmi0 talks to this BMC.
	VMSerial string
}

// Sim is one running ipmi_sim.
type Sim struct {
	Addr     string // host:port
	Host     string
	Port     int
	User     string
	Password string
	Dir      string // config, hook, hook state (power, boot, logs)

	opts    Options
	lock    *os.File // flock on the address, held while the Sim lives
	mu      sync.Mutex
	cmd     *exec.Cmd
	waitErr chan error
	stopped bool
}

// Start starts a simulator for a test and stops it (and anything its hook
// started) in t.Cleanup. It fails the test if ipmi_sim is missing or never
// answers.
func Start(t testing.TB, opts Options) *Sim {
	t.Helper()
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		t.Fatalf("ipmi_sim not installed (Debian package openipmi; scripts/test-deps.sh installs it): %v", err)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("ipmisim: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("ipmisim %s: %v", s.Addr, err)
		}
	})
	return s
}

// New starts a simulator outside a test (benchmarks); the caller must Close it.
func New(opts Options) (*Sim, error) {
	if opts.User == "" {
		opts.User = "admin"
	}
	if opts.Password == "" {
		opts.Password = "secret"
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	dir, err := os.MkdirTemp("", "rackd-ipmisim-")
	if err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	s := &Sim{User: opts.User, Password: opts.Password, Dir: dir, opts: opts}
	if err := s.claimAddr(opts.Addr); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.writeConfig(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// lockDir holds one flock file per claimed address, shared by every process
// using this package (parallel test binaries, benchmarks).
// lockDir is per user: a directory root made is not another user's to
// write, and the two never claim the same port (defaultPort).
func lockDir() string {
	if os.Geteuid() == 0 {
		return filepath.Join(os.TempDir(), "rackd-ipmisim-locks")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("rackd-ipmisim-locks-%d", os.Geteuid()))
}

// defaultPort is the port a Sim listens on when not told: IPMI's own 623
// as root, else one any user may bind (the driver and ipmitool take a port),
// so that the IPMI tests run without root too.
func defaultPort() int {
	if os.Geteuid() == 0 {
		return 623
	}
	return 16623
}

// netnsID names the network namespace of the calling thread (its inode, as
// /proc shows it), so that an address is claimed per namespace: 127.0.0.1
// in a test's own namespace is not the host's, and two tests that each use
// it in their own namespace do not collide.
func netnsID() string {
	link, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		return "host"
	}
	return strings.Trim(strings.TrimPrefix(link, "net:"), "[]")
}

func (s *Sim) claimAddr(addr string) error {
	if err := os.MkdirAll(lockDir(), 0o755); err != nil {
		return fmt.Errorf("lock dir: %w", err)
	}
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("address %q: %w", addr, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("address %q: port: %w", addr, err)
		}
		if !s.tryClaim(host, p) {
			return fmt.Errorf("address %s is in use", addr)
		}
		return nil
	}
	// Random probing over 127.0.1-8.2-254: collisions with parallel test
	// binaries are settled by the flock, foreign listeners by the bind probe.
	const third, fourth = 8, 253
	start := rand.IntN(third * fourth)
	port := defaultPort()
	for i := range third * fourth {
		n := (start + i) % (third * fourth)
		host := fmt.Sprintf("127.0.%d.%d", 1+n/fourth, 2+n%fourth)
		if s.tryClaim(host, port) {
			return nil
		}
	}
	return fmt.Errorf("no free 127.0.1-8.N:%d address for ipmi_sim", port)
}

func (s *Sim) tryClaim(host string, port int) bool {
	f, err := os.OpenFile(filepath.Join(lockDir(), fmt.Sprintf("%s_%s_%d.lock", netnsID(), host, port)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	// Someone outside this package may hold the port.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(host), Port: port})
	if err != nil {
		f.Close()
		return false
	}
	c.Close()
	s.lock, s.Host, s.Port = f, host, port
	s.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	return true
}

// shq quotes one word for /bin/sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shq(a)
	}
	return strings.Join(q, " ")
}

func (s *Sim) writeConfig() error {
	guid := fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
	hook := filepath.Join(s.Dir, "hook.sh")
	state := filepath.Join(s.Dir, "hook")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "sim"), 0o755); err != nil {
		return err
	}
	lan := fmt.Sprintf(`name "rackd-sim"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid %s
  endlan
  chassis_control "%s %s"
user 2 true %q %q admin 10 none md2 md5 straight
`, s.Host, s.Port, guid, hook, state, s.User, s.Password)
	if s.opts.SOL != "" {
		lan += fmt.Sprintf("sol %q 115200\n", s.opts.SOL)
	}
	if s.opts.VMSerial != "" {
		host, port, err := net.SplitHostPort(s.opts.VMSerial)
		if err != nil {
			return fmt.Errorf("VMSerial %q: %w", s.opts.VMSerial, err)
		}
		lan += fmt.Sprintf("serial 15 %s %s codec VM\n", host, port)
	}
	emu := `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
mc_enable 0x20
`
	initial := "0"
	if s.opts.PowerOn {
		initial = "1"
	}
	files := map[string]string{
		"lan.conf":   lan,
		"bmc.emu":    emu,
		"hook/power": initial + "\n",
		"hook/boot":  "default\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(hook, []byte(s.hookScript()), 0o755); err != nil {
		return err
	}
	if s.opts.PowerOn && len(s.opts.Machine) > 0 {
		out, err := exec.Command(hook, state, "set", "power", "1").CombinedOutput()
		if err != nil {
			return fmt.Errorf("starting the machine: %v: %s", err, out)
		}
	}
	return nil
}

// hookScript is ipmi_sim's chassis_control program. It is run as
// "hook <state dir> get power boot" (prints name:value lines) and
// "hook <state dir> set <name> <value>"; a non-zero exit is an error
// completion code.
func (s *Sim) hookScript() string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# written by rackd's internal/ipmisim\ndir=$1; shift; op=$1; shift\n")
	fmt.Fprintf(&b, "on_cmd() { %s; }\noff_cmd() { %s; }\nboot_cmd() { %s; }\n", orTrue(s.opts.OnCmd), orTrue(s.opts.OffCmd), orTrue(s.opts.BootCmd))
	if len(s.opts.Machine) > 0 {
		// Not a process group leader when backgrounded, so setsid execs in
		// place and $! is the machine's PID (and its process group).
		fmt.Fprintf(&b, "start_machine() { setsid %s >>\"$dir/machine.log\" 2>&1 </dev/null & echo $! >\"$dir/machine.pid\"; }\nhave_machine=1\n", shArgv(s.opts.Machine))
	} else {
		b.WriteString("have_machine=0\n")
	}
	b.WriteString(`
alive() {
	[ -s "$dir/machine.pid" ] || return 1
	pid=$(cat "$dir/machine.pid")
	[ -d /proc/$pid ] || return 1
	# a zombie is dead
	case $(sed 's/.*) //' /proc/$pid/stat 2>/dev/null | cut -c1) in Z|X|"") return 1;; esac
	return 0
}
get_power() {
	if [ $have_machine = 1 ]; then
		if alive; then echo 1; else echo 0; fi
	else
		cat "$dir/power"
	fi
}
set_power() {
	if [ "$1" = 1 ]; then
		on_cmd >>"$dir/hook.log" 2>&1 || return 1
		if [ $have_machine = 1 ] && ! alive; then
			start_machine
		fi
	else
		off_cmd >>"$dir/hook.log" 2>&1 || return 1
		if [ $have_machine = 1 ] && alive; then
			pid=$(cat "$dir/machine.pid")
			kill -TERM -"$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
			i=0
			while alive && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done
			alive && kill -KILL -"$pid" 2>/dev/null
		fi
	fi
	echo "$1" >"$dir/power.tmp" && mv "$dir/power.tmp" "$dir/power"
}
echo "$(date +%T.%N) $op $*" >>"$dir/hook.log"
case $op in
get)
	for n in "$@"; do
		case $n in
		power) echo "power:$(get_power)" ;;
		boot) echo "boot:$(cat "$dir/boot")" ;;
		esac
	done ;;
set)
	while [ $# -ge 2 ]; do
		case $1 in
		power) set_power "$2" || exit 1 ;;
		boot) boot_cmd >>"$dir/hook.log" 2>&1 || exit 1; echo "$2" >"$dir/boot" ;;
		reset) if [ "$(get_power)" = 1 ]; then set_power 0 && set_power 1 || exit 1; fi ;;
		shutdown) set_power 0 || exit 1 ;;
		esac
		shift 2
	done ;;
esac
exit 0
`)
	return b.String()
}

func orTrue(argv []string) string {
	if len(argv) == 0 {
		return "true"
	}
	return shArgv(argv)
}

func (s *Sim) start() error {
	cmd := exec.Command("ipmi_sim", "-n",
		"-c", filepath.Join(s.Dir, "lan.conf"),
		"-f", filepath.Join(s.Dir, "bmc.emu"),
		"-s", filepath.Join(s.Dir, "sim"))
	logf, err := os.OpenFile(filepath.Join(s.Dir, "ipmi_sim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdin = nil // /dev/null; -n because it is not a tty
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a Ctrl-C on the test does not race our
	// cleanup; and it dies with the test process should that be killed
	// before its cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ipmi_sim: %w", err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	s.mu.Lock()
	s.cmd, s.waitErr, s.stopped = cmd, waitErr, false
	s.mu.Unlock()
	return s.waitReady(waitErr)
}

// waitReady sends a sessionless IPMI 1.5 Get Channel Authentication
// Capabilities (the first packet every client sends) until the MC answers:
// a silent error in the .emu file leaves the process alive but deaf, so a
// sleep would not do.
func (s *Sim) waitReady(exited <-chan error) error {
	deadline := time.Now().Add(s.opts.StartTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			s.waitErr <- err // keep it for stop
			return fmt.Errorf("ipmi_sim on %s exited at start (%v); log: %s", s.Addr, err, s.tail("ipmi_sim.log"))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := Ping(ctx, s.Addr)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	return fmt.Errorf("ipmi_sim on %s did not answer within %v; log: %s", s.Addr, s.opts.StartTimeout, s.tail("ipmi_sim.log"))
}

// getChanAuthCaps is an RMCP + IPMI 1.5 sessionless Get Channel
// Authentication Capabilities request (channel: this one, privilege: admin).
var getChanAuthCaps = []byte{
	0x06, 0x00, 0xff, 0x07, // RMCP: version, reserved, seq (no ack), class IPMI
	0x00, 0, 0, 0, 0, 0, 0, 0, 0, // auth type none, session seq, session id
	0x09,             // message length
	0x20, 0x18, 0xc8, // rsAddr BMC, netFn App, checksum
	0x81, 0x00, 0x38, 0x0e, 0x04, 0x35, // rqAddr, rqSeq, cmd, channel, privilege, checksum
}

// Ping sends one Get Channel Authentication Capabilities to addr and waits
// for a successful answer until ctx ends.
func Ping(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write(getChanAuthCaps); err != nil {
		return err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	// RMCP(4) + session header(10) + rqAddr, netFn, chk, rsAddr, seq, cmd, then the completion code.
	if n < 21 || buf[3] != 0x07 || buf[19] != 0x38 || buf[20] != 0x00 {
		return fmt.Errorf("unexpected answer % x", buf[:n])
	}
	return nil
}

func (s *Sim) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, name))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// PID is the running ipmi_sim's process id (0 when stopped).
func (s *Sim) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.stopped {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Sim) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.stopped {
		return fmt.Errorf("ipmi_sim on %s is not running", s.Addr)
	}
	return s.cmd.Process.Signal(sig)
}

// Hang freezes the simulator (SIGSTOP): packets are queued and never
// answered, like a hung BMC. A stopped process would instead answer with
// ICMP port unreachable at once.
func (s *Sim) Hang() error { return s.signal(syscall.SIGSTOP) }

// Resume undoes Hang (SIGCONT).
func (s *Sim) Resume() error { return s.signal(syscall.SIGCONT) }

// Stop ends the simulator (SIGTERM, SIGKILL after 3 s); the address stays
// claimed and the state kept, so Restart can bring it back. The machine
// process, if any, keeps running, as a host does while its BMC reboots.
func (s *Sim) Stop() error { return s.stop() }

func (s *Sim) stop() error {
	s.mu.Lock()
	cmd, waitErr, stopped := s.cmd, s.waitErr, s.stopped
	s.stopped = true
	s.mu.Unlock()
	if cmd == nil || stopped {
		return nil
	}
	// A SIGSTOPped process does not act on SIGTERM until continued.
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-waitErr:
		return nil
	case <-time.After(3 * time.Second):
	}
	cmd.Process.Kill()
	select {
	case <-waitErr:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("ipmi_sim pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}

// Restart stops the simulator and starts it again on the same address with
// the same state: a BMC reboot. Sessions opened before are gone.
func (s *Sim) Restart() error {
	if err := s.stop(); err != nil {
		return err
	}
	return s.start()
}

// Close stops the simulator and the machine process, releases the address
// and removes the state directory. It is safe to call twice.
func (s *Sim) Close() error {
	err := s.stop()
	s.killMachine()
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
	if s.Dir != "" && os.Getenv("RACKD_KEEP_IPMISIM") == "" {
		os.RemoveAll(s.Dir)
	}
	return err
}

func (s *Sim) killMachine() {
	b, err := os.ReadFile(filepath.Join(s.Dir, "hook", "machine.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	// The machine leads its own session and process group (setsid).
	syscall.Kill(-pid, syscall.SIGTERM)
	for range 30 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(-pid, syscall.SIGKILL)
}

// Power reads the chassis power bit the hook keeps (true = on), without IPMI.
// With Options.Machine it says whether the machine process runs.
func (s *Sim) Power() (bool, error) {
	out, err := exec.Command(filepath.Join(s.Dir, "hook.sh"), filepath.Join(s.Dir, "hook"), "get", "power").Output()
	if err != nil {
		return false, fmt.Errorf("hook get power: %w", err)
	}
	switch strings.TrimSpace(string(out)) {
	case "power:1":
		return true, nil
	case "power:0":
		return false, nil
	}
	return false, fmt.Errorf("hook get power: %q", out)
}

// BootDevice is the boot device last set through IPMI as ipmi_sim passes it
// to the hook (pxe, default, cdrom, bios, none).
func (s *Sim) BootDevice() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, "hook", "boot"))
	return strings.TrimSpace(string(b)), err
}

// MachinePID is the PID of the running Options.Machine process, 0 when it
// does not run.
func (s *Sim) MachinePID() int {
	b, err := os.ReadFile(filepath.Join(s.Dir, "hook", "machine.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// HookLog is what the hook recorded (every get and set, with times).
func (s *Sim) HookLog() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "hook", "hook.log"))
	return string(b)
}

// Ipmitool runs ipmitool -I lanplus -C 3 against the simulator, the
// password passed through the environment (-E), never argv.
func (s *Sim) Ipmitool(ctx context.Context, args ...string) (string, error) {
	return s.IpmitoolAs(ctx, s.User, s.Password, args...)
}

// IpmitoolAs is Ipmitool logged in as another user of the BMC (one a
// test created).
func (s *Sim) IpmitoolAs(ctx context.Context, user, password string, args ...string) (string, error) {
	argv := append([]string{"-I", "lanplus", "-C", "3", "-H", s.Host, "-p", strconv.Itoa(s.Port), "-U", user, "-E", "-N", "1", "-R", "3"}, args...)
	cmd := exec.CommandContext(ctx, "ipmitool", argv...)
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+password)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// ActiveSessions asks the BMC (through ipmitool) how many sessions are
// active, not counting ipmitool's own.
func (s *Sim) ActiveSessions(ctx context.Context) (int, error) {
	out, err := s.Ipmitool(ctx, "session", "info", "active")
	if err != nil {
		return 0, fmt.Errorf("session info: %v: %s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "active sessions" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("session info: %q", line)
			}
			return n - 1, nil
		}
	}
	return 0, fmt.Errorf("session info: no count in %q", out)
}
