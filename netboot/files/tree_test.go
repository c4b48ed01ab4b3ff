package files

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// newTestTree makes a boot tree in a temporary directory, beside a secret
// that must never be served, with the links a careless server would follow.
func newTestTree(t testing.TB) (*Tree, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "tftp")
	secret := filepath.Join(base, "secret")
	must(t, os.WriteFile(secret, []byte("SECRET"), 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, "grub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "pxelinux.0"), []byte("loader"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "grub", "grub.cfg"), []byte("set timeout=1\n"), 0o644))
	must(t, os.Symlink("grub/grub.cfg", filepath.Join(dir, "inside")))          // stays inside
	must(t, os.Symlink(secret, filepath.Join(dir, "abs-out")))                  // absolute, out
	must(t, os.Symlink("../secret", filepath.Join(dir, "rel-out")))             // relative, out
	must(t, os.Symlink("../../secret", filepath.Join(dir, "grub", "deep-out"))) // from a subdirectory
	must(t, os.Symlink("/etc", filepath.Join(dir, "etc")))                      // a directory out
	must(t, os.Symlink("loop", filepath.Join(dir, "loop")))                     // a loop
	must(t, os.Symlink("nowhere", filepath.Join(dir, "dangling")))              // dangling, inside
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))                  // must not hang
	tree, err := NewTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tree.Close() })
	return tree, dir
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestTreeOpen(t *testing.T) {
	tree, _ := newTestTree(t)
	tests := map[string]struct {
		name string
		want string // content; empty: an error of kind
		kind error
	}{
		"file":                {name: "pxelinux.0", want: "loader"},
		"leading slash":       {name: "/grub/grub.cfg", want: "set timeout=1\n"},
		"symlink inside":      {name: "inside", want: "set timeout=1\n"},
		"missing":             {name: "nope", kind: ErrNotFound},
		"missing in dir":      {name: "grub/nope", kind: ErrNotFound},
		"file as directory":   {name: "pxelinux.0/x", kind: ErrNotFound},
		"directory":           {name: "grub", kind: ErrNotFound},
		"fifo":                {name: "fifo", kind: ErrNotFound},
		"dangling inside":     {name: "dangling", kind: ErrNotFound},
		"absolute link out":   {name: "abs-out", kind: ErrRefused},
		"relative link out":   {name: "rel-out", kind: ErrRefused},
		"deep link out":       {name: "grub/deep-out", kind: ErrRefused},
		"through dir link":    {name: "etc/passwd", kind: ErrRefused},
		"link loop":           {name: "loop", kind: ErrRefused},
		"traversal":           {name: "../secret", kind: ErrRefused},
		"absolute":            {name: "//etc/passwd", kind: ErrRefused},
		"invalid":             {name: "a\x00b", kind: ErrInvalid},
		"traversal via inner": {name: "grub/../../secret", kind: ErrRefused},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			f, err := tree.Open(ctx, tt.name)
			if tt.kind != nil {
				if err == nil {
					b, _ := io.ReadAll(f)
					_ = f.Close()
					t.Fatalf("Open(%q) served %q, want %v", tt.name, b, tt.kind)
				}
				var e *Error
				if !errors.As(err, &e) || e.Kind != tt.kind {
					t.Fatalf("Open(%q): %v, want kind %v", tt.name, err, tt.kind)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tt.name, err)
			}
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil || string(b) != tt.want {
				t.Fatalf("Open(%q) read %q, %v; want %q", tt.name, b, err, tt.want)
			}
			if f.Size() != int64(len(tt.want)) || f.ModTime().IsZero() || len(f.ETag()) < 3 {
				t.Errorf("Size %d ModTime %v ETag %s", f.Size(), f.ModTime(), f.ETag())
			}
		})
	}
}

// TestTreeSendfile pins what HTTP boot relies on: a tree file is a
// syscall.Conn (the embedded *os.File's), which is what net's sendfile path
// looks for behind http.ServeContent's io.CopyN.
func TestTreeSendfile(t *testing.T) {
	tree, _ := newTestTree(t)
	f, err := tree.Open(context.Background(), "pxelinux.0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.(syscall.Conn); !ok {
		t.Fatalf("%T is not a syscall.Conn: sendfile would not be used", f)
	}
}

func TestTreeETagChanges(t *testing.T) {
	tree, dir := newTestTree(t)
	tag := func() string {
		f, err := tree.Open(context.Background(), "pxelinux.0")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return f.ETag()
	}
	a := tag()
	if b := tag(); a != b {
		t.Fatalf("ETag not stable: %s then %s", a, b)
	}
	// The images store's install: write elsewhere, rename over.
	tmp := filepath.Join(dir, ".new")
	must(t, os.WriteFile(tmp, []byte("loadex"), 0o644)) // same size
	must(t, os.Rename(tmp, filepath.Join(dir, "pxelinux.0")))
	if b := tag(); a == b {
		t.Fatalf("ETag %s unchanged after replacing the file", a)
	}
}

func TestTreeCancelled(t *testing.T) {
	tree, _ := newTestTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tree.Open(ctx, "pxelinux.0"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open on a cancelled context: %v", err)
	}
}

type fakeRenderer map[string]string

func (r fakeRenderer) Render(_ context.Context, name string) ([]byte, bool, error) {
	if name == "broken" {
		return nil, false, errors.New("store down")
	}
	s, ok := r[name]
	return []byte(s), ok, nil
}

func TestOverlay(t *testing.T) {
	tree, _ := newTestTree(t)
	o := NewOverlay(fakeRenderer{
		"grub/grub.cfg":              "rendered\n", // shadows the tree's file
		"ipxe?mac=aa:bb:cc:dd:ee:ff": "#!ipxe\nexit\n",
	}, tree)
	read := func(name string) (string, File, error) {
		f, err := o.Open(context.Background(), name)
		if err != nil {
			return "", nil, err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), f, err
	}
	if s, f, err := read("/grub/grub.cfg"); err != nil || s != "rendered\n" || !f.ModTime().IsZero() || f.Size() != 9 {
		t.Errorf("rendered: %q %v", s, err)
	}
	if s, _, err := read("ipxe?mac=aa:bb:cc:dd:ee:ff"); err != nil || s != "#!ipxe\nexit\n" {
		t.Errorf("query form: %q %v", s, err)
	}
	if s, _, err := read("pxelinux.0"); err != nil || s != "loader" {
		t.Errorf("fallback: %q %v", s, err)
	}
	if _, _, err := read("ipxe?mac=11:22:33:44:55:66"); !errors.Is(err, ErrNotFound) {
		t.Errorf("declined query form: %v, want not found", err)
	}
	if _, _, err := read("../secret"); !errors.Is(err, ErrRefused) {
		t.Errorf("traversal: %v", err)
	}
	if _, _, err := read("rel-out"); !errors.Is(err, ErrRefused) {
		t.Errorf("symlink out: %v", err)
	}
	if _, _, err := read("broken"); err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrRefused) {
		t.Errorf("render error: %v", err)
	}
	a, b := NewMemFile([]byte("x")), NewMemFile([]byte("y"))
	if a.ETag() == b.ETag() || a.ETag() != NewMemFile([]byte("x")).ETag() {
		t.Errorf("MemFile ETags: %s %s", a.ETag(), b.ETag())
	}
	if !bytes.HasPrefix([]byte(a.ETag()), []byte(`"`)) {
		t.Errorf("ETag %s not quoted", a.ETag())
	}
}
