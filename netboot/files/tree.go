package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Tree is a Source rooted at a directory. It opens files through an
// os.Root, so no name, symlink or race with a concurrent rename can make it
// open anything outside the directory: os.Root resolves every element itself
// (openat with O_NOFOLLOW, one element at a time on Linux) and fails with
// "path escapes from parent" instead of following a link out. Symlinks that
// stay inside the tree are followed.
//
// Only regular files are served: directories and special files are
// ErrNotFound. Files are opened non-blocking, so a FIFO dropped into the tree
// cannot hang a server thread in open(2).
type Tree struct {
	root *os.Root
	// escape is os.Root's own "path escapes from parent" error, which the
	// os package does not export. It is taken once from the Root itself
	// (by opening "..") so that refusals are recognised with errors.Is,
	// not by matching message text.
	escape error
}

// NewTree opens dir as a boot file tree. The directory stays open (and
// served as it is, even if renamed) until Close.
func NewTree(dir string) (*Tree, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("files: opening tree: %w", err)
	}
	t := &Tree{root: root}
	f, err := root.Open("..")
	if err == nil {
		_ = f.Close()
		_ = root.Close()
		return nil, errors.New("files: os.Root let \"..\" escape")
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		t.escape = pe.Err
	}
	return t, nil
}

// Dir is the directory the tree was opened on.
func (t *Tree) Dir() string { return t.root.Name() }

// Close releases the tree's directory.
func (t *Tree) Close() error { return t.root.Close() }

// Open opens name (see Clean for the rules) for reading. The *os.File inside
// the returned File is kept as it is, embedded: http.ServeContent's copy
// then reaches net's sendfile path (which looks for syscall.Conn on the
// source), so HTTP boot sends file bytes without copying them through user
// space.
func (t *Tree) Open(ctx context.Context, name string) (File, error) {
	p, err := Clean(name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := t.root.OpenFile(p, openFlags, 0)
	if err != nil {
		return nil, t.classify(name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("files: %q: %w", name, err)
	}
	switch {
	case fi.IsDir():
		_ = f.Close()
		return nil, notFound(name, "is a directory", nil)
	case !fi.Mode().IsRegular():
		_ = f.Close()
		return nil, notFound(name, "not a regular file", nil)
	}
	return &treeFile{File: f, size: fi.Size(), mod: fi.ModTime(), etag: etag(fi)}, nil
}

// classify turns an os.Root error into an *Error.
func (t *Tree) classify(name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// ENOTDIR: an element of the path is a file ("pxelinux.0/x").
		return notFound(name, "", err)
	case t.escape != nil && errors.Is(err, t.escape):
		return refused(name, "resolves outside the tree", nil)
	case errors.Is(err, syscall.ELOOP):
		return refused(name, "too many symbolic links", nil)
	case errors.Is(err, fs.ErrPermission):
		return refused(name, "permission denied", err)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return invalid(name, "name too long")
	}
	return fmt.Errorf("files: %q: %w", name, err)
}

// treeFile is an open file of a Tree. It embeds *os.File on purpose: see
// Tree.Open.
type treeFile struct {
	*os.File
	size int64
	mod  time.Time
	etag string
}

func (f *treeFile) Size() int64        { return f.size }
func (f *treeFile) ModTime() time.Time { return f.mod }
func (f *treeFile) ETag() string       { return f.etag }

// etag derives a strong ETag from the file's identity, size and mtime, as
// nginx does, instead of hashing content that may be a gigabyte image. The
// images store installs by writing a temporary file and renaming it, so a
// new version is a new inode with a new mtime; the inode also tells apart
// two files of equal size written within one mtime tick.
func etag(fi fs.FileInfo) string {
	return `"` + strconv.FormatUint(fileID(fi), 16) + "-" +
		strconv.FormatInt(fi.Size(), 16) + "-" +
		strconv.FormatInt(fi.ModTime().UnixNano(), 16) + `"`
}
