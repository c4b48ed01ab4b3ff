package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"rackd/internal/chunksum"
)

// A qcow2 disk file is converted at import, never stored as qcow2: the
// deploy environment writes raw disk images (compressed or not) and has no
// qcow2 reader. The conversion is qemu-img's (Debian's qemu-utils), after
// qemu-img info has shown that the file stands alone: a backing file or an
// external data file names a file on the rackd host, whose content the
// conversion would copy into the image, so either is refused.
//
// The raw result is stored compressed with zstd. Raw, a qcow2 is as large
// as its virtual size (a vendor's cloud image: 2 to 3 GiB for a few hundred
// MB of data); as a blob that would take that much space (the blob store
// does not keep files sparse) and every deploy would send all of it, zeros
// included. zstd brings it back to about the qcow2's size, costs little to
// compress at import, and the deploy environment decompresses it while it
// streams, as it does any zstd image.

// QEMUImg is the qemu-img program qcow2 imports run.
var QEMUImg = "qemu-img"

// Time bounds of a qcow2 import's qemu-img runs (the import's context
// bounds them too).
const (
	// QEMUInfoTimeout bounds qemu-img info, which reads only headers.
	QEMUInfoTimeout = time.Minute
	// QEMUConvertTimeout bounds qemu-img convert: several times what a
	// MaxFileSize image takes on a slow disk.
	QEMUConvertTimeout = 2 * time.Hour
)

// qemuInfo is what qemu-img info --output=json says that matters here.
type qemuInfo struct {
	Format              string `json:"format"`
	VirtualSize         int64  `json:"virtual-size"`
	BackingFilename     string `json:"backing-filename"`
	FullBackingFilename string `json:"full-backing-filename"`
	FormatSpecific      struct {
		Data struct {
			DataFile string `json:"data-file"`
			Corrupt  bool   `json:"corrupt"`
		} `json:"data"`
	} `json:"format-specific"`
}

// checkQCOW2 is the rule for which qcow2 files an import converts: the
// format qemu-img finds is qcow2 (not qcow version 1, or anything else),
// with no backing file, no external data file, not marked corrupt, and a
// virtual size of 1 to MaxFileSize bytes.
func checkQCOW2(info qemuInfo) error {
	switch {
	case info.Format != FormatQCOW2:
		return fmt.Errorf("qemu-img info says the format is %q: only qcow2 (and raw) disk images are imported", info.Format)
	case info.BackingFilename != "" || info.FullBackingFilename != "":
		return fmt.Errorf("the qcow2 image has a backing file (%q): import a standalone image (qemu-img convert -O qcow2 flattens it)", info.BackingFilename)
	case info.FormatSpecific.Data.DataFile != "":
		return fmt.Errorf("the qcow2 image keeps its data in an external file (%q): import a standalone image", info.FormatSpecific.Data.DataFile)
	case info.FormatSpecific.Data.Corrupt:
		return errors.New("qemu-img marks the qcow2 image corrupt")
	case info.VirtualSize <= 0:
		return fmt.Errorf("the qcow2 image's virtual size is %d bytes", info.VirtualSize)
	case info.VirtualSize > MaxFileSize:
		return fmt.Errorf("the qcow2 image's virtual size is %d bytes, more than the %d a disk image may be", info.VirtualSize, int64(MaxFileSize))
	}
	return nil
}

// runQEMUImg runs qemu-img with args within timeout and returns its
// standard output; a failure's error carries its standard error.
func runQEMUImg(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, QEMUImg, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &limitedBuffer{b: &stderr, max: 4096}
	err := cmd.Run()
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("qcow2 images are converted with %s, which is not installed on the rackd host (Debian package qemu-utils): %w", QEMUImg, err)
	case err != nil && ctx.Err() != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("qemu-img %s did not finish within %s", args[0], timeout)
		}
		return nil, ctx.Err()
	case err != nil:
		return nil, fmt.Errorf("qemu-img %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// convertQCOW2 converts the qcow2 file at name (staged, verified) into a
// new staged zstd file of its raw content and returns it with what it is.
// Everything it writes to tmp/ besides the result is gone when it returns.
func convertQCOW2(ctx context.Context, s *Store, name string, step func(string), progress func(int64)) (*staged, Disk, error) {
	out, err := runQEMUImg(ctx, QEMUInfoTimeout, "info", "--output=json", name)
	if err != nil {
		return nil, Disk{}, err
	}
	var info qemuInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, Disk{}, fmt.Errorf("qemu-img info: %w", err)
	}
	if err := checkQCOW2(info); err != nil {
		return nil, Disk{}, err
	}
	raw, err := os.CreateTemp(s.tmp, "qcow2-raw-*")
	if err != nil {
		return nil, Disk{}, fmt.Errorf("convert qcow2: %w", err)
	}
	raw.Close()
	defer os.Remove(raw.Name())
	step("converting qcow2 to raw")
	// -f qcow2: the format is the one checked, never probed again.
	if _, err := runQEMUImg(ctx, QEMUConvertTimeout, "convert", "-q", "-f", FormatQCOW2, "-O", FormatRaw, name, raw.Name()); err != nil {
		return nil, Disk{}, err
	}
	step("compressing the raw image with zstd")
	st, rawSize, rawSum, chunks, err := compressZstd(ctx, s, raw.Name(), progress)
	if err != nil {
		return nil, Disk{}, err
	}
	if rawSize != info.VirtualSize {
		st.discard()
		return nil, Disk{}, fmt.Errorf("qemu-img convert wrote %d bytes, the qcow2 image's virtual size is %d", rawSize, info.VirtualSize)
	}
	return st, Disk{Format: FormatZstd, RawSize: rawSize, RawSHA256: rawSum, Chunks: chunks, From: FormatQCOW2}, nil
}

// compressZstd stages the zstd compression of the file at name, returning
// it with the raw file's size, SHA-256 and chunk list. progress gets the
// raw bytes read.
func compressZstd(ctx context.Context, s *Store, name string, progress func(int64)) (*staged, int64, string, *chunksum.List, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, "", nil, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &chunksum.Writer{}
	cr := &countingReader{r: io.TeeReader(f, io.MultiWriter(h, cw)), progress: progress}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(8<<20))
		if err == nil {
			_, err = io.Copy(enc, cr)
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		}
		pw.CloseWithError(err)
		done <- err
	}()
	st, err := s.stage(ctx, pr, "", -1, nil)
	pr.CloseWithError(errors.New("compression abandoned")) // stops the encoder if stage gave up
	if encErr := <-done; err == nil && encErr != nil {
		err = encErr
	}
	if err != nil {
		if st != nil {
			st.discard()
		}
		return nil, 0, "", nil, fmt.Errorf("compress the raw image: %w", err)
	}
	return st, cr.n, hex.EncodeToString(h.Sum(nil)), cw.List(), nil
}
