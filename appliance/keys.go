package appliance

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"rackd/internal/atomicfile"
)

// Key files use the formats OpenSSL reads and writes for ed25519
// (openssl genpkey -algorithm ed25519): the private key is PKCS#8 in a
// "PRIVATE KEY" PEM block, the public key PKIX in a "PUBLIC KEY" block.
const (
	PrivateKeyFile = "signing.key"
	PublicKeyFile  = "signing.pub"
)

// ErrNotEd25519 is returned for a well-formed key of another algorithm.
var ErrNotEd25519 = errors.New("not an ed25519 key")

// MarshalPrivateKey encodes key as PKCS#8 PEM.
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalPublicKey encodes pub as PKIX PEM.
func MarshalPublicKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

func onePEM(data []byte, want string) ([]byte, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("no PEM block (want %q)", want)
	}
	if b.Type != want {
		return nil, fmt.Errorf("PEM block is %q, want %q", b.Type, want)
	}
	return b.Bytes, nil
}

// ParsePrivateKey reads a PKCS#8 PEM ed25519 private key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	der, err := onePEM(data, "PRIVATE KEY")
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is a %T: %w", k, ErrNotEd25519)
	}
	return ek, nil
}

// ParsePublicKey reads a PKIX PEM ed25519 public key (the slot's
// /bundle.pub, OpenSSL's "openssl pkey -pubout").
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	der, err := onePEM(data, "PUBLIC KEY")
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key is a %T: %w", k, ErrNotEd25519)
	}
	return ek, nil
}

// LoadPrivateKey reads a private key file.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadPublicKey reads a public key file.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Keygen makes a new signing key pair in dir as signing.key (mode 0600) and
// signing.pub. It refuses to replace an existing key: a lost signing key
// means the appliances built with its public key take no more updates.
func Keygen(dir string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	privPEM, err := MarshalPrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubPEM, err := MarshalPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for _, name := range []string{PrivateKeyFile, PublicKeyFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return nil, fmt.Errorf("%s: %w (remove it first if you really mean to replace the key)", filepath.Join(dir, name), os.ErrExist)
		}
	}
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{{PrivateKeyFile, privPEM, 0o600}, {PublicKeyFile, pubPEM, 0o644}} {
		err := atomicfile.WriteFile(filepath.Join(dir, f.name), f.data, atomicfile.Options{Perm: f.perm, NoReplace: true})
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return pub, nil
}
