package store

import (
	"testing"
	"time"
)

// TestWrittenReason: the image-written event gives the write's own time
// and, apart, the time before it; without the environment's measure, only
// the time since the deployment began, not called the write's.
func TestWrittenReason(t *testing.T) {
	for _, tc := range []struct {
		bytes        int64
		write, since time.Duration
		want         string
	}{
		{8_000_000, 380 * time.Millisecond, 71 * time.Second, "image written (8 MB in 0.38 s; power-on and boot before it: 71 s)"},
		{2_147_483_648, 95 * time.Second, 160 * time.Second, "image written (2147 MB in 95 s; power-on and boot before it: 65 s)"},
		{8_000_000, 0, 71 * time.Second, "image written (8 MB, 71 s after the deployment began)"},
		// A clock that stepped back: no negative boot time.
		{8_000_000, 5 * time.Second, 2 * time.Second, "image written (8 MB in 5.00 s; power-on and boot before it: 0 s)"},
	} {
		if got := writtenReason(tc.bytes, tc.write, tc.since); got != tc.want {
			t.Errorf("writtenReason(%d, %v, %v) = %q, want %q", tc.bytes, tc.write, tc.since, got, tc.want)
		}
	}
}
