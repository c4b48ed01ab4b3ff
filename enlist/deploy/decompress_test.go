package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// The compressed images of these tests are made by the real tools: gzip,
// xz and zstd, as an operator (or rackd's import) would.

// compressible is an image that compresses like a disk does: runs of
// zeros, repeated text and random blocks.
func compressible(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(7, uint64(n)))
	for off := 0; off < n; off += 64 << 10 {
		blk := b[off:min(n, off+64<<10)]
		switch r.IntN(3) {
		case 0: // zeros
		case 1:
			for i := range blk {
				blk[i] = "rackd deploys disks "[i%20]
			}
		default:
			for i := range blk {
				blk[i] = byte(r.Uint32())
			}
		}
	}
	return b
}

var tools = map[Format][]string{
	FormatGzip: {"gzip", "-c", "-6"},
	FormatXZ:   {"xz", "-c", "-T1", "-3"},
	FormatZstd: {"zstd", "-c", "-q", "-3"},
}

// compress runs the format's tool on b, for a test or a benchmark.
func compress(t testing.TB, f Format, b []byte) []byte {
	t.Helper()
	argv := tools[f]
	path, err := exec.LookPath(argv[0])
	if err != nil {
		t.Skipf("%s not installed (scripts/test-deps.sh installs it): %v", argv[0], err)
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", argv[0], err)
	}
	return out
}

func hexSHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func TestWriteCompressed(t *testing.T) {
	raw := compressible(5<<20 + 4321)
	for _, f := range []Format{FormatGzip, FormatXZ, FormatZstd} {
		t.Run(string(f), func(t *testing.T) {
			file := compress(t, f, raw)
			for _, rawSHA := range []string{"", hexSHA(raw)} {
				d := fakeDisk(t, 12<<20)
				var last int64
				img := Image{Format: f, Size: int64(len(file)), SHA256: hexSHA(file), RawSize: int64(len(raw)), RawSHA256: rawSHA}
				res, err := Write(context.Background(), bytes.NewReader(file), d, img, Options{Progress: func(n int64) { last = n }})
				if err != nil {
					t.Fatal(err)
				}
				if res.Bytes != int64(len(raw)) || res.Downloaded != int64(len(file)) || res.SHA256 != img.SHA256 ||
					res.RawSHA256 != rawSHA || last != int64(len(raw)) {
					t.Fatalf("%+v (progress %d)", res, last)
				}
				got := read(t, d)
				if !bytes.Equal(got[:len(raw)], raw) || !bytes.Equal(got[len(raw):], bytes.Repeat([]byte{0xEE}, len(got)-len(raw))) {
					t.Fatal("the disk does not hold the decompressed image followed by what was there")
				}
			}
		})
	}
	// Concatenated streams are one stream to gzip, xz and zstd alike.
	a, b := raw[:2<<20], raw[2<<20:]
	for _, f := range []Format{FormatGzip, FormatXZ, FormatZstd} {
		file := append(compress(t, f, a), compress(t, f, b)...)
		d := fakeDisk(t, 12<<20)
		img := Image{Format: f, Size: int64(len(file)), SHA256: hexSHA(file), RawSize: int64(len(raw)), RawSHA256: hexSHA(raw)}
		if _, err := Write(context.Background(), bytes.NewReader(file), d, img, Options{}); err != nil {
			t.Fatalf("%s, two streams: %v", f, err)
		}
		if !bytes.Equal(read(t, d)[:len(raw)], raw) {
			t.Fatalf("%s, two streams: wrong content", f)
		}
	}
}

// Every way a compressed image can be wrong fails the write and leaves
// the first MiB zeroed.
func TestWriteCompressedFailures(t *testing.T) {
	raw := compressible(2<<20 + 99)
	for _, f := range []Format{FormatGzip, FormatXZ, FormatZstd} {
		t.Run(string(f), func(t *testing.T) {
			file := compress(t, f, raw)
			rawSize, sum, rawSum := int64(len(raw)), hexSHA(file), hexSHA(raw)
			flipped := bytes.Clone(file)
			flipped[len(file)/2] ^= 0x55
			cut := file[:len(file)*2/3]
			garbage := append(bytes.Clone(file), []byte("not a stream at all, just bytes")...)
			otherRaw := bytes.Clone(raw)
			otherRaw[len(raw)-1000] ^= 1
			other := compress(t, f, otherRaw)
			for _, tc := range []struct {
				name string
				r    io.Reader
				img  Image
				want string
			}{
				{"wrong file sha256", bytes.NewReader(other), Image{Size: int64(len(other)), SHA256: sum, RawSize: rawSize}, "sha256 mismatch: the image streamed"},
				{"wrong raw sha256", bytes.NewReader(other), Image{Size: int64(len(other)), SHA256: hexSHA(other), RawSize: rawSize, RawSHA256: rawSum},
					"sha256 mismatch: the decompressed image"},
				{"corrupt stream", bytes.NewReader(flipped), Image{Size: int64(len(file)), SHA256: hexSHA(flipped), RawSize: rawSize}, "decompress the " + string(f)},
				{"truncated stream", bytes.NewReader(cut), Image{Size: int64(len(cut)), SHA256: hexSHA(cut), RawSize: rawSize}, "decompress the " + string(f)},
				{"trailing garbage", bytes.NewReader(garbage), Image{Size: int64(len(garbage)), SHA256: hexSHA(garbage), RawSize: rawSize}, string(f)},
				{"raw size too large", bytes.NewReader(file), Image{Size: int64(len(file)), SHA256: sum, RawSize: rawSize + 1}, "stream ended after"},
				{"raw size too small", bytes.NewReader(file), Image{Size: int64(len(file)), SHA256: sum, RawSize: rawSize - 1}, "decompresses to more than"},
				{"file shorter than announced", bytes.NewReader(file[:len(file)-10]), Image{Size: int64(len(file)), SHA256: sum, RawSize: rawSize}, "ended early after"},
				{"file longer than announced", bytes.NewReader(append(bytes.Clone(file), 0)), Image{Size: int64(len(file)), SHA256: sum, RawSize: rawSize}, "longer than"},
				{"cut connection", &failingReader{bytes.NewReader(file), len(file) / 2}, Image{Size: int64(len(file)), SHA256: sum, RawSize: rawSize}, "connection reset"},
				{"no raw size", bytes.NewReader(file), Image{Size: int64(len(file)), SHA256: sum}, "decompressed size is needed"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					d := fakeDisk(t, 8<<20)
					tc.img.Format = f
					_, err := Write(context.Background(), tc.r, d, tc.img, Options{})
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						t.Fatalf("err %v, want %q", err, tc.want)
					}
					if got := read(t, d); !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) {
						t.Fatal("the first MiB is not zeroed after a failed write")
					}
				})
			}
		})
	}
}

// A late disk failure under a compressed image is the disk's error, not
// a decompression error, and the download stops.
func TestWriteCompressedDiskError(t *testing.T) {
	raw := compressible(20 << 20)
	file := compress(t, FormatZstd, raw)
	d := fakeDisk(t, 24<<20)
	img := Image{Format: FormatZstd, Size: int64(len(file)), SHA256: hexSHA(file), RawSize: int64(len(raw))}
	res, err := Write(context.Background(), bytes.NewReader(file), lateFailingDisk{d}, img, Options{})
	var we *writeError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "EIO") || res.Bytes > 6<<20 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := read(t, d); !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) {
		t.Fatal("the head is not zeroed after a write error")
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(cancelled, bytes.NewReader(file), fakeDisk(t, 24<<20), img, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// nullDisk takes writes and keeps nothing.
type nullDisk struct{}

func (nullDisk) WriteAt(b []byte, _ int64) (int, error) { return len(b), nil }
func (nullDisk) Sync() error                            { return nil }

// An image far larger than what Write allocates streams: memory use does
// not grow with the image.
func TestWriteCompressedStreams(t *testing.T) {
	const rawSize = 128 << 20
	file := compress(t, FormatZstd, make([]byte, rawSize))
	img := Image{Format: FormatZstd, Size: int64(len(file)), SHA256: hexSHA(file), RawSize: rawSize}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := Write(context.Background(), bytes.NewReader(file), nullDisk{}, img, Options{}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > rawSize/3 {
		t.Fatalf("writing a %d-byte image allocated %d bytes", rawSize, alloc)
	}
	if testing.Verbose() {
		t.Logf("allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
	}
}

func TestImageCheck(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		img  Image
		want string
	}{
		{Image{Size: 1, SHA256: sum}, ""},
		{Image{Format: "raw", Size: 1, SHA256: sum, RawSize: 1, RawSHA256: sum}, ""},
		{Image{Format: "zstd", Size: 1, SHA256: sum, RawSize: 10}, ""},
		{Image{Format: "lz4", Size: 1, SHA256: sum}, "want raw, gzip, xz or zstd"},
		{Image{Size: 0, SHA256: sum}, "positive size"},
		{Image{Size: 1, SHA256: "AB"}, "64 lower-case hex"},
		{Image{Size: 1, SHA256: sum, RawSHA256: "x"}, "decompressed image sha256"},
		{Image{Size: 1, SHA256: sum, RawSize: 2}, "announced as 2 bytes decompressed"},
		{Image{Size: 1, SHA256: sum, RawSHA256: strings.Repeat("cd", 32)}, "two different sha256s"},
		{Image{Format: "xz", Size: 1, SHA256: sum}, "decompressed size is needed"},
	} {
		err := tc.img.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.img, err, tc.want)
		}
	}
}

// BenchmarkDecode is each decoder's rate on a disk-like image (go test
// -bench Decode ./enlist/deploy/).
func BenchmarkDecode(b *testing.B) {
	raw := compressible(32 << 20)
	for _, f := range []Format{FormatGzip, FormatXZ, FormatZstd} {
		b.Run(string(f), func(b *testing.B) {
			argv := tools[f]
			path, err := exec.LookPath(argv[0])
			if err != nil {
				b.Skip(err)
			}
			cmd := exec.Command(path, argv[1:]...)
			cmd.Stdin = bytes.NewReader(raw)
			file, err := cmd.Output()
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				z, done, err := newDecoder(f, bufio.NewReaderSize(bytes.NewReader(file), decoderBuffer))
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, z); err != nil || n != int64(len(raw)) {
					b.Fatal(n, err)
				}
				done()
			}
		})
	}
}

// BenchmarkWrite is Write's rate for a raw and a zstd image into a disk
// that keeps nothing: the pipeline and its digests, no disk. Under
// emulation (qemu-x86_64 -cpu max, GODEBUG=cpu.X=off) it says which
// instructions the deploy environment's rate depends on.
func BenchmarkWrite(b *testing.B) {
	raw := compressible(64 << 20)
	for _, f := range []Format{FormatRaw, FormatZstd} {
		b.Run(string(f), func(b *testing.B) {
			file, img := raw, Image{Size: int64(len(raw)), SHA256: hexSHA(raw)}
			if f != FormatRaw {
				path, err := exec.LookPath("zstd")
				if err != nil {
					b.Skip(err)
				}
				cmd := exec.Command(path, "-c", "-q", "-3")
				cmd.Stdin = bytes.NewReader(raw)
				if file, err = cmd.Output(); err != nil {
					b.Fatal(err)
				}
				img = Image{Format: f, Size: int64(len(file)), SHA256: hexSHA(file), RawSize: int64(len(raw))}
			}
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := Write(context.Background(), bytes.NewReader(file), nullDisk{}, img, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSHA256 is the digest alone, in Write's chunks.
func BenchmarkSHA256(b *testing.B) {
	buf := compressible(chunk)
	b.SetBytes(int64(len(buf)))
	h := sha256.New()
	for b.Loop() {
		h.Write(buf)
	}
}
