package dhcp

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// checkSameParse fails unless parseRequest reads q as dhcpv4.FromBytes does:
// the same message (nil and empty values told apart), or an error for both.
func checkSameParse(t testing.TB, q []byte) {
	t.Helper()
	orig := bytes.Clone(q)
	want, wantErr := dhcpv4.FromBytes(q)
	got, err := parseRequest(q)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("parseRequest error %v, FromBytes error %v, for %x", err, wantErr, q)
	}
	if !bytes.Equal(q, orig) {
		t.Fatal("parseRequest changed its input")
	}
	if err != nil {
		if got != nil {
			t.Fatal("a message with the error")
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseRequest reads\n%#v\nFromBytes reads\n%#v\nfrom %x", got, want, q)
	}
	// Nothing of q is kept: the packet buffer is reused at once.
	for i := range q {
		q[i] ^= 0xff
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("parseRequest's message changed with its input buffer")
	}
	copy(q, orig)
	// A value can grow without overwriting another.
	for code, v := range got.Options {
		got.Options[code] = append(v, 0xee)
	}
	for code, v := range want.Options {
		if w := got.Options[code]; !bytes.Equal(w[:len(w)-1], v) {
			t.Fatalf("option %d is %x after appending to the others, want %x", code, w[:len(w)-1], v)
		}
	}
}

// parseCases are packets where parsing can go astray: the typical requests,
// then truncations, missing and early ends, padding, repeated and empty
// options, an overlong hardware address length, full sname and file.
func parseCases(tb testing.TB) map[string][]byte {
	d, r := benchRequests(tb)
	disc, req := d.ToBytes(), r.ToBytes()
	hdr := disc[:offOptions]
	with := func(opts ...byte) []byte { return append(bytes.Clone(hdr), opts...) }
	long := bytes.Clone(disc)
	long[2] = 200 // hlen
	copy(long[offSName:offFile], bytes.Repeat([]byte{'s'}, 64))
	copy(long[offFile:offCookie], bytes.Repeat([]byte{'f'}, 128))
	badCookie := bytes.Clone(disc)
	badCookie[offCookie] = 98
	return map[string][]byte{
		"discover":           disc,
		"request":            req,
		"empty":              nil,
		"short":              disc[:offOptions-1],
		"bad cookie":         badCookie,
		"header only":        hdr,
		"end only":           with(255),
		"pad only":           with(0, 0, 0),
		"pads then end":      with(0, 0, 53, 1, 1, 0, 255, 1, 2, 3),
		"no end":             with(53, 1, 1),
		"no length":          with(53, 1, 1, 12),
		"value cut short":    with(53, 1, 1, 12, 5, 'a', 'b', 255),
		"repeated":           with(12, 2, 'a', 'b', 53, 1, 1, 12, 3, 'c', 'd', 'e', 255),
		"empty value":        with(12, 0, 255),
		"empty then value":   with(12, 0, 12, 2, 'a', 'b', 255),
		"value then empty":   with(12, 2, 'a', 'b', 12, 0, 255),
		"empty twice":        with(61, 0, 61, 0, 255),
		"hlen over 16, full": long,
		"zero hlen":          append([]byte{1, 1, 0}, with(255)[3:]...),
	}
}

func TestParseRequest(t *testing.T) {
	for name, q := range parseCases(t) {
		t.Run(name, func(t *testing.T) { checkSameParse(t, q) })
	}
}

// FuzzParseRequest: parseRequest reads whatever arrives as FromBytes does.
func FuzzParseRequest(f *testing.F) {
	for _, q := range parseCases(f) {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		checkSameParse(t, q)
	})
}
