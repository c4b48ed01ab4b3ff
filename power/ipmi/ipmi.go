// Package ipmi is the power driver for BMCs that speak IPMI over LAN: IPMI
// 2.0 RMCP+ ("lanplus") natively in Go through github.com/bougou/go-ipmi,
// falling back to IPMI 1.5 where a BMC does not offer 2.0. No ipmitool is
// executed, so the password never reaches argv; it is never logged and never
// part of an error's text either.
//
// One session per BMC address and user is kept and reused: a go-ipmi client
// is not safe for concurrent use, so each has its own lock, and commands to
// one BMC (several machines may share a chassis BMC) take turns. A session
// that fails (a BMC restart forgets its sessions) is replaced and the command
// retried once. Sessions are retired before go-ipmi's own 30 s keep-alive
// would fire: that goroutine sends on the client without our lock.
package ipmi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"

	"rackd/power"
)

// maxSessionAge keeps a session clear of go-ipmi's keep-alive, which fires
// 30 s after Connect and sends on the client without our lock.
const maxSessionAge = 25 * time.Second

// Defaults for Options.
const (
	DefaultTimeout       = 2500 * time.Millisecond
	DefaultSessionMaxAge = 20 * time.Second
	DefaultCipherSuite   = 3
	DefaultPort          = 623
)

// Options tunes the driver. The zero value is usable.
type Options struct {
	// Timeout bounds one driver call against a BMC: session setup if one
	// is needed, the command, and the one reconnect after a lost session.
	// Each datagram waits Timeout/4 and is sent at most twice, so a session
	// the BMC forgot (it restarted) is noticed within half the budget and a
	// hung BMC gives ErrTimeout after Timeout. Default 2.5 s: slower BMCs
	// need more than go-ipmi's 1 s, a hung one must not hold a queue slot.
	Timeout time.Duration
	// AuthRetryAfter: after the BMC refused a user and password, calls with
	// the same ones fail at once with ErrAuth for this long (default 10 s).
	// Every refused login holds one of the BMC's few session slots until it
	// expires (ipmi_sim: 63 slots, 30 s), so hammering locks everyone out.
	AuthRetryAfter time.Duration
	// SessionMaxAge retires a session this long after it was opened (default
	// 20 s; at most 25 s, below go-ipmi's 30 s keep-alive tick, leaving room
	// for a command in flight). Idle sessions are closed on the BMC at 3/4 of
	// it, so we never sit on its few session slots.
	SessionMaxAge time.Duration
	// Version forces "1.5" or "2.0"; empty asks the BMC and prefers 2.0.
	Version string
	// EFIBoot sets the "EFI boot" flag with the next-boot device (needed by
	// some UEFI-only firmware; most BMCs ignore it).
	EFIBoot bool
	// Logger gets the driver's log; nil discards.
	Logger *slog.Logger
}

// Driver is the IPMI power driver. Close it on shutdown to end its sessions.
type Driver struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	clients map[clientKey]*bmc
	refused map[refusal]time.Time // logins the BMC refused, and when
	closed  bool
	stats   Stats
	done    chan struct{}
	wg      sync.WaitGroup // janitor and background closes
}

type clientKey struct{ addr, user string }

// refusal names a refused login without keeping the password.
type refusal struct {
	key clientKey
	pw  [32]byte // sha256
}

// Stats counts sessions, for tests and debugging.
type Stats struct {
	Opened     int // session setups started, each on its own socket
	Closed     int // of those, ended (CloseSession sent, socket closed)
	Reconnects int // commands retried on a new session after a lost one
}

// bmc is the cached session to one BMC address as one user.
type bmc struct {
	host string
	port int
	user string

	// turn is a one-slot semaphore (a mutex that honours ctx): the client
	// and the fields below belong to whoever holds it.
	turn     chan struct{}
	c        *client.Client
	password string
	cipher   int
	opened   time.Time
	lastUsed time.Time
	dead     bool // dropped from the driver's map
}

var _ power.Driver = (*Driver)(nil)

// New returns a driver; it starts a janitor that closes idle sessions.
func New(opts Options) *Driver {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.SessionMaxAge <= 0 {
		opts.SessionMaxAge = DefaultSessionMaxAge
	}
	opts.SessionMaxAge = min(opts.SessionMaxAge, maxSessionAge)
	if opts.AuthRetryAfter <= 0 {
		opts.AuthRetryAfter = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{
		opts:    opts,
		log:     opts.Logger.With("driver", "ipmi"),
		clients: make(map[clientKey]*bmc),
		refused: make(map[refusal]time.Time),
		done:    make(chan struct{}),
	}
	d.wg.Add(1)
	go d.janitor()
	return d
}

// Close ends every session (bounded by the timeout per BMC) and stops the
// janitor. Commands after Close fail; a second Close is a no-op.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	all := make([]*bmc, 0, len(d.clients))
	for _, b := range d.clients {
		all = append(all, b)
	}
	d.clients = map[clientKey]*bmc{}
	d.mu.Unlock()

	var wg sync.WaitGroup
	for _, b := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), d.opts.Timeout)
			defer cancel()
			if b.acquire(ctx) == nil {
				d.closeSession(b, true)
				b.release()
			}
		}()
	}
	wg.Wait()
	d.wg.Wait()
	return nil
}

// Stats returns the session counters.
func (d *Driver) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *Driver) count(f func(*Stats)) {
	d.mu.Lock()
	f(&d.stats)
	d.mu.Unlock()
}

func (d *Driver) janitor() {
	defer d.wg.Done()
	tick := time.NewTicker(d.opts.SessionMaxAge / 4)
	defer tick.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-tick.C:
		}
		d.mu.Lock()
		all := make([]*bmc, 0, len(d.clients))
		for _, b := range d.clients {
			all = append(all, b)
		}
		for r, at := range d.refused {
			if time.Since(at) > d.opts.AuthRetryAfter {
				delete(d.refused, r)
			}
		}
		d.mu.Unlock()
		for _, b := range all {
			select {
			case b.turn <- struct{}{}:
			default:
				continue // busy: the command retires it if it is old
			}
			if b.c != nil && time.Since(b.opened) > d.opts.SessionMaxAge-d.opts.SessionMaxAge/4 {
				d.closeSession(b, false)
			}
			if b.c == nil && time.Since(b.lastUsed) > 5*d.opts.SessionMaxAge {
				// Forget BMCs nobody asked about for a while.
				d.mu.Lock()
				for k, v := range d.clients {
					if v == b {
						delete(d.clients, k)
					}
				}
				d.mu.Unlock()
				b.dead = true
			}
			b.release()
		}
	}
}

func (b *bmc) acquire(ctx context.Context) error {
	select {
	case b.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *bmc) release() { <-b.turn }

// closeSession ends b's session on the BMC in the background (a hung BMC
// must not hold up the caller) unless wait. Caller holds b.turn.
func (d *Driver) closeSession(b *bmc, wait bool) {
	c := b.c
	b.c = nil
	if c == nil {
		return
	}
	// Copies: b belongs to whoever holds b.turn next.
	host, port, user, password := b.host, b.port, b.user, b.password
	closeFn := func() {
		defer d.count(func(s *Stats) { s.Closed++ })
		ctx, cancel := context.WithTimeout(context.Background(), d.opts.Timeout/2)
		defer cancel()
		// client.Close panics when called twice (it closes a channel); b.c
		// was cleared above, so this is the only call for c.
		if err := c.Close(ctx); err != nil {
			d.log.Debug("ipmi close session", "bmc", host, "port", port, "user", user, "err", redact(err, password))
		}
	}
	if wait {
		closeFn()
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		closeFn()
	}()
}

func splitAddr(addr string) (string, int, error) {
	return power.SplitHostPort(addr, DefaultPort)
}

// CheckAddress says whether addr is a BMC address the driver takes: HOST or
// HOST:PORT (port 1-65535, 623 when none is given; an IPv6 address with a
// port in brackets).
func (d *Driver) CheckAddress(addr string) error {
	_, _, err := splitAddr(addr)
	return err
}

var _ power.AddressChecker = (*Driver)(nil)

func (d *Driver) get(t power.Target) (*bmc, error) {
	host, port, err := splitAddr(t.Address)
	if err != nil {
		return nil, err
	}
	key := clientKey{net.JoinHostPort(host, strconv.Itoa(port)), t.Username}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("ipmi driver closed")
	}
	b := d.clients[key]
	if b == nil {
		b = &bmc{host: host, port: port, user: t.Username, turn: make(chan struct{}, 1)}
		d.clients[key] = b
	}
	return b, nil
}

// Cipher suites with AES-128 confidentiality (IPMI 2.0 table 22-20): 3
// (SHA1), 8, 12 (MD5), 17 (SHA256). go-ipmi v0.9.1 flags every packet of an
// active session as encrypted and authenticated whatever the suite says, so
// with a suite without encryption the BMC gets mislabelled packets: ipmi_sim
// drops them (1, 6, 7, 11) or dies (2). Unencrypted suites are also a bad
// idea on a management network (0 is the well-known no-password hole).
var allowedCipherSuites = map[int]bool{3: true, 8: true, 12: true, 17: true}

// newClient is a go-ipmi client for t's BMC at host:port with the driver's
// timeouts and t's cipher suite, refused unless the suite encrypts (IPMI 1.5,
// plain, has no suites to check). It returns the suite.
func (d *Driver) newClient(host string, port int, t power.Target, plain bool) (*client.Client, int, error) {
	cipher := cipherOf(t)
	if !allowedCipherSuites[cipher] && !plain {
		return nil, 0, fmt.Errorf("%w: cipher suite %d does not encrypt; use 3 (default) or 17, or 8 or 12", power.ErrUnsupported, cipher)
	}
	c, err := client.NewClient(host, port, t.Username, t.Password)
	if err != nil {
		return nil, 0, err
	}
	c.WithTimeout(d.opts.Timeout / 4).WithRetry(1).WithCipherSuiteID(types.CipherSuiteID(cipher))
	return c, cipher, nil
}

// connect opens a session to b as t says, within ctx. Caller holds b.turn.
func (d *Driver) connect(ctx context.Context, b *bmc, t power.Target) error {
	c, cipher, err := d.newClient(b.host, b.port, t, d.opts.Version == "1.5")
	if err != nil {
		return err
	}
	d.count(func(s *Stats) { s.Opened++ })
	switch d.opts.Version {
	case "1.5":
		err = c.WithInterface(client.InterfaceLan).Connect(ctx)
	case "2.0":
		err = c.Connect(ctx)
	default:
		// Asks the BMC (Get Channel Authentication Capabilities) and
		// prefers 2.0 when offered.
		err = c.ConnectAuto(ctx)
	}
	b.c, b.password, b.cipher = c, t.Password, cipher
	if err != nil {
		// Release the socket, off the caller's time.
		d.closeSession(b, false)
		return fmt.Errorf("session setup: %w", err)
	}
	b.opened = time.Now()
	d.log.Debug("ipmi session opened", "bmc", b.host, "port", b.port, "user", b.user, "cipher_suite", cipher)
	return nil
}

// do runs one command on t's BMC within the driver's timeout, opening or
// replacing the session as needed, and retries once on a fresh session when
// a reused one stops answering (the BMC restarted and forgot it).
func (d *Driver) do(ctx context.Context, t power.Target, what string, fn func(context.Context, *client.Client) error) error {
	err := d.do1(ctx, t, fn)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		// The caller gave up: say so, not "timeout from the BMC".
		return fmt.Errorf("ipmi %s (user %s): %s: %w", t.Address, t.Username, what, ctx.Err())
	}
	err = classify(redact(err, t.Password))
	return fmt.Errorf("ipmi %s (user %s): %s: %w", t.Address, t.Username, what, err)
}

func (d *Driver) do1(parent context.Context, t power.Target, fn func(context.Context, *client.Client) error) error {
	// The budget covers waiting for our turn on a BMC shared with other
	// machines too: a hung BMC must not stack up its callers.
	ctx, cancel := context.WithTimeout(parent, d.opts.Timeout)
	defer cancel()
	for range 3 {
		b, err := d.get(t)
		if err != nil {
			return err
		}
		if err := b.acquire(ctx); err != nil {
			return err
		}
		if b.dead {
			// The janitor dropped b from the map after we looked it up:
			// a session opened on b would be seen by neither it nor
			// Close. Look again.
			b.release()
			continue
		}
		err = d.run(ctx, parent, b, t, fn)
		b.release()
		return err
	}
	return errors.New("ipmi driver: BMC entry kept vanishing")
}

// run is do1 with b's turn held.
func (d *Driver) run(ctx, parent context.Context, b *bmc, t power.Target, fn func(context.Context, *client.Client) error) error {
	ref := refusal{clientKey{net.JoinHostPort(b.host, strconv.Itoa(b.port)), t.Username}, sha256.Sum256([]byte(t.Password))}
	d.mu.Lock()
	at, ok := d.refused[ref]
	d.mu.Unlock()
	if ok && time.Since(at) < d.opts.AuthRetryAfter {
		return &power.KindError{Kind: power.ErrAuth, Msg: fmt.Sprintf("%s: the BMC refused this user name and password %v ago; not asking again for %v (each refused login holds a BMC session slot)",
			power.AuthFailed, time.Since(at).Round(time.Millisecond), d.opts.AuthRetryAfter)}
	}
	b.lastUsed = time.Now()
	connect := func() error {
		err := d.connect(ctx, b, t)
		if err != nil && parent.Err() == nil && isAuth(err) {
			d.mu.Lock()
			d.refused[ref] = time.Now()
			d.mu.Unlock()
		}
		return err
	}

	if b.c != nil && (b.password != t.Password || b.cipher != cipherOf(t) || time.Since(b.opened) > d.opts.SessionMaxAge) {
		d.closeSession(b, false)
	}
	fresh := false
	if b.c == nil {
		if err := connect(); err != nil {
			return err
		}
		fresh = true
	}
	for {
		err := fn(ctx, b.c)
		if err == nil {
			return nil
		}
		lost := sessionTrouble(err)
		if lost || ctx.Err() != nil {
			// A late reply may still arrive on this socket and the
			// client's sequence numbers are unknown: start afresh.
			d.closeSession(b, false)
		}
		if !lost || fresh || ctx.Err() != nil {
			return err
		}
		d.log.Info("ipmi session lost, reconnecting", "bmc", b.host, "port", b.port, "user", b.user, "err", redact(err, t.Password))
		d.count(func(s *Stats) { s.Reconnects++ })
		if err := connect(); err != nil {
			return err
		}
		fresh = true
	}
}

// sentErr marks the failure of a command that may have reached the BMC and
// must not be repeated on a new session (a power cycle).
type sentErr struct{ error }

func (e sentErr) Unwrap() error { return e.error }

func cipherOf(t power.Target) int {
	if t.CipherSuite == 0 {
		return DefaultCipherSuite
	}
	return t.CipherSuite
}

// sessionTrouble says whether err may be cured by a new session: no answer
// (a BMC that restarted drops packets for sessions it forgot) or a
// session-level refusal. A completion code for the command itself is the
// BMC's answer and is not retried here (the queue decides).
func sessionTrouble(err error) bool {
	if errors.As(err, new(sentErr)) {
		return false
	}
	if isTimeout(err) || isUnreachable(err) {
		return true
	}
	var serr *types.RmcpStatusError
	if errors.As(err, &serr) {
		switch serr.StatusCode() {
		case types.RmcpStatusCodeInvalidSessionID, types.RmcpStatusCodeInactiveSessionID:
			return true
		}
	}
	return false
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, power.ErrTimeout) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	// go-ipmi's "no datagram matched" error is unexported.
	s := err.Error()
	return strings.Contains(s, "no matching IPMI response") || strings.Contains(s, "no UDP datagram matched") || strings.Contains(s, "timed out")
}

func isUnreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTDOWN)
}

// isAuth recognises a refused login. go-ipmi keeps the typed errors in the
// chain for 2.0 (RAKP), but 1.5 session setup reports completion codes.
func isAuth(err error) bool {
	if errors.Is(err, client.ErrRAKPAuthentication) {
		return true
	}
	var serr *types.RmcpStatusError
	if errors.As(err, &serr) {
		switch serr.StatusCode() {
		case types.RmcpStatusCodeUnauthorizedName, types.RmcpStatusCodeInvalidIntegrityCheckValue,
			types.RmcpStatusCodeInvalidRole, types.RmcpStatusCodeUnauthorizedRoleOfPriLevel,
			types.RmcpStatusCodeInvalidNameLength:
			return true
		}
	}
	// go-ipmi formats some of the RAKP errors with %s, losing the type.
	s := err.Error()
	if strings.Contains(s, "RAKP") && (strings.Contains(s, "mismatch") || strings.Contains(s, "authentication")) {
		return true
	}
	for _, code := range []string{"0x09", "0x0a", "0x0c", "0x0d", "0x0f"} {
		if strings.Contains(s, "RMCP+ status "+code) {
			return true
		}
	}
	if strings.Contains(s, "ActivateSession failed") && isTimeout(err) {
		// IPMI 1.5: the BMC answered Get Session Challenge a moment ago, then
		// silently drops an Activate Session whose auth code (made from the
		// password) does not match; that is how it refuses a password.
		return true
	}
	var rerr *types.ResponseError
	if errors.As(err, &rerr) && (strings.Contains(s, "GetSessionChallenge") || strings.Contains(s, "ActivateSession")) {
		// 1.5: 0x81 invalid user name, 0x82 null user disabled, 0x86
		// privilege not allowed; a wrong password fails Activate Session.
		return true
	}
	return false
}

// flatError is an error whose text is made one line (go-ipmi joins its
// errors with newlines, which an error in an event or a log line must not
// carry); it still unwraps to the original.
type flatError struct {
	msg string
	err error
}

func (e *flatError) Error() string { return e.msg }
func (e *flatError) Unwrap() error { return e.err }

// oneLine is err's text on one line, runs of white space made one space.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// classify wraps err in the power error kind the queue and metrics use, its
// text made one line.
func classify(err error) error {
	detail := oneLine(err)
	switch {
	case isAuth(err):
		return &power.KindError{Kind: power.ErrAuth, Msg: power.AuthFailed + ": " + detail}
	case isUnreachable(err):
		return fmt.Errorf("%w: %s", power.ErrUnreachable, detail)
	case isTimeout(err):
		return fmt.Errorf("%w: no answer: %s", power.ErrTimeout, detail)
	}
	if s := err.Error(); strings.Contains(s, "Open Session failed") && strings.Contains(s, "too short") {
		// ipmi_sim, and BMCs like it, answer a bare status when it offers
		// no such cipher suite or every session slot is taken (refused
		// logins hold one for a while).
		return fmt.Errorf("%w: the BMC would not open a session (cipher suite not offered, or all its session slots taken): %s", power.ErrBMC, detail)
	}
	var rerr *types.ResponseError
	if errors.As(err, &rerr) {
		return fmt.Errorf("%w: completion code %#02x: %s", power.ErrBMC, uint8(rerr.CompletionCode()), detail)
	}
	var serr *types.RmcpStatusError
	if errors.As(err, &serr) {
		return fmt.Errorf("%w: %s", power.ErrBMC, detail)
	}
	if detail != err.Error() {
		return &flatError{msg: detail, err: err}
	}
	return err
}

// redact removes the password from err's text, should a library ever echo
// it. The result no longer unwraps to err's chain when it had to redact.
func redact(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "<redacted>"))
}

// Status reads the chassis power state.
func (d *Driver) Status(ctx context.Context, t power.Target) (power.State, error) {
	var st power.State
	err := d.do(ctx, t, "chassis status", func(ctx context.Context, c *client.Client) error {
		res, err := c.GetChassisStatus(ctx)
		if err != nil {
			return err
		}
		st = power.StateOff
		if res.PowerIsOn {
			st = power.StateOn
		}
		return nil
	})
	if err != nil {
		return power.StateUnknown, err
	}
	return st, nil
}

func (d *Driver) control(ctx context.Context, t power.Target, what string, ctl chassis.ChassisControl) error {
	return d.do(ctx, t, what, func(ctx context.Context, c *client.Client) error {
		_, err := c.ChassisControl(ctx, ctl)
		return err
	})
}

// PowerOn asks the chassis to power up.
func (d *Driver) PowerOn(ctx context.Context, t power.Target) error {
	return d.control(ctx, t, "power on", chassis.ChassisControlPowerUp)
}

// PowerOff asks the chassis to power down (hard off, not an ACPI shutdown).
func (d *Driver) PowerOff(ctx context.Context, t power.Target) error {
	return d.control(ctx, t, "power off", chassis.ChassisControlPowerDown)
}

// PowerCycle ends with the machine on: a chassis power cycle when it is on,
// a power up when it is off (IPMI leaves the cycle of an off chassis to the
// BMC, and many do nothing). The cycle request is sent once, never
// retransmitted: a lost answer must not turn into two cycles.
func (d *Driver) PowerCycle(ctx context.Context, t power.Target) error {
	return d.do(ctx, t, "power cycle", func(ctx context.Context, c *client.Client) error {
		res, err := c.GetChassisStatus(ctx)
		if err != nil {
			return err
		}
		if !res.PowerIsOn {
			_, err = c.ChassisControl(ctx, chassis.ChassisControlPowerUp)
			return err
		}
		c.WithRetry(0)
		defer c.WithRetry(1)
		if _, err = c.ChassisControl(ctx, chassis.ChassisControlPowerCycle); err != nil {
			return sentErr{err}
		}
		return nil
	})
}

// SetNextBoot sets the boot device for the next boot only (boot flags,
// chassis boot option parameter 5).
func (d *Driver) SetNextBoot(ctx context.Context, t power.Target, dev power.BootDevice) error {
	var sel types.BootDeviceSelector
	switch dev {
	case power.BootPXE:
		sel = types.BootDeviceSelectorForcePXE
	case power.BootDisk:
		sel = types.BootDeviceSelectorForceHardDrive
	default:
		return fmt.Errorf("ipmi: next boot %v: %w", dev, power.ErrUnsupported)
	}
	bootType := types.BIOSBootTypeLegacy
	if d.opts.EFIBoot {
		bootType = types.BIOSBootTypeEFI
	}
	return d.do(ctx, t, "set next boot "+dev.String(), func(ctx context.Context, c *client.Client) error {
		return c.SetBootDevice(ctx, sel, bootType, false)
	})
}
