package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"unicode/utf16"
)

// The GUID Partition Table of a disk image, as the UEFI specification
// (chapter 5) lays it out: a protective MBR in LBA 0, the primary header
// in LBA 1, the partition entry array after it, and a backup entry array
// and header in the last LBAs of the disk. An image made for a disk of
// its own size has its backup at the image's end; written to a larger
// disk it must be moved to that disk's end, which is what gives the
// partitions after it (the CIDATA seed) and the root's growth room.

// GUID is a GUID as the GPT stores it: the first three fields little-endian.
type GUID [16]byte

// String is the GUID in its canonical form, upper case as sfdisk and
// sgdisk print it.
func (g GUID) String() string {
	return fmt.Sprintf("%08X-%04X-%04X-%X-%X", binary.LittleEndian.Uint32(g[0:4]), binary.LittleEndian.Uint16(g[4:6]),
		binary.LittleEndian.Uint16(g[6:8]), g[8:10], g[10:16])
}

// parseGUID reads a canonical GUID string.
func parseGUID(s string) (GUID, error) {
	var g GUID
	var a uint32
	var b, c uint16
	var d [2]byte
	var e [6]byte
	if len(s) != 36 {
		return g, fmt.Errorf("guid %q: want 36 characters", s)
	}
	if _, err := fmt.Sscanf(s, "%08x-%04x-%04x-%02x%02x-%02x%02x%02x%02x%02x%02x", &a, &b, &c, &d[0], &d[1],
		&e[0], &e[1], &e[2], &e[3], &e[4], &e[5]); err != nil {
		return g, fmt.Errorf("guid %q: %w", s, err)
	}
	binary.LittleEndian.PutUint32(g[0:4], a)
	binary.LittleEndian.PutUint16(g[4:6], b)
	binary.LittleEndian.PutUint16(g[6:8], c)
	copy(g[8:10], d[:])
	copy(g[10:16], e[:])
	return g, nil
}

func mustGUID(s string) GUID {
	g, err := parseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// BasicDataGUID is the Microsoft basic data partition type, which FAT
// file systems such as the CIDATA seed carry.
var BasicDataGUID = mustGUID("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7")

// gptSignature starts a GPT header.
const gptSignature = "EFI PART"

// Bounds on what a GPT may declare. The specification's minimum array is
// 16 KiB (128 entries of 128 bytes); real tables use exactly that.
const (
	gptMinHeader  = 92
	maxEntrySize  = 4096
	maxEntries    = 1 << 14
	gptEntryName  = 72 // bytes of UTF-16LE
	gptHeaderCRC  = 16 // offset of the header's CRC32
	gptEntriesCRC = 88 // offset of the entry array's CRC32
)

// gptEntry is one partition entry (the first 128 bytes of its slot).
type gptEntry struct {
	Type, Unique GUID
	First, Last  uint64
	Attrs        uint64
	Name         [gptEntryName]byte
}

func (e gptEntry) used() bool { return e.Type != GUID{} }

// name is the entry's name, up to its first NUL.
func (e gptEntry) name() string {
	u := make([]uint16, 0, gptEntryName/2)
	for i := 0; i < gptEntryName; i += 2 {
		c := binary.LittleEndian.Uint16(e.Name[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

// gpt is a parsed primary GPT.
type gpt struct {
	// sector is the image's logical sector size: 512, or 4096 for a 4Kn
	// image.
	sector int
	// header is the header sector's first headerSize bytes, kept whole
	// so that fields this editor does not know survive the edit.
	header                             []byte
	alternate, firstUsable, lastUsable uint64
	diskGUID                           GUID
	entriesLBA                         uint64
	numEntries, entrySize              uint32
	// entries is the whole partition entry array.
	entries []byte
}

// GPTError is a GPT that cannot be used as it is.
type GPTError struct{ Msg string }

func (e *GPTError) Error() string { return "GPT: " + e.Msg }

func gptErr(format string, a ...any) error { return &GPTError{Msg: fmt.Sprintf(format, a...)} }

// hasGPT reports whether head holds a GPT header signature at LBA 1, for
// 512- or 4096-byte sectors, and which.
func hasGPT(head []byte) (sector int, ok bool) {
	for _, ss := range []int{512, 4096} {
		if len(head) >= 2*ss && string(head[ss:ss+8]) == gptSignature {
			return ss, true
		}
	}
	return 0, false
}

// parseGPT parses and validates the primary GPT in the first bytes of an
// image: the header's fields and CRC32, the entry array (which must lie
// within head) and its CRC32, and every used entry (inside the usable
// LBAs, first <= last, no two overlapping).
func parseGPT(head []byte) (*gpt, error) {
	ss, ok := hasGPT(head)
	if !ok {
		return nil, gptErr("no header at LBA 1")
	}
	sec := head[ss : 2*ss]
	g := &gpt{sector: ss}
	le := binary.LittleEndian
	if rev := le.Uint32(sec[8:]); rev>>16 != 1 {
		return nil, gptErr("header revision %#x, want 1.x", rev)
	}
	hsize := le.Uint32(sec[12:])
	if hsize < gptMinHeader || hsize > uint32(ss) {
		return nil, gptErr("header size %d, want %d to %d", hsize, gptMinHeader, ss)
	}
	g.header = bytes.Clone(sec[:hsize])
	if got, want := headerCRC(g.header), le.Uint32(sec[gptHeaderCRC:]); got != want {
		return nil, gptErr("header CRC32 %08x, the header says %08x", got, want)
	}
	if my := le.Uint64(sec[24:]); my != 1 {
		return nil, gptErr("primary header says it is at LBA %d, want 1", my)
	}
	g.alternate, g.firstUsable, g.lastUsable = le.Uint64(sec[32:]), le.Uint64(sec[40:]), le.Uint64(sec[48:])
	copy(g.diskGUID[:], sec[56:72])
	g.entriesLBA, g.numEntries, g.entrySize = le.Uint64(sec[72:]), le.Uint32(sec[80:]), le.Uint32(sec[84:])
	if g.entrySize < 128 || g.entrySize > maxEntrySize || g.entrySize&(g.entrySize-1) != 0 {
		return nil, gptErr("partition entry size %d, want 128 times a power of two", g.entrySize)
	}
	if g.numEntries == 0 || g.numEntries > maxEntries {
		return nil, gptErr("%d partition entries, want 1 to %d", g.numEntries, maxEntries)
	}
	arr := uint64(g.numEntries) * uint64(g.entrySize)
	if g.entriesLBA < 2 || g.entriesLBA > uint64(len(head)/ss) || g.entriesLBA*uint64(ss)+arr > uint64(len(head)) {
		return nil, gptErr("partition entries at LBA %d (%d bytes) are not within the first %d bytes", g.entriesLBA, arr, len(head))
	}
	g.entries = bytes.Clone(head[g.entriesLBA*uint64(ss) : g.entriesLBA*uint64(ss)+arr])
	if got, want := crc32.ChecksumIEEE(g.entries), le.Uint32(sec[gptEntriesCRC:]); got != want {
		return nil, gptErr("partition entries CRC32 %08x, the header says %08x", got, want)
	}
	entriesEnd := g.entriesLBA + g.entrySectors() - 1
	switch {
	case g.firstUsable <= entriesEnd:
		return nil, gptErr("first usable LBA %d is within the partition entries (LBA %d to %d)", g.firstUsable, g.entriesLBA, entriesEnd)
	case g.lastUsable < g.firstUsable:
		return nil, gptErr("last usable LBA %d is before the first, %d", g.lastUsable, g.firstUsable)
	case g.alternate <= g.lastUsable:
		return nil, gptErr("backup header at LBA %d is not after the last usable LBA %d", g.alternate, g.lastUsable)
	}
	type span struct{ first, last uint64 }
	var spans []span
	for i := range g.numEntries {
		e := g.entry(i)
		if !e.used() {
			continue
		}
		if e.First > e.Last || e.First < g.firstUsable || e.Last > g.lastUsable {
			return nil, gptErr("partition %d spans LBA %d to %d, outside the usable LBA %d to %d", i+1, e.First, e.Last, g.firstUsable, g.lastUsable)
		}
		spans = append(spans, span{e.First, e.Last})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmpU64(a.first, b.first) })
	for i := 1; i < len(spans); i++ {
		if spans[i].first <= spans[i-1].last {
			return nil, gptErr("partitions overlap at LBA %d", spans[i].first)
		}
	}
	return g, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// headerCRC is the CRC32 of a header with its CRC field taken as zero.
func headerCRC(h []byte) uint32 {
	c := bytes.Clone(h)
	clear(c[gptHeaderCRC : gptHeaderCRC+4])
	return crc32.ChecksumIEEE(c)
}

// entrySectors is the entry array's length in sectors.
func (g *gpt) entrySectors() uint64 {
	arr := uint64(g.numEntries) * uint64(g.entrySize)
	return (arr + uint64(g.sector) - 1) / uint64(g.sector)
}

func (g *gpt) entry(i uint32) gptEntry {
	b := g.entries[uint64(i)*uint64(g.entrySize):]
	var e gptEntry
	copy(e.Type[:], b[0:16])
	copy(e.Unique[:], b[16:32])
	le := binary.LittleEndian
	e.First, e.Last, e.Attrs = le.Uint64(b[32:]), le.Uint64(b[40:]), le.Uint64(b[48:])
	copy(e.Name[:], b[56:128])
	return e
}

func (g *gpt) setEntry(i uint32, e gptEntry) {
	b := g.entries[uint64(i)*uint64(g.entrySize) : uint64(i+1)*uint64(g.entrySize)]
	clear(b)
	copy(b[0:16], e.Type[:])
	copy(b[16:32], e.Unique[:])
	le := binary.LittleEndian
	le.PutUint64(b[32:], e.First)
	le.PutUint64(b[40:], e.Last)
	le.PutUint64(b[48:], e.Attrs)
	copy(b[56:128], e.Name[:])
}

// lastUsed is the last LBA any partition uses (0 when none does).
func (g *gpt) lastUsed() uint64 {
	var last uint64
	for i := range g.numEntries {
		if e := g.entry(i); e.used() {
			last = max(last, e.Last)
		}
	}
	return last
}

// headerSector renders a header sector: the kept header with the fields
// given, both CRCs recomputed.
func (g *gpt) headerSector(my, alternate, entriesLBA uint64) []byte {
	h := bytes.Clone(g.header)
	le := binary.LittleEndian
	le.PutUint64(h[24:], my)
	le.PutUint64(h[32:], alternate)
	le.PutUint64(h[40:], g.firstUsable)
	le.PutUint64(h[48:], g.lastUsable)
	le.PutUint64(h[72:], entriesLBA)
	le.PutUint32(h[gptEntriesCRC:], crc32.ChecksumIEEE(g.entries))
	le.PutUint32(h[gptHeaderCRC:], headerCRC(h))
	sec := make([]byte, g.sector)
	copy(sec, h)
	return sec
}

// entryName is name as a GPT entry's UTF-16LE name field.
func entryName(name string) [gptEntryName]byte {
	var b [gptEntryName]byte
	for i, c := range utf16.Encode([]rune(name)) {
		if 2*i+2 > gptEntryName {
			break
		}
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}

// seedGUID is the CIDATA partition's unique GUID: derived from the disk's
// GUID and the seed (which holds the deployment's own instance-id), so
// the same deployment gets the same GUID and two deployments do not; a
// version 4 (random) GUID in form.
func seedGUID(disk GUID, seed []byte, salt int) GUID {
	h := sha256.New()
	fmt.Fprintf(h, "rackd CIDATA partition %d\x00", salt)
	h.Write(disk[:])
	h.Write(seed)
	var g GUID
	copy(g[:], h.Sum(nil))
	g[7] = g[7]&0x0f | 0x40 // version 4, in the little-endian third field
	g[8] = g[8]&0x3f | 0x80 // RFC 4122 variant
	return g
}

// errNoGPTRoom is a disk too small for the image's GPT and the seed.
var errNoGPTRoom = errors.New("no room")
