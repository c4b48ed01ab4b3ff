package appliance

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
)

func TestEnvMarshal(t *testing.T) {
	e := NewEnv()
	e.Set(EnvGood, "a")
	e.Set(EnvTry, "")
	e.Set("odd", "back\\slash\nnewline")
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != EnvSize {
		t.Fatalf("size %d", len(b))
	}
	want := EnvSignature + "rackd_good=a\nrackd_try=\nodd=back\\\\slash\\\nnewline\n"
	if !bytes.HasPrefix(b, []byte(want)) || strings.Trim(string(b[len(want):]), "#") != "" {
		t.Fatalf("block:\n%q", b)
	}
	e2, err := ParseEnv(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e2.Map(), e.Map()) || !reflect.DeepEqual(e2.Names(), e.Names()) {
		t.Fatalf("parsed %v, want %v", e2.Map(), e.Map())
	}
	// Changing a value keeps its place.
	e.Set(EnvGood, "b")
	if e.Names()[0] != EnvGood {
		t.Fatal(e.Names())
	}
	e.Unset(EnvTry)
	if _, ok := e.Lookup(EnvTry); ok || len(e.Names()) != 2 {
		t.Fatal(e.Names())
	}
}

func TestParseEnv(t *testing.T) {
	pad := func(s string) []byte { return append([]byte(s), bytes.Repeat([]byte{'#'}, 1024-len(s))...) }
	cases := []struct {
		name string
		in   []byte
		want map[string]string
		err  error
	}{
		{"empty block", pad(EnvSignature), map[string]string{}, nil},
		{"vars", pad(EnvSignature + "a=1\nb=\n"), map[string]string{"a": "1", "b": ""}, nil},
		{"comment line", pad(EnvSignature + "# a comment\na=1\n"), map[string]string{"a": "1"}, nil},
		{"value with =", pad(EnvSignature + "a=x=y\n"), map[string]string{"a": "x=y"}, nil},
		{"escapes", pad(EnvSignature + "a=x\\\ny\\\\z\n"), map[string]string{"a": "x\ny\\z"}, nil},
		{"later duplicate wins", pad(EnvSignature + "a=1\na=2\n"), map[string]string{"a": "2"}, nil},
		{"unterminated last var", []byte(EnvSignature + "a=1\nb=2"), map[string]string{"a": "1"}, nil},
		{"trailing backslash", []byte(EnvSignature + "a=1\nb=2\\"), map[string]string{"a": "1"}, nil},
		{"no signature", pad("# GRUB Environment Blok\na=1\n"), nil, ErrNotEnv},
		{"empty file", nil, nil, ErrNotEnv},
		{"short block", []byte(EnvSignature), map[string]string{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := ParseEnv(c.in)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(e.Map(), c.want) {
				t.Fatalf("got %q, want %q", e.Map(), c.want)
			}
			if e.Size() != len(c.in) {
				t.Fatalf("size %d, want %d", e.Size(), len(c.in))
			}
		})
	}
}

func TestEnvFull(t *testing.T) {
	e := NewEnv()
	if err := e.Set("big", strings.Repeat("x", EnvSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Marshal(); !errors.Is(err, ErrEnvFull) {
		t.Fatalf("got %v", err)
	}
	// Exactly full is fine.
	e = NewEnv()
	e.Set("v", strings.Repeat("x", EnvSize-len(EnvSignature)-3))
	if b, err := e.Marshal(); err != nil || len(b) != EnvSize {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
}

func TestEnvBadNames(t *testing.T) {
	for _, n := range []string{"", "a=b", "a\nb", "#a"} {
		if err := NewEnv().Set(n, "x"); err == nil {
			t.Errorf("Set(%q) accepted", n)
		}
	}
}

// The file is rewritten in place: same inode, same size, never truncated,
// which is what GRUB's save_env (writing the file's sectors) needs.
func TestWriteEnvFileInPlace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "grubenv")
	if err := CreateEnvFile(p, EnvOf(map[string]string{EnvGood: "a"})); err != nil {
		t.Fatal(err)
	}
	if err := CreateEnvFile(p, NewEnv()); !errors.Is(err, os.ErrExist) {
		t.Fatalf("CreateEnvFile over a file: %v", err)
	}
	fi1, _ := os.Stat(p)
	e, err := UpdateEnvFile(p, func(e *Env) error { return e.Set(EnvTry, "b") })
	if err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Stat(p)
	if fi2.Size() != EnvSize || fi1.Sys().(*syscall.Stat_t).Ino != fi2.Sys().(*syscall.Stat_t).Ino {
		t.Fatalf("size %d, inode changed: %v", fi2.Size(), fi1.Sys().(*syscall.Stat_t).Ino != fi2.Sys().(*syscall.Stat_t).Ino)
	}
	back, err := ReadEnvFile(p)
	if err != nil || back.Get(EnvTry) != "b" || back.Get(EnvGood) != "a" || e.Get(EnvTry) != "b" {
		t.Fatalf("%v %v", back.Map(), err)
	}
	// A file of another size than the block is refused, not rewritten.
	os.WriteFile(p, append([]byte(EnvSignature), make([]byte, 10)...), 0o644)
	e = NewEnv()
	if err := WriteEnvFile(p, e); err == nil {
		t.Fatal("rewrote a file of another size")
	}
	if _, err := ReadEnvFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

func needGrubEditenv(t *testing.T) string {
	p, err := exec.LookPath("grub-editenv")
	if err != nil {
		t.Skip("grub-editenv not installed (package grub-common): the GRUB interoperability test needs it")
	}
	return p
}

func editenvList(t *testing.T, ge, path string) map[string]string {
	t.Helper()
	out := run(t, ge, path, "list")
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		m[k] = v
	}
	return m
}

// grub-editenv is the real peer: it reads what we write, and we read what it
// writes, including after it changed a block we wrote.
func TestGrubEditenvInterop(t *testing.T) {
	ge := needGrubEditenv(t)
	dir := t.TempDir()

	// grub-editenv creates, sets; we read.
	theirs := filepath.Join(dir, "theirs")
	run(t, ge, theirs, "create")
	run(t, ge, theirs, "set", "rackd_good=b", "rackd_try=a", "rackd_tries=1", "rackd_reset=")
	e, err := ReadEnvFile(theirs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{EnvGood: "b", EnvTry: "a", EnvTries: "1", EnvReset: ""}
	if !reflect.DeepEqual(e.Map(), want) || e.Size() != EnvSize {
		t.Fatalf("we read %q (%d bytes), grub-editenv set %q", e.Map(), e.Size(), want)
	}

	// We write (create and in place); grub-editenv lists the same.
	ours := filepath.Join(dir, "ours")
	if err := CreateEnvFile(ours, EnvOf(map[string]string{EnvGood: "a", EnvTry: "", EnvTries: "0"})); err != nil {
		t.Fatal(err)
	}
	if _, err := UpdateEnvFile(ours, func(e *Env) error {
		*e = *ArmTry(e, SlotB)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "1"}
	if got := editenvList(t, ge, ours); !reflect.DeepEqual(got, want) {
		t.Fatalf("grub-editenv lists %q, want %q", got, want)
	}

	// grub-editenv changes our block (as GRUB's save_env would), we read it.
	run(t, ge, ours, "set", "rackd_tries=0")
	run(t, ge, ours, "unset", "rackd_good")
	e, err = ReadEnvFile(ours)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{EnvTry: "b", EnvTries: "0"}
	if !reflect.DeepEqual(e.Map(), want) {
		t.Fatalf("after grub-editenv set: we read %q, want %q", e.Map(), want)
	}
	// And the bytes are the same as ours for the same variables: we
	// write what GRUB's tools write.
	got, _ := os.ReadFile(ours)
	e2 := NewEnv()
	for _, n := range e.Names() {
		e2.Set(n, e.Get(n))
	}
	b2, _ := e2.Marshal()
	if !bytes.Equal(got, b2) {
		t.Fatalf("grub-editenv's block:\n%q\nours:\n%q", got, b2)
	}

	// Values GRUB escapes.
	run(t, ge, theirs, "set", "odd=a\\b")
	e, _ = ReadEnvFile(theirs)
	if e.Get("odd") != "a\\b" {
		t.Fatalf("escaped value read as %q", e.Get("odd"))
	}
	keys := e.Names()
	sort.Strings(keys)
	if len(keys) != 5 {
		t.Fatalf("names %v", keys)
	}
}

// FuzzParseEnv: any input either is refused or parses to variables that
// survive a marshal and a parse.
func FuzzParseEnv(f *testing.F) {
	b, _ := EnvOf(map[string]string{EnvGood: "a", EnvTry: "b", "x": "a\\b\nc"}).Marshal()
	f.Add(b)
	f.Add([]byte(EnvSignature + "a=1\nb"))
	f.Add([]byte(EnvSignature + "#\n=\n\\"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEnv(data)
		if err != nil {
			return
		}
		out, err := e.Marshal()
		if err != nil {
			if errors.Is(err, ErrEnvFull) {
				return
			}
			t.Fatal(err)
		}
		if len(out) != len(data) {
			t.Fatalf("marshalled %d bytes of a %d byte block", len(out), len(data))
		}
		e2, err := ParseEnv(out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(e.Map(), e2.Map()) {
			t.Fatalf("%q -> %q", e.Map(), e2.Map())
		}
	})
}
