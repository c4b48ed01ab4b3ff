package bmc

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fakeBMC is an in-memory BMC for Setup's unit tests: the user table,
// one LAN channel and its access, answering the requests Setup sends the
// way the IPMI specification says. The real peer is in lan_test.go.
type fakeBMC struct {
	lanChannel byte
	addr       [4]byte
	source     byte
	maxIDs     int
	names      map[int]string
	passwords  map[int][]byte
	twenty     map[int]bool
	enabled    map[int]bool
	priv       map[int]byte
	messaging  map[int]bool
	access     [2]ChannelAccess // non-volatile, volatile
	// quirks
	no20           bool // refuses the 20-byte password form
	noChannelInfo  bool
	noAuthCaps     bool
	ignoreAccess   bool // accepts Set User Access and changes nothing
	wrongPassword  bool // password test fails
	nameless       bool // Get User Name refused for unnamed slots
	sent           []string
	failAfterWrite bool
}

func newFake() *fakeBMC {
	return &fakeBMC{lanChannel: 1, addr: [4]byte{10, 0, 0, 13}, source: 2, maxIDs: 10,
		names:     map[int]string{2: "admin"},
		passwords: map[int][]byte{}, twenty: map[int]bool{}, enabled: map[int]bool{2: true},
		priv: map[int]byte{2: PrivAdmin}, messaging: map[int]bool{2: true},
		access: [2]ChannelAccess{{Mode: AccessAlwaysAvailable, PrivLimit: PrivAdmin}, {Mode: AccessAlwaysAvailable, PrivLimit: PrivAdmin}}}
}

func (f *fakeBMC) cc(netfn, cmd, code byte) error {
	return &CompletionError{NetFn: netfn, Cmd: cmd, Code: code}
}

func (f *fakeBMC) Raw(netfn, cmd byte, d []byte) ([]byte, error) {
	f.sent = append(f.sent, fmt.Sprintf("%02x/%02x", netfn, cmd))
	bad := f.cc(netfn, cmd, 0xc7)
	switch {
	case netfn == NetFnApp && cmd == CmdGetChannelInfo:
		if f.noChannelInfo {
			return nil, f.cc(netfn, cmd, ccInvalidCommand)
		}
		medium := byte(0x05)
		if d[0] == f.lanChannel {
			medium = MediumLAN
		}
		return []byte{d[0], medium, 0x01, 0x81, 0xf2, 0x1b, 0, 0, 0}, nil
	case netfn == NetFnTransport && cmd == CmdGetLANConfigParameter:
		if len(d) != 4 || d[0] != f.lanChannel {
			return nil, f.cc(netfn, cmd, 0xcc)
		}
		switch d[1] {
		case lanParamIPAddress:
			return append([]byte{0x11}, f.addr[:]...), nil
		case lanParamIPAddressSource:
			return []byte{0x11, f.source}, nil
		}
		return nil, f.cc(netfn, cmd, 0x80)
	case netfn == NetFnApp && cmd == CmdGetChannelAuthCaps:
		if f.noAuthCaps {
			return nil, f.cc(netfn, cmd, 0xd5)
		}
		ext := byte(0x03)
		if f.no20 {
			ext = 0x01
		}
		return []byte{d[0] & 0x0f, 0x97, 0x04, ext, 0, 0, 0, 0}, nil
	case netfn == NetFnApp && cmd == CmdGetUserAccess:
		id := int(d[1])
		if len(d) != 2 || id < 1 || id > f.maxIDs {
			return nil, f.cc(netfn, cmd, 0xcc)
		}
		n, status := 0, byte(0)
		for _, e := range f.enabled {
			if e {
				n++
			}
		}
		if f.enabled[id] {
			status = 0x40
		}
		b4 := f.priv[id]
		if f.messaging[id] {
			b4 |= 0x10
		}
		return []byte{byte(f.maxIDs), status | byte(n), 0, b4}, nil
	case netfn == NetFnApp && cmd == CmdGetUserName:
		id := int(d[0])
		if id < 1 || id > f.maxIDs {
			return nil, f.cc(netfn, cmd, 0xcc)
		}
		if f.nameless && f.names[id] == "" {
			return nil, f.cc(netfn, cmd, 0xcc)
		}
		b := make([]byte, 16)
		copy(b, f.names[id])
		return b, nil
	case netfn == NetFnApp && cmd == CmdSetUserName:
		if len(d) != 17 {
			return nil, bad
		}
		f.names[int(d[0])] = string(bytes.TrimRight(d[1:], "\x00"))
		return nil, nil
	case netfn == NetFnApp && cmd == CmdSetUserPassword:
		id, twenty, op := int(d[0]&0x3f), d[0]&0x80 != 0, d[1]&0x03
		if twenty && f.no20 {
			return nil, f.cc(netfn, cmd, 0xcc)
		}
		switch op {
		case pwEnableUser:
			f.enabled[id] = true
		case pwDisableUser:
			f.enabled[id] = false
		case pwSet:
			if (twenty && len(d) != 22) || (!twenty && len(d) != 18) {
				return nil, bad
			}
			f.passwords[id], f.twenty[id] = bytes.Clone(d[2:]), twenty
		case pwTest:
			if f.twenty[id] != twenty {
				return nil, f.cc(netfn, cmd, ccWrongPasswordSize)
			}
			if f.wrongPassword || !bytes.Equal(f.passwords[id], d[2:]) {
				return nil, f.cc(netfn, cmd, ccPasswordTestFailed)
			}
		}
		return nil, nil
	case netfn == NetFnApp && cmd == CmdSetUserAccess:
		if len(d) < 3 || d[0]&0x0f != f.lanChannel {
			return nil, f.cc(netfn, cmd, 0xcc)
		}
		if f.ignoreAccess {
			return nil, nil
		}
		id := int(d[1] & 0x3f)
		f.priv[id] = d[2] & 0x0f
		if d[0]&0x80 != 0 {
			f.messaging[id] = d[0]&0x10 != 0
		}
		return nil, nil
	case netfn == NetFnApp && cmd == CmdGetChannelAccess:
		return []byte{f.access[d[1]>>7].Flags | f.access[d[1]>>7].Mode, f.access[d[1]>>7].PrivLimit}, nil
	case netfn == NetFnApp && cmd == CmdSetChannelAccess:
		i := 0
		if d[1]&0xc0 == 0x80 {
			i = 1
		}
		f.access[i] = ChannelAccess{Flags: d[1] & 0x38, Mode: d[1] & 0x07, PrivLimit: d[2] & 0x0f}
		return nil, nil
	case netfn == NetFnApp && cmd == CmdSetUserPayloadAccess:
		return nil, f.cc(netfn, cmd, ccInvalidCommand)
	}
	return nil, f.cc(netfn, cmd, ccInvalidCommand)
}

func (f *fakeBMC) sentAny(prefix string) bool {
	for _, s := range f.sent {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func TestSetup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prep   func(*fakeBMC)
		opts   Options
		wantID int
		want20 bool
		err    string
		notes  []string
		check  func(*testing.T, *fakeBMC)
	}{
		{name: "fresh BMC: the first free slot after the vendor's admin", wantID: 3, want20: true, notes: []string{"user 3 created"}},
		{name: "existing rackd user: reused, new password", prep: func(f *fakeBMC) {
			f.names[3], f.names[7] = "ops", DefaultUser
		}, wantID: 7, want20: true, notes: []string{"user 7 existed"}},
		{name: "an unnamed slot that is enabled is not free", prep: func(f *fakeBMC) {
			f.enabled[3], f.messaging[4] = true, true
		}, wantID: 5, want20: true},
		{name: "slots never used refuse Get User Name", prep: func(f *fakeBMC) { f.nameless = true }, wantID: 3, want20: true},
		{name: "configured slot", opts: Options{UserID: 9, User: "maas"}, wantID: 9, want20: true, notes: []string{"user 9 as configured"}},
		{name: "configured slot out of range", opts: Options{UserID: 11}, err: "the BMC has users 2 to 10"},
		{name: "configured anonymous user", opts: Options{UserID: 1}, err: "1 is the anonymous user"},
		{name: "bad user name", opts: Options{User: "rack d"}, err: "printable ASCII"},
		{name: "no address: nothing written", prep: func(f *fakeBMC) { f.addr = [4]byte{} }, err: "no LAN address",
			check: func(t *testing.T, f *fakeBMC) {
				if f.sentAny("06/45") || f.sentAny("06/47") || f.sentAny("06/43") {
					t.Errorf("set commands sent to a BMC without an address: %v", f.sent)
				}
			}},
		{name: "IPMI v1.5 BMC: 16-byte password", prep: func(f *fakeBMC) { f.no20 = true }, wantID: 3, want20: false},
		{name: "unknown capabilities, no v2.0 form: falls back", prep: func(f *fakeBMC) { f.no20, f.noAuthCaps = true, true },
			wantID: 3, want20: false, notes: []string{"authentication capabilities unknown", "stored as IPMI v1.5"}},
		{name: "LAN channel 2", prep: func(f *fakeBMC) { f.lanChannel = 2 }, wantID: 3, want20: true},
		{name: "no channel info: channel 1", prep: func(f *fakeBMC) { f.noChannelInfo = true }, wantID: 3, want20: true,
			notes: []string{"assuming LAN channel 1"}},
		{name: "disabled channel opened, flags kept", prep: func(f *fakeBMC) {
			f.access[0] = ChannelAccess{Flags: 0x20, Mode: AccessDisabled, PrivLimit: 2}
			f.access[1] = ChannelAccess{Mode: AccessPreBootOnly, PrivLimit: PrivAdmin}
		}, wantID: 3, want20: true, notes: []string{"non-volatile channel access was mode 0 limit 2", "volatile channel access was mode 1"},
			check: func(t *testing.T, f *fakeBMC) {
				want := [2]ChannelAccess{{Flags: 0x20, Mode: AccessAlwaysAvailable, PrivLimit: PrivAdmin}, {Mode: AccessAlwaysAvailable, PrivLimit: PrivAdmin}}
				if f.access != want {
					t.Errorf("channel access %+v, want %+v", f.access, want)
				}
			}},
		{name: "open channel left alone", wantID: 3, want20: true, check: func(t *testing.T, f *fakeBMC) {
			if f.sentAny("06/40") {
				t.Errorf("Set Channel Access sent to an open channel: %v", f.sent)
			}
		}},
		{name: "full BMC", prep: func(f *fakeBMC) {
			for id := 2; id <= f.maxIDs; id++ {
				f.names[id] = fmt.Sprint("u", id)
			}
		}, err: `no free user slot among the BMC's 10 users (and none named "rackd")`},
		{name: "access that does not stick", prep: func(f *fakeBMC) { f.ignoreAccess = true }, err: "reads back with IPMI messaging false"},
		{name: "password test fails", prep: func(f *fakeBMC) { f.wrongPassword = true }, err: "the password just set is wrong"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			if tc.prep != nil {
				tc.prep(f)
			}
			r, err := Setup(f, tc.opts)
			if tc.check != nil {
				defer tc.check(t, f)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Setup: %v (sent %v)", err, f.sent)
			}
			user := tc.opts.User
			if user == "" {
				user = DefaultUser
			}
			id := r.UserID
			if id != tc.wantID || r.User != user || r.IPMI20 != tc.want20 || r.Address.String() != "10.0.0.13" ||
				r.IPSource != IPSourceDHCP || r.Channel != f.lanChannel {
				t.Fatalf("result %+v, want user %d %q, IPMI20 %v", r, tc.wantID, user, tc.want20)
			}
			if len(r.Password) != PasswordLen {
				t.Errorf("password of %d characters", len(r.Password))
			}
			want := make([]byte, 16)
			if tc.want20 {
				want = make([]byte, 20)
			}
			copy(want, r.Password)
			if f.names[id] != user || !bytes.Equal(f.passwords[id], want) || f.twenty[id] != tc.want20 || !f.enabled[id] ||
				f.priv[id] != PrivAdmin || !f.messaging[id] {
				t.Errorf("user %d on the BMC: name %q password % x (20: %v) enabled %v priv %d messaging %v",
					id, f.names[id], f.passwords[id], f.twenty[id], f.enabled[id], f.priv[id], f.messaging[id])
			}
			if f.names[2] != "admin" || f.priv[2] != PrivAdmin || !f.enabled[2] {
				t.Errorf("the vendor's admin changed: %q %d %v", f.names[2], f.priv[2], f.enabled[2])
			}
			for _, n := range tc.notes {
				if !strings.Contains(strings.Join(r.Notes, "; "), n) {
					t.Errorf("notes %q lack %q", r.Notes, n)
				}
			}
		})
	}
}

func TestSetupNewPasswordEachTime(t *testing.T) {
	f := newFake()
	a, err := Setup(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Setup(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.UserID != b.UserID || a.Password == b.Password {
		t.Errorf("second set-up: user %d -> %d, same password %v", a.UserID, b.UserID, a.Password == b.Password)
	}
}

func TestSetupTransportError(t *testing.T) {
	_, err := Setup(connFunc(func(netfn, cmd byte, d []byte) ([]byte, error) { return nil, errors.New("ioctl: EIO") }), Options{})
	if err == nil || !strings.Contains(err.Error(), "EIO") {
		t.Fatalf("err %v", err)
	}
}

type connFunc func(netfn, cmd byte, d []byte) ([]byte, error)

func (f connFunc) Raw(netfn, cmd byte, d []byte) ([]byte, error) { return f(netfn, cmd, d) }
