package deploy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rackd/internal/gpt"
)

// These tests make disk images with sfdisk, write them with a seed made
// by mkfs.vfat, and have sfdisk, sgdisk, blkid, fsck.fat and growpart
// judge the result.

func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (scripts/test-deps.sh installs it): %v", name, err)
	}
	return p
}

func runTool(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool(t, name), args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// partitioned makes an image of size bytes partitioned by sfdisk's script
// (and a recognisable byte pattern inside, so that the body is checked).
func partitioned(t testing.TB, size int64, script string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "image")
	b := compressible(int(size))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// compressible's runs would look like tables to nobody; the first
	// MiB is cleared so that only sfdisk's structures are there.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, MiB), 0)
	f.WriteAt(make([]byte, 64<<10), size-64<<10)
	f.Close()
	runTool(t, script, "sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", path)
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// vfatSeed is a CIDATA file system of kib KiB made by mkfs.vfat, with a
// meta-data file copied in by mtools when it is there.
func vfatSeed(t testing.TB, kib int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seed.img")
	runTool(t, "", "mkfs.vfat", "-n", "CIDATA", "-C", path, fmt.Sprint(kib))
	if mcopy, err := exec.LookPath("mcopy"); err == nil {
		md := filepath.Join(t.TempDir(), "meta-data")
		os.WriteFile(md, []byte("instance-id: i-test\nlocal-hostname: node1.example\n"), 0o644)
		if out, err := exec.Command(mcopy, "-i", path, md, "::meta-data").CombinedOutput(); err != nil {
			t.Fatalf("mcopy: %v\n%s", err, out)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type sfdiskTable struct {
	PartitionTable struct {
		Label      string `json:"label"`
		ID         string `json:"id"`
		Device     string `json:"device"`
		Unit       string `json:"unit"`
		FirstLBA   int64  `json:"firstlba"`
		LastLBA    int64  `json:"lastlba"`
		SectorSize int64  `json:"sectorsize"`
		Partitions []struct {
			Node  string `json:"node"`
			Start int64  `json:"start"`
			Size  int64  `json:"size"`
			Type  string `json:"type"`
			UUID  string `json:"uuid"`
			Name  string `json:"name"`
		} `json:"partitions"`
	} `json:"partitiontable"`
}

func sfdiskJSON(t *testing.T, path string) sfdiskTable {
	t.Helper()
	var tab sfdiskTable
	if err := json.Unmarshal([]byte(runTool(t, "", "sfdisk", "--json", path)), &tab); err != nil {
		t.Fatal(err)
	}
	return tab
}

// checkSeedFS says whether blkid sees the CIDATA vfat at off and fsck.fat
// finds it clean.
func checkSeedFS(t *testing.T, disk string, off int64, seed []byte) {
	t.Helper()
	out := runTool(t, "", "blkid", "-p", "-O", fmt.Sprint(off), "-o", "export", disk)
	if !strings.Contains(out, "LABEL=CIDATA") || !strings.Contains(out, "TYPE=vfat") {
		t.Errorf("blkid at %d: %s", off, out)
	}
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[off:off+int64(len(seed))], seed) {
		t.Fatal("the seed partition does not hold the seed")
	}
	part := filepath.Join(t.TempDir(), "part")
	if err := os.WriteFile(part, b[off:off+int64(len(seed))], 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, "", "fsck.fat", "-n", part)
}

// writeSeeded writes img to a disk file of diskSize bytes (an old system
// on it: 0xEE) with seed, compressed with format f when not raw.
func writeSeeded(t *testing.T, img []byte, diskSize int64, seed []byte, f Format) (string, Result) {
	t.Helper()
	disk := fakeDisk(t, diskSize)
	file, im := img, Image{Format: FormatRaw, Size: int64(len(img)), SHA256: hexSHA(img)}
	if f != FormatRaw {
		file = compress(t, f, img)
		im = Image{Format: f, Size: int64(len(file)), SHA256: hexSHA(file), RawSize: int64(len(img)), RawSHA256: hexSHA(img)}
	}
	res, err := Write(context.Background(), bytes.NewReader(file), disk, im, Options{Seed: seed, DiskSize: diskSize})
	if err != nil {
		t.Fatal(err)
	}
	return disk.Name(), res
}

const gptScript = `label: gpt
size=1MiB, type=21686148-6453-6F48-6E6F-744E65656646, name=bios
size=4MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root
`

func TestSeedGPT(t *testing.T) {
	const imgSize, diskSize = 24 << 20, 64 << 20
	img := partitioned(t, imgSize, gptScript)
	seed := vfatSeed(t, 1024)
	for _, f := range []Format{FormatRaw, FormatZstd} {
		t.Run(string(f), func(t *testing.T) {
			disk, res := writeSeeded(t, img, diskSize, seed, f)
			want := SeedPlacement{Table: "gpt", Partition: 4, Start: diskSize - 2*MiB, Size: MiB}
			if res.Seed == nil || *res.Seed != want {
				t.Fatalf("placement %+v, want %+v", res.Seed, want)
			}
			runTool(t, "", "sfdisk", "--verify", disk)
			if out := runTool(t, "", "sgdisk", "-v", disk); !strings.Contains(out, "No problems found") {
				t.Fatalf("sgdisk -v:\n%s", out)
			}
			tab := sfdiskJSON(t, disk).PartitionTable
			if tab.LastLBA != diskSize/512-34 || len(tab.Partitions) != 4 {
				t.Fatalf("sfdisk --json: %+v", tab)
			}
			p := tab.Partitions[3]
			if p.Name != "CIDATA" || p.Type != gpt.BasicDataGUID.String() || p.Start*512 != want.Start || p.Size*512 != want.Size {
				t.Fatalf("CIDATA partition %+v", p)
			}
			for _, o := range tab.Partitions[:3] {
				if strings.EqualFold(o.UUID, p.UUID) {
					t.Fatalf("CIDATA has the GUID of %s", o.Node)
				}
			}
			checkSeedFS(t, disk, want.Start, seed)
			got, _ := os.ReadFile(disk)
			// The body is the image's, from its first MiB to where its
			// backup GPT was (zeroed now, header and all).
			if !bytes.Equal(got[MiB:imgSize-33*512], img[MiB:imgSize-33*512]) || !bytes.Equal(got[imgSize-512:imgSize], make([]byte, 512)) {
				t.Fatal("the image's body is not on the disk, or its old backup header is")
			}
			// What an earlier deployment left in the tail before this
			// seed (its seed, its user-data) is zeroed; the free space
			// before the tail is left alone.
			tail := int64(diskSize - TailSize)
			if !bytes.Equal(got[tail:want.Start], make([]byte, want.Start-tail)) ||
				!bytes.Equal(got[imgSize:tail], bytes.Repeat([]byte{0xEE}, int(tail-imgSize))) {
				t.Fatal("the disk's tail before the seed is not zeroed, or more than the tail is")
			}
			// growpart grows the root up to the seed, not over it.
			out, err := exec.Command(tool(t, "growpart"), disk, "3").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "CHANGED") {
				t.Fatalf("growpart: %v\n%s", err, out)
			}
			tab = sfdiskJSON(t, disk).PartitionTable
			root := tab.Partitions[2]
			if gap := want.Start - (root.Start+root.Size)*512; gap < 0 || gap >= MiB || tab.Partitions[3].Start*512 != want.Start {
				t.Fatalf("after growpart: root %+v, seed %+v", root, tab.Partitions[3])
			}
			if out := runTool(t, "", "sgdisk", "-v", disk); !strings.Contains(out, "No problems found") {
				t.Fatalf("sgdisk -v after growpart:\n%s", out)
			}
			checkSeedFS(t, disk, want.Start, seed)
		})
	}
}

func TestSeedMBR(t *testing.T) {
	const imgSize, diskSize = 16 << 20, 40<<20 + 12345
	img := partitioned(t, imgSize, "label: dos\nsize=4MiB, type=83, bootable\ntype=83\n")
	seed := vfatSeed(t, 1500) // a seed of 1.5 MiB takes 2
	disk, res := writeSeeded(t, img, diskSize, seed, FormatGzip)
	want := SeedPlacement{Table: "mbr", Partition: 3, Start: 38 << 20, Size: 2 << 20}
	if res.Seed == nil || *res.Seed != want {
		t.Fatalf("placement %+v, want %+v", res.Seed, want)
	}
	runTool(t, "", "sfdisk", "--verify", disk)
	tab := sfdiskJSON(t, disk).PartitionTable
	if tab.Label != "dos" || len(tab.Partitions) != 3 || tab.Partitions[2].Type != "c" ||
		tab.Partitions[2].Start*512 != want.Start || tab.Partitions[2].Size*512 != want.Size {
		t.Fatalf("sfdisk --json: %+v", tab)
	}
	checkSeedFS(t, disk, want.Start, seed)
	out, err := exec.Command(tool(t, "growpart"), disk, "2").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHANGED") {
		t.Fatalf("growpart: %v\n%s", err, out)
	}
	tab = sfdiskJSON(t, disk).PartitionTable
	if root := tab.Partitions[1]; (root.Start+root.Size)*512 > want.Start || (root.Start+root.Size)*512 < want.Start-MiB {
		t.Fatalf("after growpart: %+v", tab.Partitions)
	}
	// The e2e tests' image: a boot sector and no partition at all.
	bare := make([]byte, 3<<20)
	bare[510], bare[511] = 0x55, 0xAA
	disk, res = writeSeeded(t, bare, 8<<20, seed, FormatRaw)
	if res.Seed == nil || res.Seed.Partition != 1 || res.Seed.Start != 6<<20 {
		t.Fatalf("bare MBR: %+v", res.Seed)
	}
	runTool(t, "", "sfdisk", "--verify", disk)
	checkSeedFS(t, disk, 6<<20, seed)
}

// Images that cannot take the seed fail before anything but the zeroed
// head is written.
func TestSeedRefused(t *testing.T) {
	seed := vfatSeed(t, 1024)
	full := partitioned(t, 16<<20, "label: dos\nsize=2MiB\nsize=2MiB\nsize=2MiB\ntype=83\n")
	gpt := partitioned(t, 16<<20, gptScript)
	bigGPT := partitioned(t, 16<<20, "label: gpt\ntable-length: 4\nsize=2MiB\nsize=2MiB\nsize=2MiB\nsize=2MiB\n")
	badCRC := bytes.Clone(gpt)
	badCRC[512+60] ^= 1 // in the disk GUID
	noTable := compressible(4 << 20)
	for _, tc := range []struct {
		name     string
		img      []byte
		diskSize int64
		want     string
	}{
		{"four primaries", full, 32 << 20, "all four primary partitions are used"},
		{"full gpt", bigGPT, 32 << 20, "all 4 partition entries are used"},
		{"bad header crc", badCRC, 32 << 20, "header CRC32"},
		{"no table", noTable, 32 << 20, "no partition table"},
		{"disk too small", gpt, 17 << 20, "no room for the 1048576-byte seed partition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := fakeDisk(t, tc.diskSize)
			_, err := Write(context.Background(), bytes.NewReader(tc.img), disk, Image{Size: int64(len(tc.img)), SHA256: hexSHA(tc.img)},
				Options{Seed: seed, DiskSize: tc.diskSize})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "CIDATA") {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			got := read(t, disk)
			if !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) || !bytes.Equal(got[HeadSize:], bytes.Repeat([]byte{0xEE}, len(got)-HeadSize)) {
				t.Fatal("a refused image wrote more than the zeroed head")
			}
		})
	}
	// A seed with the wrong image checksum: neither seed nor head.
	disk := fakeDisk(t, 32<<20)
	_, err := Write(context.Background(), bytes.NewReader(gpt), disk, Image{Size: int64(len(gpt)), SHA256: strings.Repeat("0", 64)},
		Options{Seed: seed, DiskSize: 32 << 20})
	var ce *ChecksumError
	if !errors.As(err, &ce) {
		t.Fatal(err)
	}
	if got := read(t, disk); !bytes.Equal(got[:HeadSize], make([]byte, HeadSize)) || !bytes.Equal(got[30<<20:], bytes.Repeat([]byte{0xEE}, 2<<20)) {
		t.Fatal("a failed deployment wrote its head or its seed")
	}
}

func TestDiskNeeded(t *testing.T) {
	if DiskNeeded(5, 0) != 5 || DiskNeeded(24<<20, 1) != 26<<20 || DiskNeeded(24<<20+1, MiB+1) != 28<<20 {
		t.Fatal(DiskNeeded(5, 0), DiskNeeded(24<<20, 1), DiskNeeded(24<<20+1, MiB+1))
	}
	// What DiskNeeded says is enough is enough.
	img := partitioned(t, 24<<20+512*7, gptScript)
	seed := vfatSeed(t, 1024)
	size := DiskNeeded(int64(len(img)), len(seed))
	disk, _ := writeSeeded(t, img, size, seed, FormatRaw)
	runTool(t, "", "sfdisk", "--verify", disk)
}

// FuzzPlanSeed: whatever the first bytes of an image say, planning the
// seed either refuses it or yields a table that parses again, with the
// seed partition inside the disk, after the image and every partition,
// 1 MiB-aligned, and a backup GPT that is valid where it is written.
func FuzzPlanSeed(f *testing.F) {
	for _, script := range []string{gptScript, "label: dos\nsize=4MiB, type=83\ntype=83\n", "label: gpt\ntable-length: 4\nsize=1MiB\n"} {
		img := partitioned(f, 8<<20, script)
		f.Add(img[:17<<10], int64(8<<20), int64(12<<20), true)
	}
	f.Add(make([]byte, 4096), int64(4096), int64(1<<30), false)
	seed := bytes.Repeat([]byte{0xF0}, 5000)
	f.Fuzz(func(t *testing.T, head []byte, imageSize, diskSize int64, fix bool) {
		if imageSize < int64(len(head)) || imageSize > 1<<44 || diskSize > 1<<44 {
			return
		}
		if fix {
			// Mutated fields with their CRCs made right again: the
			// checks behind the CRCs get fuzzed too.
			fixCRCs(head)
		}
		p, err := planSeed(head, imageSize, diskSize, seed)
		if err != nil {
			return
		}
		pl := p.placement
		if pl.Start%MiB != 0 || pl.Size != MiB || pl.Start < imageSize || pl.Start+pl.Size > diskSize || len(p.head) != len(head) {
			t.Fatalf("placement %+v for an image of %d bytes on a disk of %d", pl, imageSize, diskSize)
		}
		if pl.Table == "mbr" {
			es := mbrEntries(p.head)
			e := es[pl.Partition-1]
			if e.typ != mbrSeedType || int64(e.first)*512 != pl.Start || int64(e.sectors)*512 != pl.Size {
				t.Fatalf("seed slot %+v for %+v", e, pl)
			}
			for i, o := range es {
				if i != pl.Partition-1 && o.typ != 0 && int64(o.first+o.sectors)*512 > pl.Start {
					t.Fatalf("partition %d %+v reaches into the seed at %d", i+1, o, pl.Start)
				}
			}
			return
		}
		g, err := gpt.Parse(p.head)
		if err != nil {
			t.Fatalf("the edited GPT does not parse: %v", err)
		}
		ss := int64(g.Sector)
		e := g.Entry(uint32(pl.Partition - 1))
		if e.Type != gpt.BasicDataGUID || e.Label() != SeedPartitionName || int64(e.First)*ss != pl.Start || int64(e.Last+1)*ss != pl.Start+pl.Size ||
			g.Alternate != uint64(diskSize/ss-1) || g.LastUsable < e.Last {
			t.Fatalf("seed entry %+v, alternate %d, last usable %d on a disk of %d bytes", e, g.Alternate, g.LastUsable, diskSize)
		}
		backup := p.patches[len(p.patches)-1]
		entries := p.patches[len(p.patches)-2]
		if backup.off != int64(g.Alternate)*ss || !bytes.Equal(entries.b, g.Entries) {
			t.Fatalf("backup at %d, entries at %d", backup.off, entries.off)
		}
		h := backup.b[:binary.LittleEndian.Uint32(backup.b[12:])]
		le := binary.LittleEndian
		if gpt.HeaderCRC(h) != le.Uint32(h[gpt.HeaderCRCOffset:]) || le.Uint64(h[24:]) != g.Alternate || le.Uint64(h[32:]) != 1 ||
			le.Uint64(h[72:])*uint64(ss) != uint64(entries.off) || le.Uint32(h[gpt.EntriesCRCOffset:]) != crc32.ChecksumIEEE(entries.b) {
			t.Fatal("the backup header does not check")
		}
	})
}

// fixCRCs recomputes the CRC32s of a GPT in head where its fields let
// them be found.
func fixCRCs(head []byte) {
	ss, ok := gpt.Detect(head)
	if !ok {
		return
	}
	sec := head[ss : 2*ss]
	le := binary.LittleEndian
	lba, n, size := le.Uint64(sec[72:]), uint64(le.Uint32(sec[80:])), uint64(le.Uint32(sec[84:]))
	if lba < uint64(len(head)) && n*size <= uint64(len(head)) && lba*uint64(ss)+n*size <= uint64(len(head)) {
		le.PutUint32(sec[gpt.EntriesCRCOffset:], crc32.ChecksumIEEE(head[lba*uint64(ss):lba*uint64(ss)+n*size]))
	}
	if hs := le.Uint32(sec[12:]); hs >= 92 && hs <= uint32(ss) {
		le.PutUint32(sec[gpt.HeaderCRCOffset:], gpt.HeaderCRC(sec[:hs]))
	}
}
