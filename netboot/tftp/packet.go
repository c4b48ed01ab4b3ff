package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Opcodes (RFC 1350 section 5, RFC 2347 for OACK).
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// Error codes (RFC 1350 appendix, RFC 2347 for 8).
const (
	errCodeUndefined     = 0 // see the message
	errCodeNotFound      = 1
	errCodeAccess        = 2 // access violation
	errCodeIllegal       = 4 // illegal TFTP operation
	errCodeUnknownTID    = 5
	errCodeOptionRefused = 8
)

// Limits of the option values (RFC 2348, 2349, 7440).
const (
	minBlockSize  = 8
	maxBlockSize  = 65464
	defBlockSize  = 512
	maxWindowSize = 65535
	maxTimeoutSec = 255
)

// maxRequest is the largest request read: the name and options of a request
// fit in one unfragmented datagram on any network, and RFC 2347 limits an
// option-extended request to 512 bytes.
const maxRequest = 1500

// errMalformed is a packet to the server port that is no usable request.
var errMalformed = errors.New("tftp: malformed request")

// request is a parsed RRQ or WRQ.
type request struct {
	op       uint16
	filename string
	mode     string // lower case: "octet", "netascii" (or "mail")
	// The options the client sent that the server knows, as sent (after
	// lower-casing the names, RFC 2347: names are case-insensitive).
	// Options it does not know, or with values that are no number, are
	// left out: RFC 2347 lets a server ignore them, and the client then
	// uses the default.
	blksize, windowsize, timeout int // 0: not asked
	tsize                        bool
}

// parseRequest parses a datagram sent to the server port. It returns
// errMalformed (wrapped, with the reason) for anything that is not a well
// formed RRQ or WRQ.
func parseRequest(p []byte) (request, error) {
	if len(p) < 2 {
		return request{}, fmt.Errorf("%w: %d bytes", errMalformed, len(p))
	}
	r := request{op: binary.BigEndian.Uint16(p)}
	if r.op != opRRQ && r.op != opWRQ {
		return request{}, fmt.Errorf("%w: opcode %d", errMalformed, r.op)
	}
	// filename NUL mode NUL [name NUL value NUL]...
	fields := bytes.Split(p[2:], []byte{0})
	// A well formed request ends with NUL, so the last field is empty.
	if len(fields) < 3 || len(fields[len(fields)-1]) != 0 {
		return request{}, fmt.Errorf("%w: not NUL-terminated", errMalformed)
	}
	fields = fields[:len(fields)-1]
	if len(fields)%2 != 0 {
		return request{}, fmt.Errorf("%w: option without a value", errMalformed)
	}
	r.filename = string(fields[0])
	r.mode = strings.ToLower(string(fields[1]))
	if r.filename == "" {
		return request{}, fmt.Errorf("%w: empty file name", errMalformed)
	}
	switch r.mode {
	case "octet", "netascii", "mail":
	default:
		return request{}, fmt.Errorf("%w: mode %q", errMalformed, r.mode)
	}
	for i := 2; i+1 < len(fields); i += 2 {
		name := strings.ToLower(string(fields[i]))
		val := string(fields[i+1])
		n, err := strconv.Atoi(val)
		switch name {
		case "blksize":
			if err == nil && n >= minBlockSize && n <= maxBlockSize {
				r.blksize = n
			}
		case "windowsize":
			if err == nil && n >= 1 && n <= maxWindowSize {
				r.windowsize = n
			}
		case "timeout":
			if err == nil && n >= 1 && n <= maxTimeoutSec {
				r.timeout = n
			}
		case "tsize":
			// A reader sends 0 (RFC 2349); any number asks for it.
			if err == nil && n >= 0 {
				r.tsize = true
			}
		}
	}
	return r, nil
}

// appendOption appends one option of an OACK.
func appendOption(b []byte, name string, v int64) []byte {
	b = append(b, name...)
	b = append(b, 0)
	b = strconv.AppendInt(b, v, 10)
	return append(b, 0)
}

// errorPacket builds an ERROR packet. The message is cut to fit a 512-byte
// packet, as the smallest block any client accepts.
func errorPacket(code uint16, msg string) []byte {
	if len(msg) > 500 {
		msg = msg[:500]
	}
	b := make([]byte, 4, 5+len(msg))
	binary.BigEndian.PutUint16(b, opERROR)
	binary.BigEndian.PutUint16(b[2:], code)
	b = append(b, msg...)
	return append(b, 0)
}

// parseError reads an ERROR packet's code and message.
func parseError(p []byte) (uint16, string) {
	if len(p) < 4 {
		return 0, ""
	}
	msg := p[4:]
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		msg = msg[:i]
	}
	return binary.BigEndian.Uint16(p[2:]), string(msg)
}
