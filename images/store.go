package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"rackd/internal/atomicfile"
)

// Blob identifies a stored artefact.
type Blob struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// ErrNotFound is returned (wrapped) when a blob is absent.
var ErrNotFound = errors.New("images: blob not found")

// ErrMismatch is returned (wrapped) when content added is not the size or
// SHA-256 it had to be.
var ErrMismatch = errors.New("not the content wanted")

// ErrBadHash is returned (wrapped) for a malformed hex digest.
var ErrBadHash = errors.New("images: invalid sha256 (want 64 lowercase hex characters)")

// Store is a content-addressed blob store rooted at a directory.
// It is safe for concurrent use.
type Store struct {
	dir  string
	blob string // <dir>/sha256
	tmp  string // <dir>/tmp

	// mu orders the final install step (exists check + rename) against
	// Remove, so a Remove cannot race an Add that found the blob present.
	// It also guards pins.
	mu sync.Mutex
	// pins counts imports in progress that reference a blob; Remove and
	// import rollback leave pinned blobs alone.
	pins map[string]int
}

// ErrInUse is returned (wrapped) by Remove while an import references the blob.
var ErrInUse = errors.New("images: blob in use by an import in progress")

// Open opens (creating if needed) the store at dir and removes any
// partial writes left in dir/tmp by an earlier run.
func Open(dir string) (*Store, error) {
	s := &Store{
		dir:  dir,
		blob: filepath.Join(dir, "sha256"),
		tmp:  filepath.Join(dir, "tmp"),
		pins: map[string]int{},
	}
	for _, d := range []string{dir, s.blob, s.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("images: open %s: %w", dir, err)
		}
	}
	ents, err := os.ReadDir(s.tmp)
	if err != nil {
		return nil, fmt.Errorf("images: open %s: %w", dir, err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(s.tmp, e.Name())); err != nil {
			return nil, fmt.Errorf("images: clean tmp: %w", err)
		}
	}
	return s, nil
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.dir }

// ValidHex reports whether h is 64 lowercase hexadecimal characters.
func ValidHex(h string) bool { return validHexLen(h, 64) }

// validHexLen reports whether h is n lowercase hexadecimal characters.
func validHexLen(h string, n int) bool {
	if len(h) != n {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func (s *Store) path(h string) (string, error) {
	if !ValidHex(h) {
		return "", fmt.Errorf("%w: %q", ErrBadHash, h)
	}
	return filepath.Join(s.blob, h), nil
}

// Add streams r into the store. If wantSHA256 is non-empty the content must
// hash to it; if wantSize >= 0 the content must be exactly that long.
// progress, if non-nil, is called with the running byte count. On any
// failure (mismatch, read error, cancelled ctx) nothing is left behind.
// If the blob already exists the new copy is discarded and the existing
// blob returned.
func (s *Store) Add(ctx context.Context, r io.Reader, wantSHA256 string, wantSize int64, progress func(written int64)) (Blob, error) {
	b, _, err := s.add(ctx, r, wantSHA256, wantSize, progress, false)
	return b, err
}

// add is Add that also reports whether this call created the blob and,
// if pin is set, pins the blob (under the same lock as the install) on
// success; the caller must unpin it.
func (s *Store) add(ctx context.Context, r io.Reader, wantSHA256 string, wantSize int64, progress func(int64), pin bool) (Blob, bool, error) {
	st, err := s.stage(ctx, r, wantSHA256, wantSize, progress)
	if err != nil {
		return Blob{}, false, err
	}
	defer st.discard()
	return s.install(ctx, st, pin)
}

// staged is content written to tmp/, verified and fsynced, that is not a
// blob yet: install makes it one, discard removes it. Import stages a disk
// image first so that it can look inside (decompress it, convert it)
// before anything is in sha256/.
type staged struct {
	name string // the file in tmp/
	blob Blob
}

// stage streams r into a new file in tmp/ and checks it as Add does. On
// failure nothing is left behind.
func (s *Store) stage(ctx context.Context, r io.Reader, wantSHA256 string, wantSize int64, progress func(int64)) (*staged, error) {
	if wantSHA256 != "" && !ValidHex(wantSHA256) {
		return nil, fmt.Errorf("%w: %q", ErrBadHash, wantSHA256)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(s.tmp, "add-*")
	if err != nil {
		return nil, fmt.Errorf("images: add: %w", err)
	}
	tmpName := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmpName)
		}
	}()

	h := sha256.New()
	w := io.MultiWriter(f, h)
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, rerr := r.Read(buf)
		if m > 0 {
			if wantSize >= 0 && n+int64(m) > wantSize {
				return nil, fmt.Errorf("images: size mismatch: expected %d bytes, got more than that: %w", wantSize, ErrMismatch)
			}
			if _, werr := w.Write(buf[:m]); werr != nil {
				return nil, fmt.Errorf("images: add: %w", werr)
			}
			n += int64(m)
			if progress != nil {
				progress(n)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("images: add: read: %w", rerr)
		}
	}
	if wantSize >= 0 && n != wantSize {
		return nil, fmt.Errorf("images: size mismatch: expected %d bytes, got %d: %w", wantSize, n, ErrMismatch)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if wantSHA256 != "" && got != wantSHA256 {
		return nil, fmt.Errorf("images: sha256 mismatch: expected %s, got %s: %w", wantSHA256, got, ErrMismatch)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("images: add: fsync: %w", err)
	}
	if err := f.Chmod(0o444); err != nil {
		return nil, fmt.Errorf("images: add: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("images: add: %w", err)
	}
	done = true
	return &staged{name: tmpName, blob: Blob{SHA256: got, Size: n}}, nil
}

// discard removes st's file if install has not taken it.
func (st *staged) discard() {
	if st.name != "" {
		os.Remove(st.name)
		st.name = ""
	}
}

// install moves st into sha256/ (or, if the blob is there already, drops
// st and returns the existing one), reporting whether it created the
// blob, and pins it if pin is set.
func (s *Store) install(ctx context.Context, st *staged, pin bool) (Blob, bool, error) {
	if err := ctx.Err(); err != nil {
		return Blob{}, false, err
	}
	got := st.blob.SHA256
	final := filepath.Join(s.blob, got)

	s.mu.Lock()
	defer s.mu.Unlock()
	if fi, err := os.Lstat(final); err == nil && fi.Mode().IsRegular() {
		st.discard()
		if pin {
			s.pins[got]++
		}
		return Blob{SHA256: got, Size: fi.Size()}, false, nil
	}
	if err := os.Rename(st.name, final); err != nil {
		return Blob{}, false, fmt.Errorf("images: add: install: %w", err)
	}
	st.name = ""
	if pin {
		s.pins[got]++
	}
	if err := atomicfile.SyncDir(s.blob); err != nil {
		return st.blob, true, fmt.Errorf("images: add: %w", err)
	}
	return st.blob, true, nil
}

// Open opens blob h read-only. The caller closes the file. It is an
// *os.File so servers can use sendfile.
func (s *Store) Open(h string) (*os.File, Blob, error) {
	p, err := s.path(h)
	if err != nil {
		return nil, Blob{}, err
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, Blob{}, fmt.Errorf("%w: %s", ErrNotFound, h)
		}
		return nil, Blob{}, fmt.Errorf("images: open: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Blob{}, fmt.Errorf("images: open: %w", err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, Blob{}, fmt.Errorf("images: open %s: not a regular file", h)
	}
	return f, Blob{SHA256: h, Size: fi.Size()}, nil
}

// Has reports whether blob h is present.
func (s *Store) Has(h string) bool {
	p, err := s.path(h)
	if err != nil {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Remove deletes blob h. Removing an absent blob returns ErrNotFound.
// Readers holding the file open keep reading the old content.
func (s *Store) Remove(h string) error {
	p, err := s.path(h)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins[h] > 0 {
		return fmt.Errorf("%w: %s", ErrInUse, h)
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, h)
		}
		return fmt.Errorf("images: remove: %w", err)
	}
	return atomicfile.SyncDir(s.blob)
}

// List returns all blobs, sorted by digest. Stray files whose names are
// not valid digests are ignored.
func (s *Store) List() ([]Blob, error) {
	ents, err := os.ReadDir(s.blob)
	if err != nil {
		return nil, fmt.Errorf("images: list: %w", err)
	}
	var out []Blob
	for _, e := range ents {
		if !ValidHex(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed concurrently
			}
			return nil, fmt.Errorf("images: list: %w", err)
		}
		out = append(out, Blob{SHA256: e.Name(), Size: fi.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SHA256 < out[j].SHA256 })
	return out, nil
}

// unpin drops one pin on each of hs. Blobs in
// removable whose pin count drops to zero are deleted under the same lock;
// their digests are returned.
func (s *Store) unpin(hs []string, removable map[string]bool) (removed []string, errs []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		if s.pins[h]--; s.pins[h] <= 0 {
			delete(s.pins, h)
		}
	}
	for _, h := range hs {
		if !removable[h] || s.pins[h] > 0 {
			continue
		}
		delete(removable, h) // a digest may appear twice in hs
		if err := os.Remove(filepath.Join(s.blob, h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("images: rollback %s: %w", h, err))
			continue
		}
		removed = append(removed, h)
	}
	if len(removed) > 0 {
		if err := atomicfile.SyncDir(s.blob); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errs
}
