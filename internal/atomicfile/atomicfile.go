// Package atomicfile writes files that a crash or a power cut leaves either
// with their old content or with their new, never half written: the data goes
// to a temporary file in the same directory, which is synced, closed and
// renamed over the final name, and then the directory is synced so that the
// rename itself is on disk.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrDirSync marks the error of a Commit whose rename happened but whose
// directory sync failed: the file has its new content now, but the rename
// may not survive a power cut. The caller must not remove anything then.
var ErrDirSync = errors.New("the file is in place, but syncing its directory failed (it may not survive a power cut)")

// Options say how Create and WriteFile write.
type Options struct {
	// Perm is the file's mode, set exactly (the umask does not apply).
	Perm fs.FileMode
	// TempName, if set, is the temporary file's name in the final file's
	// directory, created exclusively: when it exists, Create fails with an
	// error wrapping fs.ErrExist and leaves it alone, so that two writers of
	// the same file at the same time find out instead of racing. Empty
	// picks a fresh name (".NAME.tmp" and a random suffix).
	TempName string
	// NoReplace makes Commit fail with an error wrapping fs.ErrExist, and
	// leave the existing file alone, when the final name exists by then.
	NoReplace bool
}

// File is a file being written under a temporary name. Write to it, then
// Commit; Abort (deferred) removes the temporary file unless Commit ran.
type File struct {
	f         *os.File
	path      string
	noReplace bool
	done      bool
}

// Create starts writing path.
func Create(path string, o Options) (*File, error) {
	dir := filepath.Dir(path)
	var f *os.File
	var err error
	if o.TempName == "" {
		f, err = os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	} else {
		if strings.ContainsRune(o.TempName, filepath.Separator) || o.TempName == "." || o.TempName == ".." {
			return nil, fmt.Errorf("atomicfile: temporary name %q is not a file name", o.TempName)
		}
		f, err = os.OpenFile(filepath.Join(dir, o.TempName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return nil, err
	}
	a := &File{f: f, path: path, noReplace: o.NoReplace}
	if err := f.Chmod(o.Perm); err != nil {
		a.Abort()
		return nil, err
	}
	return a, nil
}

// TempName is the temporary file's path.
func (a *File) TempName() string { return a.f.Name() }

// Write writes to the temporary file.
func (a *File) Write(p []byte) (int, error) { return a.f.Write(p) }

// ReadFrom copies r into the temporary file, letting the kernel move the
// bytes where it can (io.Copy uses it).
func (a *File) ReadFrom(r io.Reader) (int64, error) { return a.f.ReadFrom(r) }

// Commit makes the written data the content of the final file. On an error
// before the rename the final file is untouched and the temporary one is
// removed; an error after it wraps ErrDirSync.
func (a *File) Commit() error {
	if a.done {
		return errors.New("atomicfile: commit of a file already committed or aborted")
	}
	tmp := a.f.Name()
	if err := a.f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("sync %s: %w", tmp, err), a.Abort())
	}
	a.done = true
	if err := a.f.Close(); err != nil {
		return errors.Join(fmt.Errorf("close %s: %w", tmp, err), removeTemp(tmp))
	}
	var err error
	if a.noReplace {
		// RENAME_NOREPLACE checks and renames in one step, where a Stat
		// first would leave a window for another writer.
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, a.path, unix.RENAME_NOREPLACE)
		if err != nil {
			err = &os.LinkError{Op: "rename", Old: tmp, New: a.path, Err: err}
		}
	} else {
		err = os.Rename(tmp, a.path)
	}
	if err != nil {
		return errors.Join(err, removeTemp(tmp))
	}
	if err := SyncDir(filepath.Dir(a.path)); err != nil {
		return fmt.Errorf("%s: %w: %w", a.path, ErrDirSync, err)
	}
	return nil
}

// Abort removes the temporary file; after Commit (or a failed one) it does
// nothing. The final file is untouched.
func (a *File) Abort() error {
	if a.done {
		return nil
	}
	a.done = true
	a.f.Close()
	return removeTemp(a.f.Name())
}

func removeTemp(name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove temporary file: %w", err)
	}
	return nil
}

// WriteFile writes data to path atomically and durably.
func WriteFile(path string, data []byte, o Options) error {
	f, err := Create(path, o)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}

// SyncDir syncs a directory, which makes the creations, renames and
// removals of names in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
