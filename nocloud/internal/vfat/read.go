package vfat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
)

// Read decodes a FAT12 image's volume label and root directory files, long
// names preferred. It is the decoder the tests check Build against: it
// works from the boot sector's fields as the specification defines them,
// not from the constants Build uses, and refuses what it cannot vouch for
// (a broken cluster chain, a long name whose checksum does not match its
// short name, a subdirectory).
func Read(img []byte) (label string, files []File, err error) {
	le := binary.LittleEndian
	if len(img) < 512 {
		return "", nil, errors.New("vfat: shorter than a boot sector")
	}
	if img[510] != 0x55 || img[511] != 0xAA {
		return "", nil, errors.New("vfat: no boot sector signature")
	}
	bps := int(le.Uint16(img[11:]))
	spc := int(img[13])
	res := int(le.Uint16(img[14:]))
	nfats := int(img[16])
	nroot := int(le.Uint16(img[17:]))
	total := int(le.Uint16(img[19:]))
	if total == 0 {
		total = int(le.Uint32(img[32:]))
	}
	fatSz := int(le.Uint16(img[22:]))
	if bps < 512 || bps > 4096 || bps&(bps-1) != 0 {
		return "", nil, fmt.Errorf("vfat: %d bytes per sector", bps)
	}
	if spc == 0 || spc&(spc-1) != 0 {
		return "", nil, fmt.Errorf("vfat: %d sectors per cluster", spc)
	}
	if res == 0 || nfats == 0 || fatSz == 0 {
		return "", nil, errors.New("vfat: no reserved sector, FAT or FAT size")
	}
	if total*bps > len(img) {
		return "", nil, fmt.Errorf("vfat: %d sectors claimed, the image holds %d", total, len(img)/bps)
	}
	rootSecs := (nroot*32 + bps - 1) / bps
	dataSec := res + nfats*fatSz + rootSecs
	if dataSec >= total {
		return "", nil, errors.New("vfat: no data region")
	}
	clusters := (total - dataSec) / spc
	if clusters >= 4085 {
		return "", nil, fmt.Errorf("vfat: %d clusters: not FAT12", clusters)
	}
	if ((clusters+2)*3+1)/2 > fatSz*bps { // ceil(1.5 bytes per entry)
		return "", nil, errors.New("vfat: the FAT is too small for the clusters")
	}
	fat := img[res*bps:][:fatSz*bps]
	for i := 1; i < nfats; i++ {
		if string(img[(res+i*fatSz)*bps:][:fatSz*bps]) != string(fat) {
			return "", nil, fmt.Errorf("vfat: FAT %d differs from FAT 1", i+1)
		}
	}
	get := func(n int) int {
		off := n + n/2
		v := int(le.Uint16(fat[off:]))
		if n%2 == 1 {
			return v >> 4
		}
		return v & 0xFFF
	}
	cbytes := spc * bps
	root := img[(res+nfats*fatSz)*bps:][:nroot*32]

	used := make([]bool, clusters+2) // a cluster belongs to one file at most

	var lfn []uint16
	var lfnSum byte
	var lfnNext int // the sequence number expected next, 0 when none pending
	for i := 0; i < nroot; i++ {
		e := root[i*32 : i*32+32]
		if e[0] == 0 {
			break
		}
		if e[0] == 0xE5 {
			lfnNext = 0
			continue
		}
		attr := e[11]
		if attr&0x3F == 0x0F {
			seq := int(e[0] & 0x1F)
			if e[0]&0x40 != 0 {
				lfn, lfnSum, lfnNext = nil, e[13], seq
			}
			if seq == 0 || seq != lfnNext || e[13] != lfnSum {
				return "", nil, fmt.Errorf("vfat: entry %d: long name part out of order", i)
			}
			var part []uint16
			for _, r := range [][2]int{{1, 5}, {14, 6}, {28, 2}} {
				for k := 0; k < r[1]; k++ {
					part = append(part, le.Uint16(e[r[0]+2*k:]))
				}
			}
			lfn = append(part, lfn...)
			lfnNext--
			if lfnNext == 0 {
				lfnNext = -1 // complete: the short entry must follow
			}
			continue
		}
		if attr&0x08 != 0 {
			label = strings.TrimRight(string(e[:11]), " ")
			lfnNext = 0
			continue
		}
		if attr&0x10 != 0 {
			return "", nil, fmt.Errorf("vfat: entry %d: a subdirectory", i)
		}
		var short [11]byte
		copy(short[:], e[:11])
		name := shortString(short)
		if lfnNext == -1 {
			if shortChecksum(short) != lfnSum {
				return "", nil, fmt.Errorf("vfat: entry %d: long name checksum does not match %q", i, name)
			}
			end := len(lfn)
			for k, u := range lfn {
				if u == 0 {
					end = k
					break
				}
			}
			name = string(utf16.Decode(lfn[:end]))
		} else if lfnNext != 0 {
			return "", nil, fmt.Errorf("vfat: entry %d: incomplete long name", i)
		}
		lfnNext = 0

		size := int(le.Uint32(e[28:]))
		c := int(le.Uint16(e[26:]))
		if size > clusters*cbytes {
			return "", nil, fmt.Errorf("vfat: %q: %d bytes cannot fit the volume", name, size)
		}
		data := make([]byte, 0, size)
		for steps := 0; len(data) < size; steps++ {
			if c < 2 || c >= clusters+2 || steps >= clusters {
				return "", nil, fmt.Errorf("vfat: %q: broken cluster chain at %d", name, c)
			}
			if used[c] {
				return "", nil, fmt.Errorf("vfat: %q: cluster %d is also another file's (or this one's, in a loop)", name, c)
			}
			used[c] = true
			off := (dataSec + (c-2)*spc) * bps
			n := min(cbytes, size-len(data))
			data = append(data, img[off:off+n]...)
			c = get(c)
		}
		if size > 0 && c < 0xFF8 {
			return "", nil, fmt.Errorf("vfat: %q: cluster chain longer than the file", name)
		}
		if size == 0 && c != 0 {
			return "", nil, fmt.Errorf("vfat: %q: an empty file with a cluster", name)
		}
		files = append(files, File{Name: name, Data: data})
	}
	return label, files, nil
}
