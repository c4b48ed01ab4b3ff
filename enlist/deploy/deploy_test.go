package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rackd/enlist"
)

// fakeDisk is a disk backed by a file, already holding an "old system":
// every byte 0xEE, so tests can see what was written and what was not.
func fakeDisk(t *testing.T, size int64) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "disk"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(bytes.Repeat([]byte{0xEE}, int(size))); err != nil {
		t.Fatal(err)
	}
	return f
}

func image(n int) ([]byte, string) {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, uint64(n)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	h := sha256.Sum256(b)
	return b, hex.EncodeToString(h[:])
}

func read(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWrite(t *testing.T) {
	const disk = 12 << 20
	img, sum := image(9<<20 + 12345) // several chunks and a ragged end
	f := fakeDisk(t, disk)
	var last int64
	res, err := Write(context.Background(), bytes.NewReader(img), f, Image{Size: int64(len(img)), SHA256: sum}, Options{Progress: func(n int64) { last = n }})
	if err != nil || res.Bytes != int64(len(img)) || res.SHA256 != sum || last != int64(len(img)) {
		t.Fatalf("%+v %v (progress %d)", res, err, last)
	}
	got := read(t, f)
	if !bytes.Equal(got[:len(img)], img) || !bytes.Equal(got[len(img):], bytes.Repeat([]byte{0xEE}, disk-len(img))) {
		t.Fatal("the disk does not hold the image followed by what was there")
	}
	// A small image (less than the head) works too.
	small, ssum := image(1000)
	f = fakeDisk(t, 4096)
	if _, err := Write(context.Background(), bytes.NewReader(small), f, Image{Size: 1000, SHA256: ssum}, Options{}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, f); !bytes.Equal(got[:1000], small) {
		t.Fatal("small image not written")
	}
}

// failingReader fails after n bytes.
type failingReader struct {
	r io.Reader
	n int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection reset by peer")
	}
	p = p[:min(len(p), f.n)]
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// Every failure leaves the first MiB zeroed: nothing bootable, old or new.
func TestWriteFailuresLeaveNothingBootable(t *testing.T) {
	const disk = 8 << 20
	img, sum := image(6 << 20)
	corrupt := bytes.Clone(img)
	corrupt[5<<20] ^= 1
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		r    io.Reader
		size int64
		sha  string
		want string
	}{
		{"wrong checksum", context.Background(), bytes.NewReader(corrupt), int64(len(img)), sum, "sha256 mismatch"},
		{"short", context.Background(), bytes.NewReader(img[:3<<20]), int64(len(img)), sum, "ended early after"},
		{"long", context.Background(), bytes.NewReader(append(bytes.Clone(img), 0)), int64(len(img)), sum, "longer than"},
		{"cut mid-stream", context.Background(), &failingReader{bytes.NewReader(img), 2 << 20}, int64(len(img)), sum, "connection reset"},
		{"head only", context.Background(), bytes.NewReader(img[:1000]), int64(len(img)), sum, "after 0 of"},
		{"cancelled", cancelled, bytes.NewReader(img), int64(len(img)), sum, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeDisk(t, disk)
			_, err := Write(tc.ctx, tc.r, f, Image{Size: tc.size, SHA256: tc.sha}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if got := read(t, f); !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) {
				t.Fatal("the first MiB is not zeroed after a failed write")
			}
			var ce *ChecksumError
			if tc.name == "wrong checksum" && (!errors.As(err, &ce) || ce.Want != sum || ce.Got == sum) {
				t.Fatalf("%#v", err)
			}
		})
	}
}

type failingDisk struct{ *os.File }

func (failingDisk) WriteAt([]byte, int64) (int, error) { return 0, errors.New("EIO") }

// lateFailingDisk fails writes beyond byte 6 MiB: mid-stream, in the
// writer of the pipeline.
type lateFailingDisk struct{ *os.File }

func (d lateFailingDisk) WriteAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) > 6<<20 {
		return 0, errors.New("EIO")
	}
	return d.File.WriteAt(b, off)
}

func TestWriteDiskError(t *testing.T) {
	img, sum := image(2 << 20)
	_, err := Write(context.Background(), bytes.NewReader(img), failingDisk{fakeDisk(t, 4<<20)}, Image{Size: int64(len(img)), SHA256: sum}, Options{})
	if err == nil || !strings.Contains(err.Error(), "EIO") {
		t.Fatal(err)
	}
	big, bigSum := image(20 << 20)
	f := fakeDisk(t, 24<<20)
	res, err := Write(context.Background(), bytes.NewReader(big), lateFailingDisk{f}, Image{Size: int64(len(big)), SHA256: bigSum}, Options{})
	if err == nil || !strings.Contains(err.Error(), "write the disk at byte") || !strings.Contains(err.Error(), "EIO") || res.Bytes > 6<<20 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := read(t, f); !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) {
		t.Fatal("the head is not zeroed after a write error")
	}
}

func TestErase(t *testing.T) {
	if TailSize < enlist.MaxSeed+2*MiB {
		t.Fatalf("TailSize %d does not cover the largest seed (%d) with its alignment and the backup GPT", TailSize, enlist.MaxSeed)
	}
	const disk = 40<<20 + 512
	f := fakeDisk(t, disk)
	if err := Erase(f, disk); err != nil {
		t.Fatal(err)
	}
	got := read(t, f)
	if !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) || !bytes.Equal(got[disk-TailSize:], make([]byte, TailSize)) ||
		!bytes.Equal(got[HeadSize:disk-TailSize], bytes.Repeat([]byte{0xEE}, disk-TailSize-HeadSize)) {
		t.Fatal("erase wrote the wrong bytes")
	}
	// A disk smaller than a MiB is wiped whole.
	f = fakeDisk(t, 4096)
	if err := Erase(f, 4096); err != nil || !bytes.Equal(read(t, f), make([]byte, 4096)) {
		t.Fatal("small disk", err)
	}
}

func TestChooseDisk(t *testing.T) {
	disks := []enlist.Disk{{Name: "sr0", SizeBytes: 1 << 40}, {Name: "vda", SizeBytes: 1 << 20}, {Name: "vdb", SizeBytes: 1 << 30}}
	for _, tc := range []struct {
		rule string
		size int64
		want string // disk name or error substring
	}{
		{"", 1 << 20, "vda"},
		{"auto", 1 << 21, "vdb"},
		{"vdb", 1, "vdb"},
		{"vda", 1 << 21, "has 1048576 bytes"},
		{"auto", 1 << 31, "no disk holds"},
		{"nvme0n1", 1, "no such disk"},
		{"../sda", 1, "want auto or a kernel disk name"},
	} {
		d, err := ChooseDisk(disks, tc.rule, tc.size)
		if err != nil && !strings.Contains(err.Error(), tc.want) || err == nil && d.Name != tc.want {
			t.Errorf("%q %d: %+v %v, want %s", tc.rule, tc.size, d, err, tc.want)
		}
	}
	if _, err := ChooseDisk(nil, "auto", 1); err == nil {
		t.Error("no disks: no error")
	}
}

func FuzzChooseDisk(f *testing.F) {
	for _, s := range []string{"", "auto", "vda", "nvme0n1", "../x", strings.Repeat("a", 100)} {
		f.Add(s, int64(1))
	}
	disks := []enlist.Disk{{Name: "vda", SizeBytes: 1 << 20}, {Name: "nvme0n1", SizeBytes: 1 << 30}}
	f.Fuzz(func(t *testing.T, rule string, size int64) {
		d, err := ChooseDisk(disks, rule, size)
		if err == nil && (d.SizeBytes < size || (d.Name != "vda" && d.Name != "nvme0n1")) {
			t.Fatalf("rule %q size %d chose %+v", rule, size, d)
		}
	})
}
