// Package powertest has a fake power driver for tests and benchmarks, and
// the conformance suite every driver passes.
package powertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"rackd/power"
)

// Fake is an in-memory power.Driver. It tells machines apart by Key (the
// address and the user name), so several machines can share one BMC address
// the way blades share a chassis BMC. Each command takes Latency (or the
// per-address latency), then succeeds, fails as configured, or hangs until
// its ctx is done or the address is released. It counts commands per machine
// and records the most commands it saw at once overall, per machine and per
// address, so tests can check the queue's bounds.
//
// With a log file (OpenFake), every command that took effect is appended to
// the file before the state changes, and the state is replayed from the file
// on open: a test can SIGKILL a process driving this fake, restart it, and
// still see every command ever executed and the machines' power as it was.
type Fake struct {
	mu          sync.Mutex
	latency     time.Duration
	addrLatency map[string]time.Duration
	// cycleOff is how long a cycled machine reads off before it reads on
	// (a slow BMC); onDelay is how long a powered-on machine still reads off.
	cycleOff, onDelay time.Duration
	state             map[string]*fakeMachine
	fail              map[string]*failure
	failCmd           map[string]*failure // address NUL command
	hang              map[string]chan struct{}
	// hangAfter: commands with an effect hang once effects (the commands
	// that took effect here, not those replayed from the log) reaches it;
	// 0: never.
	hangAfter, effects int
	counts             map[string]map[string]int
	starts             map[string][]time.Time // per address
	inFlight           int
	inFlightKey        map[string]int
	inFlightAddr       map[string]int
	maxInFlight        int
	maxKey             map[string]int
	maxAddr            map[string]int
	cycles             map[string]int // per request id
	lastTarget         map[string]power.Target
	log                *os.File
}

type fakeMachine struct {
	state    power.State
	onAfter  time.Time // reads off until then (cycle or slow on)
	nextBoot power.BootDevice
	// bootedFrom is what the last boot (a power-on from off, a cycle) used:
	// the next boot then set, BootNone for the firmware's order. A next
	// boot is used once, as IPMI's boot flags are.
	bootedFrom power.BootDevice
	boots      int
}

type failure struct {
	n   int // remaining failures; < 0: forever
	err error
}

// Commands as Count and the log name them.
const (
	CmdOn     = "on"
	CmdOff    = "off"
	CmdCycle  = "cycle"
	CmdStatus = "status"
	CmdBoot   = "boot"
)

// NewFake returns a fake whose machines all start off.
func NewFake() *Fake {
	return &Fake{
		addrLatency: map[string]time.Duration{}, state: map[string]*fakeMachine{},
		fail: map[string]*failure{}, failCmd: map[string]*failure{}, hang: map[string]chan struct{}{},
		counts: map[string]map[string]int{}, starts: map[string][]time.Time{},
		inFlightKey: map[string]int{}, inFlightAddr: map[string]int{},
		maxKey: map[string]int{}, maxAddr: map[string]int{}, cycles: map[string]int{},
		lastTarget: map[string]power.Target{},
	}
}

// OpenFake returns a fake that appends every executed command to the file at
// path and starts from the state the file records.
func OpenFake(path string) (*Fake, error) {
	f := NewFake()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read fake power log: %w", err)
	}
	for _, e := range parseLog(string(data)) {
		f.apply(e.Cmd, e.Key, e.Request, time.Time{})
	}
	f.log, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open fake power log: %w", err)
	}
	return f, nil
}

// Close closes the log file, if any.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.log == nil {
		return nil
	}
	err := f.log.Close()
	f.log = nil
	return err
}

// LogEntry is one executed command of a fake's log.
type LogEntry struct {
	Time    time.Time
	Cmd     string
	Key     string
	Request string // the queue's request id ("-" when none)
}

// ReadLog returns the commands a fake logged to path, in order. A torn last
// line (the process died mid-write) is ignored.
func ReadLog(path string) ([]LogEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseLog(string(data)), nil
}

func parseLog(data string) []LogEntry {
	var out []LogEntry
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		var ns int64
		var e LogEntry
		if n, _ := fmt.Sscanf(sc.Text(), "%d %s %s %s", &ns, &e.Cmd, &e.Key, &e.Request); n != 4 {
			continue
		}
		e.Time = time.Unix(0, ns)
		out = append(out, e)
	}
	return out
}

// Key is how the fake names a target's machine.
func Key(t power.Target) string {
	if t.Username == "" {
		return t.Address
	}
	return t.Address + "/" + t.Username
}

// SetLatency sets how long every command takes.
func (f *Fake) SetLatency(d time.Duration) {
	f.mu.Lock()
	f.latency = d
	f.mu.Unlock()
}

// SetAddrLatency sets how long commands to one BMC address take.
func (f *Fake) SetAddrLatency(addr string, d time.Duration) {
	f.mu.Lock()
	f.addrLatency[addr] = d
	f.mu.Unlock()
}

// SetSlow makes cycled machines read off for cycleOff, and powered-on
// machines read off for onDelay, before they read on.
func (f *Fake) SetSlow(cycleOff, onDelay time.Duration) {
	f.mu.Lock()
	f.cycleOff, f.onDelay = cycleOff, onDelay
	f.mu.Unlock()
}

// Fail makes the next n commands to addr fail with err (n < 0: all of them,
// until Fail(addr, 0, nil)).
func (f *Fake) Fail(addr string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n == 0 {
		delete(f.fail, addr)
		return
	}
	f.fail[addr] = &failure{n: n, err: err}
}

// FailCommand makes the next n commands cmd (CmdBoot...) to addr fail with
// err, the other commands working (n < 0: all of them, until
// FailCommand(addr, cmd, 0, nil)): a BMC that refuses one kind of command.
func (f *Fake) FailCommand(addr, cmd string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n == 0 {
		delete(f.failCmd, addr+"\x00"+cmd)
		return
	}
	f.failCmd[addr+"\x00"+cmd] = &failure{n: n, err: err}
}

// Hang makes commands to addr block until their ctx is done or Release.
func (f *Fake) Hang(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.hang[addr]; !ok {
		f.hang[addr] = make(chan struct{})
	}
}

// HangAfter makes every command that would change something (on, off,
// cycle, boot device) hang until its ctx is done once n commands took effect
// on this fake (n <= 0: never); status still answers. A crash test uses it to
// kill the process driving the fake while work is still open, whatever the
// machine's speed.
func (f *Fake) HangAfter(n int) {
	f.mu.Lock()
	f.hangAfter = max(n, 0)
	f.mu.Unlock()
}

// Release ends Hang: hung commands go on as if nothing happened.
func (f *Fake) Release(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.hang[addr]; ok {
		close(ch)
		delete(f.hang, addr)
	}
}

// SetState sets a machine's power, as if someone pressed its button.
func (f *Fake) SetState(key string, s power.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machine(key).state = s
	f.machine(key).onAfter = time.Time{}
}

// State is a machine's power as its BMC would report it now.
func (f *Fake) State(key string) power.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.read(key, time.Now())
}

// NextBoot is the boot device set for a machine's next boot (BootNone when
// none is pending).
func (f *Fake) NextBoot(key string) power.BootDevice {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.machine(key).nextBoot
}

// BootedFrom is what a machine's last boot used and how many times it has
// booted (powered on from off, or cycled).
func (f *Fake) BootedFrom(key string) (dev power.BootDevice, boots int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.machine(key)
	return m.bootedFrom, m.boots
}

// Count is how many commands cmd (CmdOn...) reached the machine, including
// failed ones.
func (f *Fake) Count(key, cmd string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[key][cmd]
}

// LastTarget is the target of the last command to a machine (what the
// caller passed: address, credentials, cipher suite).
func (f *Fake) LastTarget(key string) power.Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastTarget[key]
}

// Total is how many commands reached the fake.
func (f *Fake) Total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.counts {
		for _, v := range c {
			n += v
		}
	}
	return n
}

// Starts returns when each command to addr started, in order.
func (f *Fake) Starts(addr string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.starts[addr]...)
}

// MaxInFlight is the most commands the fake ran at once.
func (f *Fake) MaxInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxInFlight
}

// MaxInFlightMachine is the most commands one machine saw at once.
func (f *Fake) MaxInFlightMachine(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxKey[key]
}

// MaxInFlightAddr is the most commands one BMC address saw at once.
func (f *Fake) MaxInFlightAddr(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxAddr[addr]
}

// InFlight is how many commands are running now.
func (f *Fake) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight
}

// Cycles is how many cycles the fake executed for request id.
func (f *Fake) Cycles(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cycles[id]
}

func (f *Fake) machine(key string) *fakeMachine {
	m, ok := f.state[key]
	if !ok {
		m = &fakeMachine{state: power.StateOff}
		f.state[key] = m
	}
	return m
}

func (f *Fake) read(key string, now time.Time) power.State {
	m := f.machine(key)
	if m.state == power.StateOn && now.Before(m.onAfter) {
		return power.StateOff
	}
	return m.state
}

// apply changes the state as cmd does; the caller holds f.mu (or owns f).
func (f *Fake) apply(cmd, key, req string, now time.Time) {
	m := f.machine(key)
	switch cmd {
	case CmdOn:
		if m.state != power.StateOn {
			m.onAfter = now.Add(f.onDelay)
			m.boot()
		}
		m.state = power.StateOn
	case CmdOff:
		m.state, m.onAfter = power.StateOff, time.Time{}
	case CmdCycle:
		m.state, m.onAfter = power.StateOn, now.Add(f.cycleOff)
		m.boot()
		f.cycles[req]++
	case "boot-pxe":
		m.nextBoot = power.BootPXE
	case "boot-disk":
		m.nextBoot = power.BootDisk
	}
}

// takeFailure uses up one failure configured under key, if any.
func takeFailure(m map[string]*failure, key string) (bool, error) {
	fl := m[key]
	if fl == nil {
		return false, nil
	}
	if fl.n > 0 {
		fl.n--
		if fl.n == 0 {
			delete(m, key)
		}
	}
	return true, fl.err
}

// boot uses up the next boot.
func (m *fakeMachine) boot() {
	m.bootedFrom, m.nextBoot = m.nextBoot, power.BootNone
	m.boots++
}

// run is one command: bookkeeping, latency or hang, failure, then effect.
func (f *Fake) run(ctx context.Context, t power.Target, cmd string, effect string) (power.State, error) {
	key := Key(t)
	f.mu.Lock()
	if f.counts[key] == nil {
		f.counts[key] = map[string]int{}
	}
	f.counts[key][cmd]++
	f.lastTarget[key] = t
	f.starts[t.Address] = append(f.starts[t.Address], time.Now())
	f.inFlight++
	f.inFlightKey[key]++
	f.inFlightAddr[t.Address]++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.maxKey[key] = max(f.maxKey[key], f.inFlightKey[key])
	f.maxAddr[t.Address] = max(f.maxAddr[t.Address], f.inFlightAddr[t.Address])
	lat, ok := f.addrLatency[t.Address]
	if !ok {
		lat = f.latency
	}
	hang := f.hang[t.Address]
	if f.hangAfter > 0 && effect != "" && f.effects >= f.hangAfter {
		hang = make(chan struct{}) // never closed: no answer until ctx ends
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.inFlightKey[key]--
		f.inFlightAddr[t.Address]--
		f.mu.Unlock()
	}()

	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return power.StateUnknown, fmt.Errorf("fake bmc %s: %s: no answer: %w", t.Address, cmd, power.ErrTimeout)
		}
	}
	if lat > 0 {
		timer := time.NewTimer(lat)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return power.StateUnknown, fmt.Errorf("fake bmc %s: %s: no answer: %w", t.Address, cmd, power.ErrTimeout)
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hangAfter > 0 && effect != "" && f.effects >= f.hangAfter {
		// The limit was reached while this command was under way.
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return power.StateUnknown, fmt.Errorf("fake bmc %s: %s: no answer: %w", t.Address, cmd, power.ErrTimeout)
	}
	for _, fl := range []struct {
		m   map[string]*failure
		key string
	}{{f.fail, t.Address}, {f.failCmd, t.Address + "\x00" + cmd}} {
		if ok, err := takeFailure(fl.m, fl.key); ok {
			return power.StateUnknown, fmt.Errorf("fake bmc %s: %s: %w", t.Address, cmd, err)
		}
	}
	now := time.Now()
	if effect != "" {
		req := power.RequestID(ctx)
		if req == "" {
			req = "-"
		}
		if f.log != nil {
			// Written before the state changes: what the log holds was
			// executed, or is about to be and its process died.
			if _, err := fmt.Fprintf(f.log, "%d %s %s %s\n", now.UnixNano(), effect, key, req); err != nil {
				return power.StateUnknown, fmt.Errorf("fake bmc %s: write log: %w", t.Address, err)
			}
		}
		f.apply(effect, key, req, now)
		f.effects++
	}
	return f.read(key, now), nil
}

// PowerOn implements power.Driver.
func (f *Fake) PowerOn(ctx context.Context, t power.Target) error {
	_, err := f.run(ctx, t, CmdOn, CmdOn)
	return err
}

// PowerOff implements power.Driver.
func (f *Fake) PowerOff(ctx context.Context, t power.Target) error {
	_, err := f.run(ctx, t, CmdOff, CmdOff)
	return err
}

// PowerCycle implements power.Driver. Like IPMI's chassis power cycle, it
// leaves the machine on whatever it was before.
func (f *Fake) PowerCycle(ctx context.Context, t power.Target) error {
	_, err := f.run(ctx, t, CmdCycle, CmdCycle)
	return err
}

// Status implements power.Driver.
func (f *Fake) Status(ctx context.Context, t power.Target) (power.State, error) {
	return f.run(ctx, t, CmdStatus, "")
}

// SetNextBoot implements power.Driver.
func (f *Fake) SetNextBoot(ctx context.Context, t power.Target, dev power.BootDevice) error {
	effect := "boot-pxe"
	switch dev {
	case power.BootPXE:
	case power.BootDisk:
		effect = "boot-disk"
	default:
		return fmt.Errorf("fake bmc %s: boot device %v: %w", t.Address, dev, power.ErrUnsupported)
	}
	_, err := f.run(ctx, t, CmdBoot, effect)
	return err
}

var _ power.Driver = (*Fake)(nil)
