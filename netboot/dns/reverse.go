package dns

import (
	"net/netip"
	"strings"
)

// Suffixes of the reverse-mapping trees: RFC 1035 section 3.5 (IPv4) and
// RFC 3596 section 2.5 (IPv6).
const (
	suffix4 = ".in-addr.arpa."
	suffix6 = ".ip6.arpa."
)

// reverseKind classifies a name under in-addr.arpa or ip6.arpa.
type reverseKind int

const (
	// notReverse: the name is not under in-addr.arpa. or ip6.arpa.
	notReverse reverseKind = iota
	// reverseAddr: the name is the full reverse name of one address.
	reverseAddr
	// reversePrefix: the name is a well-formed leading part of reverse
	// names (fewer octets or nibbles than an address), such as
	// "0.10.in-addr.arpa.". Such a name may be an empty non-terminal.
	reversePrefix
	// reverseMalformed: under a reverse tree, but not a name any address
	// maps to ("x.0.10.in-addr.arpa.", "010.0.0.10.in-addr.arpa.", too
	// many labels, RFC 2317 "0/25" style labels...).
	reverseMalformed
)

// parseReverse reads a reverse-mapping name. name must be canonical (lower
// case, fully qualified, as CanonicalName makes it). For reverseAddr and
// reversePrefix the prefix holds the bits the labels spell, its length being
// 8 bits per in-addr.arpa label and 4 bits per ip6.arpa nibble label; for
// reverseAddr it is a full-length (single address) prefix.
//
// Parsing is strict so that every address has exactly one reverse name: a
// leading zero ("010") is malformed, and so is any escape (names from the
// wire are in presentation form, where a dot inside a label or an odd byte
// is written "\." or "\001"; none of them is a digit).
func parseReverse(name string) (netip.Prefix, reverseKind) {
	switch {
	case name == suffix4[1:]:
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0), reversePrefix
	case name == suffix6[1:]:
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0), reversePrefix
	case strings.HasSuffix(name, suffix4):
		return parseReverse4(strings.TrimSuffix(name, suffix4))
	case strings.HasSuffix(name, suffix6):
		return parseReverse6(strings.TrimSuffix(name, suffix6))
	}
	return netip.Prefix{}, notReverse
}

// parseReverse4 reads the labels before ".in-addr.arpa.", least significant
// octet first.
func parseReverse4(labels string) (netip.Prefix, reverseKind) {
	parts := strings.Split(labels, ".")
	if len(parts) > 4 {
		return netip.Prefix{}, reverseMalformed
	}
	var a [4]byte
	for i, p := range parts {
		v, ok := octet(p)
		if !ok {
			return netip.Prefix{}, reverseMalformed
		}
		a[len(parts)-1-i] = v
	}
	p := netip.PrefixFrom(netip.AddrFrom4(a), 8*len(parts))
	if len(parts) == 4 {
		return p, reverseAddr
	}
	return p, reversePrefix
}

// octet reads a decimal 0..255 with no leading zero and no sign.
func octet(s string) (byte, bool) {
	if len(s) == 0 || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}

// parseReverse6 reads the labels before ".ip6.arpa.", one hex nibble each,
// least significant nibble first (RFC 3596 section 2.5).
func parseReverse6(labels string) (netip.Prefix, reverseKind) {
	parts := strings.Split(labels, ".")
	if len(parts) > 32 {
		return netip.Prefix{}, reverseMalformed
	}
	var a [16]byte
	for i, p := range parts {
		if len(p) != 1 {
			return netip.Prefix{}, reverseMalformed
		}
		v, ok := nibble(p[0])
		if !ok {
			return netip.Prefix{}, reverseMalformed
		}
		// Nibble k (0 = most significant) sits at label len-1-k.
		k := len(parts) - 1 - i
		if k%2 == 0 {
			a[k/2] |= v << 4
		} else {
			a[k/2] |= v
		}
	}
	p := netip.PrefixFrom(netip.AddrFrom16(a), 4*len(parts))
	if len(parts) == 32 {
		return p, reverseAddr
	}
	return p, reversePrefix
}

// nibble reads one lower-case hex digit.
func nibble(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
