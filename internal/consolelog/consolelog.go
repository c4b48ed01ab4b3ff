// Package consolelog keeps the serial console output of machines' boots on
// disk: per machine a ring of its last Options.Boots boots, each kept to at
// most Options.BootBytes of its newest output. Files are only ever appended
// to or removed, so a crash loses at most the write in flight, and memory
// use does not grow with the output: a boot is two segment files of half
// the cap each; when the newer one is full the older one is removed and a
// new one started.
//
// Layout under the directory, per machine id:
//
//	<id>/<boot>.json         the boot's record (number, start, phase)
//	<id>/<boot>.<seg>.log    its output, segment by segment
//
// with boot and seg as zero-padded decimal numbers counting from 1 and 0.
package consolelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options bound what is kept per machine.
type Options struct {
	// Boots is how many boots of a machine are kept (default 5).
	Boots int
	// BootBytes caps each boot's output (default 256 KiB, at least 2):
	// beyond it the oldest output is dropped, half the cap at a time.
	BootBytes int64
}

// Boot describes one kept boot.
type Boot struct {
	N       int       `json:"boot"`
	Started time.Time `json:"started"`
	Phase   string    `json:"phase,omitempty"`
	// Bytes is how much of its output is kept, Dropped how much older
	// output the cap removed.
	Bytes   int64 `json:"bytes"`
	Dropped int64 `json:"dropped"`
}

// Log is the console logs under one directory. Its methods are safe for
// concurrent use; a machine has at most one Writer at a time (the
// recorder's), which Log does not enforce.
type Log struct {
	dir  string
	opts Options
	mu   sync.Mutex // orders boot creation and removal against each other
}

// ErrNoBoot: the machine has no kept boot (or not the one asked for).
var ErrNoBoot = errors.New("no console log kept for that boot")

// Open uses dir (created if missing) for the logs.
func Open(dir string, opts Options) (*Log, error) {
	if opts.Boots <= 0 {
		opts.Boots = 5
	}
	if opts.BootBytes <= 0 {
		opts.BootBytes = 256 << 10
	}
	opts.BootBytes = max(opts.BootBytes, 2)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("console log directory: %w", err)
	}
	return &Log{dir: dir, opts: opts}, nil
}

// segBytes is the size of one segment: a boot keeps at most two.
func (l *Log) segBytes() int64 { return l.opts.BootBytes / 2 }

// machineDir checks that id is one path element and names its directory.
func (l *Log) machineDir(id string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, `/\`+"\x00") {
		return "", fmt.Errorf("machine id %q cannot name a console log", id)
	}
	return filepath.Join(l.dir, id), nil
}

// files are the boot numbers and, per boot, the segment numbers found in a
// machine's directory, each sorted.
type files struct {
	boots []int
	segs  map[int][]int
}

func (l *Log) scan(dir string) (files, error) {
	f := files{segs: map[int][]int{}}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("console log: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if b, ok := strings.CutSuffix(name, ".json"); ok {
			if n, err := strconv.Atoi(b); err == nil && n > 0 {
				f.boots = append(f.boots, n)
			}
			continue
		}
		if rest, ok := strings.CutSuffix(name, ".log"); ok {
			b, s, ok := strings.Cut(rest, ".")
			bn, err1 := strconv.Atoi(b)
			sn, err2 := strconv.Atoi(s)
			if ok && err1 == nil && err2 == nil && bn > 0 && sn >= 0 {
				f.segs[bn] = append(f.segs[bn], sn)
			}
		}
	}
	slices.Sort(f.boots)
	for _, s := range f.segs {
		slices.Sort(s)
	}
	return f, nil
}

func bootMeta(dir string, n int) string { return filepath.Join(dir, fmt.Sprintf("%06d.json", n)) }
func segPath(dir string, n, seg int) string {
	return filepath.Join(dir, fmt.Sprintf("%06d.%06d.log", n, seg))
}

// NewBoot starts the next boot of machine, of phase, and returns its
// writer; the boots beyond the ring's size are removed, oldest first.
func (l *Log) NewBoot(machine, phase string, now time.Time) (*Writer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	dir, err := l.machineDir(machine)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("console log: %w", err)
	}
	f, err := l.scan(dir)
	if err != nil {
		return nil, err
	}
	n := 1
	if len(f.boots) > 0 {
		n = f.boots[len(f.boots)-1] + 1
	}
	for bn := range f.segs { // output whose record is missing counts too
		n = max(n, bn+1)
	}
	meta, err := json.Marshal(Boot{N: n, Started: now.UTC(), Phase: phase})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(bootMeta(dir, n), meta, 0o640); err != nil {
		return nil, fmt.Errorf("console log: %w", err)
	}
	// Keep Boots boots with this one.
	old := slices.Clone(f.boots)
	for bn := range f.segs {
		if !slices.Contains(old, bn) {
			old = append(old, bn)
		}
	}
	for _, bn := range old {
		if bn <= n-l.opts.Boots {
			if err := removeBoot(dir, bn, f.segs[bn]); err != nil {
				return nil, err
			}
		}
	}
	return l.openWriter(dir, n, nil)
}

// Resume continues machine's newest boot (after a restart of the recorder
// mid-phase), or starts one of phase if it has none.
func (l *Log) Resume(machine, phase string, now time.Time) (*Writer, error) {
	l.mu.Lock()
	dir, err := l.machineDir(machine)
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	f, err := l.scan(dir)
	if err != nil || len(f.boots) == 0 {
		l.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return l.NewBoot(machine, phase, now)
	}
	defer l.mu.Unlock()
	n := f.boots[len(f.boots)-1]
	return l.openWriter(dir, n, f.segs[n])
}

func removeBoot(dir string, n int, segs []int) error {
	for _, s := range segs {
		if err := os.Remove(segPath(dir, n, s)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("console log: %w", err)
		}
	}
	if err := os.Remove(bootMeta(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("console log: %w", err)
	}
	return nil
}

func (l *Log) openWriter(dir string, n int, segs []int) (*Writer, error) {
	w := &Writer{dir: dir, boot: n, segBytes: l.segBytes()}
	if len(segs) > 0 {
		w.seg = segs[len(segs)-1]
		w.older = segs[:len(segs)-1]
	}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// Writer appends to one boot's output. It is safe for concurrent use.
type Writer struct {
	mu       sync.Mutex
	dir      string
	boot     int
	segBytes int64
	seg      int   // the segment being written
	older    []int // segments before it still on disk
	f        *os.File
	size     int64 // of f
	closed   bool
}

func (w *Writer) open() error {
	f, err := os.OpenFile(segPath(w.dir, w.boot, w.seg), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("console log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("console log: %w", err)
	}
	w.f, w.size = f, st.Size()
	return nil
}

// Boot is the number of the boot w writes.
func (w *Writer) Boot() int { return w.boot }

// Write appends p, moving to a new segment (and removing all but the one
// before it) each time a segment is full.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, os.ErrClosed
	}
	written := 0
	for len(p) > 0 {
		if w.size >= w.segBytes {
			if err := w.rotate(); err != nil {
				return written, err
			}
		}
		chunk := p[:min(int64(len(p)), w.segBytes-w.size)]
		n, err := w.f.Write(chunk)
		written += n
		w.size += int64(n)
		if err != nil {
			return written, fmt.Errorf("console log: %w", err)
		}
		p = p[n:]
	}
	return written, nil
}

func (w *Writer) rotate() error {
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("console log: %w", err)
	}
	w.older = append(w.older, w.seg)
	w.seg++
	// Two segments at most: the full one just closed and the new one.
	for len(w.older) > 1 {
		if err := os.Remove(segPath(w.dir, w.boot, w.older[0])); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("console log: %w", err)
		}
		w.older = w.older[1:]
	}
	return w.open()
}

// Close ends the writer; the boot stays on disk.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.f.Close()
}

// Boots lists machine's kept boots, oldest first.
func (l *Log) Boots(machine string) ([]Boot, error) {
	dir, err := l.machineDir(machine)
	if err != nil {
		return nil, err
	}
	f, err := l.scan(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Boot, 0, len(f.boots))
	for _, n := range f.boots {
		b, err := l.boot(dir, n, f.segs[n])
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed by a rotation meanwhile
			}
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (l *Log) boot(dir string, n int, segs []int) (Boot, error) {
	raw, err := os.ReadFile(bootMeta(dir, n))
	if err != nil {
		return Boot{}, err
	}
	var b Boot
	if err := json.Unmarshal(raw, &b); err != nil {
		return Boot{}, fmt.Errorf("console log: boot %d record: %w", n, err)
	}
	b.N = n
	if len(segs) > 0 {
		// Every segment before the first kept one was full.
		b.Dropped = int64(segs[0]) * l.segBytes()
	}
	for _, s := range segs {
		if st, err := os.Stat(segPath(dir, n, s)); err == nil {
			b.Bytes += st.Size()
		}
	}
	return b, nil
}

// Read returns boot n of machine (0: the newest) and its kept output.
func (l *Log) Read(machine string, n int) (Boot, []byte, error) {
	dir, err := l.machineDir(machine)
	if err != nil {
		return Boot{}, nil, err
	}
	f, err := l.scan(dir)
	if err != nil {
		return Boot{}, nil, err
	}
	if n == 0 && len(f.boots) > 0 {
		n = f.boots[len(f.boots)-1]
	}
	if !slices.Contains(f.boots, n) {
		return Boot{}, nil, ErrNoBoot
	}
	b, err := l.boot(dir, n, f.segs[n])
	if errors.Is(err, fs.ErrNotExist) {
		return Boot{}, nil, ErrNoBoot
	}
	if err != nil {
		return Boot{}, nil, err
	}
	var out []byte
	for _, s := range f.segs[n] {
		data, err := os.ReadFile(segPath(dir, n, s))
		if errors.Is(err, fs.ErrNotExist) {
			continue // rotated away while reading
		}
		if err != nil {
			return Boot{}, nil, fmt.Errorf("console log: %w", err)
		}
		out = append(out, data...)
	}
	return b, out, nil
}

// Tail returns the last max bytes of machine's newest boot, nil when it has
// none.
func (l *Log) Tail(machine string, maxBytes int) ([]byte, error) {
	_, data, err := l.Read(machine, 0)
	if errors.Is(err, ErrNoBoot) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(data) > maxBytes {
		data = data[len(data)-maxBytes:]
	}
	return data, nil
}

// Remove deletes every boot of machine (a deleted machine).
func (l *Log) Remove(machine string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	dir, err := l.machineDir(machine)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("console log: %w", err)
	}
	return nil
}

// Machines lists the machine ids that have a console log.
func (l *Log) Machines() ([]string, error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("console log: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

var _ io.WriteCloser = (*Writer)(nil)
