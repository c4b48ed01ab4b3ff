package seal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestSealOpen(t *testing.T) {
	ring := New()
	other := New()
	rotated := ring.WithNewKey()
	ad := []byte("m-abc\x00power.password")
	env, err := ring.Seal([]byte("hunter2"), ad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(env, []byte("hunter2")) {
		t.Fatal("the envelope holds the plaintext")
	}
	if len(env) != Overhead+len("hunter2") {
		t.Fatalf("envelope of %d bytes, want %d", len(env), Overhead+len("hunter2"))
	}
	relabel := func(id KeyID) []byte {
		b := bytes.Clone(env)
		binary.BigEndian.PutUint32(b[1:5], uint32(id))
		return b
	}
	flip := func(i int) []byte {
		b := bytes.Clone(env)
		b[i] ^= 1
		return b
	}
	for _, tc := range []struct {
		name string
		ring *Keyring
		env  []byte
		ad   []byte
		want error // nil: opens to hunter2
	}{
		{"same key, same data", ring, env, ad, nil},
		{"after a rotation the old key still opens", rotated, env, ad, nil},
		{"another machine", ring, env, []byte("m-xyz\x00power.password"), ErrOpen},
		{"another field", ring, env, []byte("m-abc\x00power.token"), ErrOpen},
		{"no data", ring, env, nil, ErrOpen},
		{"another keyring", other, env, ad, ErrUnknownKey},
		{"key ID relabelled to another key of the ring", rotated, relabel(rotated.Current()), ad, ErrOpen},
		{"key ID relabelled to an unknown key", ring, relabel(ring.Current() + 1), ad, ErrUnknownKey},
		{"key ID zero", ring, relabel(0), ad, ErrMalformed},
		{"truncated to nothing", ring, nil, ad, ErrMalformed},
		{"truncated header", ring, env[:3], ad, ErrMalformed},
		{"truncated tag", ring, env[:len(env)-1], ad, ErrOpen},
		{"shorter than the overhead", ring, env[:Overhead-1], ad, ErrMalformed},
		{"version 2", ring, append([]byte{2}, env[1:]...), ad, ErrMalformed},
		{"nonce changed", ring, flip(headerSize), ad, ErrOpen},
		{"ciphertext changed", ring, flip(headerSize + nonceSize), ad, ErrOpen},
		{"tag changed", ring, flip(len(env) - 1), ad, ErrOpen},
		{"too long", ring, append(bytes.Clone(env), make([]byte, MaxPlaintext)...), ad, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.ring.Open(tc.env, tc.ad)
			if tc.want == nil {
				if err != nil || string(got) != "hunter2" {
					t.Fatalf("Open = %q, %v; want hunter2", got, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || got != nil {
				t.Fatalf("Open = %q, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestSealFreshNonce(t *testing.T) {
	ring := New()
	a, _ := ring.Seal([]byte("same"), nil)
	b, _ := ring.Seal([]byte("same"), nil)
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same secret are the same bytes: the nonce is not fresh")
	}
}

func TestSealLimits(t *testing.T) {
	ring := New()
	if _, err := ring.Seal(make([]byte, MaxPlaintext+1), nil); err == nil {
		t.Fatal("sealed more than MaxPlaintext")
	}
	env, err := ring.Seal(make([]byte, MaxPlaintext), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Open(env, nil); err != nil {
		t.Fatalf("open a secret of MaxPlaintext bytes: %v", err)
	}
	if _, err := (&Keyring{}).Seal([]byte("x"), nil); err == nil {
		t.Fatal("an empty keyring sealed")
	}
	if _, err := (*Keyring)(nil).Open(env, nil); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a nil keyring opened: %v", err)
	}
}

func TestKeyringRetain(t *testing.T) {
	a := New()
	b := a.WithNewKey()
	c := b.WithNewKey()
	if c.Current() == b.Current() || len(c.IDs()) != 3 || c.IDs()[2] != a.Current() {
		t.Fatalf("rotated twice: %v", c.IDs())
	}
	kept := c.Retain(func(id KeyID) bool { return id == a.Current() })
	if got := kept.IDs(); len(got) != 2 || got[0] != c.Current() || got[1] != a.Current() {
		t.Fatalf("retain: %v", got)
	}
	none := c.Retain(func(KeyID) bool { return false })
	if got := none.IDs(); len(got) != 1 || got[0] != c.Current() {
		t.Fatalf("retain nothing keeps the current key only: %v", got)
	}
	if len(c.IDs()) != 3 {
		t.Fatal("Retain changed the keyring it was called on")
	}
}

func TestKeyringText(t *testing.T) {
	r := New().WithNewKey()
	text, err := r.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseKeyring(text)
	if err != nil || !back.Equal(r) {
		t.Fatalf("round trip: %v\n%s", err, text)
	}
	line := func(s string) []byte { return []byte(fileMagic + "\n" + s + "\n") }
	good := "key 0000000a " + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"no magic", []byte(good + "\n")},
		{"no keys", line("# nothing")},
		{"key ID zero", line("key 00000000 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")},
		{"short key ID", line("key 0a AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")},
		{"short key", line("key 0000000a AAAA")},
		{"not base64", line("key 0000000a ********************************************")},
		{"twice", line(good + "\n" + good)},
		{"extra field", line(good + " more")},
		{"not a key line", line("password hunter2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := ParseKeyring(tc.data); err == nil {
				t.Fatalf("parsed: %v", r.IDs())
			}
		})
	}
	if r, err := ParseKeyring(line(good)); err != nil || r.Current() != 10 {
		t.Fatalf("a good line: %v %v", r, err)
	}
}

func TestFile(t *testing.T) {
	f := File{Path: filepath.Join(t.TempDir(), "secrets.key")}
	if _, err := f.Load(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("load a missing file: %v", err)
	}
	r := New()
	if err := f.Create(r); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(New()); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("create over an existing key file: %v", err)
	}
	fi, err := os.Stat(f.Path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	got, err := f.Load()
	if err != nil || !got.Equal(r) {
		t.Fatalf("load after create: %v", err)
	}
	r2 := r.WithNewKey()
	if err := f.Save(r2); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Load(); err != nil || !got.Equal(r2) {
		t.Fatalf("load after save: %v", err)
	}
	os.WriteFile(f.Path, []byte("garbage"), 0o600)
	if _, err := f.Load(); err == nil || !bytes.Contains([]byte(err.Error()), []byte(f.Path)) {
		t.Fatalf("a damaged key file: %v (want an error naming the file)", err)
	}
}

// FuzzOpen feeds Parse and Open arbitrary bytes: they must refuse without
// panicking, and whatever opens must be what was sealed.
func FuzzOpen(f *testing.F) {
	ring := &Keyring{keys: []key{{id: 7, key: make([]byte, KeySize)}}}
	env, _ := ring.Seal([]byte("hunter2"), []byte("ad"))
	f.Add(env, []byte("ad"))
	f.Add(env[:Overhead], []byte("ad"))
	f.Add([]byte{1, 0, 0, 0, 7}, []byte(nil))
	f.Add([]byte{}, []byte("ad"))
	f.Fuzz(func(t *testing.T, b, data []byte) {
		e, perr := Parse(b)
		p, err := ring.Open(b, data)
		if perr != nil {
			if err == nil {
				t.Fatalf("opened what Parse refuses: %v", perr)
			}
			return
		}
		if e.Key == 0 || len(e.Nonce) != nonceSize {
			t.Fatalf("parsed a bad envelope: %+v", e)
		}
		// The key is fixed (the seeds are sealed again in each fuzzing
		// process, with other nonces): only the seeds' secret opens.
		if err == nil && (string(p) != "hunter2" || string(data) != "ad") {
			t.Fatalf("opened a forgery: %x %q -> %q", b, data, p)
		}
	})
}

// FuzzParseKeyring: a damaged key file is refused, never half read.
func FuzzParseKeyring(f *testing.F) {
	good, _ := New().WithNewKey().MarshalText()
	f.Add(good)
	f.Add([]byte(fileMagic + "\nkey 0000000a AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseKeyring(data)
		if err != nil {
			return
		}
		text, err := r.MarshalText()
		if err != nil {
			t.Fatalf("a parsed keyring does not encode: %v", err)
		}
		back, err := ParseKeyring(text)
		if err != nil || !back.Equal(r) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
