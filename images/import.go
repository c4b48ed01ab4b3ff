package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// ImportOptions tunes ImportDir. The zero value is usable.
type ImportOptions struct {
	// InUse reports whether a blob is referenced by another image in the
	// registry; rollback never removes such blobs. Nil means none is.
	InUse func(sha256 string) bool
	// Progress, if non-nil, is called as each file is copied.
	Progress func(path string, written, size int64)
}

// ImportError is returned when an import fails after adding blobs; Removed
// lists the blobs the rollback deleted again.
type ImportError struct {
	Path    string // file that failed ("" for the manifest)
	Err     error
	Removed []string
	Kept    []string // added by this import but kept (in use elsewhere)
}

func (e *ImportError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		fmt.Fprintf(&b, "images: import %s: %v", e.Path, e.Err)
	} else {
		fmt.Fprintf(&b, "images: import: %v", e.Err)
	}
	if len(e.Removed) > 0 {
		fmt.Fprintf(&b, " (rolled back: removed %s)", strings.Join(e.Removed, ", "))
	}
	if len(e.Kept) > 0 {
		fmt.Fprintf(&b, " (kept, in use: %s)", strings.Join(e.Kept, ", "))
	}
	return b.String()
}

func (e *ImportError) Unwrap() error { return e.Err }

// ImportDir reads dir/rackd-image.json, validates it, and adds every file
// it lists to s with its size and sha256 verified. Files are opened through
// an os.Root, so symlinks cannot escape dir. It returns the manifest and
// the blobs, one per manifest file in order. If any file fails, the blobs
// this import created that neither another image (opts.InUse) nor a
// concurrent import references are removed, and an *ImportError says which.
func ImportDir(ctx context.Context, s *Store, dir string, opts ImportOptions) (*Manifest, []Blob, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("images: import: %w", err)
	}
	defer root.Close()

	mf, err := root.Open(ManifestName)
	if err != nil {
		return nil, nil, fmt.Errorf("images: import: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(mf, MaxManifestSize+1))
	mf.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("images: import: read manifest: %w", err)
	}
	if len(data) > MaxManifestSize {
		return nil, nil, fmt.Errorf("images: import: manifest larger than %d bytes", MaxManifestSize)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, nil, err
	}

	var pinned []string
	created := map[string]bool{}
	blobs := make([]Blob, 0, len(m.Files))
	for _, f := range m.Files {
		b, made, err := importFile(ctx, s, root, f, opts.Progress)
		if err != nil {
			return nil, nil, rollback(s, pinned, created, opts.InUse, &ImportError{Path: f.Path, Err: err})
		}
		pinned = append(pinned, b.SHA256)
		if made {
			created[b.SHA256] = true
		}
		blobs = append(blobs, b)
	}
	s.unpin(pinned, nil)
	return m, blobs, nil
}

func importFile(ctx context.Context, s *Store, root *os.Root, f File, progress func(string, int64, int64)) (Blob, bool, error) {
	fh, err := root.Open(f.Path)
	if err != nil {
		return Blob{}, false, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return Blob{}, false, err
	}
	if !fi.Mode().IsRegular() {
		return Blob{}, false, errors.New("not a regular file")
	}
	var p func(int64)
	if progress != nil {
		p = func(n int64) { progress(f.Path, n, f.Size) }
	}
	return s.add(ctx, fh, f.SHA256, f.Size, p, true)
}

func rollback(s *Store, pinned []string, created map[string]bool, inUse func(string) bool, ie *ImportError) error {
	removable := map[string]bool{}
	for h := range created {
		if inUse != nil && inUse(h) {
			ie.Kept = append(ie.Kept, h)
			continue
		}
		removable[h] = true
	}
	removed, errs := s.unpin(pinned, removable)
	for h := range removable { // still there: pinned by a concurrent import
		ie.Kept = append(ie.Kept, h)
	}
	ie.Removed = removed
	sort.Strings(ie.Kept)
	if len(errs) > 0 {
		ie.Err = errors.Join(append([]error{ie.Err}, errs...)...)
	}
	return ie
}
