package bmc

import "testing"

// FuzzParsers feeds arbitrary BMC answers to every parser: none may panic,
// and what they accept must be within the fields' ranges.
func FuzzParsers(f *testing.F) {
	for _, seed := range [][]byte{
		{0x01, 0x04, 0x01, 0x81, 0xf2, 0x1b, 0x00, 0x00, 0x00},
		{0x11, 10, 0, 0, 13},
		{0x11, 0x02},
		{0x01, 0x97, 0x04, 0x03, 0, 0, 0, 0},
		{0x3f, 0x01, 0x00, 0x00},
		[]byte("rackd\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		{0x02, 0x04},
		{},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, medium, err := parseChannelInfo(b); err == nil && medium > 0x7f {
			t.Errorf("medium %#x", medium)
		}
		if a, err := parseIPAddress(b); err == nil && a.IsValid() && (!a.Is4() || a.IsUnspecified()) {
			t.Errorf("address %v", a)
		}
		if s, err := parseIPSource(b); err == nil && s > 0x0f {
			t.Errorf("source %d", s)
		}
		_, _ = parseAuthCaps(b)
		if u, err := parseUserAccess(b); err == nil && (u.MaxIDs < 1 || u.MaxIDs > 63 || u.PrivLimit > 0x0f) {
			t.Errorf("user access %+v", u)
		}
		if name, err := parseUserName(b); err == nil && len(name) > maxNameLen {
			t.Errorf("name %q", name)
		}
		if a, err := parseChannelAccess(b); err == nil && (a.Mode > 7 || a.PrivLimit > 0x0f || a.Flags&^0x38 != 0) {
			t.Errorf("channel access %+v", a)
		}
	})
}
