package bmc

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

func TestEncoders(t *testing.T) {
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pad := func(s string, n int) []byte { b := make([]byte, n); copy(b, s); return b }
	for _, tc := range []struct {
		name string
		got  []byte
		want []byte
	}{
		{"get channel info", getChannelInfoReq(1), []byte{0x01}},
		{"get LAN config address", getLANConfigReq(1, lanParamIPAddress), []byte{0x01, 0x03, 0x00, 0x00}},
		{"get LAN config source", getLANConfigReq(2, lanParamIPAddressSource), []byte{0x02, 0x04, 0x00, 0x00}},
		{"get auth caps v2.0 admin", getChannelAuthCapsReq(1), []byte{0x81, 0x04}},
		{"get user access", getUserAccessReq(1, 3), []byte{0x01, 0x03}},
		{"get user name", getUserNameReq(5), []byte{0x05}},
		{"set user name", must(setUserNameReq(3, "rackd")), append([]byte{0x03}, pad("rackd", 16)...)},
		{"set user name of 16", must(setUserNameReq(63, "abcdefghijklmnop")), append([]byte{0x3f}, "abcdefghijklmnop"...)},
		{"set password 20-byte form", must(setUserPasswordReq(3, pwSet, "secret", true)), append([]byte{0x83, 0x02}, pad("secret", 20)...)},
		{"set password 16-byte form", must(setUserPasswordReq(3, pwSet, "secret", false)), append([]byte{0x03, 0x02}, pad("secret", 16)...)},
		{"test password", must(setUserPasswordReq(4, pwTest, "pw", true)), append([]byte{0x84, 0x03}, pad("pw", 20)...)},
		{"enable user", must(setUserPasswordReq(3, pwEnableUser, "", false)), []byte{0x03, 0x01}},
		{"disable user", must(setUserPasswordReq(3, pwDisableUser, "ignored", false)), []byte{0x03, 0x00}},
		{"set user access admin", setUserAccessReq(1, 3, PrivAdmin), []byte{0x91, 0x03, 0x04}},
		{"get channel access non-volatile", getChannelAccessReq(1, false), []byte{0x01, 0x40}},
		{"get channel access volatile", getChannelAccessReq(1, true), []byte{0x01, 0x80}},
		{"set channel access non-volatile, flags kept", setChannelAccessReq(1, ChannelAccess{Flags: 0x20, Mode: AccessAlwaysAvailable, PrivLimit: PrivAdmin}, false),
			[]byte{0x01, 0x62, 0x44}},
		{"set channel access volatile", setChannelAccessReq(2, ChannelAccess{Mode: AccessAlwaysAvailable, PrivLimit: PrivAdmin}, true),
			[]byte{0x02, 0x82, 0x84}},
		{"set user payload access SOL", setUserPayloadAccessReq(1, 3), []byte{0x01, 0x03, 0x02, 0, 0, 0}},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: % x, want % x", tc.name, tc.got, tc.want)
		}
	}
}

func TestEncoderRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"empty name", second(setUserNameReq(3, "")), "want 1 to 16"},
		{"long name", second(setUserNameReq(3, "abcdefghijklmnopq")), "want 1 to 16"},
		{"name with a space", second(setUserNameReq(3, "rack d")), "printable ASCII"},
		{"name with UTF-8", second(setUserNameReq(3, "räckd")), "printable ASCII"},
		{"empty password", second(setUserPasswordReq(3, pwSet, "", true)), "want 1 to 20"},
		{"21-byte password", second(setUserPasswordReq(3, pwSet, strings.Repeat("a", 21), true)), "want 1 to 20"},
		{"17-byte v1.5 password", second(setUserPasswordReq(3, pwSet, strings.Repeat("a", 17), false)), "want 1 to 16"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, tc.err, tc.want)
		}
	}
}

func second(_ []byte, err error) error { return err }

func TestParsers(t *testing.T) {
	t.Run("channel info", func(t *testing.T) {
		ch, medium, err := parseChannelInfo([]byte{0x01, 0x04, 0x01, 0x81, 0xf2, 0x1b, 0x00, 0x00, 0x00})
		if err != nil || ch != 1 || medium != MediumLAN {
			t.Errorf("LAN channel: %d %d %v", ch, medium, err)
		}
		if _, medium, _ := parseChannelInfo([]byte{0x0f, 0x0c, 0x05}); medium != 0x0c {
			t.Errorf("system interface: medium %d", medium)
		}
		if _, _, err := parseChannelInfo([]byte{0x01, 0x04}); err == nil {
			t.Error("short answer accepted")
		}
	})
	t.Run("LAN address", func(t *testing.T) {
		for _, tc := range []struct {
			resp []byte
			want string
			err  bool
		}{
			{[]byte{0x11, 10, 0, 0, 13}, "10.0.0.13", false},
			{[]byte{0x11, 127, 0, 0, 1}, "127.0.0.1", false},
			{[]byte{0x11, 0, 0, 0, 0}, "", false},
			{[]byte{0x11, 10, 0, 0}, "", true},
			{[]byte{0x11, 10, 0, 0, 13, 1}, "", true},
			{nil, "", true},
		} {
			a, err := parseIPAddress(tc.resp)
			got := ""
			if a.IsValid() {
				got = a.String()
			}
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("% x: %q %v, want %q (error %v)", tc.resp, got, err, tc.want, tc.err)
			}
		}
	})
	t.Run("LAN address source", func(t *testing.T) {
		for _, tc := range []struct {
			resp []byte
			want string
		}{
			{[]byte{0x11, 0x01}, "static"},
			{[]byte{0x11, 0x02}, "dhcp"},
			{[]byte{0x11, 0xf2}, "dhcp"}, // reserved high bits ignored
			{[]byte{0x11, 0x00}, "unspecified"},
			{[]byte{0x11, 0x03}, "bios"},
			{[]byte{0x11, 0x04}, "other"},
			{[]byte{0x11, 0x09}, "reserved(9)"},
		} {
			if s, err := parseIPSource(tc.resp); err != nil || s.String() != tc.want {
				t.Errorf("% x: %v %v, want %s", tc.resp, s, err, tc.want)
			}
		}
		if _, err := parseIPSource([]byte{0x11}); err == nil {
			t.Error("short answer accepted")
		}
	})
	t.Run("auth caps", func(t *testing.T) {
		for _, tc := range []struct {
			resp []byte
			want AuthCaps
			err  bool
		}{
			{[]byte{0x01, 0x97, 0x04, 0x03, 0, 0, 0, 0}, AuthCaps{IPMI15: true, IPMI20: true}, false},
			{[]byte{0x01, 0x97, 0x04, 0x02, 0, 0, 0, 0}, AuthCaps{IPMI20: true}, false},
			{[]byte{0x01, 0x17, 0x04, 0x00, 0, 0, 0, 0}, AuthCaps{IPMI15: true}, false}, // no extended data: v1.5
			{[]byte{0x01, 0x97, 0x04}, AuthCaps{}, true},
		} {
			got, err := parseAuthCaps(tc.resp)
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("% x: %+v %v, want %+v (error %v)", tc.resp, got, err, tc.want, tc.err)
			}
		}
	})
	t.Run("user access", func(t *testing.T) {
		for _, tc := range []struct {
			resp []byte
			want UserAccess
			err  bool
		}{
			// ipmi_sim: 63 users, one enabled; user 3 untouched.
			{[]byte{0x3f, 0x01, 0x00, 0x00}, UserAccess{MaxIDs: 63, EnabledIDs: 1}, false},
			// user enabled (01b), messaging, admin
			{[]byte{0x0a, 0x42, 0x01, 0x14}, UserAccess{MaxIDs: 10, EnabledIDs: 2, Enabled: true, Messaging: true, PrivLimit: 4}, false},
			{[]byte{0x0a, 0x82, 0x01, 0x6f}, UserAccess{MaxIDs: 10, EnabledIDs: 2, CallbackOnly: true, LinkAuth: true, PrivLimit: 0x0f}, false},
			{[]byte{0x00, 0x00, 0x00, 0x00}, UserAccess{}, true},
			{[]byte{0x3f, 0x01, 0x00}, UserAccess{}, true},
		} {
			got, err := parseUserAccess(tc.resp)
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("% x: %+v %v, want %+v (error %v)", tc.resp, got, err, tc.want, tc.err)
			}
		}
	})
	t.Run("user name", func(t *testing.T) {
		pad := func(s string, fill byte) []byte { b := bytes.Repeat([]byte{fill}, 16); copy(b, s); return b }
		for _, tc := range []struct {
			resp []byte
			want string
			err  bool
		}{
			{pad("rackd", 0), "rackd", false},
			{pad("", 0), "", false},
			{pad("admin\x00junk", 0), "admin", false},
			{pad("ADMIN", ' '), "ADMIN", false}, // space padded
			{[]byte("abcdefghijklmnop"), "abcdefghijklmnop", false},
			{[]byte("short"), "", true},
		} {
			got, err := parseUserName(tc.resp)
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("% x: %q %v, want %q (error %v)", tc.resp, got, err, tc.want, tc.err)
			}
		}
	})
	t.Run("channel access", func(t *testing.T) {
		got, err := parseChannelAccess([]byte{0x02, 0x04}) // ipmi_sim
		if err != nil || got != (ChannelAccess{Mode: AccessAlwaysAvailable, PrivLimit: PrivAdmin}) {
			t.Errorf("ipmi_sim's answer: %+v %v", got, err)
		}
		got, err = parseChannelAccess([]byte{0xe0, 0xf2})
		if err != nil || got != (ChannelAccess{Flags: 0x20, Mode: AccessDisabled, PrivLimit: 2}) {
			t.Errorf("disabled, user limit: %+v %v", got, err)
		}
		if _, err := parseChannelAccess([]byte{0x02}); err == nil {
			t.Error("short answer accepted")
		}
	})
}

func TestNewPassword(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		pw, err := NewPassword()
		if err != nil {
			t.Fatal(err)
		}
		if len(pw) != PasswordLen || strings.Trim(pw, passwordAlphabet) != "" {
			t.Fatalf("password %q: want %d characters of [A-Za-z0-9]", pw, PasswordLen)
		}
		if seen[pw] {
			t.Fatalf("password %q drawn twice", pw)
		}
		seen[pw] = true
	}
}

func TestResultStringHidesPassword(t *testing.T) {
	r := Result{Channel: 1, Address: netip.MustParseAddr("10.0.0.13"), IPSource: IPSourceDHCP, UserID: 3, User: "rackd",
		Password: "Zx81Secret", IPMI20: true, Notes: []string{"user 3 created"}}
	s := r.String()
	if strings.Contains(s, r.Password) || !strings.Contains(s, "10.0.0.13") || !strings.Contains(s, "user 3 created") {
		t.Errorf("Result.String() = %q", s)
	}
}
