// Package deploy writes a raw disk image to a disk and erases disks: the
// deploy and erase modes of rackd's ephemeral environment.
//
// Write streams the image straight to the disk, hashing it as it goes, and
// makes sure that a disk whose image did not arrive whole and correct is
// never left bootable: the first MiB (boot sector, partition table, the
// start of the EFI system partition's GPT) is zeroed before anything else,
// held back in memory while the rest is written, and written last, only
// after every other byte is on the disk (fsync) and the SHA-256 of the
// whole image matched. A wrong checksum, a short or long stream, a write
// error or a cancelled context leave the first MiB zeroed: firmware finds
// nothing to boot there, and the machine is not mistaken for deployed.
package deploy

import (
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
)

// HeadSize is what Write holds back and writes last, and what Erase wipes
// at each end of a disk.
const HeadSize = 1 << 20

// chunk is the size of one read and one write.
const chunk = 4 << 20

// Disk is a disk open for writing: a block device, or a file in tests.
type Disk interface {
	io.WriterAt
	Sync() error
}

// Result says what Write wrote.
type Result struct {
	Bytes  int64
	SHA256 string
	// Read, Hash and Write are the time spent reading the image, hashing
	// it and writing the disk (they overlap): which one bounds the rate.
	Read, Hash, Write time.Duration
}

// ChecksumError is an image whose content is not the one announced.
type ChecksumError struct {
	Got, Want string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("sha256 mismatch: the image streamed hashes to %s, want %s", e.Got, e.Want)
}

// Write streams size bytes of image from r to d, verifying that they hash
// to wantSHA (lower-case hex). progress, when set, is told the bytes
// written so far after each chunk. See the package documentation for the
// order of writes.
func Write(ctx context.Context, r io.Reader, d Disk, size int64, wantSHA string, progress func(int64)) (Result, error) {
	if size <= 0 {
		return Result{}, fmt.Errorf("image size %d: want a positive size", size)
	}
	if err := zero(d, 0, min(HeadSize, size)); err != nil {
		return Result{}, fmt.Errorf("clear the head of the disk: %w", err)
	}
	if err := d.Sync(); err != nil {
		return Result{}, fmt.Errorf("sync the disk: %w", err)
	}
	h := sha256.New()
	head := make([]byte, min(HeadSize, size))
	if _, err := io.ReadFull(r, head); err != nil {
		return Result{}, fmt.Errorf("read the image: %w after 0 of %d bytes", noEOF(err), size)
	}
	h.Write(head)
	var res Result
	off, err := stream(ctx, r, d, h, int64(len(head)), size, progress, &res)
	res.Bytes = off
	if err != nil {
		return res, err
	}
	// Anything after size means the image is not the one announced.
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		return res, fmt.Errorf("the image is longer than the %d bytes announced", size)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != wantSHA {
		return res, &ChecksumError{Got: got, Want: wantSHA}
	}
	t := time.Now()
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
	res.SHA256 = got
	return res, nil
}

// depth is how many chunks are in flight between the reader, the hasher
// and the writer.
const depth = 4

// stream copies the image from r to d from byte off to size, hashing it
// into h. Reading, hashing and writing overlap: this goroutine reads each
// chunk, then a hasher and a writer goroutine take it, in order, at the
// same time (both only read the buffer), and it goes back to the pool when
// both are done; so the rate is close to the slowest of the three rather
// than their sum. It returns the bytes written (read, on a read error).
func stream(ctx context.Context, r io.Reader, d Disk, h hash.Hash, off, size int64, progress func(int64), res *Result) (int64, error) {
	type job struct {
		b    []byte
		off  int64
		left *atomic.Int32
	}
	free := make(chan []byte, depth)
	for range depth {
		free <- make([]byte, chunk)
	}
	release := func(j job) {
		if j.left.Add(-1) == 0 {
			free <- j.b[:cap(j.b)]
		}
	}
	hashQ, writeQ := make(chan job, depth), make(chan job, depth)
	var (
		wg      sync.WaitGroup
		werr    atomic.Pointer[error]
		written atomic.Int64
	)
	written.Store(off)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for j := range hashQ {
			t := time.Now()
			h.Write(j.b)
			res.Hash += time.Since(t)
			release(j)
		}
	}()
	go func() {
		defer wg.Done()
		for j := range writeQ {
			if werr.Load() == nil {
				t := time.Now()
				_, err := d.WriteAt(j.b, j.off)
				res.Write += time.Since(t)
				if err != nil {
					e := fmt.Errorf("write the disk at byte %d: %w", j.off, err)
					werr.Store(&e)
				} else if n := written.Add(int64(len(j.b))); progress != nil {
					progress(n)
				}
			}
			release(j)
		}
	}()
	var rerr error
read:
	for off < size {
		if werr.Load() != nil {
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
		n, err := io.ReadFull(r, b[:min(int64(len(b)), size-off)])
		res.Read += time.Since(t)
		if n > 0 {
			left := new(atomic.Int32)
			left.Store(2)
			j := job{b: b[:n], off: off, left: left}
			hashQ <- j
			writeQ <- j
			off += int64(n)
		} else {
			free <- b
		}
		if err != nil {
			rerr = fmt.Errorf("read the image: %w after %d of %d bytes", noEOF(err), off, size)
			break
		}
	}
	close(hashQ)
	close(writeQ)
	wg.Wait()
	if e := werr.Load(); e != nil {
		return written.Load(), *e
	}
	if rerr != nil {
		return off, rerr
	}
	return written.Load(), nil
}

// noEOF turns a clean end of stream into what it means here: too short.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the image ended early")
	}
	return err
}

// Erase zeroes the first and last MiB of a disk of size bytes (partition
// tables at both ends, boot sectors, most file system superblocks) and
// syncs: quick, and enough that the next user finds an empty disk.
func Erase(d Disk, size int64) error {
	if size <= 0 {
		return fmt.Errorf("disk size %d: want a positive size", size)
	}
	n := min(HeadSize, size)
	if err := zero(d, 0, n); err != nil {
		return fmt.Errorf("erase the head: %w", err)
	}
	if err := zero(d, size-n, n); err != nil {
		return fmt.Errorf("erase the tail: %w", err)
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

func zero(d Disk, off, n int64) error {
	_, err := d.WriteAt(make([]byte, n), off)
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
