package store

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"
	"time"
)

func checkAddressJSON(t *testing.T, a Address) {
	t.Helper()
	want, err := json.Marshal(a)
	if err != nil {
		t.Skip("encoding/json refuses it:", err)
	}
	if got := a.appendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("appendJSON = %s\nencoding/json = %s", got, want)
	}
}

func TestAddressJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 9, 10, 123456789, time.UTC)
	for _, a := range []Address{
		{},
		{IP: netip.MustParseAddr("10.0.0.5"), Subnet: netip.MustParsePrefix("10.0.0.0/24"), Kind: KindDynamic,
			MAC: "52:54:00:00:00:01", Hostname: "web1", Expires: now.Add(time.Hour), Created: now},
		{IP: netip.MustParseAddr("fd00::5"), Subnet: netip.MustParsePrefix("fd00::/64"), Kind: KindSticky,
			MachineID: "m-1", Owner: "alice", Purpose: `a "quoted" <purpose> & more\n`, Created: now.In(time.FixedZone("x", 3600))},
		{IP: netip.MustParseAddr("10.0.0.6"), Kind: KindReserved, Hostname: "sw\u00e9itch\u2028", Created: now.Truncate(time.Second)},
	} {
		checkAddressJSON(t, a)
	}
}

func FuzzAddressJSON(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, 24, "dynamic", "52:54:00:00:00:01", "", "host", "", "", int64(1), int64(2))
	f.Add([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 64, "sticky", "", "m", "h\x00<", "o\u2029", "p\"\\", int64(-5), int64(0))
	f.Fuzz(func(t *testing.T, ip []byte, bits int, kind, mac, machine, host, owner, purpose string, exp, created int64) {
		a := Address{Kind: AddrKind(kind), MAC: mac, MachineID: machine, Hostname: host, Owner: owner, Purpose: purpose,
			Expires: time.Unix(0, exp).UTC(), Created: time.Unix(0, created).UTC()}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			a.IP = addr
			if p, err := addr.Prefix(bits); err == nil {
				a.Subnet = p
			}
		}
		checkAddressJSON(t, a)
	})
}
