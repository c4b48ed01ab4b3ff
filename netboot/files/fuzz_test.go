package files

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzClean checks Clean's promises on any input: it never panics; what it
// accepts is a clean relative path (no leading "/", no "", "." or ".."
// element, no NUL, control character or backslash, valid UTF-8, at most
// MaxNameLen bytes), equal to the input less at most one leading "/", and
// accepted unchanged again (idempotence); what it refuses is an *Error of
// a known kind.
//
// Run: go test -run XXX -fuzz FuzzClean ./netboot/files/
func FuzzClean(f *testing.F) {
	for _, s := range []string{
		"pxelinux.0", "/pxelinux.0", "//etc/passwd", "../../etc/passwd", "/..",
		"grub/../../x", "a/./b", "a//b", "a/", "", "/", ".", "..", "...",
		"a\x00b", `a\b`, "a\nb", "\xff", "ipxe?mac=aa:bb:cc:dd:ee:ff",
		strings.Repeat("x", 300), "/" + strings.Repeat("y", 255), "%2e%2e/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := Clean(name)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Kind != ErrRefused && e.Kind != ErrInvalid) {
				t.Fatalf("Clean(%q): %v is not a refusal", name, err)
			}
			return
		}
		if p != name && "/"+p != name {
			t.Fatalf("Clean(%q) = %q: more than one leading slash removed", name, p)
		}
		if len(p) == 0 || len(p) > MaxNameLen || p[0] == '/' || !utf8.ValidString(p) {
			t.Fatalf("Clean(%q) = %q", name, p)
		}
		if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
			t.Fatalf("Clean(%q) = %q keeps a forbidden byte", name, p)
		}
		for _, elem := range strings.Split(p, "/") {
			if elem == "" || elem == "." || elem == ".." {
				t.Fatalf("Clean(%q) = %q has element %q", name, p, elem)
			}
		}
		if q, err := Clean(p); err != nil || q != p {
			t.Fatalf("Clean not idempotent: %q -> %q -> %q, %v", name, p, q, err)
		}
	})
}

// FuzzTreeOpen opens arbitrary names in a tree that sits beside a secret
// and holds symlinks pointing at it: whatever the name, the secret is never
// read, and every failure is an *Error.
//
// Run: go test -run XXX -fuzz FuzzTreeOpen ./netboot/files/
func FuzzTreeOpen(f *testing.F) {
	for _, s := range []string{
		"pxelinux.0", "inside", "abs-out", "rel-out", "grub/deep-out", "etc/passwd",
		"../secret", "/../secret", "grub/../../secret", "loop", "fifo", "grub",
	} {
		f.Add(s)
	}
	tree, _ := newTestTree(f)
	f.Fuzz(func(t *testing.T, name string) {
		file, err := tree.Open(context.Background(), name)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Open(%q): %v is not an *Error", name, err)
			}
			return
		}
		defer file.Close()
		b, err := io.ReadAll(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "SECRET") {
			t.Fatalf("Open(%q) served the secret outside the tree", name)
		}
	})
}
