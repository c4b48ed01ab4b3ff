package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

func mustOpen(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func dirNames(t *testing.T, d string) []string {
	t.Helper()
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	for _, sub := range []string{"tmp", "sha256"} {
		if n := dirNames(t, filepath.Join(dir, sub)); len(n) != 0 {
			t.Errorf("%s not empty: %v", sub, n)
		}
	}
}

func TestAdd(t *testing.T) {
	data := []byte("vmlinuz contents")
	good := sum(data)
	bad := sum([]byte("other"))
	tests := []struct {
		name    string
		sha     string
		size    int64
		wantErr string
	}{
		{"verified", good, int64(len(data)), ""},
		{"unverified", "", -1, ""},
		{"size only", "", int64(len(data)), ""},
		{"wrong sha", bad, int64(len(data)), "expected " + bad + ", got " + good},
		{"too short", good, int64(len(data)) + 5, "expected 21 bytes, got 16"},
		{"too long", good, 3, "expected 3 bytes"},
		{"malformed want", "ABC", -1, "invalid sha256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, dir := mustOpen(t)
			var last int64
			b, err := s.Add(context.Background(), bytes.NewReader(data), tc.sha, tc.size, func(n int64) { last = n })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				assertEmpty(t, dir)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b != (Blob{good, int64(len(data))}) || last != int64(len(data)) {
				t.Fatalf("blob %+v progress %d", b, last)
			}
			if !s.Has(good) {
				t.Fatal("Has = false")
			}
			f, ob, err := s.Open(good)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(f)
			f.Close()
			if !bytes.Equal(got, data) || ob != b {
				t.Fatalf("read %q %+v", got, ob)
			}
			// dedupe
			b2, err := s.Add(context.Background(), bytes.NewReader(data), "", -1, nil)
			if err != nil || b2 != b {
				t.Fatalf("dedupe: %+v %v", b2, err)
			}
			l, err := s.List()
			if err != nil || len(l) != 1 || l[0] != b {
				t.Fatalf("List = %+v %v", l, err)
			}
			if n := dirNames(t, filepath.Join(dir, "tmp")); len(n) != 0 {
				t.Fatalf("tmp left: %v", n)
			}
			if err := s.Remove(good); err != nil {
				t.Fatal(err)
			}
			if s.Has(good) {
				t.Fatal("still there after Remove")
			}
			if err := s.Remove(good); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second Remove: %v", err)
			}
			assertEmpty(t, dir)
		})
	}
}

// cancelReader cancels ctx after the first chunk.
type cancelReader struct {
	cancel context.CancelFunc
	n      int
}

func (r *cancelReader) Read(p []byte) (int, error) {
	r.n++
	if r.n == 2 {
		r.cancel()
	}
	if r.n > 1000 {
		return 0, io.EOF
	}
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

func TestAddCancelled(t *testing.T) {
	s, dir := mustOpen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.Add(ctx, &cancelReader{cancel: cancel}, "", -1, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	assertEmpty(t, dir)
}

func TestAddReadError(t *testing.T) {
	s, dir := mustOpen(t)
	r := io.MultiReader(strings.NewReader("part"), errReader{})
	if _, err := s.Add(context.Background(), r, "", -1, nil); err == nil {
		t.Fatal("no error")
	}
	assertEmpty(t, dir)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestConcurrentAdd(t *testing.T) {
	s, dir := mustOpen(t)
	data := bytes.Repeat([]byte("initrd"), 100000)
	want := Blob{sum(data), int64(len(data))}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := s.Add(context.Background(), bytes.NewReader(data), want.SHA256, want.Size, nil)
			if err == nil && b != want {
				err = errors.New("wrong blob")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := dirNames(t, filepath.Join(dir, "sha256")); len(n) != 1 || n[0] != want.SHA256 {
		t.Fatalf("sha256/ = %v", n)
	}
	if n := dirNames(t, filepath.Join(dir, "tmp")); len(n) != 0 {
		t.Fatalf("tmp left: %v", n)
	}
}

func TestBadHexRefused(t *testing.T) {
	s, _ := mustOpen(t)
	for _, h := range []string{
		"", "../../etc/passwd", strings.Repeat("A", 64), strings.Repeat("a", 63),
		strings.Repeat("a", 65), strings.Repeat("a", 62) + "/x", strings.Repeat("g", 64),
	} {
		if _, _, err := s.Open(h); !errors.Is(err, ErrBadHash) {
			t.Errorf("Open(%q) err = %v", h, err)
		}
		if s.Has(h) {
			t.Errorf("Has(%q)", h)
		}
		if err := s.Remove(h); !errors.Is(err, ErrBadHash) {
			t.Errorf("Remove(%q) err = %v", h, err)
		}
	}
	if _, _, err := s.Open(strings.Repeat("a", 64)); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent: %v", err)
	}
}

func TestOpenCleansTmp(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tmp", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tmp", "add-123"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, dir)
}
