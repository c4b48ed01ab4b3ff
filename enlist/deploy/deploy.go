// Package deploy writes a disk image to a disk and erases disks: the
// deploy and erase modes of rackd's ephemeral environment.
//
// Write streams the image straight to the disk, decompressing it on the
// way when the served file is gzip, xz or zstd, hashing what it downloads
// (and what it decompresses, when that digest is announced) or, when the
// image's chunk list is given, verifying each 4 MiB chunk of the raw image
// on its own, in parallel (see chunks.go), and makes
// sure that a disk whose image did not arrive whole and correct is never
// left bootable: the first MiB (boot sector, partition table, the start
// of the EFI system partition's GPT) is zeroed before anything else, held
// back in memory while the rest is written, and written last, only after
// every other byte is on the disk (fsync) and every digest (or every
// chunk's) matched. A
// wrong checksum, a short or long stream (downloaded or decompressed), a
// corrupt or truncated compressed stream, bytes after it, a write error or
// a cancelled context leave the first MiB zeroed: firmware finds nothing
// to boot there, and the machine is not mistaken for deployed. Nothing is
// held in memory but a few chunks and the head: images larger than the
// machine's RAM stream.
//
// With a seed (Options.Seed; see seed.go) the order is: the head zeroed;
// the image's body; the seed partition's content and the moved backup GPT;
// sync; the head, with the partition table that names the seed partition;
// sync. Where the seed would go is planned from the head before the body
// is written, so an image that cannot take it fails at once.
package deploy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"rackd/enlist"
	"rackd/internal/chunksum"
)

// HeadSize is what Write holds back and writes last, and what Erase wipes
// at each end of a disk.
const HeadSize = 1 << 20

// chunk is the size of one read and one write of the decompressed image;
// srcChunk of one read of a compressed one.
const (
	chunk    = 4 << 20
	srcChunk = 1 << 20
)

// Disk is a disk open for writing: a block device, or a file in tests.
type Disk interface {
	io.WriterAt
	Sync() error
}

// Image is what rackd says about the file it serves (the kernel command
// line's rackd.image_* arguments).
type Image struct {
	// Format is the file's encoding; empty means raw.
	Format Format
	// Size and SHA256 (lower-case hex) are those of the served file, the
	// bytes downloaded.
	Size   int64
	SHA256 string
	// RawSize is the size of the decompressed image, what is written to
	// the disk; 0 for a raw image means Size. RawSHA256, when set, is the
	// SHA-256 of the decompressed image, checked too.
	RawSize   int64
	RawSHA256 string
	// Chunks, when set, is the chunk list of the decompressed image (its
	// ImageSize is RawSize): every chunk is checked against it, and the
	// whole-stream digests (SHA256, RawSHA256) are then not computed.
	Chunks *chunksum.List
}

// Options are the optional parts of a Write.
type Options struct {
	// Progress, when set, is told the bytes written so far after each
	// chunk.
	Progress func(int64)
	// Seed, when set, is the NoCloud seed (a CIDATA file system image)
	// to put in a partition of its own at the end of the disk, added to
	// the image's partition table (see SeedPlacement); DiskSize is then
	// the disk's size in bytes.
	Seed     []byte
	DiskSize int64
}

// Result says what Write wrote.
type Result struct {
	// Bytes is what was written of the decompressed image.
	Bytes int64
	// SHA256 is that of the served file; RawSHA256 that of the
	// decompressed image, when it was computed (raw images, or a
	// RawSHA256 to check).
	SHA256, RawSHA256 string
	// Downloaded is the bytes of the served file read.
	Downloaded int64
	// Chunks is how many chunks were verified against Image.Chunks; the
	// whole-stream digests are then empty.
	Chunks int
	// Read, Hash, Decompress and Write are the time spent reading the
	// served file, hashing (all digests), decompressing and writing the
	// disk. They overlap: the largest says what bounds the rate.
	Read, Hash, Decompress, Write time.Duration
	// Seed is where the seed went, when there was one.
	Seed *SeedPlacement
	// Elapsed is the write's wall time, from the request for the image to
	// the disk synced; the caller, who makes the request, sets it.
	Elapsed time.Duration
}

// ChecksumError is an image whose content is not the one announced.
type ChecksumError struct {
	// What is "image" (the served file) or "decompressed image".
	What      string
	Got, Want string
	// Len, when positive, says the digest is that of one chunk of the
	// raw image: chunk number Chunk, Len bytes at byte Offset, of the
	// image whose served file's SHA-256 is Image.
	Chunk       int
	Offset, Len int64
	Image       string
}

func (e *ChecksumError) Error() string {
	what := e.What
	if what == "" {
		what = "image"
	}
	if e.Len > 0 {
		return fmt.Sprintf("sha256 mismatch: chunk %d (bytes %d to %d) of the %s streamed (image %s) hashes to %s, want %s",
			e.Chunk, e.Offset, e.Offset+e.Len, what, e.Image, e.Got, e.Want)
	}
	return fmt.Sprintf("sha256 mismatch: the %s streamed hashes to %s, want %s", what, e.Got, e.Want)
}

// Check says what is wrong with an image's description.
func (img Image) Check() error {
	f, err := ParseFormat(string(img.Format))
	if err != nil {
		return err
	}
	if img.Size <= 0 {
		return fmt.Errorf("image size %d: want a positive size", img.Size)
	}
	if !isSHA256(img.SHA256) {
		return fmt.Errorf("image sha256 %q: want 64 lower-case hex digits", clipText(img.SHA256))
	}
	if img.RawSHA256 != "" && !isSHA256(img.RawSHA256) {
		return fmt.Errorf("decompressed image sha256 %q: want 64 lower-case hex digits", clipText(img.RawSHA256))
	}
	switch {
	case f == FormatRaw && img.RawSize != 0 && img.RawSize != img.Size:
		return fmt.Errorf("raw image of %d bytes announced as %d bytes decompressed", img.Size, img.RawSize)
	case f == FormatRaw && img.RawSHA256 != "" && img.RawSHA256 != img.SHA256:
		return fmt.Errorf("raw image announced with two different sha256s")
	case f != FormatRaw && img.RawSize <= 0:
		return fmt.Errorf("%s image: its decompressed size is needed (got %d)", f, img.RawSize)
	}
	if c := img.Chunks; c != nil {
		if err := c.Check(); err != nil {
			return err
		}
		if c.ImageSize != img.rawSize() {
			return fmt.Errorf("a chunk list of a %d-byte image for a %d-byte image", c.ImageSize, img.rawSize())
		}
	}
	return nil
}

// rawSize is the size written to the disk.
func (img Image) rawSize() int64 {
	if img.RawSize > 0 {
		return img.RawSize
	}
	return img.Size
}

func isSHA256(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// Write streams the image from r (the served file, decompressed on the
// way when it is compressed) to d. The SHA-256 of the bytes read is
// checked against img.SHA256, and that of the decompressed bytes against
// img.RawSHA256 when set; exactly img.Size bytes must arrive, and they must
// decompress to exactly img.RawSize bytes, with nothing after the
// compressed stream. See the package documentation for the order of
// writes.
func Write(ctx context.Context, r io.Reader, d Disk, img Image, opt Options) (Result, error) {
	// Even a deployment refused for its arguments leaves nothing to
	// boot: a failed deployment must not boot the previous system.
	checkErr := img.Check()
	n := int64(HeadSize)
	if checkErr == nil {
		n = min(HeadSize, img.rawSize())
	}
	if err := zero(d, 0, n); err != nil {
		return Result{}, errors.Join(checkErr, fmt.Errorf("clear the head of the disk: %w", err))
	}
	if err := d.Sync(); err != nil {
		return Result{}, errors.Join(checkErr, fmt.Errorf("sync the disk: %w", err))
	}
	if checkErr != nil {
		return Result{}, checkErr
	}
	img.Format, _ = ParseFormat(string(img.Format))
	if opt.Seed != nil && opt.DiskSize < img.rawSize() {
		return Result{}, fmt.Errorf("a seed needs the disk's size (got %d bytes for a %d-byte image)", opt.DiskSize, img.rawSize())
	}
	// The seed's place is planned from the head, before the body is
	// written: an image that cannot take it fails early.
	var plan *seedPlan
	prepare := func(head []byte) error {
		if opt.Seed == nil {
			return nil
		}
		var err error
		plan, err = planSeed(head, img.rawSize(), opt.DiskSize, opt.Seed)
		if err != nil {
			return fmt.Errorf("add the %s seed partition: %w", SeedPartitionName, err)
		}
		return nil
	}
	var res Result
	var head []byte
	var err error
	switch {
	case img.Format == FormatRaw && img.Chunks != nil:
		head, err = writeRawChunked(ctx, r, d, img, opt, prepare, &res)
	case img.Format == FormatRaw:
		head, err = writeRaw(ctx, r, d, img, opt, prepare, &res)
	default:
		head, err = writeCompressed(ctx, r, d, img, opt, prepare, &res)
	}
	if err != nil {
		return res, err
	}
	t := time.Now()
	if plan != nil {
		// The seed and the moved backup GPT, then the head with the
		// primary GPT that points at them.
		for _, p := range plan.patches {
			if _, err := d.WriteAt(p.b, p.off); err != nil {
				return res, fmt.Errorf("write the seed partition: %w", &writeError{off: p.off, err: err})
			}
		}
		head = plan.head
		res.Seed = &plan.placement
	}
	if err := d.Sync(); err != nil {
		return res, fmt.Errorf("sync the disk: %w", err)
	}
	if _, err := d.WriteAt(head, 0); err != nil {
		return res, fmt.Errorf("write the head of the disk: %w", err)
	}
	if err := d.Sync(); err != nil {
		return res, fmt.Errorf("sync the disk: %w", err)
	}
	res.Write += time.Since(t)
	if img.Chunks != nil {
		res.Chunks = len(img.Chunks.Sums)
	}
	return res, nil
}

// writeRaw writes a raw image: one stream, one digest. It returns the
// held-back head.
func writeRaw(ctx context.Context, r io.Reader, d Disk, img Image, opt Options, prepare func([]byte) error, res *Result) ([]byte, error) {
	size := img.Size
	h := sha256.New()
	head := alignedBuf(int(min(HeadSize, size)))
	t := time.Now()
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, fmt.Errorf("read the image: %w after 0 of %d bytes", noEOF(err), size)
	}
	res.Read += time.Since(t)
	if err := prepare(head); err != nil {
		return nil, err
	}
	h.Write(head)
	var written atomic.Int64
	written.Store(int64(len(head)))
	n, err := pump(ctx, r, int64(len(head)), size, chunk, &res.Read,
		hashSink(h, &res.Hash), diskSink(d, &written, opt.Progress, &res.Write))
	n += int64(len(head))
	res.Bytes, res.Downloaded = written.Load(), n
	if err != nil {
		return nil, readErr("read the image", err, n, size)
	}
	// Anything after size means the image is not the one announced.
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		return nil, fmt.Errorf("the image is longer than the %d bytes announced", size)
	}
	got := hex.EncodeToString(h.Sum(nil))
	res.SHA256, res.RawSHA256 = got, got
	if got != img.SHA256 {
		return nil, &ChecksumError{What: "image", Got: got, Want: img.SHA256}
	}
	return head, nil
}

// errAborted stops the download of a compressed image whose decompressed
// side failed: the failure that matters is that one.
var errAborted = errors.New("aborted")

// writeCompressed writes a compressed image. A goroutine downloads the
// served file, hashing it, into a pipe; the decoder reads the pipe; the
// decompressed stream is written as a raw image is (its own digest only
// when one is announced). With a chunk list, the decompressed stream is
// verified chunk by chunk instead, and the served file is not hashed: the
// chunks prove every byte written. It returns the held-back head.
func writeCompressed(ctx context.Context, r io.Reader, d Disk, img Image, opt Options, prepare func([]byte) error, res *Result) ([]byte, error) {
	size := img.rawSize()
	ch := sha256.New()
	pr, pw := io.Pipe()
	var (
		srcRead, srcHash time.Duration
		srcN             int64
		srcErr           error
		done             = make(chan struct{})
	)
	go func() {
		defer close(done)
		sinks := []sink{func(b []byte, _ int64) error { _, err := pw.Write(b); return err }}
		if img.Chunks == nil {
			sinks = append(sinks, hashSink(ch, &srcHash))
		}
		srcN, srcErr = pump(ctx, r, 0, img.Size, srcChunk, &srcRead, sinks...)
		if srcErr == nil {
			var one [1]byte
			if n, _ := r.Read(one[:]); n > 0 {
				srcErr = fmt.Errorf("the image file is longer than the %d bytes announced", img.Size)
			}
		} else {
			srcErr = readErr("read the image", srcErr, srcN, img.Size)
		}
		pw.CloseWithError(srcErr) // nil: a clean end of the file
	}()
	// finish ends the download and says what went wrong, the download's
	// own failure first (a cut connection makes the decoder fail too).
	finish := func(err error) error {
		pr.CloseWithError(errAborted)
		<-done
		res.Read += srcRead
		res.Hash += srcHash
		res.Downloaded = srcN
		if srcErr != nil && !errors.Is(srcErr, errAborted) {
			return srcErr
		}
		return err
	}
	src := bufio.NewReaderSize(pr, decoderBuffer)
	dec, closeDec, err := newDecoder(img.Format, src)
	if err != nil {
		return nil, finish(fmt.Errorf("decompress the %s image: %w", img.Format, noEOF(err)))
	}
	defer closeDec()
	if img.Chunks != nil {
		head, n, err := streamChunks(ctx, dec, d, size, img, "decompressed image", opt, prepare, func(err error, n int64) error {
			return decompressErr(img.Format, err, n, size)
		}, &res.Decompress, res)
		if err != nil {
			return nil, finish(err)
		}
		if err := endCompressed(dec, src, img.Format, size, n); err != nil {
			return nil, finish(err)
		}
		if err := finish(nil); err != nil {
			return nil, err
		}
		return head, nil
	}
	var rh hash.Hash
	sinks := []sink{}
	if img.RawSHA256 != "" {
		rh = sha256.New()
		sinks = append(sinks, hashSink(rh, &res.Hash))
	}
	head := alignedBuf(int(min(HeadSize, size)))
	t := time.Now()
	if _, err := io.ReadFull(dec, head); err != nil {
		res.Decompress += time.Since(t)
		return nil, finish(decompressErr(img.Format, err, 0, size))
	}
	res.Decompress += time.Since(t)
	if err := prepare(head); err != nil {
		return nil, finish(err)
	}
	if rh != nil {
		rh.Write(head)
	}
	var written atomic.Int64
	written.Store(int64(len(head)))
	sinks = append(sinks, diskSink(d, &written, opt.Progress, &res.Write))
	n, err := pump(ctx, dec, int64(len(head)), size, chunk, &res.Decompress, sinks...)
	n += int64(len(head))
	res.Bytes = written.Load()
	if err != nil {
		return nil, finish(decompressErr(img.Format, err, n, size))
	}
	if err := endCompressed(dec, src, img.Format, size, n); err != nil {
		return nil, finish(err)
	}
	if err := finish(nil); err != nil {
		return nil, err
	}
	res.SHA256 = hex.EncodeToString(ch.Sum(nil))
	if res.SHA256 != img.SHA256 {
		return nil, &ChecksumError{What: "image", Got: res.SHA256, Want: img.SHA256}
	}
	if rh != nil {
		res.RawSHA256 = hex.EncodeToString(rh.Sum(nil))
		if res.RawSHA256 != img.RawSHA256 {
			return nil, &ChecksumError{What: "decompressed image", Got: res.RawSHA256, Want: img.RawSHA256}
		}
	}
	return head, nil
}

// endCompressed checks that the decompressed stream ends after its size
// bytes, which also makes the decoder read and check the end of the
// compressed stream, and that nothing follows the compressed stream in
// src, the served file.
func endCompressed(dec io.Reader, src io.Reader, f Format, size, n int64) error {
	var one [1]byte
	if k, err := io.ReadFull(dec, one[:]); k > 0 {
		return fmt.Errorf("the %s image decompresses to more than the %d bytes announced", f, size)
	} else if !errors.Is(err, io.EOF) {
		return decompressErr(f, err, n, size)
	}
	// Whatever the decoder did not take is not part of the image.
	if k, err := io.Copy(io.Discard, src); k > 0 {
		return fmt.Errorf("the %s image has %d bytes of trailing data after its compressed stream", f, k)
	} else if err != nil {
		return err
	}
	return nil
}

// decompressErr says where decompression failed; a stream that ends early
// is a truncated (or shorter than announced) image.
func decompressErr(f Format, err error, n, size int64) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("decompress the %s image: the stream ended after %d of the %d bytes announced (truncated, or a smaller image)", f, n, size)
	}
	var we *writeError
	if errors.As(err, &we) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("decompress the %s image: %w after %d of %d bytes", f, err, n, size)
}

// readErr is a failed read of what the network serves, or a failed sink.
func readErr(what string, err error, n, size int64) error {
	var we *writeError
	if errors.As(err, &we) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errAborted) {
		return err
	}
	return fmt.Errorf("%s: %w after %d of %d bytes", what, noEOF(err), n, size)
}

// A sink takes each chunk of a stream, in order, with its offset; it must
// not keep the buffer.
type sink func(b []byte, off int64) error

// hashSink feeds h, timed into spent.
func hashSink(h hash.Hash, spent *time.Duration) sink {
	return func(b []byte, _ int64) error {
		t := time.Now()
		h.Write(b)
		*spent += time.Since(t)
		return nil
	}
}

// writeError is a failed write of the disk.
type writeError struct {
	off int64
	err error
}

func (e *writeError) Error() string {
	return fmt.Sprintf("write the disk at byte %d: %v", e.off, e.err)
}
func (e *writeError) Unwrap() error { return e.err }

// diskSink writes each chunk at its offset, counting into written and
// telling progress.
func diskSink(d Disk, written *atomic.Int64, progress func(int64), spent *time.Duration) sink {
	return func(b []byte, off int64) error {
		t := time.Now()
		_, err := d.WriteAt(b, off)
		*spent += time.Since(t)
		if err != nil {
			return &writeError{off: off, err: err}
		}
		if n := written.Add(int64(len(b))); progress != nil {
			progress(n)
		}
		return nil
	}
}

// depth is how many chunks are in flight between the reader and the
// sinks.
const depth = 4

// pump reads r from byte off up to byte end in chunks of size bytes and
// hands each chunk to every sink. Reading and the sinks overlap: this
// goroutine reads each chunk, then each sink's goroutine takes it, in
// order, at the same time (they only read the buffer), and it goes back to
// the pool when all are done; so the rate is close to the slowest of them
// rather than their sum. Reading stops at the first failure, a sink's or
// the reader's (a sink's wins). It returns the bytes read; readTime gets
// the time spent in r.Read.
func pump(ctx context.Context, r io.Reader, off, end int64, size int, readTime *time.Duration, sinks ...sink) (int64, error) {
	type job struct {
		b    []byte
		off  int64
		left *atomic.Int32
	}
	free := make(chan []byte, depth)
	for range depth {
		free <- alignedBuf(size)
	}
	release := func(j job) {
		if j.left.Add(-1) == 0 {
			free <- j.b[:cap(j.b)]
		}
	}
	var (
		wg   sync.WaitGroup
		serr atomic.Pointer[error]
	)
	queues := make([]chan job, len(sinks))
	for i, s := range sinks {
		q := make(chan job, depth)
		queues[i] = q
		wg.Go(func() {
			for j := range q {
				if serr.Load() == nil {
					if err := s(j.b, j.off); err != nil {
						serr.CompareAndSwap(nil, &err)
					}
				}
				release(j)
			}
		})
	}
	start := off
	var rerr error
read:
	for off < end {
		if serr.Load() != nil {
			break
		}
		var b []byte
		select {
		case b = <-free:
		case <-ctx.Done():
			rerr = ctx.Err()
			break read
		}
		if err := ctx.Err(); err != nil {
			rerr = err
			break
		}
		t := time.Now()
		n, err := io.ReadFull(r, b[:min(int64(len(b)), end-off)])
		*readTime += time.Since(t)
		if n > 0 {
			left := new(atomic.Int32)
			left.Store(int32(len(sinks)))
			j := job{b: b[:n], off: off, left: left}
			for _, q := range queues {
				q <- j
			}
			off += int64(n)
		} else {
			free <- b
		}
		if err != nil {
			rerr = err
			break
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	if e := serr.Load(); e != nil {
		return off - start, *e
	}
	return off - start, rerr
}

// noEOF turns a clean end of stream into what it means here: too short.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the image ended early")
	}
	return err
}

// Erase zeroes the first MiB of a disk of size bytes (partition table,
// boot sectors, most file system superblocks) and its last TailSize (the
// backup GPT and a deployment's seed partition, whose user-data must not
// reach the next user), and syncs: quick, and enough that the next user
// finds an empty disk.
func Erase(d Disk, size int64) error {
	if size <= 0 {
		return fmt.Errorf("disk size %d: want a positive size", size)
	}
	n := min(HeadSize, size)
	if err := zero(d, 0, n); err != nil {
		return fmt.Errorf("erase the head: %w", err)
	}
	// The tail holds the backup GPT and the seed partition, whose
	// user-data must not survive a release.
	n = min(TailSize, size)
	if err := zero(d, size-n, n); err != nil {
		return fmt.Errorf("erase the tail: %w", err)
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

func zero(d Disk, off, n int64) error {
	_, err := d.WriteAt(alignedBuf(int(n)), off)
	return err
}

// Disk selection. The rule comes from the kernel command line
// (rackd.disk=) or a flag: "auto" (or empty) takes the first disk, by
// kernel name, that is large enough and not a CD/DVD drive (sr*) or a
// read-only-by-nature device; a kernel name ("vda", "nvme0n1") takes that
// disk, which must be large enough.

// maxRule bounds a rule's length.
const maxRule = 64

// ChooseDisk picks the target disk of rule among disks for an image of
// size bytes.
func ChooseDisk(disks []enlist.Disk, rule string, size int64) (enlist.Disk, error) {
	rule = strings.TrimSpace(rule)
	if len(rule) > maxRule {
		return enlist.Disk{}, fmt.Errorf("disk rule of %d bytes, at most %d", len(rule), maxRule)
	}
	if rule == "" || rule == "auto" {
		var seen []string
		for _, d := range disks {
			if strings.HasPrefix(d.Name, "sr") || strings.HasPrefix(d.Name, "mmcblk") && strings.Contains(d.Name, "boot") {
				continue
			}
			if d.SizeBytes >= size {
				return d, nil
			}
			seen = append(seen, fmt.Sprintf("%s (%d bytes)", d.Name, d.SizeBytes))
		}
		if len(seen) == 0 {
			return enlist.Disk{}, errors.New("no disk found to write the image to")
		}
		return enlist.Disk{}, fmt.Errorf("no disk holds the %d-byte image: %s", size, strings.Join(seen, ", "))
	}
	for _, c := range rule {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':' || c == '!') {
			return enlist.Disk{}, fmt.Errorf("disk rule %q: want auto or a kernel disk name like vda or nvme0n1", rule)
		}
	}
	for _, d := range disks {
		if d.Name == rule {
			if d.SizeBytes < size {
				return enlist.Disk{}, fmt.Errorf("disk %s has %d bytes, the image %d", d.Name, d.SizeBytes, size)
			}
			return d, nil
		}
	}
	return enlist.Disk{}, fmt.Errorf("disk rule %q: no such disk", rule)
}
