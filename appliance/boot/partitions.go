package boot

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The appliance's partition names (GPT PARTLABEL). Partitions are found by
// name, never by number.
const (
	PartESP   = "esp"
	PartSlotA = "rackd-a"
	PartSlotB = "rackd-b"
	PartData  = "rackd-data"
)

// Partition is a block device partition as sysfs shows it.
type Partition struct {
	// Name is the GPT partition name (PARTNAME), Dev the kernel's device
	// name (vda5) and Number its partition number.
	Name, Dev string
	Number    int
	// Disk is the whole disk's kernel name (vda).
	Disk string
}

// DevPath is the partition's device node.
func (p Partition) DevPath() string { return "/dev/" + p.Dev }

// DiskPath is its disk's device node.
func (p Partition) DiskPath() string { return "/dev/" + p.Disk }

// FindPartitions reads sysfs (sysDir is /sys) for the partitions with the
// appliance's names and returns them by name. The appliance's partitions
// must all be on one disk: when two disks carry partitions of these names
// (the appliance's disk and the stick it was flashed from), the disk with
// the booted slot wins, and a tie is an error rather than a guess that
// could format the wrong disk.
func FindPartitions(sysDir, bootedSlot string) (map[string]Partition, error) {
	dir := filepath.Join(sysDir, "class", "block")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	wanted := []string{PartESP, PartSlotA, PartSlotB, PartData}
	byDisk := map[string]map[string]Partition{}
	for _, e := range ents {
		ue, err := readUevent(filepath.Join(dir, e.Name(), "uevent"))
		if err != nil || ue["DEVTYPE"] != "partition" || !slices.Contains(wanted, ue["PARTNAME"]) {
			continue
		}
		n, _ := strconv.Atoi(ue["PARTN"])
		dev := ue["DEVNAME"]
		if dev == "" {
			dev = e.Name()
		}
		// The partition's sysfs directory is inside its disk's.
		real, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		disk := filepath.Base(filepath.Dir(real))
		p := Partition{Name: ue["PARTNAME"], Dev: dev, Number: n, Disk: disk}
		if byDisk[disk] == nil {
			byDisk[disk] = map[string]Partition{}
		}
		if old, dup := byDisk[disk][p.Name]; dup {
			return nil, fmt.Errorf("disk %s has two partitions named %s (%s and %s)", disk, p.Name, old.Dev, p.Dev)
		}
		byDisk[disk][p.Name] = p
	}
	var disks []string
	for d, parts := range byDisk {
		if len(parts) == len(wanted) {
			disks = append(disks, d)
		}
	}
	slices.Sort(disks)
	switch {
	case len(disks) == 0:
		var have []string
		for d, parts := range byDisk {
			for n := range parts {
				have = append(have, d+":"+n)
			}
		}
		slices.Sort(have)
		return nil, fmt.Errorf("no disk has all of the partitions %s (found: %s)", strings.Join(wanted, ", "), orNone(have))
	case len(disks) > 1:
		return nil, fmt.Errorf("disks %s all carry the appliance's partitions: remove the one that is not the appliance's", strings.Join(disks, ", "))
	}
	return byDisk[disks[0]], nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// readUevent reads a sysfs uevent file's KEY=value lines.
func readUevent(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m, sc.Err()
}

// ext4 superblock: at byte 1024, its magic at offset 56.
const (
	superblockOff = 1024
	ext4MagicOff  = superblockOff + 56
	ext4Magic     = 0xEF53
)

// HasExtFS reports whether the device (or image) starts with an ext2/3/4
// superblock: a blank data partition has none.
func HasExtFS(r interface {
	ReadAt([]byte, int64) (int, error)
}) (bool, error) {
	b := make([]byte, 2)
	if _, err := r.ReadAt(b, ext4MagicOff); err != nil {
		return false, fmt.Errorf("read the superblock: %w", err)
	}
	return uint16(b[0])|uint16(b[1])<<8 == ext4Magic, nil
}
