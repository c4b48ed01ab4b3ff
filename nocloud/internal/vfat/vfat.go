// Package vfat writes a small FAT12 filesystem image holding files in its
// root directory, with VFAT long names, byte for byte the same for the same
// input: timestamps are fixed and the volume id is the caller's.
//
// It writes only what a NoCloud seed needs: one directory (the root), a few
// files, a label. The layout follows Microsoft's FAT specification (FAT
// Specification, 2005: boot sector and BPB, FAT12 packing, long name
// entries and their checksum); sizes are whole mebibytes so the image fills
// a 1 MiB-aligned partition exactly.
package vfat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// File is one file of the root directory.
type File struct {
	Name string
	Data []byte
}

const (
	sectorSize  = 512
	reserved    = 1   // the boot sector
	numFATs     = 2   // what every FAT driver and fsck expect
	rootEntries = 512 // 32 sectors: the usual fixed-disk root directory
	rootSectors = rootEntries * dirEntrySize / sectorSize
	media       = 0xF8 // fixed disk
	// A FAT with fewer than 4085 clusters is FAT12, by count alone
	// (the specification, "FAT Type Determination"): the writer keeps
	// below that.
	maxFAT12Clusters = 4084
	dirEntrySize     = 32
	mib              = 1 << 20
	// MaxSize bounds the image: 64 sectors per cluster (32 KiB) times the
	// FAT12 cluster count is 127 MiB; a seed is far smaller.
	MaxSize = 64 * mib

	attrVolumeID = 0x08
	attrArchive  = 0x20
	attrLFN      = 0x0F

	// Every timestamp is 1980-01-01 00:00:00, the first date FAT can hold.
	dosDate = 1<<5 | 1
	dosTime = 0
)

// layout is the geometry of an image of a given size.
type layout struct {
	totalSectors int
	spc          int // sectors per cluster
	fatSectors   int
	clusters     int
}

func (l layout) clusterBytes() int { return l.spc * sectorSize }
func (l layout) dataStart() int {
	return (reserved + numFATs*l.fatSectors + rootSectors) * sectorSize
}

// geometry picks, for an image of size bytes, the smallest cluster that
// keeps the filesystem FAT12. ok is false when no cluster size does.
func geometry(size int) (layout, bool) {
	total := size / sectorSize
	for spc := 1; spc <= 64; spc *= 2 {
		// The FAT is sized for every cluster the rest of the volume could
		// hold (an upper bound, as mkfs.fat does), then the clusters are
		// what is left after the FATs.
		upper := (total - reserved - rootSectors) / spc
		fatBytes := ((upper+2)*3 + 1) / 2 // 12 bits per entry, rounded up
		fatSectors := (fatBytes + sectorSize - 1) / sectorSize
		clusters := (total - reserved - rootSectors - numFATs*fatSectors) / spc
		if clusters >= 1 && clusters <= maxFAT12Clusters {
			return layout{totalSectors: total, spc: spc, fatSectors: fatSectors, clusters: clusters}, true
		}
	}
	return layout{}, false
}

// entry is one file with its place on the volume.
type entry struct {
	long    string
	short   [11]byte
	needLFN bool
	data    []byte
	first   int // first cluster, 0 for an empty file
	count   int // clusters
}

// Build returns the image: label (up to 11 characters of an 8.3 name, upper
// case) as the volume label in the boot sector and the root directory,
// volumeID as the volume serial number, and files in the root directory in
// the order given. The size is the smallest whole number of MiB that holds
// them.
func Build(label string, volumeID uint32, files []File) ([]byte, error) {
	lab, err := labelBytes(label)
	if err != nil {
		return nil, err
	}
	entries, err := plan(files)
	if err != nil {
		return nil, err
	}
	slots := 1 // the volume label
	for _, e := range entries {
		slots++
		if e.needLFN {
			slots += lfnCount(e.long)
		}
	}
	if slots > rootEntries {
		return nil, fmt.Errorf("vfat: %d directory entries do not fit a root directory of %d", slots, rootEntries)
	}

	var l layout
	for size := mib; ; size += mib {
		if size > MaxSize {
			return nil, fmt.Errorf("vfat: the files need more than %d MiB", MaxSize/mib)
		}
		g, ok := geometry(size)
		if !ok {
			continue
		}
		need := 0
		for _, e := range entries {
			need += (len(e.data) + g.clusterBytes() - 1) / g.clusterBytes()
		}
		if need <= g.clusters {
			l = g
			break
		}
	}

	img := make([]byte, l.totalSectors*sectorSize)
	bootSector(img[:sectorSize], l, lab, volumeID)

	fat := make([]byte, l.fatSectors*sectorSize)
	setFAT12(fat, 0, 0xF00|media)
	setFAT12(fat, 1, 0xFFF)
	next := 2
	for i := range entries {
		e := &entries[i]
		e.count = (len(e.data) + l.clusterBytes() - 1) / l.clusterBytes()
		if e.count == 0 {
			continue
		}
		e.first = next
		for c := next; c < next+e.count-1; c++ {
			setFAT12(fat, c, uint16(c+1))
		}
		setFAT12(fat, next+e.count-1, 0xFFF)
		off := l.dataStart() + (next-2)*l.clusterBytes()
		copy(img[off:], e.data)
		next += e.count
	}
	for i := 0; i < numFATs; i++ {
		copy(img[(reserved+i*l.fatSectors)*sectorSize:], fat)
	}

	root := img[(reserved+numFATs*l.fatSectors)*sectorSize:][:rootSectors*sectorSize]
	slot := 0
	put := func(b []byte) { copy(root[slot*dirEntrySize:], b); slot++ }
	put(dirEntry(lab, attrVolumeID, 0, 0))
	for _, e := range entries {
		if e.needLFN {
			for _, b := range lfnEntries(e.long, e.short) {
				put(b)
			}
		}
		put(dirEntry(e.short, attrArchive, e.first, len(e.data)))
	}
	return img, nil
}

func bootSector(b []byte, l layout, label [11]byte, volumeID uint32) {
	le := binary.LittleEndian
	copy(b[0:], []byte{0xEB, 0x3C, 0x90}) // jmp to the stub at 0x3E
	copy(b[3:11], "RACKD   ")
	le.PutUint16(b[11:], sectorSize)
	b[13] = byte(l.spc)
	le.PutUint16(b[14:], reserved)
	b[16] = numFATs
	le.PutUint16(b[17:], rootEntries)
	if l.totalSectors < 1<<16 {
		le.PutUint16(b[19:], uint16(l.totalSectors))
	} else {
		le.PutUint32(b[32:], uint32(l.totalSectors))
	}
	b[21] = media
	le.PutUint16(b[22:], uint16(l.fatSectors))
	le.PutUint16(b[24:], 32) // sectors per track and heads: unused on
	le.PutUint16(b[26:], 64) // LBA disks, mkfs.fat's values for a file
	b[36] = 0x80             // a hard disk
	b[38] = 0x29             // the next three fields are present
	le.PutUint32(b[39:], volumeID)
	copy(b[43:54], label[:])
	copy(b[54:62], "FAT12   ")
	// A firmware that boots this partition gets "int 18h" (boot failed,
	// try the next device) instead of running zeros, then a halt loop.
	copy(b[0x3E:], []byte{0xCD, 0x18, 0xF4, 0xEB, 0xFD})
	b[510], b[511] = 0x55, 0xAA
}

// setFAT12 stores v as cluster n's 12-bit entry: two entries share three
// bytes, the even one in the low 12 bits.
func setFAT12(fat []byte, n int, v uint16) {
	off := n + n/2
	if n%2 == 0 {
		fat[off] = byte(v)
		fat[off+1] = fat[off+1]&0xF0 | byte(v>>8)&0x0F
	} else {
		fat[off] = fat[off]&0x0F | byte(v<<4)
		fat[off+1] = byte(v >> 4)
	}
}

func dirEntry(name [11]byte, attr byte, first, size int) []byte {
	le := binary.LittleEndian
	b := make([]byte, dirEntrySize)
	copy(b, name[:])
	b[11] = attr
	le.PutUint16(b[14:], dosTime) // created
	le.PutUint16(b[16:], dosDate)
	le.PutUint16(b[18:], dosDate) // last access
	le.PutUint16(b[22:], dosTime) // written
	le.PutUint16(b[24:], dosDate)
	le.PutUint16(b[26:], uint16(first))
	le.PutUint32(b[28:], uint32(size))
	return b
}

// lfnCount is how many long-name entries hold name: 13 UTF-16 units each.
func lfnCount(name string) int {
	return (len(utf16.Encode([]rune(name))) + 12) / 13
}

// lfnEntries returns the long-name entries of name in the order they sit on
// disk (the last part first, flagged 0x40), each carrying the checksum of
// the short name that follows them.
func lfnEntries(name string, short [11]byte) [][]byte {
	units := utf16.Encode([]rune(name))
	n := lfnCount(name)
	padded := make([]uint16, n*13)
	copy(padded, units)
	for i := len(units); i < len(padded); i++ {
		if i == len(units) {
			padded[i] = 0x0000 // the terminator, when the name leaves room
		} else {
			padded[i] = 0xFFFF
		}
	}
	sum := shortChecksum(short)
	le := binary.LittleEndian
	out := make([][]byte, 0, n)
	for seq := n; seq >= 1; seq-- {
		part := padded[(seq-1)*13 : seq*13]
		b := make([]byte, dirEntrySize)
		b[0] = byte(seq)
		if seq == n {
			b[0] |= 0x40
		}
		for i := 0; i < 5; i++ {
			le.PutUint16(b[1+2*i:], part[i])
		}
		b[11] = attrLFN
		b[13] = sum
		for i := 0; i < 6; i++ {
			le.PutUint16(b[14+2*i:], part[5+i])
		}
		for i := 0; i < 2; i++ {
			le.PutUint16(b[28+2*i:], part[11+i])
		}
		out = append(out, b)
	}
	return out
}

// shortChecksum is the long-name checksum of an 11-byte short name: a
// rotate right by one, then add, per byte.
func shortChecksum(short [11]byte) byte {
	var sum byte
	for _, c := range short {
		sum = (sum&1)<<7 + sum>>1 + c
	}
	return sum
}

// plan checks the names and gives each file its short name. A short name
// made up for a long one never equals another file's name, long or short:
// a lookup by name must find one file.
func plan(files []File) ([]entry, error) {
	upper := map[string]bool{} // every name, upper case: FAT names compare without case
	taken := map[[11]byte]bool{}
	for _, f := range files {
		if err := checkLongName(f.Name); err != nil {
			return nil, fmt.Errorf("vfat: file name %q: %w", f.Name, err)
		}
		key := strings.ToUpper(f.Name)
		if upper[key] {
			return nil, fmt.Errorf("vfat: file name %q appears twice", f.Name)
		}
		upper[key] = true
		if s, ok := exactShort(f.Name); ok {
			taken[s] = true
		}
		if uint64(len(f.Data)) > 1<<32-1 {
			return nil, fmt.Errorf("vfat: file %q is larger than 4 GiB", f.Name)
		}
	}
	var out []entry
	for _, f := range files {
		e := entry{long: f.Name, data: f.Data}
		if s, ok := exactShort(f.Name); ok {
			e.short = s
		} else {
			e.needLFN = true
			s, err := numericTail(f.Name, func(s [11]byte) bool { return taken[s] || upper[shortString(s)] })
			if err != nil {
				return nil, fmt.Errorf("vfat: file name %q: %w", f.Name, err)
			}
			e.short = s
			taken[s] = true
		}
		out = append(out, e)
	}
	return out, nil
}

// shortString is a short name as a name: "BASE.EXT", or "BASE".
func shortString(s [11]byte) string {
	name := strings.TrimRight(string(s[:8]), " ")
	if ext := strings.TrimRight(string(s[8:]), " "); ext != "" {
		name += "." + ext
	}
	return name
}

// checkLongName accepts what a VFAT long name may hold.
func checkLongName(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	if !utf8.ValidString(name) {
		return errors.New("not valid UTF-8")
	}
	if name == "." || name == ".." {
		return errors.New("reserved")
	}
	if strings.HasSuffix(name, ".") || strings.HasSuffix(name, " ") || strings.HasPrefix(name, " ") {
		return errors.New("starts with a space or ends with a dot or a space")
	}
	if len(utf16.Encode([]rune(name))) > 255 {
		return errors.New("longer than 255 UTF-16 units")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(`"*/:<>?\|`, r) {
			return fmt.Errorf("holds %q, which FAT does not allow", r)
		}
	}
	return nil
}

// shortChar reports whether c may stand in a short name as it is.
func shortChar(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'()-@^_`{}~", c) >= 0
}

// exactShort returns name as a short name when it already is one (upper
// case 8.3): such a file needs no long-name entries.
func exactShort(name string) ([11]byte, bool) {
	var s [11]byte
	base, ext, hasDot := strings.Cut(name, ".")
	if base == "" || len(base) > 8 || len(ext) > 3 || hasDot && ext == "" || strings.Contains(ext, ".") {
		return s, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] != '.' && !shortChar(name[i]) {
			return s, false
		}
	}
	copy(s[:], fmt.Sprintf("%-8s%-3s", base, ext))
	return s, true
}

// numericTail makes the short name of a long one as Windows does: the upper
// case of its valid characters, at most six of the base, "~N" with the
// smallest N not yet taken, and up to three characters of the extension
// (after the last dot).
func numericTail(name string, taken func([11]byte) bool) ([11]byte, error) {
	clean := func(s string, max int) string {
		var b strings.Builder
		for _, r := range s {
			if b.Len() == max {
				break
			}
			if r >= 'a' && r <= 'z' {
				r -= 'a' - 'A'
			}
			switch {
			case r == ' ' || r == '.':
				// dropped
			case r < utf8.RuneSelf && shortChar(byte(r)):
				b.WriteByte(byte(r))
			default:
				b.WriteByte('_')
			}
		}
		return b.String()
	}
	base, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		base, ext = name[:i], name[i+1:]
	}
	b, e := clean(base, 8), clean(ext, 3)
	if b == "" {
		b = "_"
	}
	for n := 1; n < 1000000; n++ {
		tail := fmt.Sprintf("~%d", n)
		keep := min(len(b), 8-len(tail))
		var s [11]byte
		copy(s[:], fmt.Sprintf("%-8s%-3s", b[:keep]+tail, e))
		if !taken(s) {
			return s, nil
		}
	}
	return [11]byte{}, errors.New("no free short name")
}

// labelBytes pads a volume label to 11 bytes; it must be a valid short
// name's characters in upper case (FAT stores labels upper case).
func labelBytes(label string) ([11]byte, error) {
	var b [11]byte
	if label == "" || len(label) > 11 {
		return b, fmt.Errorf("vfat: volume label %q: 1 to 11 characters", label)
	}
	for i := 0; i < len(label); i++ {
		if !shortChar(label[i]) && label[i] != ' ' {
			return b, fmt.Errorf("vfat: volume label %q: %q is not allowed (upper case letters, digits, and !#$%%&'()-@^_`{}~)", label, label[i])
		}
	}
	copy(b[:], fmt.Sprintf("%-11s", label))
	return b, nil
}
