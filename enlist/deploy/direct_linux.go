package deploy

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlign is the alignment O_DIRECT writes get here: of the buffer's
// address, the offset and the length. 4096 covers 512-byte and 4Kn disks.
const directAlign = 4096

// FileDisk is a disk device opened twice: with O_DIRECT, for the aligned
// chunks that make up nearly all of an image, which then go from the
// program's buffer to the device without a copy into the page cache (in
// an emulated machine that copy costs as much CPU as the download), and
// buffered, for the rest (a ragged end, a sector of a partition table).
// The two never write the same bytes of one deployment.
type FileDisk struct {
	direct, buffered *os.File
}

// OpenDisk opens path for writing, with O_DIRECT where the device or file
// system supports it (a tmpfs does not: then every write is buffered).
func OpenDisk(path string) (*FileDisk, error) {
	b, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	d := &FileDisk{buffered: b}
	if f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0); err == nil {
		d.direct = f
	}
	return d, nil
}

// Direct reports whether aligned writes bypass the page cache.
func (d *FileDisk) Direct() bool { return d.direct != nil }

func aligned(b []byte, off int64) bool {
	return len(b) > 0 && off%directAlign == 0 && len(b)%directAlign == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign == 0
}

// WriteAt writes b at off, directly when b and off are aligned.
func (d *FileDisk) WriteAt(b []byte, off int64) (int, error) {
	if d.direct != nil && aligned(b, off) {
		n, err := d.direct.WriteAt(b, off)
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		// Some drivers want more alignment than asked: stop trying.
		d.direct.Close()
		d.direct = nil
	}
	return d.buffered.WriteAt(b, off)
}

// Sync flushes both descriptors' writes to the device.
func (d *FileDisk) Sync() error {
	var errs []error
	if d.direct != nil {
		errs = append(errs, d.direct.Sync())
	}
	errs = append(errs, d.buffered.Sync())
	return errors.Join(errs...)
}

// Close closes both descriptors.
func (d *FileDisk) Close() error {
	var errs []error
	if d.direct != nil {
		errs = append(errs, d.direct.Close())
	}
	errs = append(errs, d.buffered.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close the disk: %w", err)
	}
	return nil
}

// alignedBuf is a buffer of n bytes whose address is aligned for
// O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+directAlign)
	off := int(directAlign - uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign)
	if off == directAlign {
		off = 0
	}
	return b[off : off+n : off+n]
}
