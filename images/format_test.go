package images

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/internal/chunksum"
	"rackd/internal/netnstest"
)

// rawDisk is a small raw disk image: an MBR with its boot signature and a
// partition entry, then data that compresses neither to nothing nor not at
// all, then zeros (as a real image has).
func rawDisk(size int) []byte {
	d := make([]byte, size)
	d[0], d[1], d[2] = 0xeb, 0x63, 0x90 // a jump, as boot code starts
	d[446+4] = 0x83                     // a Linux partition
	binary.LittleEndian.PutUint32(d[446+8:], 2048)
	binary.LittleEndian.PutUint32(d[446+12:], uint32(size/512-2048))
	d[510], d[511] = 0x55, 0xaa
	x := uint32(2463534242)
	for i := 4096; i < min(size/2, 256<<10); i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		d[i] = byte(x) & 0x0f
	}
	return d
}

// compress runs the real tool on data and returns its output.
func compress(t *testing.T, tool string, args []string, data []byte) []byte {
	t.Helper()
	cmd := exec.Command(tool, args...)
	cmd.Stdin = bytes.NewReader(data)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v: %s", tool, args, err, errb.String())
	}
	return out.Bytes()
}

func TestSniff(t *testing.T) {
	vdi := make([]byte, sniffLen)
	copy(vdi[0x40:], "\x7f\x10\xda\xbe")
	for _, tc := range []struct {
		name string
		head []byte
		want string
		err  string
	}{
		{"mbr", rawDisk(4 << 20)[:sniffLen], FormatRaw, ""},
		{"zeros", make([]byte, sniffLen), FormatRaw, ""},
		{"short", []byte{0x1f}, FormatRaw, ""},
		{"empty", nil, FormatRaw, ""},
		{"gzip", []byte("\x1f\x8b\x08\x00"), FormatGzip, ""},
		{"xz", []byte("\xfd7zXZ\x00\x00\x04"), FormatXZ, ""},
		{"zstd", []byte("\x28\xb5\x2f\xfd\x04"), FormatZstd, ""},
		{"zstd skippable", []byte("\x50\x2a\x4d\x18\x04\x00"), FormatZstd, ""},
		{"qcow2", []byte("QFI\xfb\x00\x00\x00\x03"), FormatQCOW2, ""},
		{"vmdk", []byte("KDMV\x01\x00"), "", "VMDK file"},
		{"vhdx", []byte("vhdxfile"), "", "VHDX"},
		{"vdi", vdi, "", "VDI"},
		{"bzip2", []byte("BZh91AY&SY"), "", "recompress it with gzip, xz or zstd"},
	} {
		got, err := Sniff(tc.head)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %q, %v; want an error with %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// Compressed disk images made by the real gzip, xz and zstd tools import
// as they are (the blob is the compressed file, which /boot/ serves), with
// the raw size and SHA-256 found by decompressing them once; the manifest
// may say the format and raw digest, and then they must agree.
func TestImportCompressedDisk(t *testing.T) {
	raw := rawDisk(2 << 20)
	rawSum := sum(raw)
	tools := []struct {
		format, tool, pkg string
		args              []string
	}{
		{FormatGzip, "gzip", "gzip", []string{"-c", "-6"}},
		{FormatXZ, "xz", "xz-utils", []string{"-c", "-T1"}},
		{FormatZstd, "zstd", "zstd", []string{"-c", "-q", "-3"}},
		{FormatZstd, "zstd", "zstd", []string{"-c", "-q", "--long=27"}},
	}
	for _, tl := range tools {
		t.Run(tl.tool+strings.Join(tl.args, ""), func(t *testing.T) {
			netnstest.Tool(t, tl.tool)
			comp := compress(t, tl.tool, tl.args, raw)
			for _, tc := range []struct {
				name string
				f    imgFile
				err  string
			}{
				{"sniffed", imgFile{}, ""},
				{"manifest agrees", imgFile{format: tl.format, rawSize: int64(len(raw)), rawSHA: rawSum}, ""},
				{"wrong raw sha256", imgFile{rawSHA: sum([]byte("other"))}, "raw sha256 mismatch: expected " + sum([]byte("other")) + ", got " + rawSum},
				{"wrong raw size", imgFile{rawSize: 12345}, "raw size mismatch: the manifest says 12345 bytes"},
				{"wrong format", imgFile{format: FormatRaw}, "the manifest says format raw, the file is " + tl.format},
			} {
				t.Run(tc.name, func(t *testing.T) {
					f := tc.f
					f.path, f.role, f.data = "disk.img.x", RoleDisk, comp
					s, sdir := mustOpen(t)
					var steps []string
					m, blobs, err := ImportDir(context.Background(), s, writeImage(t, []imgFile{f}), ImportOptions{
						Progress: func(p Progress) {
							if p.Step != "" && (len(steps) == 0 || steps[len(steps)-1] != p.Step) {
								steps = append(steps, p.Step)
							}
						}})
					if tc.err != "" {
						if err == nil || !strings.Contains(err.Error(), tc.err) {
							t.Fatalf("err = %v, want %q", err, tc.err)
						}
						assertEmpty(t, sdir)
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					if m.Files[0].Path != "disk.img.x" || blobs[0] != (Blob{sum(comp), int64(len(comp))}) {
						t.Fatalf("blob %+v, want the compressed file's", blobs[0])
					}
					if len(steps) != 0 {
						t.Errorf("steps %q: a compressed file is checked while it downloads", steps)
					}
				})
			}
			// Imported's Files say what the registry records.
			s, _ := mustOpen(t)
			src, err := OpenDir(writeImage(t, []imgFile{{path: "d", role: RoleDisk, data: comp}}))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			im, err := Import(context.Background(), s, src, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer im.Release()
			want := File{Path: "d", Role: RoleDisk, SHA256: sum(comp), Size: int64(len(comp)), Format: tl.format, RawSize: int64(len(raw)), RawSHA256: rawSum,
				Chunks: storedChunkList(t, s, raw)}
			if im.Files[0] != want || len(im.Converted) != 0 || len(im.ChunkLists) != 1 || im.ChunkLists[0].SHA256 != want.Chunks {
				t.Fatalf("Files[0] = %+v, want %+v (converted %v)", im.Files[0], want, im.Converted)
			}
		})
	}
}

// storedChunkList is the digest of raw's chunk list, which s must hold as
// a blob: what the import records for a disk image of raw content.
func storedChunkList(t *testing.T, s *Store, raw []byte) string {
	t.Helper()
	w := &chunksum.Writer{}
	w.Write(raw)
	list := w.List().Marshal()
	h := sum(list)
	f, _, err := s.Open(h)
	if err != nil {
		t.Fatalf("the chunk list blob: %v", err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, list) {
		t.Fatalf("the chunk list blob holds %q, want %q", got, list)
	}
	return h
}

// A disk file's chunk list is rolled back with it when a later file of
// the image fails.
func TestImportRollsBackChunkList(t *testing.T) {
	s, sdir := mustOpen(t)
	_, _, err := ImportDir(context.Background(), s, writeImage(t, []imgFile{
		{path: "disk.img", role: RoleDisk, data: rawDisk(5 << 20)},
		{path: "vmlinuz", role: "kernel", data: []byte("kernel"), sha: sum([]byte("not the kernel"))},
	}), ImportOptions{})
	if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Fatalf("err = %v", err)
	}
	assertEmpty(t, sdir)
}

// A raw disk image records its own size and digest as raw; the manifest's
// raw fields must match them too.
func TestImportRawDisk(t *testing.T) {
	raw := rawDisk(2 << 20)
	for _, tc := range []struct {
		name string
		f    imgFile
		err  string
	}{
		{"plain", imgFile{}, ""},
		{"said raw", imgFile{format: FormatRaw, rawSize: int64(len(raw)), rawSHA: sum(raw)}, ""},
		{"said xz", imgFile{format: FormatXZ}, "the manifest says format xz, the file is raw"},
		{"raw sha differs", imgFile{rawSHA: sum(nil)}, "raw sha256 mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			f.path, f.role, f.data = "disk.img", RoleDisk, raw
			s, sdir := mustOpen(t)
			src, err := OpenDir(writeImage(t, []imgFile{f}))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			im, err := Import(context.Background(), s, src, ImportOptions{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				assertEmpty(t, sdir)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer im.Release()
			want := File{Path: "disk.img", Role: RoleDisk, SHA256: sum(raw), Size: int64(len(raw)), Format: FormatRaw, RawSize: int64(len(raw)), RawSHA256: sum(raw),
				Chunks: storedChunkList(t, s, raw)}
			if im.Files[0] != want {
				t.Fatalf("%+v, want %+v", im.Files[0], want)
			}
		})
	}
}

// Broken compressed files are refused at import with nothing left behind:
// a truncated xz (the way a cut download of a .xz looks when the manifest
// lists the cut file), a corrupt gzip, a compressed qcow2, and a zstd
// stream that decompresses to nothing.
func TestImportBrokenCompressed(t *testing.T) {
	netnstest.Tool(t, "xz")
	netnstest.Tool(t, "gzip")
	netnstest.Tool(t, "zstd")
	raw := rawDisk(4 << 20)
	xzData := compress(t, "xz", []string{"-c", "-T1"}, raw)
	gz := compress(t, "gzip", []string{"-c"}, raw)
	corruptGz := bytes.Clone(gz)
	for i := len(gz) / 2; i < len(gz)/2+64; i++ {
		corruptGz[i] ^= 0x5a
	}
	qcowish := append([]byte("QFI\xfb\x00\x00\x00\x03"), make([]byte, 4096)...)
	for _, tc := range []struct {
		name string
		data []byte
		err  string
	}{
		{"truncated xz", xzData[:len(xzData)/2], "decompress xz"},
		{"truncated xz end", xzData[:len(xzData)-4], "decompress xz"},
		{"corrupt gzip", corruptGz, "decompress gzip"},
		{"truncated gzip", gz[:len(gz)-10], "truncated"},
		{"gzip of a qcow2", compress(t, "gzip", []string{"-c"}, qcowish), "holds a qcow2 image, not a raw disk image"},
		{"empty zstd", compress(t, "zstd", []string{"-c", "-q"}, nil), "decompresses to nothing"},
		{"not really xz", []byte("\xfd7zXZ\x00garbage"), "not a xz file"},
		{"gzip with trailing bytes", append(bytes.Clone(gz), "not another member"...), "decompress gzip"},
		{"xz with a BCJ filter", compress(t, "xz", []string{"-c", "--x86", "--lzma2"}, raw), "only xz's default LZMA2 filter is supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, sdir := mustOpen(t)
			_, _, err := ImportDir(context.Background(), s, writeImage(t, []imgFile{{path: "disk", role: RoleDisk, data: tc.data}}), ImportOptions{})
			var ie *ImportError
			if !errors.As(err, &ie) || ie.Path != "disk" || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want an ImportError of disk with %q", err, tc.err)
			}
			assertEmpty(t, sdir)
		})
	}
}

// qcow2 files made by the real qemu-img are converted at import, and the
// stored blob is the zstd of the raw image (checked with the real zstd);
// one with a backing file, one with an external data file, one larger
// than MaxFileSize and a qcow version 1 are refused before any conversion.
func TestImportQCOW2(t *testing.T) {
	netnstest.Tool(t, "qemu-img")
	netnstest.Tool(t, "zstd")
	dir := t.TempDir()
	raw := rawDisk(5 << 20)
	rawPath := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	qemu := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	qemu("convert", "-f", "raw", "-O", "qcow2", rawPath, filepath.Join(dir, "disk.qcow2"))
	qemu("convert", "-f", "raw", "-O", "qcow2", "-c", rawPath, filepath.Join(dir, "zlib.qcow2"))
	qemu("create", "-q", "-f", "qcow2", "-b", filepath.Join(dir, "disk.qcow2"), "-F", "qcow2", filepath.Join(dir, "overlay.qcow2"))
	qemu("create", "-q", "-f", "qcow2", "-o", "data_file="+rawPath+",data_file_raw=on", filepath.Join(dir, "external.qcow2"), "5M")
	qemu("create", "-q", "-f", "qcow2", filepath.Join(dir, "huge.qcow2"), "65G")
	qemu("convert", "-f", "raw", "-O", "qcow", rawPath, filepath.Join(dir, "v1.qcow"))

	for _, name := range []string{"disk.qcow2", "zlib.qcow2"} {
		t.Run(name, func(t *testing.T) {
			s, sdir := mustOpen(t)
			qcow := read(name)
			var steps []string
			src, err := OpenDir(writeImage(t, []imgFile{{path: name, role: RoleDisk, data: qcow, format: FormatQCOW2, rawSHA: sum(raw)}}))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			im, err := Import(context.Background(), s, src, ImportOptions{Progress: func(p Progress) {
				if p.Step != "" && (len(steps) == 0 || steps[len(steps)-1] != p.Step) {
					steps = append(steps, p.Step)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer im.Release()
			f := im.Files[0]
			if f.Format != FormatZstd || f.RawSize != int64(len(raw)) || f.RawSHA256 != sum(raw) || im.Converted[name] != FormatQCOW2 ||
				f.Chunks != storedChunkList(t, s, raw) {
				t.Fatalf("stored %+v, converted %v", f, im.Converted)
			}
			blob, err := os.ReadFile(filepath.Join(sdir, "sha256", f.SHA256))
			if err != nil {
				t.Fatal(err)
			}
			if got := sum(blob); got != f.SHA256 || int64(len(blob)) != f.Size {
				t.Fatalf("blob is %s (%d bytes), recorded %s (%d)", got, len(blob), f.SHA256, f.Size)
			}
			if back := compress(t, "zstd", []string{"-d", "-c", "-q"}, blob); !bytes.Equal(back, raw) {
				t.Fatalf("zstd -d of the blob: %d bytes, not the raw image", len(back))
			}
			if len(blob) > len(qcow)*2 {
				t.Errorf("the zstd blob is %d bytes for a %d-byte qcow2", len(blob), len(qcow))
			}
			if strings.Join(steps, "|") != "converting qcow2 to raw|compressing the raw image with zstd" {
				t.Errorf("steps %q", steps)
			}
			if n := dirNames(t, filepath.Join(sdir, "tmp")); len(n) != 0 {
				t.Fatalf("tmp left: %v", n)
			}
			if n := dirNames(t, filepath.Join(sdir, "sha256")); len(n) != 2 {
				t.Fatalf("sha256/ holds %v, want only the converted blob and its chunk list", n)
			}
		})
	}
	for _, tc := range []struct{ name, err string }{
		{"overlay.qcow2", "has a backing file"},
		{"external.qcow2", "external file"},
		{"huge.qcow2", "virtual size is 69793218560 bytes, more than"},
		{"v1.qcow", `the format is "qcow"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, sdir := mustOpen(t)
			_, _, err := ImportDir(context.Background(), s, writeImage(t, []imgFile{{path: tc.name, role: RoleDisk, data: read(tc.name)}}), ImportOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			assertEmpty(t, sdir)
		})
	}
	// Without qemu-img the error says what to install.
	t.Run("no qemu-img", func(t *testing.T) {
		old := QEMUImg
		QEMUImg = filepath.Join(dir, "no-such-qemu-img")
		defer func() { QEMUImg = old }()
		s, sdir := mustOpen(t)
		_, _, err := ImportDir(context.Background(), s, writeImage(t, []imgFile{{path: "d", role: RoleDisk, data: read("disk.qcow2")}}), ImportOptions{})
		if err == nil || !strings.Contains(err.Error(), "qemu-utils") {
			t.Fatalf("err = %v", err)
		}
		assertEmpty(t, sdir)
	})
}

// The rule for which qcow2 files convert, on qemu-img info's answer.
func TestCheckQCOW2(t *testing.T) {
	ok := qemuInfo{Format: FormatQCOW2, VirtualSize: 1 << 30}
	with := func(f func(*qemuInfo)) qemuInfo { i := ok; f(&i); return i }
	for _, tc := range []struct {
		name string
		info qemuInfo
		err  string
	}{
		{"ok", ok, ""},
		{"largest", with(func(i *qemuInfo) { i.VirtualSize = MaxFileSize }), ""},
		{"raw", with(func(i *qemuInfo) { i.Format = "raw" }), "only qcow2"},
		{"vmdk", with(func(i *qemuInfo) { i.Format = "vmdk" }), "only qcow2"},
		{"backing", with(func(i *qemuInfo) { i.BackingFilename = "/etc/shadow" }), "backing file"},
		{"full backing", with(func(i *qemuInfo) { i.FullBackingFilename = "/x" }), "backing file"},
		{"data file", with(func(i *qemuInfo) { i.FormatSpecific.Data.DataFile = "/dev/sda" }), "external file"},
		{"corrupt", with(func(i *qemuInfo) { i.FormatSpecific.Data.Corrupt = true }), "corrupt"},
		{"empty", with(func(i *qemuInfo) { i.VirtualSize = 0 }), "virtual size is 0"},
		{"too big", with(func(i *qemuInfo) { i.VirtualSize = MaxFileSize + 1 }), "more than"},
	} {
		err := checkQCOW2(tc.info)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// Sniff never panics, and what it says depends only on the bytes it
// needs: a longer read of the same file gives the same answer.
func FuzzSniff(f *testing.F) {
	f.Add([]byte("\x1f\x8b\x08"))
	f.Add([]byte("QFI\xfb\x00\x00\x00\x03"))
	f.Add([]byte("\x50\x2a\x4d\x18"))
	f.Add(make([]byte, sniffLen))
	f.Fuzz(func(t *testing.T, data []byte) {
		format, err := Sniff(data)
		if err == nil && format == "" {
			t.Fatal("no format and no error")
		}
		if len(data) > sniffLen {
			f2, err2 := Sniff(data[:sniffLen])
			if f2 != format || (err == nil) != (err2 == nil) {
				t.Fatalf("Sniff of %d bytes: %q %v; of the first %d: %q %v", len(data), format, err, sniffLen, f2, err2)
			}
		}
	})
}

// A cancel while the import looks into a disk image (decompressing an xz
// as it downloads, converting a qcow2) stops it and leaves nothing behind.
func TestImportDiskCancelledInStep(t *testing.T) {
	netnstest.Tool(t, "xz")
	netnstest.Tool(t, "qemu-img")
	raw := rawDisk(2 << 20)
	dir := t.TempDir()
	rawPath := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(rawPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, filepath.Join(dir, "disk.qcow2")).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v: %s", err, out)
	}
	qcow, err := os.ReadFile(filepath.Join(dir, "disk.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"xz": compress(t, "xz", []string{"-c", "-T1"}, raw), "qcow2": qcow} {
		for _, at := range []string{"downloading", "converting", "compressing"} {
			if name == "xz" && at != "downloading" {
				continue
			}
			t.Run(name+" "+at, func(t *testing.T) {
				s, sdir := mustOpen(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				_, _, err := ImportDir(ctx, s, writeImage(t, []imgFile{{path: "disk", role: RoleDisk, data: data}}), ImportOptions{
					Progress: func(p Progress) {
						if strings.HasPrefix(p.Step, at) || at == "downloading" && p.Done > 0 {
							cancel()
						}
					}})
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled", err)
				}
				assertEmpty(t, sdir)
			})
		}
	}
}

// Streams of several members, frames or streams (what pigz, zstd -T and
// cat of .xz files make) are one disk image: the raw size and digest are
// of all of it, as the deploy environment writes all of it.
func TestImportConcatenatedStreams(t *testing.T) {
	for _, tl := range []struct{ tool, pkg string }{{"gzip", "gzip"}, {"xz", "xz-utils"}, {"zstd", "zstd"}} {
		netnstest.Tool(t, tl.tool)
	}
	a, b := rawDisk(1<<20), bytes.Repeat([]byte("second part "), 40000)
	whole := append(bytes.Clone(a), b...)
	for name, data := range map[string][]byte{
		"gzip": append(compress(t, "gzip", []string{"-c"}, a), compress(t, "gzip", []string{"-c"}, b)...),
		"xz":   append(compress(t, "xz", []string{"-c", "-T1"}, a), compress(t, "xz", []string{"-c", "-T1"}, b)...),
		"zstd": append(compress(t, "zstd", []string{"-c", "-q"}, a), compress(t, "zstd", []string{"-c", "-q"}, b)...),
	} {
		s, _ := mustOpen(t)
		src, err := OpenDir(writeImage(t, []imgFile{{path: "d", role: RoleDisk, data: data, rawSHA: sum(whole)}}))
		if err != nil {
			t.Fatal(err)
		}
		im, err := Import(context.Background(), s, src, ImportOptions{})
		src.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if f := im.Files[0]; f.RawSize != int64(len(whole)) || f.Format != name {
			t.Errorf("%s: %+v", name, f)
		}
		im.Release()
	}
}

// A compressed disk image is checked as it downloads: a stream that is
// corrupt from its first bytes fails the import at once, while the server
// still holds the rest back, rather than after the whole download.
func TestImportCorruptStreamFailsEarly(t *testing.T) {
	bad := append([]byte("\x1f\x8b\x08\x00"), bytes.Repeat([]byte{0xff}, 256<<10)...)
	full := append(bad, make([]byte, 1<<20)...)
	img := writeImage(t, []imgFile{{path: "disk", role: RoleDisk, data: full}})
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	srv := imageServer(t, img, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/disk" {
			return false
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(full)))
		w.WriteHeader(200)
		w.Write(bad)
		w.(http.Flusher).Flush()
		select { // the rest never comes while the import waits
		case <-r.Context().Done():
		case <-held:
		}
		return true
	})
	t.Cleanup(srv.CloseClientConnections)
	s, sdir := mustOpen(t)
	// The bound only keeps a broken import from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := importURL(ctx, t, s, srv.URL, ImportOptions{}, URLOptions{StallTimeout: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "decompress gzip") || ctx.Err() != nil {
		t.Fatalf("err = %v, want the gzip stream's error", err)
	}
	assertEmpty(t, sdir)
}
