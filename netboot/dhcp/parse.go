package dhcp

import (
	"bytes"
	"errors"
	"fmt"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Errors of parseRequest.
var (
	errShortPacket = errors.New("dhcp: packet shorter than the 240-byte BOOTP header and magic cookie")
	errOptionsEnd  = errors.New("dhcp: options end without the end option (255)")
)

// Offsets of the BOOTP fields (RFC 2131 section 2).
const (
	offCIAddr  = 12
	offCHAddr  = 28
	offSName   = 44
	offFile    = 108
	offCookie  = 236
	offOptions = 240
)

// parseRequest is dhcpv4.FromBytes with 3 to 4 allocations where the
// library makes one per address, one per option and more: the same result
// (FuzzParseRequest compares the two), and an error exactly where FromBytes
// fails, with its own message. Like FromBytes, it keeps nothing of q: what
// it keeps (addresses, hardware address, option values) is copied into one
// buffer of just that size, and a packet full of padding costs no more
// than its options.
func parseRequest(q []byte) (*dhcpv4.DHCPv4, error) {
	if len(q) < offOptions {
		return nil, errShortPacket
	}
	if [4]byte(q[offCookie:offOptions]) != magicCookie {
		return nil, fmt.Errorf("dhcp: malformed packet: magic cookie %v, want %v", q[offCookie:offOptions], magicCookie[:])
	}
	opts := q[offOptions:]
	// First pass: check the options as FromBytes does (each complete, and
	// an end option, unless there are no options at all) and size what
	// they keep.
	var count, size int
	if len(opts) > 0 {
		var end bool
		for i := 0; i < len(opts); {
			code := opts[i]
			i++
			if code == optPad {
				continue
			}
			if code == optEnd {
				end = true
				break
			}
			if i >= len(opts) {
				return nil, fmt.Errorf("dhcp: option %d without its length", code)
			}
			n := int(opts[i])
			i++
			if n > len(opts)-i {
				return nil, fmt.Errorf("dhcp: option %d of %d bytes, %d left", code, n, len(opts)-i)
			}
			i += n
			count++
			size += n
		}
		if !end {
			return nil, errOptionsEnd
		}
	}

	hlen := min(int(q[2]), 16)
	keep := make([]byte, 4*net.IPv4len+hlen+size)
	cut := func(b []byte) []byte { // b copied into keep, capacity cut to length
		n := copy(keep, b)
		v := keep[:n:n]
		keep = keep[n:]
		return v
	}
	p := &dhcpv4.DHCPv4{
		OpCode:        dhcpv4.OpcodeType(q[0]),
		HWType:        iana.HWType(q[1]),
		HopCount:      q[3],
		TransactionID: dhcpv4.TransactionID(q[4:8]),
		NumSeconds:    uint16(q[8])<<8 | uint16(q[9]),
		Flags:         uint16(q[10])<<8 | uint16(q[11]),
	}
	p.ClientIPAddr = net.IP(cut(q[offCIAddr : offCIAddr+4]))
	p.YourIPAddr = net.IP(cut(q[offCIAddr+4 : offCIAddr+8]))
	p.ServerIPAddr = net.IP(cut(q[offCIAddr+8 : offCIAddr+12]))
	p.GatewayIPAddr = net.IP(cut(q[offCIAddr+12 : offCIAddr+16]))
	p.ClientHWAddr = net.HardwareAddr(cut(q[offCHAddr : offCHAddr+hlen]))
	p.ServerHostName = cString(q[offSName:offFile])
	p.BootFileName = cString(q[offFile:offCookie])

	p.Options = make(dhcpv4.Options, count)
	var seen [4]uint64 // a bit per code already in the map: one map access per option
	for i := 0; i < len(opts); {
		code := opts[i]
		i++
		if code == optPad {
			continue
		}
		if code == optEnd {
			break
		}
		n := int(opts[i])
		v := opts[i+1 : i+1+n]
		i += 1 + n
		bit := &seen[code>>6]
		repeated := *bit&(1<<(code&63)) != 0
		*bit |= 1 << (code & 63)
		switch {
		case repeated:
			// Concatenated (RFC 3396). The value's capacity is its
			// length, so this copies and keep is left untouched.
			p.Options[code] = append(p.Options[code], v...)
		case n == 0:
			p.Options[code] = nil // as FromBytes's append(nil) leaves it
		default:
			p.Options[code] = cut(v)
		}
	}
	return p, nil
}

// cString is a NUL-terminated field (sname, file) up to its first NUL, or
// whole.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
