package arp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"testing"
)

var (
	ourMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	theirMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

func TestProbeMarshal(t *testing.T) {
	b, err := Probe(ourMAC, netip.MustParseAddr("10.0.0.7")).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// RFC 826 layout: htype 1, ptype 0x0800, hlen 6, plen 4, op 1,
	// sha, spa 0.0.0.0 (RFC 5227 probe), tha zero, tpa.
	want, _ := hex.DecodeString("0001" + "0800" + "06" + "04" + "0001" +
		"020000000001" + "00000000" + "000000000000" + "0a000007")
	if !bytes.Equal(b, want) {
		t.Fatalf("probe = %x\nwant    %x", b, want)
	}
}

func TestParse(t *testing.T) {
	reply := Packet{
		Op:        OpReply,
		SenderMAC: theirMAC,
		SenderIP:  netip.MustParseAddr("10.0.0.7"),
		TargetMAC: ourMAC,
		TargetIP:  netip.IPv4Unspecified(),
	}
	b, err := reply.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	padded := append(append([]byte(nil), b...), make([]byte, 18)...) // Ethernet minimum-frame padding
	tests := []struct {
		name string
		b    []byte
		want Packet
		err  error
	}{
		{"reply", b, reply, nil},
		{"padded", padded, reply, nil},
		{"short", b[:27], Packet{}, ErrMalformed},
		{"empty", nil, Packet{}, ErrMalformed},
		{"not ethernet", append([]byte{0, 6}, b[2:]...), Packet{}, ErrMalformed},
		{"not ipv4", append([]byte{0, 1, 0x86, 0xdd}, b[4:]...), Packet{}, ErrMalformed},
		{"bad hlen", append(append([]byte(nil), b[:4]...), append([]byte{8}, b[5:]...)...), Packet{}, ErrMalformed},
		{"bad plen", append(append([]byte(nil), b[:5]...), append([]byte{16}, b[6:]...)...), Packet{}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.b)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestMarshalRejects(t *testing.T) {
	for name, p := range map[string]Packet{
		"ipv6":      Probe(ourMAC, netip.MustParseAddr("fd00::1")),
		"no ip":     Probe(ourMAC, netip.Addr{}),
		"short mac": Probe(net.HardwareAddr{1, 2, 3}, netip.MustParseAddr("10.0.0.1")),
	} {
		if _, err := p.Marshal(); err == nil {
			t.Errorf("%s: Marshal accepted %+v", name, p)
		}
	}
}

// FuzzParse: Parse never panics, and what it accepts survives a round
// trip through Marshal.
func FuzzParse(f *testing.F) {
	b, _ := Probe(ourMAC, netip.MustParseAddr("10.0.0.7")).Marshal()
	f.Add(b)
	f.Add([]byte{0, 1, 8, 0, 6, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("parsed %+v does not marshal: %v", p, err)
		}
		if !bytes.Equal(out, b[:packetLen]) {
			t.Fatalf("round trip: %x != %x", out, b[:packetLen])
		}
	})
}
