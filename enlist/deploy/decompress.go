package deploy

import (
	"bufio"
	"fmt"
	"io"
	"runtime"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Format is how the served image file is encoded: rackd.image_format= of
// the kernel command line.
type Format string

// The formats. The empty format is raw.
const (
	FormatRaw  Format = "raw"
	FormatGzip Format = "gzip"
	FormatXZ   Format = "xz"
	FormatZstd Format = "zstd"
)

// ParseFormat reads a format name; the empty name is raw.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "", FormatRaw:
		return FormatRaw, nil
	case FormatGzip, FormatXZ, FormatZstd:
		return f, nil
	}
	return "", fmt.Errorf("image format %q: want raw, gzip, xz or zstd", clipText(s))
}

// MaxZstdWindow bounds the window a zstd image may ask the decoder to
// hold in memory (zstd --long=27, 128 MiB): a deploy environment has
// little RAM, and a stream asking for more is refused with an error
// rather than exhausting it.
const MaxZstdWindow = 128 << 20

// decoderBuffer is the read buffer between the compressed stream and the
// decoder: large enough that the decoder does not pull from the
// downloading goroutine a few KiB at a time.
const decoderBuffer = 256 << 10

// decoder decompresses r. Every decoder checks its format's own integrity
// data (gzip's CRC-32 and size, xz's check, zstd's frame checksum when
// present) and fails on a truncated stream or on trailing bytes that are
// not another stream of the same format. close releases the decoder's
// goroutines.
func newDecoder(f Format, r *bufio.Reader) (dec io.Reader, close func(), err error) {
	switch f {
	case FormatGzip:
		// klauspost's inflate, a drop-in for the standard library's:
		// about 1.5 times as fast here.
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return z, func() { z.Close() }, nil
	case FormatXZ:
		z, err := xz.ReaderConfig{}.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return z, func() {}, nil
	case FormatZstd:
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxWindow(MaxZstdWindow))
		if err != nil {
			return nil, nil, err
		}
		return z, z.Close, nil
	}
	return nil, nil, fmt.Errorf("image format %q: no decoder", f)
}

func clipText(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
