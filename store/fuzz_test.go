package store_test

import (
	"strings"
	"testing"

	"rackd/store"
)

// FuzzNormalizeMAC: whatever a client sends as a MAC is either refused with a
// domain error or turned into the one canonical spelling, which is stable.
func FuzzNormalizeMAC(f *testing.F) {
	for _, s := range []string{"52:54:00:AB:cd:01", "52-54-00-ab-cd-01", "5254.00ab.cd01", "", "zz", "00:00:00:00:00:00:00:00",
		"52:54:00:ab:cd:01 ", "\x00", strings.Repeat("a", 1000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := store.NormalizeMAC(in)
		if err != nil {
			if store.CodeOf(err) != store.CodeInvalid {
				t.Fatalf("refusal of %q is not a domain error: %v", in, err)
			}
			return
		}
		if len(out) != 17 || strings.ToLower(out) != out {
			t.Fatalf("NormalizeMAC(%q) = %q: not canonical", in, out)
		}
		again, err := store.NormalizeMAC(out)
		if err != nil || again != out {
			t.Fatalf("not stable: %q -> %q -> %q, %v", in, out, again, err)
		}
	})
}
