package boot

import (
	"fmt"
	"os"
	"sync"
)

// RotatingFile is a log file rotated by size: when a write would take it
// past Max bytes, PATH.N-1 becomes PATH.N (down to PATH.1), PATH becomes
// PATH.1 and a new PATH starts; at most Keep old files stay. The log on
// the data partition is bounded at Max*(Keep+1) bytes whatever rackd
// prints. Writes are whole: a write is never split across two files.
type RotatingFile struct {
	Path string
	Max  int64
	Keep int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Write appends p, rotating first when it would not fit.
func (r *RotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	if r.size > 0 && r.size+int64(len(p)) > r.Max {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *RotatingFile) open() error {
	f, err := os.OpenFile(r.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

func (r *RotatingFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	r.f = nil
	if r.Keep <= 0 {
		if err := os.Remove(r.Path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return r.open()
	}
	for i := r.Keep - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", r.Path, i), fmt.Sprintf("%s.%d", r.Path, i+1)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Rename(r.Path, r.Path+".1"); err != nil && !os.IsNotExist(err) {
		return err
	}
	return r.open()
}

// Sync flushes the current file to disk.
func (r *RotatingFile) Sync() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	return r.f.Sync()
}

// Close closes the current file.
func (r *RotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
