package deploy

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"

	"rackd/internal/chunksum"
)

// chunkList is the chunk list of raw in chunks of cs bytes, as the import
// records it.
func chunkList(raw []byte, cs int64) *chunksum.List {
	w := &chunksum.Writer{ChunkSize: cs}
	w.Write(raw)
	return w.List()
}

// served is the file rackd serves for raw in format f, and its Image with
// its chunk list in chunks of cs.
func served(t testing.TB, raw []byte, f Format, cs int64) ([]byte, Image) {
	t.Helper()
	file, img := raw, Image{Format: FormatRaw, Size: int64(len(raw)), SHA256: hexSHA(raw)}
	if f != FormatRaw {
		file = compress(t, f, raw)
		img = Image{Format: f, Size: int64(len(file)), SHA256: hexSHA(file), RawSize: int64(len(raw)), RawSHA256: hexSHA(raw)}
	}
	img.Chunks = chunkList(raw, cs)
	return file, img
}

var allFormats = []Format{FormatRaw, FormatGzip, FormatXZ, FormatZstd}

// With a chunk list, every format and size is written whole, in place,
// and the whole-stream digests are not computed.
func TestWriteChunked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		cs      int64
		formats []Format // nil: all
	}{
		{"ragged end, 1 MiB chunks", 9<<20 + 12345, chunksum.MinSize, nil},
		// The chunking does not depend on the format (each is
		// decompressed before it is chunked, as the case above shows for
		// all four): xz and gzip, minutes under -race, once are enough.
		{"ragged end, 4 MiB chunks", 9<<20 + 12345, chunksum.Size, []Format{FormatRaw, FormatZstd}},
		{"whole chunks", 8 << 20, chunksum.Size, nil},
		{"one chunk", 3<<20 + 1, chunksum.Size, nil},
		{"smaller than the head", 1000, chunksum.Size, nil},
		{"head and one byte", HeadSize + 1, chunksum.MinSize, nil},
	} {
		formats := tc.formats
		if formats == nil {
			formats = allFormats
		}
		for _, f := range formats {
			t.Run(tc.name+"/"+string(f), func(t *testing.T) {
				raw := compressible(tc.size)
				file, img := served(t, raw, f, tc.cs)
				d := fakeDisk(t, 12<<20)
				var last int64
				res, err := Write(context.Background(), bytes.NewReader(file), d, img, Options{Progress: func(n int64) { last = n }})
				if err != nil {
					t.Fatal(err)
				}
				if res.Bytes != int64(len(raw)) || res.Downloaded != int64(len(file)) || res.Chunks != len(img.Chunks.Sums) ||
					res.SHA256 != "" || res.RawSHA256 != "" || (last != int64(len(raw)) && len(raw) > HeadSize) {
					t.Fatalf("%+v (progress %d)", res, last)
				}
				got := read(t, d)
				if !bytes.Equal(got[:len(raw)], raw) || !bytes.Equal(got[len(raw):], bytes.Repeat([]byte{0xEE}, len(got)-len(raw))) {
					t.Fatal("the disk does not hold the image followed by what was there")
				}
			})
		}
	}
}

// Every way a chunk-verified image can be wrong fails the write, names the
// chunk when it is a digest's, and leaves the first MiB zeroed.
func TestWriteChunkedFailures(t *testing.T) {
	const cs = chunksum.MinSize
	raw := compressible(6<<20 + 777)
	for _, f := range allFormats {
		t.Run(string(f), func(t *testing.T) {
			file, img := served(t, raw, f, cs)
			// Another image of the same size, different in one byte of
			// chunk k: what a corrupted source or a lying server sends.
			other := func(k int, at int64) ([]byte, Image) {
				o := bytes.Clone(raw)
				o[int64(k)*cs+at] ^= 1
				ofile, oimg := served(t, o, f, cs)
				oimg.Chunks = img.Chunks
				return ofile, oimg
			}
			wrong0, wimg0 := other(0, 100)     // in the held-back head
			wrong3, wimg3 := other(3, cs-1)    // mid-image, last byte of its chunk
			wrongEnd, wimgEnd := other(6, 700) // the short last chunk
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			shortList := *img.Chunks
			shortList.Sums = shortList.Sums[:3]
			type tcase struct {
				name  string
				ctx   context.Context
				r     io.Reader
				img   Image
				d     func(*os.File) Disk
				want  string
				chunk int // the ChecksumError's chunk; -1: none; -2: either
			}
			cases := []tcase{
				{"chunk 0 differs", nil, bytes.NewReader(wrong0), wimg0, nil, "chunk 0 (bytes 0 to 1048576)", 0},
				{"chunk 3 differs", nil, bytes.NewReader(wrong3), wimg3, nil, "chunk 3 (bytes 3145728 to 4194304)", 3},
				{"last chunk differs", nil, bytes.NewReader(wrongEnd), wimgEnd, nil, "chunk 6 (bytes 6291456 to 6292233)", 6},
				{"list of another size", nil, bytes.NewReader(file), func() Image { i := img; i.Chunks = &shortList; return i }(), nil,
					"3 chunk digests", -1},
				{"cut connection", nil, &failingReader{bytes.NewReader(file), len(file) / 2}, img, nil, "connection reset", -1},
				{"longer than announced", nil, bytes.NewReader(append(bytes.Clone(file), 0)), img, nil, "longer than", -1},
				{"disk error", nil, bytes.NewReader(file), img, func(f *os.File) Disk { return lateFailingDisk{f} }, "EIO", -1},
				{"disk error at once", nil, bytes.NewReader(file), img, func(f *os.File) Disk { return failingDisk{f} }, "EIO", -1},
				{"cancelled", cancelled, bytes.NewReader(file), img, nil, "context canceled", -1},
			}
			if f == FormatRaw {
				cases = append(cases,
					tcase{"short", nil, bytes.NewReader(file[:3<<20+5]), img, nil, "ended early after 3145733 of", -1},
					tcase{"head only", nil, bytes.NewReader(file[:1000]), img, nil, "ended early after 1000 of", -1})
			} else {
				cut := file[:len(file)*2/3]
				garbage := append(bytes.Clone(file), []byte("not a stream at all, just bytes")...)
				flipped := bytes.Clone(file)
				flipped[len(file)/2] ^= 0x55
				cases = append(cases,
					tcase{"truncated stream", nil, bytes.NewReader(cut), func() Image { i := img; i.Size = int64(len(cut)); return i }(), nil, "decompress the " + string(f), -1},
					// The decoder's own check or the chunk's digest, whichever
					// sees it first.
					tcase{"corrupt stream", nil, bytes.NewReader(flipped), img, nil, string(f) + "|sha256 mismatch: chunk", -2},
					tcase{"trailing garbage", nil, bytes.NewReader(garbage), func() Image { i := img; i.Size = int64(len(garbage)); return i }(), nil, string(f), -1},
					tcase{"file shorter than announced", nil, bytes.NewReader(file[:len(file)-10]), img, nil, "ended", -1})
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					ctx := tc.ctx
					if ctx == nil {
						ctx = context.Background()
					}
					f := fakeDisk(t, 8<<20)
					var d Disk = f
					if tc.d != nil {
						d = tc.d(f)
					}
					res, err := Write(ctx, tc.r, d, tc.img, Options{})
					if err == nil || !containsAny(err.Error(), tc.want) {
						t.Fatalf("err %v, want %q", err, tc.want)
					}
					if res.Chunks != 0 {
						t.Errorf("a failed write says %d chunks verified", res.Chunks)
					}
					// A disk that takes no write cannot be zeroed either.
					if got := read(t, f); tc.name != "disk error at once" && !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) {
						t.Fatal("the first MiB is not zeroed after a failed write")
					}
					var ce *ChecksumError
					switch {
					case tc.chunk >= 0 && !errors.As(err, &ce):
						t.Fatalf("%#v: want a *ChecksumError", err)
					case tc.chunk >= 0 && (ce.Chunk != tc.chunk || ce.Offset != int64(tc.chunk)*cs || ce.Want == ce.Got ||
						ce.Image != tc.img.SHA256 || !strings.Contains(err.Error(), "(image "+tc.img.SHA256+")") ||
						ce.Want != hex.EncodeToString(img.Chunks.Sums[tc.chunk][:])):
						t.Fatalf("%+v, want chunk %d", ce, tc.chunk)
					case tc.chunk == -1 && errors.As(err, &ce):
						t.Fatalf("%v: a ChecksumError for a failure that is not one", err)
					}
				})
			}
		})
	}
}

// containsAny reports whether s contains one of the |-separated wants.
func containsAny(s, wants string) bool {
	for w := range strings.SplitSeq(wants, "|") {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// A seeded deployment verified by chunks leaves the same disk, byte for
// byte, as one verified by the whole-stream digests.
func TestSeedChunked(t *testing.T) {
	const imgSize, diskSize = 24 << 20, 64 << 20
	img := partitioned(t, imgSize, gptScript)
	seed := vfatSeed(t, 1024)
	for _, f := range []Format{FormatRaw, FormatZstd} {
		t.Run(string(f), func(t *testing.T) {
			whole, wres := writeSeeded(t, img, diskSize, seed, f)
			file, im := served(t, img, f, chunksum.Size)
			disk := fakeDisk(t, diskSize)
			res, err := Write(context.Background(), bytes.NewReader(file), disk, im, Options{Seed: seed, DiskSize: diskSize})
			if err != nil {
				t.Fatal(err)
			}
			if res.Seed == nil || *res.Seed != *wres.Seed || res.Chunks != imgSize/chunksum.Size {
				t.Fatalf("chunked %+v, whole-stream %+v", res, wres)
			}
			a, _ := os.ReadFile(whole)
			b := read(t, disk)
			if !bytes.Equal(a, b) {
				t.Fatal("the chunk-verified disk differs from the whole-stream one")
			}
		})
	}
}

// An image far larger than the chunks in flight streams on the chunked
// path too.
func TestWriteChunkedStreams(t *testing.T) {
	const rawSize = 128 << 20
	raw := make([]byte, rawSize)
	file, img := served(t, raw, FormatZstd, chunksum.Size)
	raw = nil
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
}

// BenchmarkWriteChunked is Write's rate for a raw and a zstd image into a
// disk that keeps nothing, with the whole-stream digests ("whole") and
// with the chunk list ("chunked"), one after the other for each format.
// Under emulation (go test -c, then qemu-x86_64-static -cpu max ./deploy.test
// -test.bench WriteChunked) it shows what the chunk pool gains where
// SHA-256 bounds the stream.
func BenchmarkWriteChunked(b *testing.B) {
	raw := compressible(64 << 20)
	for _, f := range []Format{FormatRaw, FormatZstd} {
		file, img := served(b, raw, f, chunksum.Size)
		whole := img
		whole.Chunks = nil
		for _, v := range []struct {
			name string
			img  Image
		}{{"whole", whole}, {"chunked", img}} {
			b.Run(string(f)+"/"+v.name, func(b *testing.B) {
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					if _, err := Write(context.Background(), bytes.NewReader(file), nullDisk{}, v.img, Options{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
