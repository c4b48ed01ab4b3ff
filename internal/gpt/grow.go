package gpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Patch is bytes to write at a byte offset of the disk.
type Patch struct {
	Off  int64
	Data []byte
}

// HeadSize is how much of a disk's start Grow reads: the protective MBR,
// the primary header and any entry array a real table has (128 entries of
// up to 4 KiB sectors fit many times over).
const HeadSize = 1 << 20

// PlanGrow plans growing the partition named name, which must be the last
// one on the disk, to the disk's end: head is the disk's first bytes
// (HeadSize, or the whole disk when smaller), diskSize its size in bytes.
// The backup entry array and header move to the disk's last LBAs, the
// partition ends right before the backup's entry array, and the protective
// MBR covers the disk. It returns the writes in the order they must be
// made (the new backup first, then the primary, then the old backup's
// header is zeroed: a cut between any two leaves a disk with one valid
// table that describes it), and the grown entry. grown is false, with no
// writes, when the partition already reaches the disk's end.
func PlanGrow(head []byte, diskSize int64, name string) (patches []Patch, e Entry, grown bool, err error) {
	g, err := Parse(head)
	if err != nil {
		return nil, Entry{}, false, err
	}
	ss := int64(g.Sector)
	diskLBAs := uint64(diskSize / ss)
	es := g.EntrySectors()
	if diskLBAs < es+2 || diskLBAs-1-es-1 < g.LastUsable {
		return nil, Entry{}, false, errorf("the table uses LBAs up to %d, the disk has %d", g.LastUsable, diskLBAs)
	}
	idx := -1
	for i := range g.NumEntries {
		if en := g.Entry(i); en.Used() && en.Label() == name {
			if idx >= 0 {
				return nil, Entry{}, false, errorf("two partitions are named %q (%d and %d)", name, idx+1, i+1)
			}
			idx = int(i)
		}
	}
	if idx < 0 {
		return nil, Entry{}, false, errorf("no partition is named %q", name)
	}
	e = g.Entry(uint32(idx))
	if last := g.LastUsed(); last != e.Last {
		return nil, Entry{}, false, errorf("partition %q (%d) ends at LBA %d, but another partition ends after it, at %d", name, idx+1, e.Last, last)
	}
	newAlt := diskLBAs - 1
	newEntries := newAlt - es
	newLastUsable := newEntries - 1
	if g.Alternate == newAlt && e.Last == newLastUsable && g.LastUsable == newLastUsable {
		return nil, e, false, nil
	}
	if newLastUsable < e.Last {
		return nil, Entry{}, false, errorf("partition %q ends at LBA %d, after the disk's last usable LBA %d", name, e.Last, newLastUsable)
	}
	oldAlt := g.Alternate
	e.Last = newLastUsable
	g.SetEntry(uint32(idx), e)
	g.LastUsable = newLastUsable
	g.Alternate = newAlt

	newHead := bytes.Clone(head)
	copy(newHead[ss:2*ss], g.HeaderSector(1, newAlt, g.EntriesLBA))
	copy(newHead[int64(g.EntriesLBA)*ss:], g.Entries)
	if mbrSigned(newHead) {
		for i := range 4 {
			m := newHead[446+16*i : 446+16*(i+1)]
			if m[4] == 0xEE && binary.LittleEndian.Uint32(m[8:]) == 1 {
				binary.LittleEndian.PutUint32(m[12:], uint32(min(diskLBAs-1, 0xFFFFFFFF)))
			}
		}
	}
	headEnd := int64(g.EntriesLBA)*ss + int64(len(g.Entries))
	patches = []Patch{
		{int64(newEntries) * ss, bytes.Clone(g.Entries)},
		{int64(newAlt) * ss, g.HeaderSector(newAlt, 1, newEntries)},
		{0, newHead[:alignUp(headEnd, ss)]},
	}
	// The old backup header, now inside the grown partition: zeroed, so
	// that nothing finds a stale table there.
	if oldAlt != newAlt && oldAlt < diskLBAs && int64(oldAlt)*ss >= headEnd {
		patches = append(patches, Patch{int64(oldAlt) * ss, make([]byte, ss)})
	}
	return patches, e, true, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

func mbrSigned(head []byte) bool { return len(head) >= 512 && head[510] == 0x55 && head[511] == 0xAA }

// Device is a disk (or an image file) Grow edits.
type Device interface {
	io.ReaderAt
	io.WriterAt
}

// Grow grows the partition named name, the disk's last, to the end of the
// disk of diskSize bytes, as PlanGrow plans it, and returns its entry.
// The caller syncs the device and tells the kernel.
func Grow(dev Device, diskSize int64, name string) (e Entry, grown bool, err error) {
	head := make([]byte, min(int64(HeadSize), diskSize))
	if _, err := dev.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return Entry{}, false, fmt.Errorf("read the partition table: %w", err)
	}
	patches, e, grown, err := PlanGrow(head, diskSize, name)
	if err != nil || !grown {
		return e, grown, err
	}
	for _, p := range patches {
		if _, err := dev.WriteAt(p.Data, p.Off); err != nil {
			return Entry{}, false, fmt.Errorf("write %d bytes at %d: %w", len(p.Data), p.Off, err)
		}
	}
	return e, true, nil
}
