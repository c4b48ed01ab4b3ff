package agent

import (
	"fmt"
	"testing"
)

func TestDefaultFirst(t *testing.T) {
	tests := []struct {
		n    int
		macs []string
		want []bool
	}{
		{0, []string{"a", "a"}, []bool{false, false}},
		{1, []string{"a", "a", "b", "a", "b"}, []bool{true, false, true, false, false}},
		{2, []string{"a", "a", "a"}, []bool{true, true, false}},
		{1, []string{""}, []bool{false}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.n, tc.macs), func(t *testing.T) {
			d := newDefaultFirst(tc.n)
			for i, mac := range tc.macs {
				if got := d.take(mac); got != tc.want[i] {
					t.Errorf("request %d (%q): take = %v, want %v", i, mac, got, tc.want[i])
				}
			}
		})
	}
}

// TestDefaultFirstBounded: past maxDefaultFirstMACs, new MACs get their
// real config and the map stops growing.
func TestDefaultFirstBounded(t *testing.T) {
	d := newDefaultFirst(1)
	for i := range maxDefaultFirstMACs {
		if !d.take(fmt.Sprint(i)) {
			t.Fatalf("MAC %d refused below the bound", i)
		}
	}
	if d.take("one-too-many") {
		t.Fatal("a MAC past the bound got the default config")
	}
	if len(d.seen) != maxDefaultFirstMACs {
		t.Fatalf("%d MACs remembered, want %d", len(d.seen), maxDefaultFirstMACs)
	}
}
