package appliance

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

// The bundle is, in order:
//
//	"RKDBNDL1"        8 bytes of magic
//	N                 uint32 big-endian, the manifest's length, 1..MaxManifestSize
//	manifest          N bytes of JSON (Manifest)
//	signature         64 bytes, ed25519 over SignatureContext || manifest
//	payload           manifest.payload_size bytes: the slot image
//
// and nothing after. The signature covers the manifest only, and the
// manifest carries the payload's sha256: so the reader knows whether to
// trust the bundle before it reads a byte of the payload, and an update
// refuses a bundle that is unsigned, signed with another key or older than
// the running version before it writes anything to a slot. The payload's
// digest can only be known at its end; the update writer checks it as it
// streams and wipes the slot when it does not match.
const (
	Magic            = "RKDBNDL1"
	MaxManifestSize  = 65536
	SignatureContext = "rackd-bundle-v1\x00"
	SignatureSize    = ed25519.SignatureSize
	// ManifestFormat is the only manifest format this build reads.
	ManifestFormat = 1
	// HeaderMax is the most bytes a bundle has before its payload.
	HeaderMax = len(Magic) + 4 + MaxManifestSize + SignatureSize
)

// Errors of ReadBundle and of the bundle's payload reader. Each is wrapped
// with the detail; test with errors.Is.
var (
	ErrNotBundle     = errors.New("not a rackd bundle (bad magic)")
	ErrManifestSize  = errors.New("bundle manifest length out of range")
	ErrTruncated     = errors.New("bundle is truncated")
	ErrBadSignature  = errors.New("bundle signature does not verify with the appliance's public key (unsigned, or signed with another key)")
	ErrBadManifest   = errors.New("bundle manifest is invalid")
	ErrPayloadDigest = errors.New("bundle payload does not match the sha256 in its manifest")
	ErrTrailingData  = errors.New("bundle has bytes after its payload")
)

// Manifest describes a bundle's payload.
type Manifest struct {
	Format  int    `json:"format"`
	Version string `json:"version"`
	// Build orders versions: a bundle with a smaller Build than the running
	// one is a downgrade. Version is for people.
	Build         int64  `json:"build"`
	Arch          string `json:"arch"`
	PayloadSize   int64  `json:"payload_size"`
	PayloadSHA256 string `json:"payload_sha256"`
}

// Validate checks the fields every bundle must have.
func (m Manifest) Validate() error {
	switch {
	case m.Format != ManifestFormat:
		return fmt.Errorf("%w: format %d (this build reads format %d)", ErrBadManifest, m.Format, ManifestFormat)
	case m.Version == "":
		return fmt.Errorf("%w: no version", ErrBadManifest)
	case m.Build <= 0:
		return fmt.Errorf("%w: build %d is not a positive integer", ErrBadManifest, m.Build)
	case m.Arch == "":
		return fmt.Errorf("%w: no arch", ErrBadManifest)
	case m.PayloadSize <= 0:
		return fmt.Errorf("%w: payload_size %d", ErrBadManifest, m.PayloadSize)
	}
	if b, err := hex.DecodeString(m.PayloadSHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%w: payload_sha256 %q is not 64 hex digits", ErrBadManifest, m.PayloadSHA256)
	}
	return nil
}

func signedMessage(manifest []byte) []byte {
	msg := make([]byte, 0, len(SignatureContext)+len(manifest))
	msg = append(msg, SignatureContext...)
	return append(msg, manifest...)
}

// SignManifest signs manifest bytes as a bundle carries them.
func SignManifest(key ed25519.PrivateKey, manifest []byte) []byte {
	return ed25519.Sign(key, signedMessage(manifest))
}

// VerifyManifest reports whether sig signs manifest under pub.
func VerifyManifest(pub ed25519.PublicKey, manifest, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && len(sig) == SignatureSize && ed25519.Verify(pub, signedMessage(manifest), sig)
}

// DigestPayload reads r to its end and returns the size and hex sha256 for
// a Manifest.
func DigestPayload(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return 0, "", fmt.Errorf("read payload: %w", err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// WriteBundle writes a bundle of m and payload to w, signed with key.
// m.PayloadSize and m.PayloadSHA256 must describe payload (DigestPayload);
// WriteBundle copies exactly PayloadSize bytes and fails if the payload is
// shorter, longer or hashes otherwise (w then holds a bundle no reader
// accepts: remove it).
func WriteBundle(w io.Writer, key ed25519.PrivateKey, m Manifest, payload io.Reader) error {
	if m.Format == 0 {
		m.Format = ManifestFormat
	}
	if err := m.Validate(); err != nil {
		return err
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	if len(mb) > MaxManifestSize {
		return fmt.Errorf("%w: %d bytes", ErrManifestSize, len(mb))
	}
	var hdr bytes.Buffer
	hdr.WriteString(Magic)
	binary.Write(&hdr, binary.BigEndian, uint32(len(mb)))
	hdr.Write(mb)
	hdr.Write(SignManifest(key, mb))
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return fmt.Errorf("write bundle header: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(payload, m.PayloadSize))
	if err != nil {
		return fmt.Errorf("write bundle payload: %w", err)
	}
	if n != m.PayloadSize {
		return fmt.Errorf("payload is %d bytes, manifest says %d", n, m.PayloadSize)
	}
	var one [1]byte
	if k, _ := io.ReadFull(payload, one[:]); k > 0 {
		return fmt.Errorf("payload is longer than the manifest's %d bytes", m.PayloadSize)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.PayloadSHA256 {
		return fmt.Errorf("payload sha256 is %s, manifest says %s", got, m.PayloadSHA256)
	}
	return nil
}

// Bundle is a bundle whose manifest is signed by the expected key. Payload
// yields exactly Manifest.PayloadSize bytes and then, instead of io.EOF, an
// error wrapping ErrPayloadDigest, ErrTrailingData or ErrTruncated if the
// payload is not what the manifest signed.
type Bundle struct {
	Manifest    Manifest
	RawManifest []byte
	Payload     io.Reader
}

// Size is the whole bundle's length as its manifest describes it.
func (b *Bundle) Size() int64 {
	return int64(len(Magic)+4+len(b.RawManifest)+SignatureSize) + b.Manifest.PayloadSize
}

// ReadBundle reads a bundle's header from r and checks its signature with
// pub, then its manifest; nothing of the payload has been read when it
// returns. Reading Bundle.Payload to io.EOF is the only way to know the
// payload is intact.
func ReadBundle(r io.Reader, pub ed25519.PublicKey) (*Bundle, error) {
	var pre [len(Magic) + 4]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, readErr("header", err)
	}
	if string(pre[:len(Magic)]) != Magic {
		return nil, ErrNotBundle
	}
	n := binary.BigEndian.Uint32(pre[len(Magic):])
	if n == 0 || n > MaxManifestSize {
		return nil, fmt.Errorf("%w: %d bytes (1..%d)", ErrManifestSize, n, MaxManifestSize)
	}
	buf := make([]byte, int(n)+SignatureSize)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, readErr("manifest and signature", err)
	}
	mb, sig := buf[:n], buf[n:]
	// The signature first: only signed bytes reach the JSON parser.
	if !VerifyManifest(pub, mb, sig) {
		return nil, ErrBadSignature
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	want, _ := hex.DecodeString(m.PayloadSHA256)
	return &Bundle{
		Manifest:    m,
		RawManifest: mb,
		Payload:     &payloadReader{r: r, left: m.PayloadSize, size: m.PayloadSize, h: sha256.New(), want: want},
	}, nil
}

func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: it ends inside the %s", ErrTruncated, what)
	}
	return fmt.Errorf("read bundle %s: %w", what, err)
}

type payloadReader struct {
	r          io.Reader
	left, size int64
	h          hash.Hash
	want       []byte
	err        error // sticky, once the end is reached or a read failed
}

func (p *payloadReader) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if p.left == 0 {
		p.err = p.finish()
		return 0, p.err
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n, err := p.r.Read(b)
	p.h.Write(b[:n])
	p.left -= int64(n)
	switch {
	case err == io.EOF && p.left > 0:
		p.err = fmt.Errorf("%w: the payload ends after %d of %d bytes", ErrTruncated, p.size-p.left, p.size)
		return n, p.err
	case err != nil && err != io.EOF:
		p.err = fmt.Errorf("read bundle payload: %w", err)
		return n, p.err
	}
	return n, nil
}

// finish runs once the payload's bytes are all read: the reader must be at
// its end, and the digest must match.
func (p *payloadReader) finish() error {
	var one [1]byte
	for range 100 {
		n, err := p.r.Read(one[:])
		if n > 0 {
			return ErrTrailingData
		}
		if err == io.EOF {
			if !bytes.Equal(p.h.Sum(nil), p.want) {
				return fmt.Errorf("%w (sha256 %x)", ErrPayloadDigest, p.h.Sum(nil))
			}
			return io.EOF
		}
		if err != nil {
			return fmt.Errorf("read bundle end: %w", err)
		}
	}
	return fmt.Errorf("read bundle end: %w", io.ErrNoProgress)
}
