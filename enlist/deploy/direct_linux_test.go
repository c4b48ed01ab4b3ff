package deploy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// An image with a ragged end and a seed, written through a FileDisk: the
// aligned chunks with O_DIRECT (the test's file system takes it), the
// rest buffered; the disk holds exactly what a buffered write would have.
func TestFileDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	const diskSize = 40 << 20
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xEE}, diskSize), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDisk(path)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Direct() {
		t.Skip("the test's file system does not take O_DIRECT")
	}
	img := partitioned(t, 24<<20+512*3, gptScript)
	seed := vfatSeed(t, 1024)
	res, err := Write(context.Background(), bytes.NewReader(img), d, Image{Size: int64(len(img)), SHA256: hexSHA(img)},
		Options{Seed: seed, DiskSize: diskSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	// The head holds the edited GPT; the body is the image's.
	if !bytes.Equal(got[HeadSize:len(img)-33*512], img[HeadSize:len(img)-33*512]) || !bytes.Equal(got[:446], img[:446]) || !bytes.Equal(got[res.Seed.Start:res.Seed.Start+int64(len(seed))], seed) {
		t.Fatal("the disk does not hold the image and the seed")
	}
	runTool(t, "", "sfdisk", "--verify", path)
	if out := runTool(t, "", "sgdisk", "-v", path); !bytes.Contains([]byte(out), []byte("No problems found")) {
		t.Fatal(out)
	}
	// Erase through it too.
	d, _ = OpenDisk(path)
	defer d.Close()
	if err := Erase(d, diskSize); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	if !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) || !bytes.Equal(got[diskSize-HeadSize:], make([]byte, HeadSize)) {
		t.Fatal("erase")
	}
	if b := alignedBuf(12345); len(b) != 12345 || !aligned(alignedBuf(8192), 0) {
		t.Fatal("alignedBuf")
	}
}
