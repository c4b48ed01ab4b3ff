package seal

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"rackd/internal/atomicfile"
)

// Keyring is a set of keys, each with its ID. The first one is the current
// key: Seal uses it. The others only open what they sealed, while a rotation
// re-encrypts under the current key; once nothing uses them they are
// retired (Retain). A Keyring is never changed in place: the methods that
// change it return a new one, so a pointer to one may be shared.
type Keyring struct {
	keys []key
}

type key struct {
	id  KeyID
	key []byte
}

// New returns a keyring with one fresh random key.
func New() *Keyring {
	return (&Keyring{}).WithNewKey()
}

// WithNewKey returns a copy of the keyring with a fresh random key as its
// current key; the old keys stay, to open what they sealed.
func (r *Keyring) WithNewKey() *Keyring {
	k := key{key: make([]byte, KeySize)}
	rand.Read(k.key)
	for k.id == 0 || r.Has(k.id) {
		var b [4]byte
		rand.Read(b[:])
		k.id = KeyID(binary.BigEndian.Uint32(b[:]))
	}
	return &Keyring{keys: append([]key{k}, r.keys...)}
}

// Retain returns a copy of the keyring with the current key and, of the
// others, only those keep says to keep.
func (r *Keyring) Retain(keep func(KeyID) bool) *Keyring {
	out := &Keyring{}
	for i, k := range r.keys {
		if i == 0 || keep(k.id) {
			out.keys = append(out.keys, k)
		}
	}
	return out
}

// Current is the ID of the key Seal uses.
func (r *Keyring) Current() KeyID {
	if r == nil || len(r.keys) == 0 {
		return 0
	}
	return r.keys[0].id
}

// IDs lists the keys, the current one first.
func (r *Keyring) IDs() []KeyID {
	var out []KeyID
	if r != nil {
		for _, k := range r.keys {
			out = append(out, k.id)
		}
	}
	return out
}

// Has says whether the keyring holds the key id.
func (r *Keyring) Has(id KeyID) bool {
	return r.find(id) != nil
}

func (r *Keyring) find(id KeyID) []byte {
	if r == nil {
		return nil
	}
	for _, k := range r.keys {
		if k.id == id {
			return k.key
		}
	}
	return nil
}

// Seal encrypts plaintext under the current key, bound to data (which is
// not in the envelope: Open must be given the same).
func (r *Keyring) Seal(plaintext, data []byte) ([]byte, error) {
	if r == nil || len(r.keys) == 0 {
		return nil, errors.New("seal: empty keyring")
	}
	return sealWith(r.keys[0].id, r.keys[0].key, plaintext, data)
}

// Open decrypts an envelope that Seal made under any key of the keyring
// with the same data.
func (r *Keyring) Open(b, data []byte) ([]byte, error) {
	e, err := Parse(b)
	if err != nil {
		return nil, err
	}
	k := r.find(e.Key)
	if k == nil {
		return nil, fmt.Errorf("key %s: %w", e.Key, ErrUnknownKey)
	}
	return openWith(e, k, data)
}

// The keyring file is text, one key a line, the current key first:
//
//	rackd-keyring v1
//	key 1f2e3d4c <base64 of 32 bytes>
//	key 0a0b0c0d <base64 of 32 bytes>
//
// Lines starting with # are comments.
const fileMagic = "rackd-keyring v1"

// MarshalText encodes the keyring as its file holds it.
func (r *Keyring) MarshalText() ([]byte, error) {
	if r == nil || len(r.keys) == 0 {
		return nil, errors.New("keyring: no keys")
	}
	var b bytes.Buffer
	b.WriteString(fileMagic + "\n")
	b.WriteString("# rackd's secrets keyring: the first key seals the BMC passwords in rackd.db,\n")
	b.WriteString("# the others open what they sealed until a rotation ends. Keep a copy of this\n")
	b.WriteString("# file with every backup of rackd.db, but never in the same place.\n")
	for _, k := range r.keys {
		fmt.Fprintf(&b, "key %s %s\n", k.id, base64.StdEncoding.EncodeToString(k.key))
	}
	return b.Bytes(), nil
}

// ParseKeyring decodes a keyring file.
func ParseKeyring(data []byte) (*Keyring, error) {
	lines := strings.Split(string(data), "\n")
	if strings.TrimSpace(lines[0]) != fileMagic {
		return nil, fmt.Errorf("keyring: first line is not %q", fileMagic)
	}
	r := &Keyring{}
	for i, line := range lines[1:] {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "key" {
			return nil, fmt.Errorf("keyring: line %d: want \"key ID BASE64\"", i+2)
		}
		n, err := strconv.ParseUint(f[1], 16, 32)
		if err != nil || n == 0 || len(f[1]) != 8 {
			return nil, fmt.Errorf("keyring: line %d: key ID %q is not 8 hex digits, not zero", i+2, f[1])
		}
		k, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil || len(k) != KeySize {
			return nil, fmt.Errorf("keyring: line %d: key %s is not %d bytes of base64", i+2, f[1], KeySize)
		}
		if r.Has(KeyID(n)) {
			return nil, fmt.Errorf("keyring: line %d: key %s is listed twice", i+2, f[1])
		}
		r.keys = append(r.keys, key{id: KeyID(n), key: k})
	}
	if len(r.keys) == 0 {
		return nil, errors.New("keyring: no keys")
	}
	return r, nil
}

// File is a keyring kept in a file (mode 0600), written whole and durably
// (internal/atomicfile): a crash leaves the old keyring or the new one.
type File struct {
	Path string
}

// Name is the file's path, for messages.
func (f File) Name() string { return f.Path }

// Load reads the keyring. A missing file is an error wrapping
// fs.ErrNotExist.
func (f File) Load() (*Keyring, error) {
	data, err := os.ReadFile(f.Path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("secrets key file %s is missing: %w", f.Path, err)
		}
		return nil, fmt.Errorf("read secrets key file: %w", err)
	}
	r, err := ParseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w", f.Path, err)
	}
	return r, nil
}

// Save writes the keyring, replacing what the file held.
func (f File) Save(r *Keyring) error {
	data, err := r.MarshalText()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(f.Path, data, atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("write secrets key file: %w", err)
	}
	return nil
}

// Create writes the keyring to a file that must not exist yet: if another
// rackd on the same directory made one meanwhile, that one is the keyring
// and Create fails rather than replace it.
func (f File) Create(r *Keyring) error {
	data, err := r.MarshalText()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(f.Path, data, atomicfile.Options{Perm: 0o600, NoReplace: true}); err != nil {
		return fmt.Errorf("create secrets key file: %w", err)
	}
	return nil
}

// Equal says whether two keyrings hold the same keys in the same order.
func (r *Keyring) Equal(o *Keyring) bool {
	return slices.EqualFunc(r.keys, o.keys, func(a, b key) bool { return a.id == b.id && bytes.Equal(a.key, b.key) })
}
