package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"testing"
)

// FuzzParseRequest: any datagram to the server port parses or is refused
// with errMalformed, never panics; what parses has a name, a known mode and
// option values within their RFC ranges, and a request rebuilt from it
// parses the same.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte("\x00\x01pxelinux.0\x00octet\x00"))
	f.Add([]byte("\x00\x01f\x00OCTET\x00BLKSIZE\x001468\x00tsize\x000\x00windowsize\x0016\x00timeout\x001\x00"))
	f.Add([]byte("\x00\x02up\x00netascii\x00"))
	f.Add([]byte("\x00\x01f\x00octet\x00blksize\x00"))
	f.Add([]byte("\x00\x01f\x00octet\x00blksize\x0099999999999999999999\x00"))
	f.Add([]byte("\x00\x04\x00\x01"))
	f.Add([]byte("\x00\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := parseRequest(p)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
			return
		}
		if r.filename == "" || (r.op != opRRQ && r.op != opWRQ) {
			t.Fatalf("parsed %+v", r)
		}
		switch r.mode {
		case "octet", "netascii", "mail":
		default:
			t.Fatalf("mode %q", r.mode)
		}
		if r.blksize != 0 && (r.blksize < minBlockSize || r.blksize > maxBlockSize) ||
			r.windowsize < 0 || r.windowsize > maxWindowSize || r.timeout < 0 || r.timeout > maxTimeoutSec {
			t.Fatalf("option out of range: %+v", r)
		}
		if bytes.IndexByte([]byte(r.filename), 0) >= 0 {
			t.Fatalf("NUL in name %q", r.filename)
		}
		// Rebuild and parse again.
		b := binary.BigEndian.AppendUint16(nil, r.op)
		b = append(append(b, r.filename...), 0)
		b = append(append(b, r.mode...), 0)
		opt := func(name string, v int) {
			if v != 0 {
				b = append(append(b, name...), 0)
				b = append(append(b, strconv.Itoa(v)...), 0)
			}
		}
		opt("blksize", r.blksize)
		opt("windowsize", r.windowsize)
		opt("timeout", r.timeout)
		if r.tsize {
			b = append(b, "tsize\x000\x00"...)
		}
		r2, err := parseRequest(b)
		if err != nil || r2 != r {
			t.Fatalf("rebuilt %q: %+v, %v; want %+v", b, r2, err, r)
		}
	})
}

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want request
		bad  bool
	}{
		{in: "\x00\x01a\x00octet\x00", want: request{op: opRRQ, filename: "a", mode: "octet"}},
		{in: "\x00\x01a\x00OcTeT\x00BlkSize\x001468\x00TSIZE\x000\x00", want: request{op: opRRQ, filename: "a", mode: "octet", blksize: 1468, tsize: true}},
		{in: "\x00\x01a\x00octet\x00windowsize\x0016\x00timeout\x003\x00", want: request{op: opRRQ, filename: "a", mode: "octet", windowsize: 16, timeout: 3}},
		// Out-of-range or unknown options are ignored (RFC 2347).
		{in: "\x00\x01a\x00octet\x00blksize\x007\x00windowsize\x000\x00timeout\x00256\x00multicast\x00\x00", want: request{op: opRRQ, filename: "a", mode: "octet"}},
		{in: "\x00\x01a\x00octet\x00blksize\x00x\x00", want: request{op: opRRQ, filename: "a", mode: "octet"}},
		{in: "\x00\x02a\x00netascii\x00", want: request{op: opWRQ, filename: "a", mode: "netascii"}},
		{in: "\x00\x01a\x00octet", bad: true},                // no final NUL
		{in: "\x00\x01\x00octet\x00", bad: true},             // empty name
		{in: "\x00\x01a\x00binary\x00", bad: true},           // unknown mode
		{in: "\x00\x01a\x00octet\x00blksize\x00", bad: true}, // option without value
		{in: "\x00\x03\x00\x01", bad: true},                  // DATA
		{in: "\x00", bad: true},
	} {
		got, err := parseRequest([]byte(tc.in))
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) {
			t.Errorf("%q: %+v, %v; want %+v (bad %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
