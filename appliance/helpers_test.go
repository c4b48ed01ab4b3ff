package appliance

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
)

func testKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func testPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// makeBundle is a bundle of payload signed with key.
func makeBundle(t testing.TB, key ed25519.PrivateKey, version string, build int64, arch string, payload []byte) []byte {
	t.Helper()
	n, sum, err := DigestPayload(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	m := Manifest{Version: version, Build: build, Arch: arch, PayloadSize: n, PayloadSHA256: sum}
	if err := WriteBundle(&b, key, m, bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rawBundle assembles a bundle from its parts with no checks, for bundles
// WriteBundle refuses to make.
func rawBundle(magic string, n uint32, manifest, sig, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString(magic)
	b.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	b.Write(manifest)
	b.Write(sig)
	b.Write(payload)
	return b.Bytes()
}
