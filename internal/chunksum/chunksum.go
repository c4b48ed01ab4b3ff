// Package chunksum is the chunk list of a raw disk image: the SHA-256 of
// each fixed-size chunk of it, in order. The image import records one for
// every disk image (of its raw, decompressed bytes), and the deploy
// environment, given the list, verifies each chunk it writes on its own,
// on as many CPUs as it has, instead of feeding the whole image through
// one sequential digest: in an emulated machine one SHA-256 stream is
// slower than the download. The whole image's SHA-256 stays its identity;
// the list is a content-addressed blob itself, named by its own digest.
//
// The encoding is text, one line of header and one line per chunk:
//
//	rackd-chunks/1 sha256 <chunk size> <image size>
//	<64 lower-case hex digits: the SHA-256 of chunk 0>
//	...
//
// Chunk i covers bytes [i*chunk size, min((i+1)*chunk size, image size));
// an image of n bytes has ceil(n / chunk size) chunks, the last one short
// unless the size divides evenly.
package chunksum

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
)

// Size is the chunk size the import uses: 4 MiB, the deploy environment's
// unit of reading and writing the disk (each chunk is one aligned O_DIRECT
// write and one digest, nothing is copied to line chunks up with writes),
// small enough that a few chunks in flight per CPU fit the deploy
// environment's RAM, large enough that a list is 16 KiB per GiB of image.
const Size = 4 << 20

// MinSize and MaxSize bound the chunk size a list may have: a chunk holds
// the whole held-back head of the disk (1 MiB) and stays a sensible amount
// of memory to keep several of.
const (
	MinSize = 1 << 20
	MaxSize = 64 << 20
)

// MaxImage bounds the image size a list may describe (1 TiB at most, as a
// disk image is): the list is read whole into memory.
const MaxImage = 1 << 40

const magic = "rackd-chunks/1 sha256 "

// List is a chunk list.
type List struct {
	// ChunkSize is the size of every chunk but the last.
	ChunkSize int64
	// ImageSize is the size of the raw image.
	ImageSize int64
	// Sums are the chunks' SHA-256s, in order.
	Sums [][sha256.Size]byte
}

// Count is how many chunks an image of size bytes has in chunks of cs.
func Count(size, cs int64) int64 {
	if cs <= 0 || size <= 0 {
		return 0
	}
	return (size + cs - 1) / cs
}

// Chunk returns the offset and length of chunk i.
func (l *List) Chunk(i int) (off, n int64) {
	off = int64(i) * l.ChunkSize
	return off, min(l.ChunkSize, l.ImageSize-off)
}

// Check says what is wrong with l.
func (l *List) Check() error {
	return check(l.ChunkSize, l.ImageSize, int64(len(l.Sums)))
}

func check(cs, size, sums int64) error {
	if cs < MinSize || cs > MaxSize || cs&(cs-1) != 0 {
		return fmt.Errorf("chunk size %d: want a power of two from %d to %d", cs, MinSize, MaxSize)
	}
	if size <= 0 || size > MaxImage {
		return fmt.Errorf("image size %d: want 1 to %d bytes", size, int64(MaxImage))
	}
	if want := Count(size, cs); sums != want {
		return fmt.Errorf("%d chunk digests for a %d-byte image in chunks of %d: want %d", sums, size, cs, want)
	}
	return nil
}

// Marshal encodes l (which Check must accept).
func (l *List) Marshal() []byte {
	var b bytes.Buffer
	b.Grow(len(magic) + 40 + len(l.Sums)*(2*sha256.Size+1))
	fmt.Fprintf(&b, "%s%d %d\n", magic, l.ChunkSize, l.ImageSize)
	var line [2*sha256.Size + 1]byte
	line[len(line)-1] = '\n'
	for _, s := range l.Sums {
		hex.Encode(line[:2*sha256.Size], s[:])
		b.Write(line[:])
	}
	return b.Bytes()
}

// Parse decodes a chunk list, strictly: the header, exactly as many lines
// as the sizes make chunks, each 64 lower-case hex digits and a newline,
// and nothing after them.
func Parse(b []byte) (*List, error) {
	rest, ok := bytes.CutPrefix(b, []byte(magic))
	if !ok {
		return nil, errors.New("chunk list: not a rackd-chunks/1 sha256 list")
	}
	header, rest, ok := bytes.Cut(rest, []byte("\n"))
	if !ok {
		return nil, errors.New("chunk list: the header does not end")
	}
	cs, size, ok := bytes.Cut(header, []byte(" "))
	if !ok {
		return nil, errors.New("chunk list: the header wants a chunk size and an image size")
	}
	l := &List{}
	var err error
	if l.ChunkSize, err = parseSize(cs); err != nil {
		return nil, fmt.Errorf("chunk list: chunk size: %w", err)
	}
	if l.ImageSize, err = parseSize(size); err != nil {
		return nil, fmt.Errorf("chunk list: image size: %w", err)
	}
	// The sums are checked against the sizes before they are decoded:
	// the count bounds the allocation by what was actually read.
	const line = 2*sha256.Size + 1
	if len(rest)%line != 0 {
		return nil, fmt.Errorf("chunk list: %d bytes of digests: want lines of 64 hex digits", len(rest))
	}
	if err := check(l.ChunkSize, l.ImageSize, int64(len(rest)/line)); err != nil {
		return nil, fmt.Errorf("chunk list: %w", err)
	}
	l.Sums = make([][sha256.Size]byte, 0, len(rest)/line)
	for i := 0; i < len(rest); i += line {
		var s [sha256.Size]byte
		digits := rest[i : i+line-1]
		if rest[i+line-1] != '\n' || !lowerHex(digits) {
			return nil, fmt.Errorf("chunk list: chunk %d: want 64 lower-case hex digits and a newline", i/line)
		}
		hex.Decode(s[:], digits)
		l.Sums = append(l.Sums, s)
	}
	return l, nil
}

// parseSize reads a positive decimal number without a sign or leading
// zero, as Marshal writes it.
func parseSize(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 19 || b[0] == '0' {
		return 0, fmt.Errorf("%q: want a positive decimal number", clip(b))
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q: want a positive decimal number", clip(b))
		}
	}
	return strconv.ParseInt(string(b), 10, 64)
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func clip(b []byte) string {
	if len(b) > 24 {
		return string(b[:24]) + "…"
	}
	return string(b)
}

// Writer computes the chunk list of what is written to it, in chunks of
// ChunkSize (Size when zero). It never fails.
type Writer struct {
	ChunkSize int64
	n         int64 // bytes written
	inChunk   int64 // bytes of the current chunk hashed
	h         hash.Hash
	sums      [][sha256.Size]byte
}

func (w *Writer) Write(p []byte) (int, error) {
	if w.ChunkSize == 0 {
		w.ChunkSize = Size
	}
	if w.h == nil {
		w.h = sha256.New()
	}
	n := len(p)
	for len(p) > 0 {
		k := min(int64(len(p)), w.ChunkSize-w.inChunk)
		w.h.Write(p[:k])
		p, w.inChunk, w.n = p[k:], w.inChunk+k, w.n+k
		if w.inChunk == w.ChunkSize {
			w.flush()
		}
	}
	return n, nil
}

func (w *Writer) flush() {
	var s [sha256.Size]byte
	w.h.Sum(s[:0])
	w.sums = append(w.sums, s)
	w.h.Reset()
	w.inChunk = 0
}

// List returns the chunk list of everything written so far; writing on
// after it is not supported.
func (w *Writer) List() *List {
	if w.ChunkSize == 0 {
		w.ChunkSize = Size
	}
	if w.inChunk > 0 {
		w.flush()
	}
	return &List{ChunkSize: w.ChunkSize, ImageSize: w.n, Sums: w.sums}
}
