package dhcp

// Replies are built and encoded here rather than with insomniacslk's option
// constructors and ToBytes, which allocate for every option (a boxed value,
// then its bytes) and for every encoding (a growing buffer, the sorted option
// codes, the padding): about 30 allocations per reply, a good part of the CPU
// a DORA costs. The wire form is the library's, byte for byte: the tests
// compare the two on every reply the handler tests produce and on fuzzed
// ones.

import (
	"encoding/binary"
	"math/bits"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Wire constants of RFC 2131 section 2 and RFC 951, as the library's
// encoder uses them.
const (
	bootpMinLen = 300 // RFC 951's message length: shorter ones are padded
	optPad      = 0
	optAgent    = 82 // relay agent information: last (RFC 3046 section 2.1)
	optEnd      = 255
)

var magicCookie = [4]byte{99, 130, 83, 99}

// appendReply appends m in its wire form to b, exactly as m.ToBytes() would
// write it: the fixed BOOTP fields, the magic cookie, the options in
// ascending code order with relay agent information (82) last and values
// longer than 255 bytes split into several instances of the option (RFC
// 3396), pad (0) and end (255) never taken from the map, then end, and pad
// bytes up to the BOOTP minimum of 300. Like ToBytes, it panics on an
// address field that is neither nil nor IPv4.
func appendReply(b []byte, m *dhcpv4.DHCPv4) []byte {
	start := len(b)
	b = append(b, byte(m.OpCode), byte(m.HWType), byte(len(m.ClientHWAddr)), m.HopCount)
	b = append(b, m.TransactionID[:]...)
	b = binary.BigEndian.AppendUint16(b, m.NumSeconds)
	b = binary.BigEndian.AppendUint16(b, m.Flags)
	b = appendIP(b, m.ClientIPAddr)
	b = appendIP(b, m.YourIPAddr)
	b = appendIP(b, m.ServerIPAddr)
	b = appendIP(b, m.GatewayIPAddr)
	// chaddr (16), sname (64) and file (128), zero-filled; the two names
	// keep their last byte for the terminating NUL.
	n := len(b)
	b = append(b, make([]byte, 16+64+128)...)
	copy(b[n:n+16], m.ClientHWAddr)
	copy(b[n+16:n+16+63], m.ServerHostName)
	copy(b[n+16+64:n+16+64+127], m.BootFileName)
	b = append(b, magicCookie[:]...)

	if len(m.Options) <= maxSortedOptions {
		b = appendOptionsSorted(b, m.Options)
	} else {
		b = appendOptionsBitmap(b, m.Options)
	}
	b = append(b, optEnd)
	for len(b)-start < bootpMinLen {
		b = append(b, optPad)
	}
	return b
}

// maxSortedOptions is the most options appendOptionsSorted takes: a reply
// has about a dozen.
const maxSortedOptions = 32

// appendOptionsSorted writes the options of a map of at most
// maxSortedOptions in the order ToBytes does (ascending, 82 last, no pad or
// end), sorting them by insertion as the map yields them: one pass over the
// map and no lookups.
func appendOptionsSorted(b []byte, opts dhcpv4.Options) []byte {
	type option struct {
		code uint8
		v    []byte
	}
	var sorted [maxSortedOptions]option
	n := 0
	var agent []byte
	hasAgent := false
	for code, v := range opts {
		switch code {
		case optPad, optEnd:
			continue
		case optAgent:
			agent, hasAgent = v, true
			continue
		}
		i := n
		for ; i > 0 && sorted[i-1].code > code; i-- {
			sorted[i] = sorted[i-1]
		}
		sorted[i] = option{code, v}
		n++
	}
	for _, o := range sorted[:n] {
		b = appendOption(b, o.code, o.v)
	}
	if hasAgent {
		b = appendOption(b, optAgent, agent)
	}
	return b
}

// appendOptionsBitmap is appendOptionsSorted for maps of any size: a bit
// per code present, then the codes in order.
func appendOptionsBitmap(b []byte, opts dhcpv4.Options) []byte {
	var present [4]uint64
	for code := range opts {
		present[code>>6] |= 1 << (code & 63)
	}
	for i, w := range present {
		for w != 0 {
			code := uint8(i<<6 + bits.TrailingZeros64(w))
			w &= w - 1
			if code == optPad || code == optAgent || code == optEnd {
				continue
			}
			b = appendOption(b, code, opts[code])
		}
	}
	if present[optAgent>>6]&(1<<(optAgent&63)) != 0 {
		b = appendOption(b, optAgent, opts[optAgent])
	}
	return b
}

// appendIP writes an address field: nil as 0.0.0.0, else its IPv4 form
// (ToBytes's writeIP, which panics on an IPv6 address as this does).
func appendIP(b []byte, ip net.IP) []byte {
	if ip == nil {
		return append(b, 0, 0, 0, 0)
	}
	return append(b, ip.To4()[:net.IPv4len]...)
}

// appendOption writes one option; an empty value still gets its code and a
// zero length, a long one as many instances as it takes (RFC 3396).
func appendOption(b []byte, code uint8, v []byte) []byte {
	if len(v) == 0 {
		return append(b, code, 0)
	}
	for len(v) > 0 {
		n := min(len(v), 255)
		b = append(b, code, byte(n))
		b = append(b, v[:n]...)
		v = v[n:]
	}
	return b
}

// replyBufs hold encoded replies while they are sent; WriteTo copies the
// datagram, so a buffer is free again once it returns.
var replyBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 576) // RFC 2131's minimum a client must accept
	return &b
}}

// optionMaps recycles the option maps of the replies the server has sent:
// a map of a reply's size costs several allocations and a kilobyte.
var optionMaps = sync.Pool{New: func() any { return make(dhcpv4.Options, 16) }}

// recycle gives back the option map of a reply that is no longer used; the
// reply is left without options.
func recycle(m *dhcpv4.DHCPv4) {
	if m.Options == nil {
		return
	}
	clear(m.Options)
	optionMaps.Put(m.Options)
	m.Options = nil
}

// draft is a reply under construction. Its option values and addresses are
// carved from one buffer allocated with it (each with its capacity cut to
// its length, so that nothing appended to one can overwrite another), where
// the library's constructors allocate twice per option.
type draft struct {
	msg   dhcpv4.DHCPv4
	buf   []byte
	arena [160]byte
}

func (r *draft) bytes(code dhcpv4.OptionCode, v []byte) {
	n := len(r.buf)
	r.buf = append(r.buf, v...)
	r.msg.Options[code.Code()] = r.buf[n:len(r.buf):len(r.buf)]
}

func (r *draft) str(code dhcpv4.OptionCode, s string) {
	n := len(r.buf)
	r.buf = append(r.buf, s...)
	r.msg.Options[code.Code()] = r.buf[n:len(r.buf):len(r.buf)]
}

// ip4 returns a's 4 bytes as a net.IP carved from the buffer; a must be
// IPv4.
func (r *draft) ip4(a netip.Addr) net.IP {
	n := len(r.buf)
	a4 := a.As4()
	r.buf = append(r.buf, a4[:]...)
	return net.IP(r.buf[n : n+4 : n+4])
}

func (r *draft) addr(code dhcpv4.OptionCode, a netip.Addr) {
	r.msg.Options[code.Code()] = r.ip4(a)
}

// seconds sets a time option (RFC 2132 sections 9.2, 9.11, 9.12): whole
// seconds, 32 bits.
func (r *draft) seconds(code dhcpv4.OptionCode, d time.Duration) {
	n := len(r.buf)
	r.buf = binary.BigEndian.AppendUint32(r.buf, uint32(d/time.Second))
	r.msg.Options[code.Code()] = r.buf[n:len(r.buf):len(r.buf)]
}
