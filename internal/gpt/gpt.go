// Package gpt reads and edits GUID Partition Tables in place: the
// deploy environment adds a seed partition to an image written to a larger
// disk, and the appliance grows its data partition to the end of its disk.
package gpt

import (
	"bytes"
	"encoding/binary"
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

// Offsets in a GPT header of its own CRC32 and of its entry array's.
const (
	HeaderCRCOffset  = 16
	EntriesCRCOffset = 88
)

// GUID is a GUID as the GPT stores it: the first three fields little-endian.
type GUID [16]byte

// String is the GUID in its canonical form, upper case as sfdisk and
// sgdisk print it.
func (g GUID) String() string {
	return fmt.Sprintf("%08X-%04X-%04X-%X-%X", binary.LittleEndian.Uint32(g[0:4]), binary.LittleEndian.Uint16(g[4:6]),
		binary.LittleEndian.Uint16(g[6:8]), g[8:10], g[10:16])
}

// ParseGUID reads a canonical GUID string.
func ParseGUID(s string) (GUID, error) {
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

// MustGUID is ParseGUID for constants: it panics on a bad string.
func MustGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// BasicDataGUID is the Microsoft basic data partition type, which FAT
// file systems such as the CIDATA seed carry.
var BasicDataGUID = MustGUID("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7")

// LinuxFilesystemGUID is the Linux file system data partition type.
var LinuxFilesystemGUID = MustGUID("0FC63DAF-8483-4772-8E79-3D69D8477DE4")

// gptSignature starts a GPT header.
const gptSignature = "EFI PART"

// Bounds on what a GPT may declare. The specification's minimum array is
// 16 KiB (128 entries of 128 bytes); real tables use exactly that.
const (
	gptMinHeader = 92
	maxEntrySize = 4096
	maxEntries   = 1 << 14
	NameBytes    = 72 // bytes of UTF-16LE
)

// gptEntry is one partition entry (the first 128 bytes of its slot).
type Entry struct {
	Type, Unique GUID
	First, Last  uint64
	Attrs        uint64
	Name         [NameBytes]byte
}

func (e Entry) Used() bool { return e.Type != GUID{} }

// Label is the entry's name, up to its first NUL.
func (e Entry) Label() string {
	u := make([]uint16, 0, NameBytes/2)
	for i := 0; i < NameBytes; i += 2 {
		c := binary.LittleEndian.Uint16(e.Name[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

// Table is a parsed primary GPT. The fields are the header's; Entries is
// the whole partition entry array, which Entry and SetEntry index.
type Table struct {
	// Sector is the image's logical sector size: 512, or 4096 for a 4Kn
	// image.
	Sector int
	// header is the header sector's first headerSize bytes, kept whole
	// so that fields this editor does not know survive the edit.
	header                             []byte
	Alternate, FirstUsable, LastUsable uint64
	DiskGUID                           GUID
	EntriesLBA                         uint64
	NumEntries, EntrySize              uint32
	Entries                            []byte
}

// Error is a GPT that cannot be used as it is.
type Error struct{ Msg string }

func (e *Error) Error() string { return "GPT: " + e.Msg }

func errorf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// Detect reports whether head holds a GPT header signature at LBA 1, for
// 512- or 4096-byte sectors, and which.
func Detect(head []byte) (sector int, ok bool) {
	for _, ss := range []int{512, 4096} {
		if len(head) >= 2*ss && string(head[ss:ss+8]) == gptSignature {
			return ss, true
		}
	}
	return 0, false
}

// Parse parses and validates the primary GPT in the first bytes of an
// image: the header's fields and CRC32, the entry array (which must lie
// within head) and its CRC32, and every used entry (inside the usable
// LBAs, first <= last, no two overlapping).
func Parse(head []byte) (*Table, error) {
	ss, ok := Detect(head)
	if !ok {
		return nil, errorf("no header at LBA 1")
	}
	sec := head[ss : 2*ss]
	g := &Table{Sector: ss}
	le := binary.LittleEndian
	if rev := le.Uint32(sec[8:]); rev>>16 != 1 {
		return nil, errorf("header revision %#x, want 1.x", rev)
	}
	hsize := le.Uint32(sec[12:])
	if hsize < gptMinHeader || hsize > uint32(ss) {
		return nil, errorf("header size %d, want %d to %d", hsize, gptMinHeader, ss)
	}
	g.header = bytes.Clone(sec[:hsize])
	if got, want := HeaderCRC(g.header), le.Uint32(sec[HeaderCRCOffset:]); got != want {
		return nil, errorf("header CRC32 %08x, the header says %08x", got, want)
	}
	if my := le.Uint64(sec[24:]); my != 1 {
		return nil, errorf("primary header says it is at LBA %d, want 1", my)
	}
	g.Alternate, g.FirstUsable, g.LastUsable = le.Uint64(sec[32:]), le.Uint64(sec[40:]), le.Uint64(sec[48:])
	copy(g.DiskGUID[:], sec[56:72])
	g.EntriesLBA, g.NumEntries, g.EntrySize = le.Uint64(sec[72:]), le.Uint32(sec[80:]), le.Uint32(sec[84:])
	if g.EntrySize < 128 || g.EntrySize > maxEntrySize || g.EntrySize&(g.EntrySize-1) != 0 {
		return nil, errorf("partition entry size %d, want 128 times a power of two", g.EntrySize)
	}
	if g.NumEntries == 0 || g.NumEntries > maxEntries {
		return nil, errorf("%d partition entries, want 1 to %d", g.NumEntries, maxEntries)
	}
	arr := uint64(g.NumEntries) * uint64(g.EntrySize)
	if g.EntriesLBA < 2 || g.EntriesLBA > uint64(len(head)/ss) || g.EntriesLBA*uint64(ss)+arr > uint64(len(head)) {
		return nil, errorf("partition entries at LBA %d (%d bytes) are not within the first %d bytes", g.EntriesLBA, arr, len(head))
	}
	g.Entries = bytes.Clone(head[g.EntriesLBA*uint64(ss) : g.EntriesLBA*uint64(ss)+arr])
	if got, want := crc32.ChecksumIEEE(g.Entries), le.Uint32(sec[EntriesCRCOffset:]); got != want {
		return nil, errorf("partition entries CRC32 %08x, the header says %08x", got, want)
	}
	entriesEnd := g.EntriesLBA + g.EntrySectors() - 1
	switch {
	case g.FirstUsable <= entriesEnd:
		return nil, errorf("first usable LBA %d is within the partition entries (LBA %d to %d)", g.FirstUsable, g.EntriesLBA, entriesEnd)
	case g.LastUsable < g.FirstUsable:
		return nil, errorf("last usable LBA %d is before the first, %d", g.LastUsable, g.FirstUsable)
	case g.Alternate <= g.LastUsable:
		return nil, errorf("backup header at LBA %d is not after the last usable LBA %d", g.Alternate, g.LastUsable)
	}
	type span struct{ first, last uint64 }
	var spans []span
	for i := range g.NumEntries {
		e := g.Entry(i)
		if !e.Used() {
			continue
		}
		if e.First > e.Last || e.First < g.FirstUsable || e.Last > g.LastUsable {
			return nil, errorf("partition %d spans LBA %d to %d, outside the usable LBA %d to %d", i+1, e.First, e.Last, g.FirstUsable, g.LastUsable)
		}
		spans = append(spans, span{e.First, e.Last})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmpU64(a.first, b.first) })
	for i := 1; i < len(spans); i++ {
		if spans[i].first <= spans[i-1].last {
			return nil, errorf("partitions overlap at LBA %d", spans[i].first)
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

// HeaderCRC is the CRC32 of a header with its CRC field taken as zero.
func HeaderCRC(h []byte) uint32 {
	c := bytes.Clone(h)
	clear(c[HeaderCRCOffset : HeaderCRCOffset+4])
	return crc32.ChecksumIEEE(c)
}

// EntrySectors is the entry array's length in sectors.
func (g *Table) EntrySectors() uint64 {
	arr := uint64(g.NumEntries) * uint64(g.EntrySize)
	return (arr + uint64(g.Sector) - 1) / uint64(g.Sector)
}

// Entry is entry i (0-based) of the array.
func (g *Table) Entry(i uint32) Entry {
	b := g.Entries[uint64(i)*uint64(g.EntrySize):]
	var e Entry
	copy(e.Type[:], b[0:16])
	copy(e.Unique[:], b[16:32])
	le := binary.LittleEndian
	e.First, e.Last, e.Attrs = le.Uint64(b[32:]), le.Uint64(b[40:]), le.Uint64(b[48:])
	copy(e.Name[:], b[56:128])
	return e
}

// SetEntry replaces entry i (0-based), clearing the rest of its slot.
func (g *Table) SetEntry(i uint32, e Entry) {
	b := g.Entries[uint64(i)*uint64(g.EntrySize) : uint64(i+1)*uint64(g.EntrySize)]
	clear(b)
	copy(b[0:16], e.Type[:])
	copy(b[16:32], e.Unique[:])
	le := binary.LittleEndian
	le.PutUint64(b[32:], e.First)
	le.PutUint64(b[40:], e.Last)
	le.PutUint64(b[48:], e.Attrs)
	copy(b[56:128], e.Name[:])
}

// LastUsed is the last LBA any partition uses (0 when none does).
func (g *Table) LastUsed() uint64 {
	var last uint64
	for i := range g.NumEntries {
		if e := g.Entry(i); e.Used() {
			last = max(last, e.Last)
		}
	}
	return last
}

// HeaderSector renders a header sector: the kept header with the fields
// given, both CRCs recomputed.
func (g *Table) HeaderSector(my, alternate, entriesLBA uint64) []byte {
	h := bytes.Clone(g.header)
	le := binary.LittleEndian
	le.PutUint64(h[24:], my)
	le.PutUint64(h[32:], alternate)
	le.PutUint64(h[40:], g.FirstUsable)
	le.PutUint64(h[48:], g.LastUsable)
	le.PutUint64(h[72:], entriesLBA)
	le.PutUint32(h[EntriesCRCOffset:], crc32.ChecksumIEEE(g.Entries))
	le.PutUint32(h[HeaderCRCOffset:], HeaderCRC(h))
	sec := make([]byte, g.Sector)
	copy(sec, h)
	return sec
}

// EntryName is name as a GPT entry's UTF-16LE name field.
func EntryName(name string) [NameBytes]byte {
	var b [NameBytes]byte
	for i, c := range utf16.Encode([]rune(name)) {
		if 2*i+2 > NameBytes {
			break
		}
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}
