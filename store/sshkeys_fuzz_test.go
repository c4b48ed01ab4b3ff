package store_test

import (
	"strings"
	"testing"

	"rackd/store"
)

// FuzzParseSSHKey: whatever a client sends as a key is either refused with a
// domain error naming it an ssh key problem, or turned into a canonical line
// that parses again to itself (so what is stored, and later written to an
// authorized_keys file, is one line of the accepted types, and Check's
// re-parse of it agrees).
func FuzzParseSSHKey(f *testing.F) {
	seeds := []string{
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGk0j5uVvZl4Zb2Gq2n0bKxF3mK8K3pFv8M8J0r3t0pH alice@laptop",
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGk0j5uVvZl4Zb2Gq2n0bKxF3mK8K3pFv8M8J0r3t0pH",
		`from="10.0.0.1" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGk0j5uVvZl4Zb2Gq2n0bKxF3mK8K3pFv8M8J0r3t0pH c`,
		"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQC c",
		"ssh-dss AAAAB3NzaC1kc3M=",
		"ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABB",
		"", "#", "ssh-ed25519", "ssh-ed25519 ====", "a\nb", "\x00", strings.Repeat("A", 9000),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := store.ParseSSHKey(in)
		if err != nil {
			if store.CodeOf(err) != store.CodeInvalid || !strings.HasPrefix(err.Error(), "ssh key: ") {
				t.Fatalf("refusal of %q is not an ssh key domain error: %v", in, err)
			}
			return
		}
		if strings.ContainsAny(p.Key, "\r\n\x00") || !strings.HasPrefix(p.Key, p.Type+" ") || !strings.HasPrefix(p.Fingerprint, "SHA256:") {
			t.Fatalf("%q parsed to %+v", in, p)
		}
		switch p.Type {
		case "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521":
		case "ssh-rsa":
			if p.Bits < 2048 {
				t.Fatalf("%q accepted as rsa of %d bits", in, p.Bits)
			}
		default:
			t.Fatalf("%q accepted as type %s", in, p.Type)
		}
		again, err := store.ParseSSHKey(p.Key)
		if err != nil || again != p {
			t.Fatalf("canonical %q parses to %+v, %v; want %+v", p.Key, again, err, p)
		}
	})
}
