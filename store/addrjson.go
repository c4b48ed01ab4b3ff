package store

import (
	"encoding/json"
	"time"
)

// appendJSON appends a's JSON encoding, byte for byte what encoding/json
// makes of it (TestAddressJSON and FuzzAddressJSON hold it to that), without
// reflection: a DHCP acknowledgement writes one Address, and reflection was
// most of its encoding cost.
func (a Address) appendJSON(b []byte) []byte {
	b = append(b, `{"ip":"`...)
	if a.IP.IsValid() { // the zero Addr's text is empty
		b = a.IP.AppendTo(b)
	}
	b = append(b, `","subnet":"`...)
	if a.Subnet.IsValid() {
		b = a.Subnet.AppendTo(b)
	}
	b = append(b, `","kind":`...)
	b = appendJSONString(b, string(a.Kind))
	b = appendJSONField(b, `,"mac":`, a.MAC)
	b = appendJSONField(b, `,"machine_id":`, a.MachineID)
	b = appendJSONField(b, `,"hostname":`, a.Hostname)
	b = appendJSONField(b, `,"owner":`, a.Owner)
	b = appendJSONField(b, `,"purpose":`, a.Purpose)
	if !a.Expires.IsZero() {
		b = append(b, `,"expires":`...)
		b = appendJSONTime(b, a.Expires)
	}
	b = append(b, `,"created":`...)
	b = appendJSONTime(b, a.Created)
	return append(b, '}')
}

// appendJSONField appends an omitempty string field.
func appendJSONField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendJSONString(append(b, name...), v)
}

// appendJSONTime appends t as encoding/json does (RFC 3339 with
// nanoseconds, quoted); a year outside [0,9999], which encoding/json
// refuses, never reaches here (addresses carry clock times).
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendJSONString appends s quoted as encoding/json quotes it: plain
// printable ASCII is copied; anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
