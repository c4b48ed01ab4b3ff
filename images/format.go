package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"rackd/internal/chunksum"
)

// The formats of a disk file. A raw disk image is written to the machine's
// disk as it is; gzip, xz and zstd files hold a raw disk image that the
// deploy environment decompresses while it writes; a qcow2 file is
// converted to raw at import (see convertQCOW2) and never stored as such.
const (
	FormatRaw   = "raw"
	FormatGzip  = "gzip"
	FormatXZ    = "xz"
	FormatZstd  = "zstd"
	FormatQCOW2 = "qcow2"
)

// MaxZstdWindow bounds the window of a zstd disk image: 128 MiB, the zstd
// tool's own default limit for decompressing (what `zstd --long` makes, up
// to --long=27). The deploy environment decompresses within the machine's
// RAM; a larger window would be refused there, so it is refused here.
const MaxZstdWindow = 128 << 20

// sniffLen is how many leading bytes Sniff needs at most.
const sniffLen = 0x48

// Sniff names the format of a disk file from its first bytes (at least
// sniffLen of them when the file has that many): FormatGzip, FormatXZ,
// FormatZstd or FormatQCOW2 by their magic numbers, and FormatRaw for
// anything else, which is what a raw disk image (boot code, a partition
// table, a file system) looks like. It refuses the formats it knows that
// rackd cannot deploy (other virtual disk formats and compressors) with an
// error that says what to do.
func Sniff(head []byte) (string, error) {
	has := func(off int, magic string) bool {
		return len(head) >= off+len(magic) && string(head[off:off+len(magic)]) == magic
	}
	switch {
	case has(0, "\x1f\x8b"):
		return FormatGzip, nil
	case has(0, "\xfd7zXZ\x00"):
		return FormatXZ, nil
	case has(0, "\x28\xb5\x2f\xfd"):
		return FormatZstd, nil
	case len(head) >= 4 && head[0]&0xf0 == 0x50 && has(1, "\x2a\x4d\x18"):
		return FormatZstd, nil // a zstd skippable frame first
	case has(0, "QFI\xfb"):
		return FormatQCOW2, nil
	}
	for _, k := range refusedFormats {
		if has(k.off, k.magic) {
			return "", fmt.Errorf("a %s file: %s", k.name, k.hint)
		}
	}
	return FormatRaw, nil
}

const convertHint = "convert it to raw or qcow2 first (qemu-img convert -O qcow2)"

var refusedFormats = []struct {
	off               int
	magic, name, hint string
}{
	{0, "KDMV", "VMDK", convertHint},
	{0, "# Disk DescriptorFile", "VMDK descriptor", convertHint},
	{0, "vhdxfile", "VHDX", convertHint},
	{0, "conectix", "VHD", convertHint},
	{0, "QED\x00", "QED", convertHint},
	{0x40, "\x7f\x10\xda\xbe", "VDI", convertHint},
	{0, "BZh", "bzip2-compressed", "recompress it with gzip, xz or zstd"},
	{0, "\x04\x22\x4d\x18", "lz4-compressed", "recompress it with gzip, xz or zstd"},
}

// decompressor returns a reader of the raw bytes of r, compressed in
// format (FormatGzip, FormatXZ or FormatZstd), and its closer. A
// truncated or corrupt stream is an error from Read, never an early EOF.
func decompressor(format string, r io.Reader) (io.Reader, func(), error) {
	switch format {
	case FormatGzip:
		// klauspost's inflate, as the deploy environment's: a drop-in for
		// the standard library's, and faster.
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case FormatXZ:
		zr, err := xz.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("xz: %w", err)
		}
		return zr, func() {}, nil
	case FormatZstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderMaxWindow(MaxZstdWindow), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	}
	return nil, nil, fmt.Errorf("format %q is not a compression", format)
}

// Disk is what an import learned about a disk file.
type Disk struct {
	// Format is the file's format as stored: FormatRaw, FormatGzip,
	// FormatXZ or FormatZstd (a qcow2 file is stored converted).
	Format string
	// RawSize and RawSHA256 are of the raw disk image: the file itself
	// when Format is FormatRaw, else its decompressed content.
	RawSize   int64
	RawSHA256 string
	// Chunks is the chunk list of the raw disk image (chunksum.Size
	// chunks), which the deploy environment verifies in parallel.
	Chunks *chunksum.List
	// From is the format the file had before conversion (FormatQCOW2),
	// or empty.
	From string
}

// diskScan looks into a disk file while it downloads: importFile tees the
// bytes it stages into it, and a goroutine sniffs the format and, for a
// compressed file, decompresses and hashes the raw image as the bytes
// arrive. The check so costs no second pass over the file (an import takes
// as long as the slower of the download and the decompression, not their
// sum), and a corrupt stream fails the download as soon as it shows.
type diskScan struct {
	pw   *io.PipeWriter
	done chan struct{}
	// Set by the goroutine before done closes.
	format string
	raw    int64
	sum    string
	chunks *chunksum.List
	err    error
}

func startDiskScan(ctx context.Context) *diskScan {
	pr, pw := io.Pipe()
	ds := &diskScan{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(ds.done)
		ds.format, ds.raw, ds.sum, ds.chunks, ds.err = scanDisk(ctx, pr)
		if ds.err != nil {
			pr.CloseWithError(ds.err) // the download stops with the scan's error
			return
		}
		io.Copy(io.Discard, pr) // what follows a qcow2 file's head
	}()
	return ds
}

func (ds *diskScan) Write(p []byte) (int, error) { return ds.pw.Write(p) }

// finish ends the stream, complete when err is nil, else failed with err,
// and waits for the scan's result.
func (ds *diskScan) finish(err error) error {
	ds.pw.CloseWithError(err)
	<-ds.done
	return ds.err
}

// scanDisk reads a disk file from r: its format by its first bytes; when
// it is compressed, the raw image's size and SHA-256 (scanStream); and,
// when it is raw or compressed, the raw image's chunk list. The size and
// digest of a raw file are the stored blob's.
func scanDisk(ctx context.Context, r io.Reader) (format string, raw int64, sum string, chunks *chunksum.List, err error) {
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(r, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return "", 0, "", nil, err
	}
	head = head[:n]
	if format, err = Sniff(head); err != nil {
		return "", 0, "", nil, fmt.Errorf("not a disk image rackd can deploy: %w", err)
	}
	switch format {
	case FormatGzip, FormatXZ, FormatZstd:
		raw, sum, chunks, err = scanStream(ctx, io.MultiReader(bytes.NewReader(head), r), format)
		return format, raw, sum, chunks, err
	case FormatRaw:
		cw := &chunksum.Writer{}
		cw.Write(head)
		if _, err := io.Copy(cw, r); err != nil {
			return "", 0, "", nil, err
		}
		return format, 0, "", cw.List(), nil
	}
	return format, 0, "", nil, nil
}

// scanStream decompresses r, compressed in format, streaming, and returns
// the raw size, SHA-256 and chunk list. It refuses a raw image larger than
// MaxFileSize, a truncated or corrupt stream, and a compressed file that
// holds not a raw disk image but another container (a compressed qcow2,
// say).
func scanStream(ctx context.Context, r io.Reader, format string) (int64, string, *chunksum.List, error) {
	cr := &countingReader{r: r}
	zr, closeZ, err := decompressor(format, cr)
	if err != nil {
		return 0, "", nil, fmt.Errorf("not a %s file: %w", format, err)
	}
	defer closeZ()
	h := sha256.New()
	cw := &chunksum.Writer{}
	buf := make([]byte, 1<<20)
	var n int64
	var head []byte
	sniffed := false
	sniff := func() error {
		sniffed = true
		inner, err := Sniff(head)
		if err == nil && inner == FormatRaw {
			return nil
		}
		what := "a " + inner + " image"
		if err != nil {
			what = err.Error()
		}
		return fmt.Errorf("the %s file holds %s, not a raw disk image: decompress it and import that", format, what)
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, "", nil, err
		}
		m, rerr := zr.Read(buf)
		if m > 0 {
			if n += int64(m); n > MaxFileSize {
				return 0, "", nil, fmt.Errorf("decompressed, the %s file is larger than %d bytes", format, int64(MaxFileSize))
			}
			h.Write(buf[:m])
			cw.Write(buf[:m])
			if !sniffed {
				head = append(head, buf[:min(m, sniffLen-len(head))]...)
				if len(head) == sniffLen {
					if err := sniff(); err != nil {
						return 0, "", nil, err
					}
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, "", nil, fmt.Errorf("decompress %s (%d bytes in): %w%s", format, cr.n, corrupt(rerr), hint(format, rerr))
		}
	}
	if n == 0 {
		return 0, "", nil, fmt.Errorf("the %s file decompresses to nothing: an empty disk image", format)
	}
	if !sniffed {
		if err := sniff(); err != nil {
			return 0, "", nil, err
		}
	}
	return n, hex.EncodeToString(h.Sum(nil)), cw.List(), nil
}

// hint says what to do about a decompressor's error, when there is
// something to do: the xz decoder (the deploy environment's too) knows
// only the LZMA2 filter, xz's default, not the BCJ or delta filters.
func hint(format string, err error) string {
	if format == FormatXZ && strings.Contains(err.Error(), "filter") {
		return " (only xz's default LZMA2 filter is supported: recompress with plain xz, without --x86, --delta or other filters)"
	}
	return ""
}

// corrupt says what a decompressor's io.ErrUnexpectedEOF means here.
func corrupt(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated: %w", err)
	}
	return err
}

// countingReader counts what it reads and reports the running total.
type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 && c.progress != nil {
		c.progress(c.n)
	}
	return n, err
}
