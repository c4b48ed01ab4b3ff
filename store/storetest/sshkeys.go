package storetest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// SSHKey makes a fresh public key in authorized_keys form ("type base64
// comment", without a newline). kind is ed25519, ecdsa or rsa; bits is the
// curve's size for ecdsa (256, 384, 521) and the modulus' for rsa.
func SSHKey(t testing.TB, kind string, bits int, comment string) string {
	t.Helper()
	var (
		pub any
		err error
	)
	switch kind {
	case "ed25519":
		pub, _, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		curve := map[int]elliptic.Curve{256: elliptic.P256(), 384: elliptic.P384(), 521: elliptic.P521()}[bits]
		if curve == nil {
			t.Fatalf("storetest: no ecdsa curve of %d bits", bits)
		}
		var k *ecdsa.PrivateKey
		k, err = ecdsa.GenerateKey(curve, rand.Reader)
		if err == nil {
			pub = &k.PublicKey
		}
	case "rsa":
		var k *rsa.PrivateKey
		k, err = rsa.GenerateKey(rand.Reader, bits)
		if err == nil {
			pub = &k.PublicKey
		}
	default:
		t.Fatalf("storetest: unknown ssh key kind %q", kind)
	}
	if err != nil {
		t.Fatalf("storetest: generate %s key: %v", kind, err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatalf("storetest: ssh public key: %v", err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))
	if comment != "" {
		line += " " + comment
	}
	return line
}
