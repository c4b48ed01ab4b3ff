package appliance

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	pub, priv := testKey(t)
	pp, err := MarshalPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	bp, err := MarshalPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(pp), "-----BEGIN PRIVATE KEY-----\n") || !strings.HasPrefix(string(bp), "-----BEGIN PUBLIC KEY-----\n") {
		t.Fatalf("PEM types:\n%s\n%s", pp, bp)
	}
	priv2, err := ParsePrivateKey(pp)
	if err != nil || !priv2.Equal(priv) {
		t.Fatalf("private key: %v", err)
	}
	pub2, err := ParsePublicKey(bp)
	if err != nil || !pub2.Equal(pub) {
		t.Fatalf("public key: %v", err)
	}
}

func TestParseKeyRefuses(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPub, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	pub, priv := testKey(t)
	pp, _ := MarshalPrivateKey(priv)
	bp, _ := MarshalPublicKey(pub)
	for name, c := range map[string]struct {
		data    []byte
		private bool
		want    error
	}{
		"empty":                 {nil, false, nil},
		"not PEM":               {[]byte("hello"), false, nil},
		"private as public":     {pp, false, nil},
		"public as private":     {bp, true, nil},
		"ecdsa public":          {pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPub}), false, ErrNotEd25519},
		"ecdsa private":         {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecPriv}), true, ErrNotEd25519},
		"garbage in PEM":        {pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("xx")}), false, nil},
		"garbage in PEM (priv)": {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("xx")}), true, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			if c.private {
				_, err = ParsePrivateKey(c.data)
			} else {
				_, err = ParsePublicKey(c.data)
			}
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("got %v, want an error (%v)", err, c.want)
			}
		})
	}
}

func TestKeygen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "key")
	pub, err := Keygen(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, PrivateKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v %v", fi.Mode(), err)
	}
	priv, err := LoadPrivateKey(filepath.Join(dir, PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pub2, err := LoadPublicKey(filepath.Join(dir, PublicKeyFile))
	if err != nil || !pub2.Equal(pub) || !pub.Equal(priv.Public()) {
		t.Fatalf("public key: %v", err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, PrivateKeyFile))
	if _, err := Keygen(dir); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second Keygen: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, PrivateKeyFile))
	if string(before) != string(after) {
		t.Fatal("second Keygen replaced the key")
	}
}

func needOpenSSL(t *testing.T) string {
	p, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed: the OpenSSL interoperability test needs it")
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// OpenSSL is the real peer for the key files and the signature: a release
// key made with OpenSSL signs bundles this package accepts, and what this
// package signs verifies with OpenSSL.
func TestOpenSSLInterop(t *testing.T) {
	ossl := needOpenSSL(t)
	dir := t.TempDir()
	key, pubf := filepath.Join(dir, "o.key"), filepath.Join(dir, "o.pub")
	run(t, ossl, "genpkey", "-algorithm", "ed25519", "-out", key)
	run(t, ossl, "pkey", "-in", key, "-pubout", "-out", pubf)
	priv, err := LoadPrivateKey(key)
	if err != nil {
		t.Fatalf("OpenSSL's private key: %v", err)
	}
	pub, err := LoadPublicKey(pubf)
	if err != nil {
		t.Fatalf("OpenSSL's public key: %v", err)
	}
	if !pub.Equal(priv.Public()) {
		t.Fatal("OpenSSL's public key is not its private key's")
	}

	// We sign, OpenSSL verifies the signed message (context || manifest).
	manifest := []byte(`{"format":1,"version":"v1","build":1,"arch":"amd64","payload_size":1,"payload_sha256":"00"}`)
	msg := filepath.Join(dir, "msg")
	if err := os.WriteFile(msg, signedMessage(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	sig := filepath.Join(dir, "sig")
	if err := os.WriteFile(sig, SignManifest(priv, manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, ossl, "pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", pubf, "-in", msg, "-sigfile", sig)
	if !strings.Contains(out, "Signature Verified Successfully") {
		t.Fatalf("openssl verify: %s", out)
	}
	// A changed manifest does not verify with OpenSSL either: the test
	// above can fail.
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, signedMessage(append([]byte(nil), append(manifest, ' ')...)), 0o644)
	if o, err := exec.Command(ossl, "pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", pubf, "-in", bad, "-sigfile", sig).CombinedOutput(); err == nil {
		t.Fatalf("openssl verified a changed message: %s", o)
	}

	// OpenSSL signs, we verify.
	osig := filepath.Join(dir, "osig")
	run(t, ossl, "pkeyutl", "-sign", "-rawin", "-inkey", key, "-in", msg, "-out", osig)
	sb, _ := os.ReadFile(osig)
	if !VerifyManifest(pub, manifest, sb) {
		t.Fatal("OpenSSL's signature does not verify")
	}

	// OpenSSL reads the keys Keygen writes.
	kd := filepath.Join(dir, "ours")
	if _, err := Keygen(kd); err != nil {
		t.Fatal(err)
	}
	ourPub := run(t, ossl, "pkey", "-in", filepath.Join(kd, PrivateKeyFile), "-pubout")
	want, _ := os.ReadFile(filepath.Join(kd, PublicKeyFile))
	if ourPub != string(want) {
		t.Fatalf("OpenSSL's public key of our private key:\n%s\nours:\n%s", ourPub, want)
	}
}
