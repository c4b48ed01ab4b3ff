package dns

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseReverse(t *testing.T) {
	const v6 = "1.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa."
	tests := map[string]struct {
		name string
		kind reverseKind
		want string // the prefix, for reverseAddr and reversePrefix
	}{
		"v4 address":           {"11.0.0.10.in-addr.arpa.", reverseAddr, "10.0.0.11/32"},
		"v4 zeros":             {"0.0.0.0.in-addr.arpa.", reverseAddr, "0.0.0.0/32"},
		"v4 all 255":           {"255.255.255.255.in-addr.arpa.", reverseAddr, "255.255.255.255/32"},
		"v4 three octets":      {"0.0.10.in-addr.arpa.", reversePrefix, "10.0.0.0/24"},
		"v4 one octet":         {"10.in-addr.arpa.", reversePrefix, "10.0.0.0/8"},
		"in-addr.arpa itself":  {"in-addr.arpa.", reversePrefix, "0.0.0.0/0"},
		"v6 address":           {v6, reverseAddr, "2001:db8::11/128"},
		"v6 prefix":            {"8.b.d.0.1.0.0.2.ip6.arpa.", reversePrefix, "2001:db8::/32"},
		"v6 odd nibble count":  {"b.d.0.1.0.0.2.ip6.arpa.", reversePrefix, "2001:db0::/28"},
		"ip6.arpa itself":      {"ip6.arpa.", reversePrefix, "::/0"},
		"v4-mapped in ip6":     {"a.0.0.0.0.0.a.0.f.f.f.f.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.", reverseAddr, "::ffff:10.0.0.10/128"},
		"forward name":         {"node1.rack.example.", notReverse, ""},
		"arpa":                 {"arpa.", notReverse, ""},
		"lookalike suffix":     {"1.notin-addr.arpa.", notReverse, ""},
		"root":                 {".", notReverse, ""},
		"v4 five octets":       {"1.11.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 leading zero":      {"011.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 double zero":       {"00.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 over 255":          {"256.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 four digits":       {"1000.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 sign":              {"+1.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 hex":               {"a.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 RFC 2317":          {"0/25.0.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v4 escaped dot":       {`1\.1.0.0.10.in-addr.arpa.`, reverseMalformed, ""},
		"v4 escaped byte":      {`\001.0.0.10.in-addr.arpa.`, reverseMalformed, ""},
		"v4 name label":        {"ns.0.10.in-addr.arpa.", reverseMalformed, ""},
		"v6 33 nibbles":        {"0." + v6, reverseMalformed, ""},
		"v6 two-char label":    {"11.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", reverseMalformed, ""},
		"v6 not hex":           {"g.8.b.d.0.1.0.0.2.ip6.arpa.", reverseMalformed, ""},
		"v6 upper case (raw)":  {"B.d.0.1.0.0.2.ip6.arpa.", reverseMalformed, ""}, // callers canonicalise first
		"v6 escaped":           {`\.` + ".8.b.d.0.1.0.0.2.ip6.arpa.", reverseMalformed, ""},
		"v6 name label":        {"ns.8.b.d.0.1.0.0.2.ip6.arpa.", reverseMalformed, ""},
		"v4 label in ip6.arpa": {"10.8.b.d.0.1.0.0.2.ip6.arpa.", reverseMalformed, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p, kind := parseReverse(tt.name)
			if kind != tt.kind {
				t.Fatalf("parseReverse(%q) kind %d, want %d", tt.name, kind, tt.kind)
			}
			if tt.want != "" && p != netip.MustParsePrefix(tt.want) {
				t.Errorf("parseReverse(%q) = %v, want %s", tt.name, p, tt.want)
			}
		})
	}
}

// reverseName is the reverse name of a, built independently of parseReverse
// (miekg/dns's ReverseAddr turns a v4-mapped address into an in-addr.arpa
// name, which is not what ip6.arpa names mean).
func reverseName(a netip.Addr) string {
	b := a.AsSlice()
	var labels []string
	if a.Is4() {
		for _, o := range b {
			labels = append(labels, fmt.Sprint(o))
		}
		slices.Reverse(labels)
		return strings.Join(labels, ".") + suffix4
	}
	for _, o := range b {
		labels = append(labels, fmt.Sprintf("%x", o>>4), fmt.Sprintf("%x", o&0xf))
	}
	slices.Reverse(labels)
	return strings.Join(labels, ".") + suffix6
}

// Every name parseReverse accepts is the one reverse name of what it
// returns: parsing and building round-trip, so no two names alias one
// address.
func FuzzParseReverse(f *testing.F) {
	for _, a := range []string{"10.0.0.11", "0.0.0.0", "255.255.255.255", "2001:db8::11", "::", "::ffff:10.0.0.1", "fe80::1"} {
		name := reverseName(netip.MustParseAddr(a))
		f.Add(name)
		f.Add(name[strings.Index(name, ".")+1:])
	}
	for _, s := range []string{"in-addr.arpa.", "ip6.arpa.", "010.0.0.10.in-addr.arpa.", `1\.1.0.0.10.in-addr.arpa.`, "x.ip6.arpa.", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, kind := parseReverse(name)
		switch kind {
		case reverseAddr:
			if !p.IsSingleIP() {
				t.Fatalf("%q: address kind with prefix %v", name, p)
			}
			if got := reverseName(p.Addr()); got != name {
				t.Fatalf("%q parsed as %v, whose reverse name is %q", name, p.Addr(), got)
			}
		case reversePrefix:
			if !p.IsValid() || p.Masked() != p {
				t.Fatalf("%q: prefix %v with host bits", name, p)
			}
			full := reverseName(p.Addr())
			per := 8
			if p.Addr().Is6() {
				per = 4
			}
			// The name is the full name less its leading labels.
			drop := (p.Addr().BitLen() - p.Bits()) / per
			labels := strings.SplitN(full, ".", drop+1)
			if got := labels[len(labels)-1]; got != name {
				t.Fatalf("%q parsed as %v, whose name is %q", name, p, got)
			}
		case notReverse, reverseMalformed:
			if p.IsValid() {
				t.Fatalf("%q: kind %d with prefix %v", name, kind, p)
			}
		default:
			t.Fatalf("%q: kind %d", name, kind)
		}
	})
}
