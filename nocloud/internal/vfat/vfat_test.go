package vfat

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pattern returns n bytes that differ from cluster to cluster, so a file
// read back from the wrong cluster or in the wrong order does not compare
// equal.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/7) ^ byte(i>>9) ^ seed
	}
	return b
}

var roundTrips = []struct {
	name  string
	files []File
	size  int // the expected image size in MiB
}{
	{"no files", nil, 1},
	{"seed names", []File{
		{"meta-data", []byte("instance-id: i-1\n")},
		{"user-data", []byte("#cloud-config\n{}\n")},
		{"vendor-data", []byte("#cloud-config\n")},
		{"network-config", []byte("version: 2\n")},
	}, 1},
	{"an 8.3 name needs no long name", []File{{"README.TXT", []byte("hi")}}, 1},
	{"lower case 8.3 and tails", []File{
		{"readme.txt", []byte("a")},
		{"network-config", []byte("b")},
		{"network-config2", []byte("c")},
		{"NETWOR~1", []byte("d")},
	}, 1},
	{"empty file", []File{{"empty", nil}, {"after-empty", []byte("x")}}, 1},
	{"non-ASCII and long names", []File{
		{"café au lait.json", []byte("{}")},
		{strings.Repeat("n", 255), []byte("max length")},
		{"a b.c.tar.gz", []byte("dots")},
	}, 1},
	{"a cluster exactly", []File{{"one", pattern(512, 1)}, {"two", pattern(513, 2)}}, 1},
	{"multi-cluster", []File{{"big", pattern(300_000, 3)}, {"small", []byte("s")}}, 1},
	{"1 MiB user-data", []File{{"meta-data", []byte("m")}, {"user-data", pattern(1<<20, 4)}}, 2},
	{"5 MiB", []File{{"blob", pattern(5<<20, 5)}}, 6},
	{"many files", func() []File {
		var fs []File
		for i := range 40 {
			fs = append(fs, File{fmt.Sprintf("file-number-%02d", i), pattern(i*100, byte(i))})
		}
		return fs
	}(), 1},
}

func TestBuildRead(t *testing.T) {
	for _, tc := range roundTrips {
		t.Run(tc.name, func(t *testing.T) {
			img, err := Build("CIDATA", 0x12345678, tc.files)
			if err != nil {
				t.Fatal(err)
			}
			if len(img) != tc.size*mib {
				t.Fatalf("image is %d bytes, want %d MiB", len(img), tc.size)
			}
			label, got, err := Read(img)
			if err != nil {
				t.Fatal(err)
			}
			if label != "CIDATA" {
				t.Errorf("label %q", label)
			}
			checkFiles(t, got, tc.files)
			again, err := Build("CIDATA", 0x12345678, tc.files)
			if err != nil || !bytes.Equal(img, again) {
				t.Errorf("a second build differs (err %v)", err)
			}
		})
	}
}

func checkFiles(t *testing.T, got, want []File) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d files, wrote %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name {
			t.Errorf("file %d: name %q, want %q", i, got[i].Name, want[i].Name)
		}
		if !bytes.Equal(got[i].Data, want[i].Data) {
			t.Errorf("file %q: %d bytes read back differ from the %d written", want[i].Name, len(got[i].Data), len(want[i].Data))
		}
	}
}

// TestSmallest: the image is the smallest whole MiB that holds the files:
// a file one cluster larger than what fits moves it to the next MiB.
func TestSmallest(t *testing.T) {
	for size := mib; size <= 8*mib; size += mib {
		l, ok := geometry(size)
		if !ok {
			t.Fatalf("%d MiB: no FAT12 geometry", size/mib)
		}
		fits := l.clusters * l.clusterBytes()
		img, err := Build("X", 1, []File{{"f", make([]byte, fits)}})
		if err != nil || len(img) != size {
			t.Errorf("%d bytes (all the clusters of %d MiB): image of %d bytes, err %v", fits, size/mib, len(img), err)
		}
		img, err = Build("X", 1, []File{{"f", make([]byte, fits+1)}})
		if err != nil || len(img) != size+mib {
			t.Errorf("%d bytes: image of %d bytes, want %d (err %v)", fits+1, len(img), size+mib, err)
		}
	}
}

func TestGeometry(t *testing.T) {
	for size := mib; size <= MaxSize; size += mib {
		l, ok := geometry(size)
		if !ok {
			t.Fatalf("%d MiB: no geometry", size/mib)
		}
		if l.clusters > maxFAT12Clusters {
			t.Errorf("%d MiB: %d clusters is not FAT12", size/mib, l.clusters)
		}
		if need := ((l.clusters+2)*3 + 1) / 2; need > l.fatSectors*sectorSize {
			t.Errorf("%d MiB: the FAT holds %d bytes, %d clusters need %d", size/mib, l.fatSectors*sectorSize, l.clusters, need)
		}
		if used := reserved + numFATs*l.fatSectors + rootSectors + l.clusters*l.spc; used > l.totalSectors {
			t.Errorf("%d MiB: %d sectors used of %d", size/mib, used, l.totalSectors)
		}
		if l.totalSectors*sectorSize != size {
			t.Errorf("%d MiB: %d sectors", size/mib, l.totalSectors)
		}
	}
}

func TestShortNames(t *testing.T) {
	for _, tc := range []struct {
		files []string
		short []string // the last file's short name: 8+3, space padded
	}{
		{[]string{"meta-data"}, []string{"META-D~1   "}},
		{[]string{"user-data"}, []string{"USER-D~1   "}},
		{[]string{"vendor-data"}, []string{"VENDOR~1   "}},
		{[]string{"network-config", "network-config2"}, []string{"NETWOR~1   ", "NETWOR~2   "}},
		{[]string{"README.TXT", "readme.tx"}, []string{"README  TXT", "README~1TX "}},
		{[]string{"network-config", "NETWOR~1"}, []string{"NETWOR~2   ", "NETWOR~1   "}},
		{[]string{"network-config", "netwoR~1"}, []string{"NETWOR~2   ", "NETWOR~3   "}},
		{[]string{"café.json"}, []string{"CAF_~1  JSO"}},
		{[]string{"a+b=c"}, []string{"A_B_C~1    "}},
	} {
		var fs []File
		for _, n := range tc.files {
			fs = append(fs, File{Name: n})
		}
		es, err := plan(fs)
		if err != nil {
			t.Fatalf("%q: %v", tc.files, err)
		}
		for i, e := range es {
			if string(e.short[:]) != tc.short[i] {
				t.Errorf("%q: short name %q, want %q", e.long, e.short[:], tc.short[i])
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		label string
		files []File
		want  string
	}{
		{"empty label", "", nil, "volume label"},
		{"long label", "ABCDEFGHIJKL", nil, "volume label"},
		{"lower case label", "cidata", nil, "not allowed"},
		{"empty name", "L", []File{{"", nil}}, "empty"},
		{"slash", "L", []File{{"a/b", nil}}, "does not allow"},
		{"dot", "L", []File{{".", nil}}, "reserved"},
		{"trailing dot", "L", []File{{"a.", nil}}, "ends with a dot"},
		{"control", "L", []File{{"a\x01", nil}}, "does not allow"},
		{"bad UTF-8", "L", []File{{"a\xff", nil}}, "UTF-8"},
		{"too long", "L", []File{{strings.Repeat("x", 256), nil}}, "255"},
		{"twice", "L", []File{{"Meta-Data", nil}, {"meta-data", nil}}, "twice"},
		{"too many entries", "L", func() []File {
			var fs []File
			for i := range 200 {
				fs = append(fs, File{Name: fmt.Sprintf("a-long-file-name-%03d", i)})
			}
			return fs
		}(), "directory entries"},
		{"too large", "L", []File{{"f", make([]byte, MaxSize)}}, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.label, 1, tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestVolumeID: the serial number is the only thing the id changes.
func TestVolumeID(t *testing.T) {
	fs := []File{{"meta-data", []byte("x")}}
	a, _ := Build("CIDATA", 0x01020304, fs)
	b, _ := Build("CIDATA", 0xA0B0C0D0, fs)
	if !bytes.Equal(a[39:43], []byte{4, 3, 2, 1}) {
		t.Errorf("volume id bytes % x", a[39:43])
	}
	a[39], a[40], a[41], a[42] = b[39], b[40], b[41], b[42]
	if !bytes.Equal(a, b) {
		t.Error("images differ beyond the volume id")
	}
}

func TestReadRefuses(t *testing.T) {
	good, err := Build("CIDATA", 1, []File{{"meta-data", pattern(2000, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := geometry(mib)
	rootOff := (reserved + numFATs*l.fatSectors) * sectorSize
	for _, tc := range []struct {
		name  string
		spoil func(b []byte)
		want  string
	}{
		{"signature", func(b []byte) { b[510] = 0 }, "signature"},
		{"sector size", func(b []byte) { b[11], b[12] = 0, 3 }, "bytes per sector"},
		{"second FAT", func(b []byte) { b[(reserved+l.fatSectors)*sectorSize+5] ^= 1 }, "differs"},
		{"checksum", func(b []byte) { b[rootOff+32+13] ^= 1; b[rootOff+64+13] ^= 1 }, "checksum"},
		{"chain", func(b []byte) {
			for i := 0; i < numFATs; i++ {
				setFAT12(b[(reserved+i*l.fatSectors)*sectorSize:], 3, 0)
			}
		}, "broken cluster chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(good)
			tc.spoil(b)
			_, _, err := Read(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// need skips the test when a peer tool is not installed.
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/test-deps.sh installs it): %v", tool, err)
		}
	}
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// TestPeerDosfstools: dosfstools' checker finds nothing to fix, for every
// round-trip case.
func TestPeerDosfstools(t *testing.T) {
	need(t, "fsck.fat")
	dir := t.TempDir()
	for _, tc := range roundTrips {
		img, err := Build("CIDATA", 0x12345678, tc.files)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "img")
		if err := os.WriteFile(path, img, 0o600); err != nil {
			t.Fatal(err)
		}
		// -n: check only; -V: read every cluster a second time (verify).
		out := run(t, "fsck.fat", "-n", "-V", path)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(line, "fsck.fat ") && !strings.Contains(line, " files, ") &&
				line != "Starting check/repair pass." && line != "Starting verification pass." {
				t.Errorf("%s: fsck.fat says %q", tc.name, line)
			}
		}
	}
}

// TestPeerBlkid: libblkid (what udev and cloud-init's device search use)
// sees a vfat filesystem labelled CIDATA with our serial number.
func TestPeerBlkid(t *testing.T) {
	need(t, "blkid")
	img, err := Build("CIDATA", 0xC0FFEE42, roundTrips[1].files)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	out := string(run(t, "blkid", "-p", "-o", "export", path))
	for _, want := range []string{"TYPE=vfat", "LABEL=CIDATA", "UUID=C0FF-EE42", "VERSION=FAT12", "USAGE=filesystem"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("blkid -p says\n%s\nwithout %s", out, want)
		}
	}
}

// TestPeerMtools: mtools lists every file under its long name and copies
// each one out byte for byte.
func TestPeerMtools(t *testing.T) {
	need(t, "mcopy", "mdir")
	dir := t.TempDir()
	for _, tc := range roundTrips {
		if len(tc.files) == 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			img, err := Build("CIDATA", 0x12345678, tc.files)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "img")
			if err := os.WriteFile(path, img, 0o600); err != nil {
				t.Fatal(err)
			}
			listing := string(run(t, "mdir", "-i", path, "-a", "::"))
			if !strings.Contains(listing, "Volume in drive : is CIDATA") {
				t.Errorf("mdir does not name the volume:\n%s", listing)
			}
			for _, f := range tc.files {
				got := run(t, "mcopy", "-n", "-i", path, "::"+f.Name, "-")
				if !bytes.Equal(got, f.Data) {
					t.Errorf("mcopy ::%s: %d bytes, differ from the %d written", f.Name, len(got), len(f.Data))
				}
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	for _, tc := range roundTrips[:8] {
		img, err := Build("CIDATA", 1, tc.files)
		if err != nil {
			f.Fatal(err)
		}
		// The boot sector, the FATs, the root directory and the first
		// clusters, as a 64 KiB volume (the sector count says so): the
		// fuzzer mutates the parts Read interprets, on inputs small enough
		// to run fast.
		seed := bytes.Clone(img[:64*1024])
		binary.LittleEndian.PutUint16(seed[19:], 64*1024/sectorSize)
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		Read(img) // must not panic or loop, whatever the bytes
	})
}

func FuzzBuild(f *testing.F) {
	f.Add("meta-data", []byte("instance-id: x\n"), "user-data", 600)
	f.Add("README.TXT", []byte{}, "café", 0)
	f.Fuzz(func(t *testing.T, n1 string, d1 []byte, n2 string, size2 int) {
		size2 = max(0, min(size2, 1<<18))
		files := []File{{n1, d1}, {n2, pattern(size2, 9)}}
		img, err := Build("CIDATA", 7, files)
		if err != nil {
			return // a name refused: the error is checked by TestBuildErrors
		}
		if len(img)%mib != 0 {
			t.Fatalf("size %d", len(img))
		}
		_, got, err := Read(img)
		if err != nil {
			t.Fatalf("Build(%q, %q) made an image Read refuses: %v", n1, n2, err)
		}
		checkFiles(t, got, files)
	})
}
