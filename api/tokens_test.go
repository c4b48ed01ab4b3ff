package api

import (
	"strings"
	"testing"
	"time"
)

func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	nowUTC := now.UTC()
	tests := map[string]struct {
		in   string
		want time.Time
		err  string // substring; "" for success
	}{
		"empty: never":        {"", time.Time{}, ""},
		"days":                {"30d", nowUTC.Add(30 * 24 * time.Hour), ""},
		"hours":               {"12h", nowUTC.Add(12 * time.Hour), ""},
		"minutes":             {"90m", nowUTC.Add(90 * time.Minute), ""},
		"days and hours":      {"1d12h", nowUTC.Add(36 * time.Hour), ""},
		"hours and minutes":   {"1h30m", nowUTC.Add(90 * time.Minute), ""},
		"RFC 3339":            {"2027-01-31T12:00:00Z", time.Date(2027, 1, 31, 12, 0, 0, 0, time.UTC), ""},
		"RFC 3339 with zone":  {"2027-01-31T12:00:00+02:00", time.Date(2027, 1, 31, 10, 0, 0, 0, time.UTC), ""},
		"date":                {"2027-01-31", time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC), ""},
		"100 years":           {"36500d", nowUTC.Add(MaxTokenLifetime), ""},
		"past time is parsed": {"2020-01-01", time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), ""},
		"zero days":           {"0d", time.Time{}, "must be positive"},
		"zero":                {"0s", time.Time{}, "must be positive"},
		"negative":            {"-1h", time.Time{}, "must be positive"},
		"over 100 years":      {"36501d", time.Time{}, "at most 100 years"},
		"days overflow":       {"99999999999d", time.Time{}, "invalid expiry"},
		"no unit":             {"30", time.Time{}, "invalid expiry"},
		"unknown unit":        {"2w", time.Time{}, "invalid expiry"},
		"upper-case D":        {"30D", time.Time{}, "invalid expiry"},
		"d only":              {"d", time.Time{}, "invalid expiry"},
		"negative after days": {"1d-2h", time.Time{}, "invalid expiry"},
		"space":               {"30 d", time.Time{}, "invalid expiry"},
		"words":               {"tomorrow", time.Time{}, "invalid expiry"},
		"bad date":            {"2027-02-30", time.Time{}, "invalid expiry"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseExpiry(tc.in, now)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseExpiry(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) || (!got.IsZero() && got.Location() != time.UTC) {
				t.Fatalf("ParseExpiry(%q) = %v, %v; want %v (UTC)", tc.in, got, err, tc.want)
			}
		})
	}
}

// An expiry is either refused with a message or a time: never a panic, never
// a lifetime that is not positive or beyond the cap.
func FuzzParseExpiry(f *testing.F) {
	for _, s := range []string{"", "30d", "12h", "1d12h", "2027-01-31", "2027-01-31T12:00:00Z", "-1h", "0d", "9999d", "1d-1h", "d", "1.5h"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseExpiry(s, now)
		if err != nil {
			if err.Error() == "" || !got.IsZero() {
				t.Fatalf("ParseExpiry(%q) = %v, %v", s, got, err)
			}
			return
		}
		if (s == "") != got.IsZero() {
			t.Fatalf("ParseExpiry(%q) = %v", s, got)
		}
		if s == "" {
			return
		}
		if _, terr := time.Parse(time.RFC3339, s); terr != nil {
			if _, derr := time.Parse(time.DateOnly, s); derr != nil && (!got.After(now) || got.Sub(now) > MaxTokenLifetime) {
				t.Fatalf("ParseExpiry(%q) = %v: a lifetime out of range", s, got)
			}
		}
	})
}
