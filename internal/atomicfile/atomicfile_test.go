package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// names lists dir, so that a test sees any temporary file left behind.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}

func TestWriteFile(t *testing.T) {
	tests := map[string]struct {
		old     string // "" for no file before
		opts    Options
		errIs   error
		want    string // the content afterwards
		perm    fs.FileMode
		foreign bool // a file of the TempName was there and must stay
	}{
		"new":                     {opts: Options{Perm: 0o600}, want: "new", perm: 0o600},
		"replace":                 {old: "old", opts: Options{Perm: 0o644}, want: "new", perm: 0o644},
		"replace keeps no mode":   {old: "old", opts: Options{Perm: 0o400}, want: "new", perm: 0o400},
		"fixed temporary name":    {old: "old", opts: Options{Perm: 0o600, TempName: "f.tmp"}, want: "new", perm: 0o600},
		"temporary name taken":    {old: "old", opts: Options{Perm: 0o600, TempName: "f.tmp"}, errIs: fs.ErrExist, want: "old", foreign: true},
		"no replace, none there":  {opts: Options{Perm: 0o600, NoReplace: true}, want: "new", perm: 0o600},
		"no replace, one there":   {old: "old", opts: Options{Perm: 0o600, NoReplace: true}, errIs: fs.ErrExist, want: "old"},
		"no replace, fixed temp":  {opts: Options{Perm: 0o600, NoReplace: true, TempName: "f.tmp"}, want: "new", perm: 0o600},
		"no replace, both there":  {old: "old", opts: Options{Perm: 0o600, NoReplace: true, TempName: "f.tmp"}, errIs: fs.ErrExist, want: "old"},
		"perm set past the umask": {opts: Options{Perm: 0o666}, want: "new", perm: 0o666},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			want := []string{}
			if tc.old != "" {
				if err := os.WriteFile(path, []byte(tc.old), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			if tc.old != "" || tc.want != "" {
				want = append(want, "f")
			}
			if tc.foreign {
				if err := os.WriteFile(filepath.Join(dir, tc.opts.TempName), []byte("theirs"), 0o600); err != nil {
					t.Fatal(err)
				}
				want = append(want, tc.opts.TempName)
			}
			err := WriteFile(path, []byte("new"), tc.opts)
			if tc.errIs == nil && err != nil || tc.errIs != nil && !errors.Is(err, tc.errIs) {
				t.Fatalf("WriteFile: %v, want %v", err, tc.errIs)
			}
			got, rerr := os.ReadFile(path)
			if rerr != nil || string(got) != tc.want {
				t.Errorf("content %q (%v), want %q", got, rerr, tc.want)
			}
			if tc.perm != 0 {
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != tc.perm {
					t.Errorf("mode %v (%v), want %v", fi.Mode().Perm(), err, tc.perm)
				}
			}
			if got := names(t, dir); !slices.Equal(got, want) {
				t.Errorf("directory holds %q, want %q", got, want)
			}
			if tc.foreign {
				if b, _ := os.ReadFile(filepath.Join(dir, tc.opts.TempName)); string(b) != "theirs" {
					t.Errorf("someone else's temporary file changed to %q", b)
				}
			}
		})
	}
}

// Every way of not committing leaves the old file as it was and no
// temporary file.
func TestFailureLeavesOldFile(t *testing.T) {
	tests := map[string]func(t *testing.T, path string) error{
		"abort after a write": func(t *testing.T, path string) error {
			f, err := Create(path, Options{Perm: 0o600})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("half")); err != nil {
				t.Fatal(err)
			}
			if err := f.Abort(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(f.TempName()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("temporary file after Abort: %v", err)
			}
			return errors.New("aborted")
		},
		"rename fails": func(t *testing.T, path string) error {
			// A directory in the final file's place refuses the rename.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(path, "x"), []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			return WriteFile(path, []byte("new"), Options{Perm: 0o600})
		},
		"bad temporary name": func(t *testing.T, path string) error {
			return WriteFile(path, []byte("new"), Options{Perm: 0o600, TempName: "../f.tmp"})
		},
		"commit twice": func(t *testing.T, path string) error {
			f, err := Create(path, Options{Perm: 0o600})
			if err != nil {
				t.Fatal(err)
			}
			f.Abort()
			return f.Commit()
		},
	}
	for name, fail := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := fail(t, path); err == nil {
				t.Fatal("no error")
			}
			old := path
			if fi, _ := os.Stat(path); fi != nil && fi.IsDir() {
				old = filepath.Join(path, "x")
			}
			if b, err := os.ReadFile(old); err != nil || string(b) != "old" {
				t.Errorf("old file %q (%v)", b, err)
			}
			if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
				t.Errorf("directory holds %q, want only f", got)
			}
		})
	}
}

// A write that fails for lack of space (a real, full file system: a small
// tmpfs) leaves the old file intact and no temporary file.
func TestFullFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old"), Options{Perm: 0o600}); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(path, bytes.Repeat([]byte("x"), 1<<20), Options{Perm: 0o600})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write of 1 MiB into 64 KiB: %v, want ENOSPC", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "old" {
		t.Errorf("old file %q (%v)", b, err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"f"}) {
		t.Errorf("directory holds %q, want only f", got)
	}
}

func TestCreateInMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	err := WriteFile(filepath.Join(dir, "no", "f"), []byte("x"), Options{Perm: 0o600})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err %v, want ErrNotExist", err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("directory holds %q", got)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Error(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
}
