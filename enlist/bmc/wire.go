package bmc

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// The IPMI requests the set-up sends, as request encoders and response
// parsers (IPMI v2.0 rev. 1.1, sections 22 and 23). Responses are the data
// after the completion code: the transport strips it (a non-zero one is a
// *CompletionError).

// Network functions and commands.
const (
	NetFnApp       = 0x06
	NetFnTransport = 0x0c

	CmdGetChannelAuthCaps    = 0x38
	CmdSetChannelAccess      = 0x40
	CmdGetChannelAccess      = 0x41
	CmdGetChannelInfo        = 0x42
	CmdSetUserAccess         = 0x43
	CmdGetUserAccess         = 0x44
	CmdSetUserName           = 0x45
	CmdGetUserName           = 0x46
	CmdSetUserPassword       = 0x47
	CmdSetUserPayloadAccess  = 0x4c
	CmdGetLANConfigParameter = 0x02
)

// Privilege levels.
const (
	PrivAdmin    = 0x04
	PrivNoAccess = 0x0f
)

// Completion codes the set-up tells apart.
const (
	ccInvalidCommand     = 0xc1
	ccPasswordTestFailed = 0x80 // Set User Password "test": wrong password
	ccWrongPasswordSize  = 0x81 // Set User Password "test": stored in the other size
)

// CompletionError is a BMC's non-zero completion code.
type CompletionError struct {
	NetFn, Cmd, Code byte
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("ipmi: netfn %#02x command %#02x: completion code %#02x", e.NetFn, e.Cmd, e.Code)
}

// IsCompletion reports whether err is a completion code, and which.
func IsCompletion(err error) (byte, bool) {
	var ce *CompletionError
	if errors.As(err, &ce) {
		return ce.Code, true
	}
	return 0, false
}

// MediumLAN is the channel medium type of an 802.3 LAN channel.
const MediumLAN = 0x04

// GetChannelInfo: request [channel].
func getChannelInfoReq(ch byte) []byte { return []byte{ch & 0x0f} }

// parseChannelInfo returns the channel number and medium type of a Get
// Channel Info answer: channel, medium, protocol, session support, IANA
// (3), auxiliary (2).
func parseChannelInfo(resp []byte) (ch, medium byte, err error) {
	if len(resp) < 3 {
		return 0, 0, fmt.Errorf("ipmi: channel info answer has %d bytes, want at least 3", len(resp))
	}
	return resp[0] & 0x0f, resp[1] & 0x7f, nil
}

// The LAN configuration parameters read.
const (
	lanParamIPAddress       = 3
	lanParamIPAddressSource = 4
)

// getLANConfigReq reads parameter param of channel ch: [channel, param,
// set selector 0, block selector 0].
func getLANConfigReq(ch, param byte) []byte { return []byte{ch & 0x0f, param, 0, 0} }

// IPSource is where a BMC's LAN address comes from (LAN parameter 4).
type IPSource byte

// The address sources.
const (
	IPSourceUnspecified IPSource = 0
	IPSourceStatic      IPSource = 1
	IPSourceDHCP        IPSource = 2
	IPSourceBIOS        IPSource = 3
	IPSourceOther       IPSource = 4
)

func (s IPSource) String() string {
	switch s {
	case IPSourceUnspecified:
		return "unspecified"
	case IPSourceStatic:
		return "static"
	case IPSourceDHCP:
		return "dhcp"
	case IPSourceBIOS:
		return "bios"
	case IPSourceOther:
		return "other"
	}
	return fmt.Sprintf("reserved(%d)", byte(s))
}

// parseIPSource reads LAN parameter 4: revision, then the source in the
// low four bits.
func parseIPSource(resp []byte) (IPSource, error) {
	if len(resp) != 2 {
		return 0, fmt.Errorf("ipmi: LAN IP address source answer has %d bytes, want 2", len(resp))
	}
	return IPSource(resp[1] & 0x0f), nil
}

// parseIPAddress reads LAN parameter 3: revision, then four octets; the
// zero address is returned as the zero netip.Addr (unset).
func parseIPAddress(resp []byte) (netip.Addr, error) {
	if len(resp) != 5 {
		return netip.Addr{}, fmt.Errorf("ipmi: LAN IP address answer has %d bytes, want 5", len(resp))
	}
	a := netip.AddrFrom4([4]byte(resp[1:5]))
	if a.IsUnspecified() {
		return netip.Addr{}, nil
	}
	return a, nil
}

// getChannelAuthCapsReq asks for channel ch's authentication capabilities
// with the IPMI v2.0 extended data (bit 7), for the administrator level.
func getChannelAuthCapsReq(ch byte) []byte { return []byte{0x80 | ch&0x0f, PrivAdmin} }

// AuthCaps is what Get Channel Authentication Capabilities says about the
// protocols a channel speaks.
type AuthCaps struct {
	IPMI15, IPMI20 bool
}

// parseAuthCaps reads the answer: channel, auth types (bit 7: extended
// capabilities present), status, extended capabilities (bit 1: IPMI v2.0
// connections, bit 0: IPMI v1.5), IANA (3), OEM data. Without the
// extended byte the channel is IPMI v1.5 only.
func parseAuthCaps(resp []byte) (AuthCaps, error) {
	if len(resp) < 8 {
		return AuthCaps{}, fmt.Errorf("ipmi: channel authentication capabilities answer has %d bytes, want 8", len(resp))
	}
	if resp[1]&0x80 == 0 {
		return AuthCaps{IPMI15: true}, nil
	}
	return AuthCaps{IPMI15: resp[3]&0x01 != 0, IPMI20: resp[3]&0x02 != 0}, nil
}

// getUserAccessReq asks about user id on channel ch.
func getUserAccessReq(ch, id byte) []byte { return []byte{ch & 0x0f, id & 0x3f} }

// UserAccess is a Get User Access answer.
type UserAccess struct {
	// MaxIDs is how many user IDs the BMC has (user 1 is the anonymous
	// user).
	MaxIDs int
	// EnabledIDs counts the enabled ones.
	EnabledIDs int
	// Enabled is the user's enable status where the BMC reports it
	// (IPMI v2.0 errata: bits 7:6 of byte 2, 01b enabled); false when it
	// does not.
	Enabled bool
	// Messaging (IPMI messaging allowed), LinkAuth, CallbackOnly and
	// PrivLimit are the user's access on the channel.
	Messaging, LinkAuth, CallbackOnly bool
	PrivLimit                         byte
}

// parseUserAccess reads the four bytes of a Get User Access answer.
func parseUserAccess(resp []byte) (UserAccess, error) {
	if len(resp) != 4 {
		return UserAccess{}, fmt.Errorf("ipmi: user access answer has %d bytes, want 4", len(resp))
	}
	u := UserAccess{
		MaxIDs:       int(resp[0] & 0x3f),
		EnabledIDs:   int(resp[1] & 0x3f),
		Enabled:      resp[1]>>6 == 0x01,
		CallbackOnly: resp[3]&0x40 != 0,
		LinkAuth:     resp[3]&0x20 != 0,
		Messaging:    resp[3]&0x10 != 0,
		PrivLimit:    resp[3] & 0x0f,
	}
	if u.MaxIDs < 1 {
		return UserAccess{}, errors.New("ipmi: user access answer says the BMC has no user IDs")
	}
	return u, nil
}

// maxNameLen is the size of an IPMI user name.
const maxNameLen = 16

// getUserNameReq asks for the name of user id.
func getUserNameReq(id byte) []byte { return []byte{id & 0x3f} }

// parseUserName reads a Get User Name answer: 16 bytes, NUL padded. BMCs
// differ in what follows the first NUL (zeros, spaces, garbage): the name
// ends there.
func parseUserName(resp []byte) (string, error) {
	if len(resp) != maxNameLen {
		return "", fmt.Errorf("ipmi: user name answer has %d bytes, want %d", len(resp), maxNameLen)
	}
	name, _, _ := strings.Cut(string(resp), "\x00")
	return strings.TrimRight(name, " "), nil
}

// checkName refuses names an IPMI BMC cannot hold: at most 16 printable
// ASCII bytes, no spaces (ipmitool and BMC web pages choke on them).
func checkName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("user name %q: want 1 to %d characters", name, maxNameLen)
	}
	for _, r := range name {
		if r <= ' ' || r > '~' {
			return fmt.Errorf("user name %q: want printable ASCII without spaces", name)
		}
	}
	return nil
}

// setUserNameReq names user id: [id, 16 bytes of name, NUL padded].
func setUserNameReq(id byte, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	b := make([]byte, 1+maxNameLen)
	b[0] = id & 0x3f
	copy(b[1:], name)
	return b, nil
}

// Set User Password operations.
const (
	pwDisableUser = 0x00
	pwEnableUser  = 0x01
	pwSet         = 0x02
	pwTest        = 0x03
)

// setUserPasswordReq is Set User Password: [id | 0x80 for a 20-byte
// password, operation, password padded to 16 or 20 bytes (set and test
// only)]. A 20-byte password is the IPMI v2.0 form: BMCs keep such a
// password out of IPMI v1.5 sessions.
func setUserPasswordReq(id, op byte, password string, twenty bool) ([]byte, error) {
	size := 16
	if twenty {
		size = 20
	}
	b := []byte{id & 0x3f, op & 0x03}
	if twenty {
		b[0] |= 0x80
	}
	if op != pwSet && op != pwTest {
		return b, nil
	}
	if len(password) == 0 || len(password) > size {
		return nil, fmt.Errorf("password of %d bytes: want 1 to %d", len(password), size)
	}
	pw := make([]byte, size)
	copy(pw, password)
	return append(b, pw...), nil
}

// setUserAccessReq gives user id privilege priv on channel ch with IPMI
// messaging on, link authentication off, not restricted to callback:
// [0x80 (change these bits) | 0x10 (messaging) | channel, id, privilege].
func setUserAccessReq(ch, id, priv byte) []byte {
	return []byte{0x80 | 0x10 | ch&0x0f, id & 0x3f, priv & 0x0f}
}

// Channel access modes.
const (
	AccessDisabled        = 0
	AccessPreBootOnly     = 1
	AccessAlwaysAvailable = 2
	AccessShared          = 3
)

// getChannelAccessReq reads channel ch's access, non-volatile (0x40) or
// volatile (0x80).
func getChannelAccessReq(ch byte, volatile bool) []byte {
	if volatile {
		return []byte{ch & 0x0f, 0x80}
	}
	return []byte{ch & 0x0f, 0x40}
}

// ChannelAccess is a channel's access settings.
type ChannelAccess struct {
	// Flags are bits 5:3 of the first byte as the BMC answered them
	// (alerting, per-message and user-level authentication disabled),
	// written back unchanged.
	Flags     byte
	Mode      byte // Access*
	PrivLimit byte
}

// parseChannelAccess reads a Get Channel Access answer (two bytes).
func parseChannelAccess(resp []byte) (ChannelAccess, error) {
	if len(resp) != 2 {
		return ChannelAccess{}, fmt.Errorf("ipmi: channel access answer has %d bytes, want 2", len(resp))
	}
	return ChannelAccess{Flags: resp[0] & 0x38, Mode: resp[0] & 0x07, PrivLimit: resp[1] & 0x0f}, nil
}

// setChannelAccessReq writes a's access mode and privilege limit (and
// flags) of channel ch, in non-volatile (01b) or volatile (10b) storage.
func setChannelAccessReq(ch byte, a ChannelAccess, volatile bool) []byte {
	store := byte(0x40)
	if volatile {
		store = 0x80
	}
	return []byte{ch & 0x0f, store | a.Flags&0x38 | a.Mode&0x07, store | a.PrivLimit&0x0f}
}

// setUserPayloadAccessReq enables the standard payload SOL (payload type
// 1) for user id on channel ch: [channel, operation 00b (enable) | id,
// standard payloads, 3 bytes of OEM payloads].
func setUserPayloadAccessReq(ch, id byte) []byte {
	return []byte{ch & 0x0f, id & 0x3f, 0x02, 0, 0, 0}
}
