// Package bmc sets up a machine's BMC from the machine itself, over the
// in-band IPMI system interface (/dev/ipmi0), for the commissioning
// environment: it reads the BMC's LAN address and creates (or updates) a
// dedicated administrator user with a fresh random password, which the
// environment reports to rackd so that the machine becomes power-managed
// without anybody typing BMC credentials.
//
// Everything goes through raw IPMI requests (Conn), so the same code runs
// in-band (u-root's pkg/ipmi on /dev/ipmi0) and, in tests, over an RMCP+
// LAN session to a real BMC simulator.
package bmc

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Conn sends one IPMI request and returns the response data after the
// completion code; a non-zero completion code is a *CompletionError.
type Conn interface {
	Raw(netfn, cmd byte, data []byte) ([]byte, error)
}

// DefaultUser is the name of the user rackd keeps on each BMC.
const DefaultUser = "rackd"

// PasswordLen is the length of the generated passwords: 16 characters of
// [A-Za-z0-9], about 95 bits. Sixteen, not twenty: every BMC takes a
// 16-byte password, whether it stores it in the IPMI v1.5 or the v2.0 form
// (some simulators and old BMCs keep only 16 bytes of a 20-byte one and
// then refuse the whole 20 at login).
const PasswordLen = 16

// Options choose the user.
type Options struct {
	// User is the user's name; empty means DefaultUser.
	User string
	// UserID, when not 0, is the slot to use (2 to the BMC's maximum),
	// whatever it holds. 0 chooses: the slot already named User, else
	// the first slot from 2 up with an empty name and no IPMI messaging.
	UserID int
	// Password, when set, is used instead of a random one (tests).
	Password string
}

// Result is what the set-up did, for the report and the console (String
// never shows the password).
type Result struct {
	// Channel is the LAN channel set up.
	Channel byte
	// Address is the BMC's LAN address, IPSource where it comes from.
	Address  netip.Addr
	IPSource IPSource
	// UserID, User and Password are the rackd user's.
	UserID   int
	User     string
	Password string
	// IPMI20 says the channel speaks IPMI v2.0 (RMCP+) and the password
	// was stored in the v2.0 form.
	IPMI20 bool
	// Notes say what was found and changed, one short sentence each.
	Notes []string
}

func (r Result) String() string {
	proto := "IPMI v1.5"
	if r.IPMI20 {
		proto = "IPMI v2.0 (RMCP+)"
	}
	s := fmt.Sprintf("BMC %s (%s) on LAN channel %d: user %d %q, administrator, %s", r.Address, r.IPSource, r.Channel, r.UserID, r.User, proto)
	if len(r.Notes) > 0 {
		s += "; " + strings.Join(r.Notes, "; ")
	}
	return s
}

// ErrNoAddress is a BMC without a LAN address: rackd could not reach it,
// so no user is created.
var ErrNoAddress = errors.New("the BMC has no LAN address")

// Setup reads the BMC's LAN configuration and creates or updates the user:
// name, a fresh password, administrator on the LAN channel with IPMI
// messaging, enabled; the LAN channel's access is made "always available"
// with an administrator limit when it was less (another user's access is
// never touched). It verifies the result by reading it back and, where the
// BMC can, testing the password.
func Setup(c Conn, o Options) (Result, error) {
	if o.User == "" {
		o.User = DefaultUser
	}
	if err := checkName(o.User); err != nil {
		return Result{}, err
	}
	r := Result{User: o.User}
	var err error
	if r.Channel, err = lanChannel(c, &r); err != nil {
		return r, err
	}
	if err := readLAN(c, &r); err != nil {
		return r, err
	}
	caps, cerr := getAuthCaps(c, r.Channel)
	if cerr != nil {
		r.Notes = append(r.Notes, "authentication capabilities unknown ("+shortErr(cerr)+")")
	}
	// Unknown capabilities: try the v2.0 form, fall back to v1.5.
	r.IPMI20 = cerr != nil || caps.IPMI20

	if err := chooseUser(c, o, &r); err != nil {
		return r, err
	}
	if r.Password = o.Password; r.Password == "" {
		if r.Password, err = NewPassword(); err != nil {
			return r, err
		}
	}
	if err := writeUser(c, &r); err != nil {
		return r, err
	}
	if err := openChannel(c, &r); err != nil {
		return r, err
	}
	if err := verify(c, &r); err != nil {
		return r, err
	}
	return r, nil
}

// raw sends a request built by an encoder that may fail.
func raw(c Conn, netfn, cmd byte, data []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	resp, err := c.Raw(netfn, cmd, data)
	if err != nil {
		if code, ok := IsCompletion(err); ok {
			return nil, &CompletionError{NetFn: netfn, Cmd: cmd, Code: code}
		}
		return nil, fmt.Errorf("ipmi: netfn %#02x command %#02x: %w", netfn, cmd, err)
	}
	return resp, nil
}

// lanChannel finds the first 802.3 LAN channel (1 to 11); channel 1, the
// usual one, when the BMC does not answer Get Channel Info.
func lanChannel(c Conn, r *Result) (byte, error) {
	var firstErr error
	for ch := byte(1); ch <= 11; ch++ {
		resp, err := raw(c, NetFnApp, CmdGetChannelInfo, getChannelInfoReq(ch), nil)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		got, medium, err := parseChannelInfo(resp)
		if err != nil {
			return 0, err
		}
		if medium == MediumLAN && got == ch {
			return ch, nil
		}
	}
	if firstErr != nil {
		r.Notes = append(r.Notes, "no channel info ("+shortErr(firstErr)+"): assuming LAN channel 1")
		return 1, nil
	}
	return 0, errors.New("the BMC has no LAN channel")
}

// readLAN reads the channel's address and its source.
func readLAN(c Conn, r *Result) error {
	resp, err := raw(c, NetFnTransport, CmdGetLANConfigParameter, getLANConfigReq(r.Channel, lanParamIPAddressSource), nil)
	if err == nil {
		r.IPSource, err = parseIPSource(resp)
	}
	if err != nil {
		return fmt.Errorf("read the LAN address source of channel %d: %w", r.Channel, err)
	}
	resp, err = raw(c, NetFnTransport, CmdGetLANConfigParameter, getLANConfigReq(r.Channel, lanParamIPAddress), nil)
	if err == nil {
		r.Address, err = parseIPAddress(resp)
	}
	if err != nil {
		return fmt.Errorf("read the LAN address of channel %d: %w", r.Channel, err)
	}
	if !r.Address.IsValid() {
		return fmt.Errorf("%w on channel %d (address source %s): no user created", ErrNoAddress, r.Channel, r.IPSource)
	}
	return nil
}

func getAuthCaps(c Conn, ch byte) (AuthCaps, error) {
	resp, err := raw(c, NetFnApp, CmdGetChannelAuthCaps, getChannelAuthCapsReq(ch), nil)
	if err != nil {
		return AuthCaps{}, err
	}
	return parseAuthCaps(resp)
}

// chooseUser picks the slot (see Options.UserID).
func chooseUser(c Conn, o Options, r *Result) error {
	resp, err := raw(c, NetFnApp, CmdGetUserAccess, getUserAccessReq(r.Channel, 1), nil)
	if err != nil {
		return fmt.Errorf("read the BMC's user count: %w", err)
	}
	first, err := parseUserAccess(resp)
	if err != nil {
		return err
	}
	if o.UserID != 0 {
		if o.UserID < 2 || o.UserID > first.MaxIDs {
			return fmt.Errorf("user ID %d: the BMC has users 2 to %d (1 is the anonymous user)", o.UserID, first.MaxIDs)
		}
		r.UserID = o.UserID
		r.Notes = append(r.Notes, fmt.Sprintf("user %d as configured", o.UserID))
		return nil
	}
	free := 0
	for id := 2; id <= first.MaxIDs; id++ {
		name := ""
		resp, err := raw(c, NetFnApp, CmdGetUserName, getUserNameReq(byte(id)), nil)
		if err == nil {
			name, err = parseUserName(resp)
		}
		if _, ok := IsCompletion(err); err != nil && !ok {
			return fmt.Errorf("read the name of user %d: %w", id, err)
		}
		// Some BMCs refuse the name of a slot never used: unnamed, then.
		if name == r.User {
			r.UserID = id
			r.Notes = append(r.Notes, fmt.Sprintf("user %d existed: new password", id))
			return nil
		}
		if name != "" || free != 0 {
			continue
		}
		resp, err = raw(c, NetFnApp, CmdGetUserAccess, getUserAccessReq(r.Channel, byte(id)), nil)
		if err != nil {
			return fmt.Errorf("read the access of user %d: %w", id, err)
		}
		ua, err := parseUserAccess(resp)
		if err != nil {
			return err
		}
		if !ua.Messaging && !ua.Enabled {
			free = id
		}
	}
	if free == 0 {
		return fmt.Errorf("no free user slot among the BMC's %d users (and none named %q)", first.MaxIDs, r.User)
	}
	r.UserID = free
	r.Notes = append(r.Notes, fmt.Sprintf("user %d created", free))
	return nil
}

// writeUser names the user, sets its password (the v2.0 form first when
// the channel may speak it), gives it administrator access with IPMI
// messaging on the LAN channel and enables it.
func writeUser(c Conn, r *Result) error {
	id := byte(r.UserID)
	data, err := setUserNameReq(id, r.User)
	if _, err := raw(c, NetFnApp, CmdSetUserName, data, err); err != nil {
		return fmt.Errorf("name user %d: %w", id, err)
	}
	data, err = setUserPasswordReq(id, pwSet, r.Password, r.IPMI20)
	_, err = raw(c, NetFnApp, CmdSetUserPassword, data, err)
	if err != nil && r.IPMI20 {
		// A BMC without the 20-byte form answers with a completion
		// code (request data length, parameter out of range...).
		if _, ok := IsCompletion(err); ok {
			r.IPMI20 = false
			r.Notes = append(r.Notes, "the BMC refused the IPMI v2.0 password form: stored as IPMI v1.5")
			data, err = setUserPasswordReq(id, pwSet, r.Password, false)
			_, err = raw(c, NetFnApp, CmdSetUserPassword, data, err)
		}
	}
	if err != nil {
		return fmt.Errorf("set the password of user %d: %w", id, err)
	}
	if _, err := raw(c, NetFnApp, CmdSetUserAccess, setUserAccessReq(r.Channel, id, PrivAdmin), nil); err != nil {
		return fmt.Errorf("give user %d administrator access on channel %d: %w", id, r.Channel, err)
	}
	data, err = setUserPasswordReq(id, pwEnableUser, "", false)
	if _, err := raw(c, NetFnApp, CmdSetUserPassword, data, err); err != nil {
		return fmt.Errorf("enable user %d: %w", id, err)
	}
	// Serial-over-LAN for the console; BMCs without per-user payload
	// access (IPMI v1.5, simulators) give it to every administrator.
	if _, err := raw(c, NetFnApp, CmdSetUserPayloadAccess, setUserPayloadAccessReq(r.Channel, id), nil); err != nil {
		if code, ok := IsCompletion(err); !ok || code != ccInvalidCommand {
			r.Notes = append(r.Notes, "SOL payload access not set ("+shortErr(err)+")")
		}
	}
	return nil
}

// openChannel makes the LAN channel usable by an administrator, in
// non-volatile and volatile storage, when it was disabled, pre-boot only
// or limited below administrator.
func openChannel(c Conn, r *Result) error {
	for _, volatile := range []bool{false, true} {
		which := "non-volatile"
		if volatile {
			which = "volatile"
		}
		resp, err := raw(c, NetFnApp, CmdGetChannelAccess, getChannelAccessReq(r.Channel, volatile), nil)
		if err != nil {
			r.Notes = append(r.Notes, which+" channel access unknown ("+shortErr(err)+")")
			continue
		}
		a, err := parseChannelAccess(resp)
		if err != nil {
			return err
		}
		if (a.Mode == AccessAlwaysAvailable || a.Mode == AccessShared) && a.PrivLimit >= PrivAdmin && a.PrivLimit != PrivNoAccess {
			continue
		}
		old := a
		a.Mode, a.PrivLimit = AccessAlwaysAvailable, PrivAdmin
		if _, err := raw(c, NetFnApp, CmdSetChannelAccess, setChannelAccessReq(r.Channel, a, volatile), nil); err != nil {
			return fmt.Errorf("open LAN channel %d (%s access mode %d, limit %d): %w", r.Channel, which, old.Mode, old.PrivLimit, err)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s channel access was mode %d limit %d: now always available, administrator", which, old.Mode, old.PrivLimit))
	}
	return nil
}

// verify reads the user back and tests the password where the BMC can.
func verify(c Conn, r *Result) error {
	id := byte(r.UserID)
	resp, err := raw(c, NetFnApp, CmdGetUserName, getUserNameReq(id), nil)
	if err != nil {
		return fmt.Errorf("read back user %d: %w", id, err)
	}
	if name, err := parseUserName(resp); err != nil {
		return err
	} else if name != r.User {
		return fmt.Errorf("user %d reads back as %q, not %q", id, name, r.User)
	}
	resp, err = raw(c, NetFnApp, CmdGetUserAccess, getUserAccessReq(r.Channel, id), nil)
	if err != nil {
		return fmt.Errorf("read back the access of user %d: %w", id, err)
	}
	ua, err := parseUserAccess(resp)
	if err != nil {
		return err
	}
	if !ua.Messaging || ua.PrivLimit != PrivAdmin {
		return fmt.Errorf("user %d reads back with IPMI messaging %v, privilege %d: want on, administrator (%d)", id, ua.Messaging, ua.PrivLimit, PrivAdmin)
	}
	data, err := setUserPasswordReq(id, pwTest, r.Password, r.IPMI20)
	_, err = raw(c, NetFnApp, CmdSetUserPassword, data, err)
	switch code, _ := IsCompletion(err); {
	case err == nil:
	case code == ccPasswordTestFailed:
		return fmt.Errorf("user %d: the BMC says the password just set is wrong", id)
	case code == ccWrongPasswordSize:
		r.Notes = append(r.Notes, "password test: stored in the other size")
	default:
		r.Notes = append(r.Notes, "password not tested ("+shortErr(err)+")")
	}
	return nil
}

func shortErr(err error) string {
	if code, ok := IsCompletion(err); ok {
		return fmt.Sprintf("completion code %#02x", code)
	}
	return err.Error()
}

const passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// NewPassword draws PasswordLen characters of [A-Za-z0-9] from crypto/rand
// (without modulo bias): characters every BMC and every tool accepts.
func NewPassword() (string, error) {
	out := make([]byte, 0, PasswordLen)
	buf := make([]byte, 32)
	for len(out) < PasswordLen {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("random password: %w", err)
		}
		for _, b := range buf {
			// 248 = 4*62: the bytes above it would favour the first
			// characters.
			if b < 248 && len(out) < PasswordLen {
				out = append(out, passwordAlphabet[int(b)%len(passwordAlphabet)])
			}
		}
	}
	return string(out), nil
}
