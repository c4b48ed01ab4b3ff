package images

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
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
	// Step says what the import does with the file after its download,
	// when it does something: converting a qcow2 disk image, compressing
	// the conversion ("" while downloading; a compressed disk image is
	// checked while it downloads).
	Step string
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
	// ChunkLists are the blobs of the disk files' chunk lists (File.Chunks),
	// pinned as Blobs are.
	ChunkLists []Blob
	// Files are the manifest's files as stored, in order: each with its
	// blob's digest and size and, for a disk file, the format, raw size
	// and raw SHA-256 the import found (a qcow2 file's blob is its
	// conversion: see convertQCOW2).
	Files []File
	// Converted maps the path of each disk file stored in another format
	// than it was read in to the format it was read in (FormatQCOW2: the
	// blob is its conversion, FormatZstd).
	Converted map[string]string

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
	im := &Imported{Manifest: m, Blobs: make([]Blob, 0, len(m.Files)), Files: make([]File, 0, len(m.Files)), s: s}
	for _, f := range m.Files {
		pr.Path, pr.Step = f.Path, ""
		before := pr.Done
		stored, from, b, made, chunks, err := importFile(ctx, s, src, f, func(step string) {
			pr.Step = step
			report()
		}, func(n int64) {
			if pr.Step == "" {
				pr.Done = before + n
				report()
			}
		})
		if chunks != nil {
			// Pinned even when the file failed after it: rolled back.
			pinned = append(pinned, chunks.blob.SHA256)
			if chunks.made {
				created[chunks.blob.SHA256] = true
			}
		}
		if err != nil {
			return nil, rollback(s, pinned, created, opts.InUse, &ImportError{Path: f.Path, Err: err})
		}
		pinned = append(pinned, b.SHA256)
		if made {
			created[b.SHA256] = true
		}
		if chunks != nil {
			im.ChunkLists = append(im.ChunkLists, chunks.blob)
		}
		im.Blobs = append(im.Blobs, b)
		im.Files = append(im.Files, stored)
		if from != "" {
			if im.Converted == nil {
				im.Converted = map[string]string{}
			}
			im.Converted[f.Path] = from
		}
		pr.Done, pr.Step = before+f.Size, ""
		pr.FilesDone++
		report()
	}
	im.pinned = pinned
	return im, nil
}

// addedBlob is a blob an import added (made) or found, pinned.
type addedBlob struct {
	blob Blob
	made bool
}

// importFile streams f from src into s and returns it as stored. A disk
// file is staged first and looked into before it becomes a blob: its
// format found by its magic bytes (and checked against the manifest's),
// a compressed one decompressed once to learn and check its raw size and
// SHA-256, a qcow2 one converted (convertQCOW2), and the chunk list of its
// raw image computed on the way and stored as a blob of its own (chunks,
// pinned: returned even with an error, for the rollback). A file that
// fails any of it never reaches sha256/. from is the format a converted
// file was read in, else empty.
func importFile(ctx context.Context, s *Store, src Source, f File, step func(string), progress func(int64)) (stored File, from string, b Blob, made bool, chunks *addedBlob, err error) {
	rc, err := src.Open(ctx, f)
	if err != nil {
		return File{}, "", Blob{}, false, nil, err
	}
	defer rc.Close()
	var r io.Reader = rc
	if f.SHA512 != "" {
		r = &sha512Reader{r: rc, h: sha512.New(), want: f.SHA512}
	}
	var scan *diskScan
	if f.Role == RoleDisk {
		scan = startDiskScan(ctx)
		r = io.TeeReader(r, scan)
	}
	st, err := s.stage(ctx, r, f.SHA256, f.Size, progress)
	if scan != nil {
		serr := scan.finish(err)
		switch {
		case err != nil && serr != nil && errors.Is(err, serr):
			err = serr // the scan stopped the download: say why
		case err == nil && serr != nil:
			st.discard()
			err = serr
		}
	}
	if err != nil {
		return File{}, "", Blob{}, false, nil, err
	}
	defer st.discard()
	rc.Close()
	stored = f
	if f.Role == RoleDisk {
		d, conv, err := inspectDisk(ctx, s, st, f, scan, step)
		if err != nil {
			return File{}, "", Blob{}, false, nil, err
		}
		if conv != nil {
			st.discard()
			st = conv
			defer conv.discard()
			stored.SHA512 = "" // the vendor's digest is of the qcow2
		}
		stored.Format, stored.RawSize, stored.RawSHA256, from = d.Format, d.RawSize, d.RawSHA256, d.From
		if d.Chunks != nil && d.Chunks.ImageSize > 0 {
			cb, cmade, err := s.add(ctx, bytes.NewReader(d.Chunks.Marshal()), "", -1, nil, true)
			if err != nil {
				return File{}, "", Blob{}, false, nil, fmt.Errorf("store the chunk list: %w", err)
			}
			chunks = &addedBlob{blob: cb, made: cmade}
			stored.Chunks = cb.SHA256
		}
	}
	b, made, err = s.install(ctx, st, true)
	if err != nil {
		return File{}, "", Blob{}, false, chunks, err
	}
	stored.SHA256, stored.Size = b.SHA256, b.Size
	return stored, from, b, made, chunks, nil
}

// inspectDisk checks what the scan found the staged disk file st to be
// against what the manifest's f says. For a qcow2 file it returns the
// staged conversion too.
func inspectDisk(ctx context.Context, s *Store, st *staged, f File, scan *diskScan, step func(string)) (Disk, *staged, error) {
	format := scan.format
	var err error
	if f.Format != "" && f.Format != format {
		return Disk{}, nil, fmt.Errorf("the manifest says format %s, the file is %s (by its first bytes)", f.Format, describeFormat(format))
	}
	var d Disk
	var conv *staged
	switch format {
	case FormatRaw:
		d = Disk{Format: FormatRaw, RawSize: st.blob.Size, RawSHA256: st.blob.SHA256, Chunks: scan.chunks}
	case FormatQCOW2:
		if conv, d, err = convertQCOW2(ctx, s, st.name, step, nil); err != nil {
			return Disk{}, nil, err
		}
	default:
		d = Disk{Format: format, RawSize: scan.raw, RawSHA256: scan.sum, Chunks: scan.chunks}
	}
	fail := func(err error) (Disk, *staged, error) {
		if conv != nil {
			conv.discard()
		}
		return Disk{}, nil, err
	}
	if f.RawSize != 0 && f.RawSize != d.RawSize {
		return fail(fmt.Errorf("raw size mismatch: the manifest says %d bytes, the raw disk image is %d", f.RawSize, d.RawSize))
	}
	if f.RawSHA256 != "" && f.RawSHA256 != d.RawSHA256 {
		return fail(fmt.Errorf("raw sha256 mismatch: expected %s, got %s (of the %s file's raw disk image)", f.RawSHA256, d.RawSHA256, format))
	}
	if d.Chunks != nil && d.Chunks.ImageSize != d.RawSize {
		return fail(fmt.Errorf("the chunk list covers %d bytes of the %d-byte raw disk image", d.Chunks.ImageSize, d.RawSize))
	}
	return d, conv, nil
}

// describeFormat names a format in a message.
func describeFormat(format string) string {
	if format == FormatRaw {
		return "raw (no known compression or image format)"
	}
	return format
}

// sha512Reader checks the SHA-512 of what it reads at EOF: a mismatch is
// a read error, so the store never installs the content.
type sha512Reader struct {
	r    io.Reader
	h    hash.Hash
	want string
}

func (v *sha512Reader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			return n, fmt.Errorf("sha512 mismatch: expected %s, got %s", v.want, got)
		}
	}
	return n, err
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
