package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"rackd/internal/gpt"
)

// The seed partition. The deploy environment adds a partition holding
// the NoCloud seed (a FAT file system labelled CIDATA, made by rackd) at
// the very end of the target disk, in the image's own partition table:
// cloud-init finds it by its label, nothing in the image changes, and the
// root partition, which ends where the image ended, can still grow into
// all the space between (cloud-init's growpart stops at the next
// partition; a seed placed right after the root would block it).
//
// GPT images get a partition named CIDATA of the Microsoft basic data
// type in a free entry, 1 MiB-aligned, in the last MiBs before the backup
// GPT, which moves from the image's end to the disk's. MBR images get a
// primary partition of type 0x0c (FAT32, LBA) in a free slot, also at the
// disk's end. An image with no free entry or slot, or no partition table
// at all, is an error: the deployment would not get its identity.

// MiB is the alignment of the seed partition.
const MiB = 1 << 20

// SeedPartitionName is the GPT name of the seed partition; the file
// system's label is CIDATA too.
const SeedPartitionName = "CIDATA"

// mbrSeedType is the MBR partition type of the seed: FAT32 with LBA.
const mbrSeedType = 0x0c

// SeedPlacement says where Write put the seed.
type SeedPlacement struct {
	// Table is "gpt" or "mbr".
	Table string
	// Partition is the seed partition's number (1-based, as the kernel
	// names it: vda4).
	Partition int
	// Start and Size are in bytes.
	Start, Size int64
}

// DiskNeeded is the size a disk needs to hold an image of rawSize bytes
// and a seed of seedLen bytes (none: 0): the image, rounded up to a MiB,
// the seed partition, rounded up to a MiB, and a MiB for the backup GPT
// and the alignment at the disk's end.
func DiskNeeded(rawSize int64, seedLen int) int64 {
	if seedLen <= 0 {
		return rawSize
	}
	return alignUp(rawSize, MiB) + alignUp(int64(seedLen), MiB) + MiB
}

func alignUp(n, a int64) int64   { return (n + a - 1) / a * a }
func alignDown(n, a int64) int64 { return n / a * a }

// patch is bytes to write at an offset.
type patch struct {
	off int64
	b   []byte
}

// seedPlan is what Write does to add the seed: the patches, written
// after the image's body and before the head, and the new head.
type seedPlan struct {
	placement SeedPlacement
	head      []byte
	patches   []patch
}

// planSeed plans the seed partition for an image of imageSize bytes whose
// first bytes are head, on a disk of diskSize bytes. It changes nothing.
func planSeed(head []byte, imageSize, diskSize int64, seed []byte) (*seedPlan, error) {
	if len(seed) == 0 {
		return nil, fmt.Errorf("empty seed")
	}
	if diskSize < imageSize {
		return nil, fmt.Errorf("disk of %d bytes is smaller than the %d-byte image", diskSize, imageSize)
	}
	var p *seedPlan
	if _, ok := gpt.Detect(head); ok {
		g, err := gpt.Parse(head)
		if err != nil {
			return nil, fmt.Errorf("the image's partition table: %w", err)
		}
		if p, err = planGPTSeed(g, head, imageSize, diskSize, seed); err != nil {
			return nil, err
		}
	} else {
		var err error
		if p, err = planMBRSeed(head, imageSize, diskSize, seed); err != nil {
			return nil, err
		}
	}
	// A previous deployment's seed (with its owner's user-data) may lie in
	// the disk's tail before this one, when it was larger or the disk was
	// not erased: the free space between the image's end and the new seed,
	// within the tail, is zeroed first.
	from := max(alignUp(imageSize, MiB), alignDown(diskSize-TailSize, MiB))
	if to := p.placement.Start; to > from {
		p.patches = append([]patch{{from, alignedBuf(int(to - from))}}, p.patches...)
	}
	return p, nil
}

// TailSize is the end of a disk that holds a deployment's seed partition
// (at most enlist.MaxSeed, 1 MiB-aligned) and the backup GPT: Erase zeroes
// it all, and a deploy zeroes what of it its own seed does not cover.
const TailSize = 32 << 20

// seedArea is where the seed partition goes: its size rounded up to a MiB,
// ending at or before end (bytes, exclusive), aligned to a MiB, after the
// image and after notBefore (bytes).
func seedArea(seed []byte, imageSize, notBefore, end int64) (start, size int64, err error) {
	size = alignUp(int64(len(seed)), MiB)
	start = alignDown(end, MiB) - size
	if need := max(imageSize, notBefore); start < need {
		return 0, 0, fmt.Errorf("no room for the %d-byte seed partition: it would start at byte %d, the image ends at %d; the disk needs %d bytes",
			size, start, need, DiskNeeded(need, len(seed)))
	}
	return start, size, nil
}

// padded is the seed zero-padded to size bytes.
func padded(seed []byte, size int64) []byte {
	b := alignedBuf(int(size))
	copy(b, seed)
	return b
}

func planGPTSeed(g *gpt.Table, head []byte, imageSize, diskSize int64, seed []byte) (*seedPlan, error) {
	ss := int64(g.Sector)
	diskLBAs := uint64(diskSize / ss)
	es := g.EntrySectors()
	if diskLBAs < es+2 || diskLBAs-1-es-1 < g.LastUsable {
		return nil, fmt.Errorf("the image's GPT uses LBAs up to %d, the disk has %d", g.LastUsable, diskLBAs)
	}
	newAlt := diskLBAs - 1
	newEntries := newAlt - es
	newLastUsable := newEntries - 1
	free := -1
	var uniques []gpt.GUID
	for i := range g.NumEntries {
		e := g.Entry(i)
		if !e.Used() {
			if free < 0 {
				free = int(i)
			}
			continue
		}
		uniques = append(uniques, e.Unique)
		if e.Label() == SeedPartitionName && e.Type == gpt.BasicDataGUID {
			return nil, gptErr("the image already has a %s partition (%d)", SeedPartitionName, i+1)
		}
	}
	if free < 0 {
		return nil, gptErr("all %d partition entries are used: no room for the %s partition", g.NumEntries, SeedPartitionName)
	}
	start, size, err := seedArea(seed, imageSize, int64(g.LastUsed()+1)*ss, int64(newLastUsable+1)*ss)
	if err != nil {
		return nil, err
	}
	unique := seedGUID(g.DiskGUID, seed, 0)
	for salt := 1; unique == g.DiskGUID || bytes.Contains(guidList(uniques), unique[:]); salt++ {
		unique = seedGUID(g.DiskGUID, seed, salt)
	}
	oldAlt := g.Alternate
	g.SetEntry(uint32(free), gpt.Entry{Type: gpt.BasicDataGUID, Unique: unique, First: uint64(start / ss),
		Last: uint64((start+size)/ss - 1), Name: gpt.EntryName(SeedPartitionName)})
	g.LastUsable = newLastUsable
	g.Alternate = newAlt
	p := &seedPlan{placement: SeedPlacement{Table: "gpt", Partition: free + 1, Start: start, Size: size}}
	// The image's own backup header, now in the free space before the
	// seed: zeroed, so that nothing finds a stale table there.
	if oldAlt != newAlt && int64(oldAlt+1)*ss <= imageSize && int64(oldAlt+1)*ss <= start {
		p.patches = append(p.patches, patch{int64(oldAlt) * ss, make([]byte, ss)})
	}
	p.patches = append(p.patches,
		patch{start, padded(seed, size)},
		patch{int64(newEntries) * ss, bytes.Clone(g.Entries)},
		patch{int64(newAlt) * ss, g.HeaderSector(newAlt, 1, newEntries)})
	p.head = cloneAligned(head)
	copy(p.head[ss:], g.HeaderSector(1, newAlt, g.EntriesLBA))
	copy(p.head[int64(g.EntriesLBA)*ss:], g.Entries)
	// The protective MBR covers the whole disk, as far as 32 bits go.
	if mbrSigned(head) {
		for i := range 4 {
			e := p.head[446+16*i : 446+16*(i+1)]
			if e[4] == 0xEE && binary.LittleEndian.Uint32(e[8:]) == 1 {
				binary.LittleEndian.PutUint32(e[12:], uint32(min(diskLBAs-1, 0xFFFFFFFF)))
			}
		}
	}
	return p, nil
}

// cloneAligned is a copy of b in a buffer aligned for O_DIRECT writes.
func cloneAligned(b []byte) []byte {
	c := alignedBuf(len(b))
	copy(c, b)
	return c
}

func guidList(gs []gpt.GUID) []byte {
	var b []byte
	for _, g := range gs {
		b = append(b, g[:]...)
	}
	return b
}

func mbrSigned(head []byte) bool { return len(head) >= 512 && head[510] == 0x55 && head[511] == 0xAA }

// mbrEntry is one of the MBR's four primary partition slots.
type mbrEntry struct {
	status, typ    byte
	first, sectors uint32
}

func mbrEntries(head []byte) [4]mbrEntry {
	var es [4]mbrEntry
	for i := range es {
		b := head[446+16*i:]
		es[i] = mbrEntry{status: b[0], typ: b[4], first: binary.LittleEndian.Uint32(b[8:]), sectors: binary.LittleEndian.Uint32(b[12:])}
	}
	return es
}

// MBRError is an MBR that cannot take the seed partition.
type MBRError struct{ Msg string }

func (e *MBRError) Error() string { return "MBR: " + e.Msg }

func planMBRSeed(head []byte, imageSize, diskSize int64, seed []byte) (*seedPlan, error) {
	if !mbrSigned(head) {
		return nil, &MBRError{"the image has no partition table (no GPT, no MBR signature): nowhere to add the " + SeedPartitionName + " partition"}
	}
	es := mbrEntries(head)
	free := -1
	var end int64 // bytes, the end of the last partition
	for i, e := range es {
		if e.status != 0 && e.status != 0x80 {
			return nil, &MBRError{fmt.Sprintf("partition %d has boot flag %#x: not a partition table (a file system's boot sector?)", i+1, e.status)}
		}
		if e.typ == 0xEE {
			return nil, &MBRError{"a protective MBR (type 0xee) without a valid GPT header"}
		}
		if e.typ == 0 {
			if free < 0 {
				free = i
			}
			continue
		}
		if e.sectors == 0 || e.first == 0 {
			return nil, &MBRError{fmt.Sprintf("partition %d starts at sector %d with %d sectors", i+1, e.first, e.sectors)}
		}
		for j, o := range es[:i] {
			if o.typ != 0 && uint64(e.first) < uint64(o.first)+uint64(o.sectors) && uint64(o.first) < uint64(e.first)+uint64(e.sectors) {
				return nil, &MBRError{fmt.Sprintf("partitions %d and %d overlap", j+1, i+1)}
			}
		}
		end = max(end, (int64(e.first)+int64(e.sectors))*512)
	}
	if free < 0 {
		return nil, &MBRError{"all four primary partitions are used: no free slot for the " + SeedPartitionName + " partition (use a GPT image)"}
	}
	start, size, err := seedArea(seed, imageSize, end, diskSize)
	if err != nil {
		return nil, err
	}
	if (start+size)/512 > 0xFFFFFFFF {
		return nil, &MBRError{fmt.Sprintf("the disk's end (%d bytes) is beyond the 2 TiB an MBR can address: use a GPT image, or a smaller disk (rackd.disk=)", diskSize)}
	}
	p := &seedPlan{placement: SeedPlacement{Table: "mbr", Partition: free + 1, Start: start, Size: size}, head: cloneAligned(head)}
	b := p.head[446+16*free : 446+16*(free+1)]
	// CHS fields say "use the LBA fields", as partitioners write beyond
	// 8 GiB.
	copy(b, []byte{0, 0xFE, 0xFF, 0xFF, mbrSeedType, 0xFE, 0xFF, 0xFF})
	binary.LittleEndian.PutUint32(b[8:], uint32(start/512))
	binary.LittleEndian.PutUint32(b[12:], uint32(size/512))
	p.patches = []patch{{start, padded(seed, size)}}
	return p, nil
}

// seedGUID is the CIDATA partition's unique GUID: derived from the disk's
// GUID and the seed (which holds the deployment's own instance-id), so
// the same deployment gets the same GUID and two deployments do not; a
// version 4 (random) GUID in form.
func seedGUID(disk gpt.GUID, seed []byte, salt int) gpt.GUID {
	h := sha256.New()
	fmt.Fprintf(h, "rackd CIDATA partition %d\x00", salt)
	h.Write(disk[:])
	h.Write(seed)
	var g gpt.GUID
	copy(g[:], h.Sum(nil))
	g[7] = g[7]&0x0f | 0x40 // version 4, in the little-endian third field
	g[8] = g[8]&0x3f | 0x80 // RFC 4122 variant
	return g
}

// gptErr is a GPT the seed cannot be added to.
func gptErr(format string, a ...any) error { return &gpt.Error{Msg: fmt.Sprintf(format, a...)} }
