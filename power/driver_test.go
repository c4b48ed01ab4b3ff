package power

import (
	"encoding/json"
	"testing"
)

// The power states read and write as on, off and unknown; "" reads as
// unknown (nothing seen yet), anything else is refused.
func TestStateText(t *testing.T) {
	for _, tc := range []struct {
		text string
		want State
		ok   bool
	}{{"on", StateOn, true}, {"off", StateOff, true}, {"unknown", StateUnknown, true}, {"", StateUnknown, true},
		{"ON", StateUnknown, false}, {"1", StateUnknown, false}, {"cycle", StateUnknown, false}} {
		var s State
		err := s.UnmarshalText([]byte(tc.text))
		if (err == nil) != tc.ok || s != tc.want {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v (ok %v)", tc.text, s, err, tc.want, tc.ok)
		}
	}
	for _, s := range []State{StateUnknown, StateOn, StateOff} {
		b, err := s.MarshalText()
		if err != nil || string(b) != s.String() {
			t.Errorf("MarshalText(%v) = %q, %v", s, b, err)
		}
		if p, err := ParseState(string(b)); err != nil || p != s {
			t.Errorf("ParseState(%q) = %v, %v; want %v", b, p, err, s)
		}
	}
	if _, err := State(7).MarshalText(); err == nil {
		t.Error("MarshalText of an out-of-range state succeeded")
	}
	// In JSON a state is its text, and omitempty leaves out unknown.
	b, err := json.Marshal(struct {
		A State `json:"a"`
		B State `json:"b,omitempty"`
		C State `json:"c,omitempty"`
	}{StateUnknown, StateUnknown, StateOn})
	if err != nil || string(b) != `{"a":"unknown","c":"on"}` {
		t.Errorf("JSON %s, %v", b, err)
	}
}

func TestParseBootDevice(t *testing.T) {
	for _, tc := range []struct {
		text string
		want BootDevice
		ok   bool
	}{{"pxe", BootPXE, true}, {"disk", BootDisk, true}, {"", BootNone, true}, {"PXE", BootNone, false}, {"cdrom", BootNone, false}} {
		got, err := ParseBootDevice(tc.text)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBootDevice(%q) = %v, %v; want %v (ok %v)", tc.text, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.text {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.text)
		}
	}
}
