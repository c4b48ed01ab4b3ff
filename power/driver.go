package power

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// State is a machine's power state as a BMC reports it.
type State int

const (
	StateUnknown State = iota
	StateOn
	StateOff
)

func (s State) String() string {
	switch s {
	case StateOn:
		return "on"
	case StateOff:
		return "off"
	default:
		return "unknown"
	}
}

// ParseState is the inverse of String.
func ParseState(s string) (State, error) {
	switch s {
	case "on":
		return StateOn, nil
	case "off":
		return StateOff, nil
	case "unknown":
		return StateUnknown, nil
	}
	return StateUnknown, fmt.Errorf("power state %q: want on, off or unknown", s)
}

// MarshalText writes the state as String does, so that stored records and
// API answers say on, off or unknown.
func (s State) MarshalText() ([]byte, error) {
	switch s {
	case StateUnknown, StateOn, StateOff:
		return []byte(s.String()), nil
	}
	return nil, fmt.Errorf("power state %d: not on, off or unknown", int(s))
}

// UnmarshalText parses what MarshalText wrote; "" is unknown (a record
// written before anything was seen or asked).
func (s *State) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*s = StateUnknown
		return nil
	}
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// BootDevice is where the machine boots next.
type BootDevice int

const (
	// BootNone sets nothing: the machine boots in its firmware's order.
	BootNone BootDevice = iota
	BootPXE
	BootDisk
)

func (b BootDevice) String() string {
	switch b {
	case BootNone:
		return ""
	case BootPXE:
		return "pxe"
	case BootDisk:
		return "disk"
	default:
		return "unknown"
	}
}

// ParseBootDevice is the inverse of String: "pxe", "disk", or "" (none).
func ParseBootDevice(s string) (BootDevice, error) {
	switch s {
	case "":
		return BootNone, nil
	case "pxe":
		return BootPXE, nil
	case "disk":
		return BootDisk, nil
	}
	return BootNone, fmt.Errorf("boot device %q: want pxe or disk", s)
}

// Target says how to reach one machine's BMC. Password is a secret: drivers
// never put it in argv, logs or error text.
type Target struct {
	// Machine names the machine (its hostname) in what a driver tells a
	// human, such as the manual driver's request to an operator; no
	// driver reaches a BMC by it.
	Machine  string
	Driver   string
	Address  string // host or host:port
	Username string
	Password string
	// CipherSuite is the IPMI 2.0 cipher suite (0 means the driver's default).
	CipherSuite int
	// TLSFingerprint is the pinned SHA-256 of the BMC's TLS certificate
	// (lower-case hex), for drivers that speak TLS: a BMC presenting another
	// certificate is refused. Empty: the first certificate seen is trusted
	// and reported through Pin (trust on first use), then enforced.
	TLSFingerprint string
	// InsecureTLS is the operator's explicit choice not to check the BMC's
	// certificate at all. Never implied.
	InsecureTLS bool
	// BootMode is the firmware mode the machine boots in, "uefi" or
	// "legacy"; empty leaves it as the BMC says.
	BootMode string
	// Pin, when set, records the certificate fingerprint a driver trusted
	// on first use (where the machine's power parameters live); the command
	// is refused if it fails. Unset, the driver remembers pins itself for
	// its lifetime.
	Pin func(ctx context.Context, fingerprint string) error
}

// Driver talks to one kind of BMC. Every method is bounded by ctx and by the
// driver's own per-command timeout; a driver is safe for concurrent use on
// different targets, and the queue never runs two commands at once against
// the same machine.
type Driver interface {
	PowerOn(ctx context.Context, t Target) error
	PowerOff(ctx context.Context, t Target) error
	PowerCycle(ctx context.Context, t Target) error
	Status(ctx context.Context, t Target) (State, error)
	SetNextBoot(ctx context.Context, t Target, dev BootDevice) error
}

// Error kinds a driver wraps its errors in, so the queue can decide whether
// retrying helps and metrics can count by kind.
var (
	ErrTimeout     = errors.New("bmc timeout")
	ErrAuth        = errors.New("bmc authentication failed")
	ErrUnreachable = errors.New("bmc unreachable")
	ErrBMC         = errors.New("bmc refused the command")
	ErrUnsupported = errors.New("not supported by this driver")
)

// KindError is an error of one of those kinds (errors.Is finds Kind) whose
// text says it in the driver's own words, without the kind's generic text.
type KindError struct {
	Kind error
	Msg  string
}

func (e *KindError) Error() string { return e.Msg }
func (e *KindError) Unwrap() error { return e.Kind }

// AuthFailed opens the text of every refused login, whatever the driver:
// what an operator sees in the request's error and the machine's events.
const AuthFailed = "authentication failed (wrong user or password: check the machine's power credentials)"

// ErrorKind names the kind of err for metrics: timeout, auth, unreachable,
// bmc, unsupported or other.
func ErrorKind(err error) string {
	switch {
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrAuth):
		return "auth"
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	case errors.Is(err, ErrBMC):
		return "bmc"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	}
	return "other"
}

// NormalizeFingerprint makes a SHA-256 fingerprint as operators write it
// (upper or lower case, with or without colons, with or without a "sha256:"
// prefix) the lower-case hex drivers compare and the store keeps.
func NormalizeFingerprint(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "sha256:")
	s = strings.ReplaceAll(s, ":", "")
	if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("TLS fingerprint: want the 64 hex digits of a SHA-256")
	}
	return s, nil
}

// AddressChecker is implemented by drivers that can tell a bad BMC address
// before it is used (the agent asks when a machine's power parameters are
// set), so an operator hears about it at once rather than at the first
// power request.
type AddressChecker interface {
	CheckAddress(addr string) error
}

// SplitHostPort parses a BMC address of the form HOST or HOST:PORT, where
// HOST is an IPv4 address, an IPv6 address (bracketed when a port follows,
// bare otherwise) or a DNS name, and PORT is 1 to 65535. It returns the host
// (without brackets) and the port, or defaultPort when none is given. The
// error says what is wrong with addr, for the operator who typed it.
func SplitHostPort(addr string, defaultPort int) (string, int, error) {
	if addr == "" {
		return "", 0, errors.New("no BMC address")
	}
	if strings.Contains(addr, "://") || strings.ContainsAny(addr, "/?#@ \t") {
		return "", 0, fmt.Errorf("BMC address %q: want HOST or HOST:PORT (no scheme, path or user)", addr)
	}
	host, port := addr, defaultPort
	if h, p, err := net.SplitHostPort(addr); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strings.TrimLeft(p, "0123456789") != "" {
			return "", 0, fmt.Errorf("BMC address %q: port %q: want a number from 1 to 65535", addr, p)
		}
		host, port = h, n
	} else if a, perr := netip.ParseAddr(strings.Trim(addr, "[]")); perr == nil && a.Is6() {
		// A bare or bracketed IPv6 address without a port.
		host = a.String()
	} else if strings.Contains(addr, ":") {
		return "", 0, fmt.Errorf("BMC address %q: want HOST or HOST:PORT (an IPv6 address with a port in brackets: [ADDR]:PORT)", addr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("BMC address %q: no host", addr)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", 0, fmt.Errorf("BMC address %q: an IPv6 zone is not supported", addr)
		}
		return a.String(), port, nil
	}
	if !validHostname(host) {
		return "", 0, fmt.Errorf("BMC address %q: host %q is neither an IP address nor a DNS name", addr, host)
	}
	return host, port, nil
}

// validHostname reports whether h is a DNS name: labels of letters, digits,
// '-' and '_' (some sites use it), not starting or ending with '-', at most
// 63 bytes each and 253 in all, and not all digits and dots (a mistyped IPv4
// address such as 10.0.0.300 is not a name).
func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 || strings.Trim(h, "0123456789.") == "" {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
