// Package seal encrypts small secrets (BMC passwords) under a keyring kept
// outside the database, so that a copy of the database (a backup, a stolen
// disk image of it) holds ciphertext only.
//
// A sealed secret is an envelope: a version byte, the 4-byte ID of the key
// that sealed it, a 24-byte random nonce, then the XChaCha20-Poly1305
// ciphertext and tag. The version and key ID are authenticated along with
// the caller's associated data (say, the machine and field the secret
// belongs to), so an envelope moved to another machine, or relabelled with
// another key ID, does not open. The key ID lets a keyring hold several
// keys while a rotation re-encrypts (see Keyring).
package seal

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
)

// KeySize is the size of a key: 256 bits.
const KeySize = chacha20poly1305.KeySize

const (
	version    = 1
	headerSize = 1 + 4
	nonceSize  = chacha20poly1305.NonceSizeX
	// Overhead is how much longer an envelope is than its plaintext.
	Overhead = headerSize + nonceSize + chacha20poly1305.Overhead
	// MaxPlaintext bounds what Seal takes and Parse accepts: secrets are
	// passwords and tokens, not files.
	MaxPlaintext = 4096
)

// KeyID names a key of a keyring. Zero is never used.
type KeyID uint32

func (id KeyID) String() string { return fmt.Sprintf("%08x", uint32(id)) }

var (
	// ErrMalformed marks bytes that are not an envelope this build reads.
	ErrMalformed = errors.New("not a sealed secret")
	// ErrUnknownKey marks an envelope sealed under a key the keyring does
	// not hold (the key file of another installation, or a lost one).
	ErrUnknownKey = errors.New("sealed under a key the keyring does not hold")
	// ErrOpen marks an envelope that does not authenticate: damaged, or
	// presented for another machine or field than it was sealed for.
	ErrOpen = errors.New("sealed secret does not authenticate (damaged, or moved from another record)")
)

// Envelope is a parsed sealed secret.
type Envelope struct {
	Key        KeyID
	Nonce      []byte // nonceSize bytes
	Ciphertext []byte // ciphertext and tag
	header     []byte
}

// Parse splits b into its parts, without opening it. It checks the form
// only: version, size, a key ID that is not zero.
func Parse(b []byte) (Envelope, error) {
	if len(b) < Overhead {
		return Envelope{}, fmt.Errorf("%w: %d bytes, an envelope has at least %d", ErrMalformed, len(b), Overhead)
	}
	if len(b) > Overhead+MaxPlaintext {
		return Envelope{}, fmt.Errorf("%w: %d bytes, more than a secret takes", ErrMalformed, len(b))
	}
	if b[0] != version {
		return Envelope{}, fmt.Errorf("%w: version %d (this rackd reads %d)", ErrMalformed, b[0], version)
	}
	id := KeyID(binary.BigEndian.Uint32(b[1:headerSize]))
	if id == 0 {
		return Envelope{}, fmt.Errorf("%w: key ID 0", ErrMalformed)
	}
	return Envelope{Key: id, header: b[:headerSize], Nonce: b[headerSize : headerSize+nonceSize],
		Ciphertext: b[headerSize+nonceSize:]}, nil
}

// KeyOf is the ID of the key that sealed b.
func KeyOf(b []byte) (KeyID, error) {
	e, err := Parse(b)
	return e.Key, err
}

// ad is what the AEAD authenticates besides the plaintext: the envelope's
// header (so its key ID cannot be swapped) and the caller's data.
func ad(header, data []byte) []byte {
	out := make([]byte, 0, len(header)+len(data))
	return append(append(out, header...), data...)
}

func sealWith(id KeyID, key, plaintext, data []byte) ([]byte, error) {
	if len(plaintext) > MaxPlaintext {
		return nil, fmt.Errorf("seal: secret of %d bytes, at most %d", len(plaintext), MaxPlaintext)
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	out := make([]byte, headerSize+nonceSize, Overhead+len(plaintext))
	out[0] = version
	binary.BigEndian.PutUint32(out[1:headerSize], uint32(id))
	rand.Read(out[headerSize:]) // never fails (crypto/rand panics instead)
	return aead.Seal(out, out[headerSize:headerSize+nonceSize], plaintext, ad(out[:headerSize], data)), nil
}

func openWith(e Envelope, key, data []byte) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	p, err := aead.Open(nil, e.Nonce, e.Ciphertext, ad(e.header, data))
	if err != nil {
		return nil, ErrOpen
	}
	return p, nil
}
