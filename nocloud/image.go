package nocloud

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"rackd/nocloud/internal/vfat"
)

// Label is the volume label cloud-init's NoCloud datasource looks for
// (it accepts it in either case; FAT stores labels upper case).
const Label = "CIDATA"

// Image returns the seed as a FAT12 filesystem labelled CIDATA holding
// meta-data, user-data, vendor-data and network-config (the last two when
// present) under their long names. Its size is the smallest whole number of
// MiB that holds them (1 MiB for a seed without a large user-data), and its
// bytes depend only on the seed: fixed timestamps, and a volume serial
// number taken from the instance-id.
func (s Seed) Image() ([]byte, error) {
	if len(s.MetaData) == 0 {
		return nil, errors.New("nocloud: the seed has no meta-data")
	}
	if len(s.UserData) == 0 {
		return nil, errors.New("nocloud: the seed has no user-data (cloud-init requires the file)")
	}
	files := []vfat.File{{Name: "meta-data", Data: s.MetaData}, {Name: "user-data", Data: s.UserData}}
	if s.VendorData != nil {
		files = append(files, vfat.File{Name: "vendor-data", Data: s.VendorData})
	}
	if s.NetworkConfig != nil {
		files = append(files, vfat.File{Name: "network-config", Data: s.NetworkConfig})
	}
	img, err := vfat.Build(Label, s.volumeID(), files)
	if err != nil {
		return nil, fmt.Errorf("nocloud: seed image: %w", err)
	}
	return img, nil
}

// volumeID is the filesystem's serial number: a hash of the meta-data (which
// holds the instance-id), so two deployments' seeds differ in it while the
// same seed always gets the same one.
func (s Seed) volumeID() uint32 {
	sum := sha256.Sum256(s.MetaData)
	return binary.BigEndian.Uint32(sum[:4])
}
