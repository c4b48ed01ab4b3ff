package perfdhcp

import (
	"slices"
	"testing"
)

// The search asks the same rates of every server that passes and fails at
// the same rates, and ends with a passing and a failing rate within the
// resolution, or at a bound.
func TestLadder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int // the highest rate that passes
		want  []int
	}{
		{"above the top", 100000, []int{2000, 4000, 8000, 16000}},
		{"between 8000 and 16000", 10000, []int{2000, 4000, 8000, 16000, 11314, 9514, 10375, 9935}},
		{"just below 16000", 15999, []int{2000, 4000, 8000, 16000, 11314, 13455, 14672, 15322}},
		{"below the start", 300, []int{2000, 1000, 500, 250, 354, 297, 324, 310}},
		{"nothing passes", 0, []int{2000, 1000, 500, 250, 125, 63, 32, 25}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLadder(2000, 25, 16000, 2, 1.05)
			var got []int
			for n := 0; n < 50; n++ {
				r := l.Rate()
				got = append(got, r)
				if !l.Record(r <= tc.limit) {
					break
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rates %v, want %v", got, tc.want)
			}
			if l.lo != 0 && l.hi != 0 && float64(l.hi)/float64(l.lo) > 1.05 {
				t.Errorf("ended with lo %d, hi %d: wider than the resolution", l.lo, l.hi)
			}
		})
	}
}
