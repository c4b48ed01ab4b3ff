package images

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ImportOptions tunes an import. The zero value is usable.
type ImportOptions struct {
	// InUse reports whether a blob is referenced by another image in the
	// registry; rollback never removes such blobs. Nil means none is.
	InUse func(sha256 string) bool
	// Check, if non-nil, vets the parsed manifest before any file is
	// read: an error stops the import with nothing added.
	Check func(*Manifest) error
	// Progress, if non-nil, is called with the running totals: once when
	// the manifest is read, then as each file is copied. It is called
	// from the importing goroutine and must be quick.
	Progress func(Progress)
}

// Progress is how far an import has come.
type Progress struct {
	// Path is the manifest path of the file being copied ("" before
	// the first).
	Path string
	// Done and Total are the bytes of the whole image: the sum of the
	// manifest's sizes, and how many of them are stored so far.
	Done, Total int64
	// FilesDone of Files are stored.
	FilesDone, Files int
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
	src, err := OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer src.Close()
	im, err := Import(ctx, s, src, opts)
	if err != nil {
		return nil, nil, err
	}
	im.Release()
	return im.Manifest, im.Blobs, nil
}

// Imported is the result of Import: the manifest and its blobs, which stay
// pinned (Remove refuses them with ErrInUse) until Release, so the caller
// can record them in the registry before a concurrent delete could take
// them away.
type Imported struct {
	Manifest *Manifest
	// Blobs holds one blob per manifest file, in order.
	Blobs []Blob

	s      *Store
	pinned []string
	once   sync.Once
}

// Release unpins the blobs. It is safe to call more than once.
func (im *Imported) Release() {
	im.once.Do(func() { im.s.unpin(im.pinned, nil) })
}

// Import reads src's manifest, validates it (and runs opts.Check), then
// streams every file it lists into s, verifying size and sha256 while
// writing. On success the blobs stay pinned until the caller calls
// Release. On failure the blobs this import created that neither another
// image (opts.InUse) nor a concurrent import references are removed, and an
// *ImportError says which; nothing half-written is ever left in the store.
func Import(ctx context.Context, s *Store, src Source, opts ImportOptions) (*Imported, error) {
	data, err := src.Manifest(ctx)
	if err != nil {
		return nil, &ImportError{Err: err}
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, err
	}
	if opts.Check != nil {
		if err := opts.Check(m); err != nil {
			return nil, fmt.Errorf("images: manifest: %w", err)
		}
	}
	pr := Progress{Files: len(m.Files)}
	for _, f := range m.Files {
		pr.Total += f.Size
	}
	report := func() {
		if opts.Progress != nil {
			opts.Progress(pr)
		}
	}
	report()

	var pinned []string
	created := map[string]bool{}
	blobs := make([]Blob, 0, len(m.Files))
	for _, f := range m.Files {
		pr.Path = f.Path
		before := pr.Done
		b, made, err := importFile(ctx, s, src, f, func(n int64) {
			pr.Done = before + n
			report()
		})
		if err != nil {
			return nil, rollback(s, pinned, created, opts.InUse, &ImportError{Path: f.Path, Err: err})
		}
		pinned = append(pinned, b.SHA256)
		if made {
			created[b.SHA256] = true
		}
		blobs = append(blobs, b)
		pr.Done = before + f.Size
		pr.FilesDone++
		report()
	}
	return &Imported{Manifest: m, Blobs: blobs, s: s, pinned: pinned}, nil
}

func importFile(ctx context.Context, s *Store, src Source, f File, progress func(int64)) (Blob, bool, error) {
	rc, err := src.Open(ctx, f)
	if err != nil {
		return Blob{}, false, err
	}
	defer rc.Close()
	return s.add(ctx, rc, f.SHA256, f.Size, progress, true)
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
