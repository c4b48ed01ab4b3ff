package bootconf

import (
	"slices"
	"strings"
)

// Image is an imported image as the environments rule sees it: the
// registry's record (store.Image) with each file's place in the boot tree.
// This package does not import store, so that dependencies keep pointing
// inwards.
type Image struct {
	Name    string
	Arch    string
	Purpose string // PurposeEnlist, PurposeCommission, PurposeDeploy, or another (ignored)
	// Cmdline is the image's own kernel arguments, space-separated.
	Cmdline string
	Files   []ImageFile
}

// ImageFile is one file of an Image.
type ImageFile struct {
	Role string // RoleKernel, RoleInitrd, RoleDisk, or another (ignored)
	// Path is where the boot tree serves the file ("images/<sha256>").
	Path   string
	SHA256 string
	Size   int64
	// Format, RawSize and RawSHA256 describe a disk image (RoleDisk): see
	// DiskImage.
	Format    string
	RawSize   int64
	RawSHA256 string
	// Chunks is the SHA-256 of the disk image's chunk list blob, or
	// empty: see DiskImage.
	Chunks string
}

// The image purposes and file roles the rule reads, spelled as the images
// registry spells them.
const (
	PurposeEnlist     = "enlist"
	PurposeCommission = "commission"
	PurposeDeploy     = "deploy"

	RoleKernel = "kernel"
	RoleInitrd = "initrd"
	RoleDisk   = "disk"
)

// EnvironmentsOf is the rule of which imported image serves which boot
// environment of arch, as a pure function of the images (in the registry's
// order, name then arch; of several images of one purpose the last wins):
//
//   - an image's environment is its first kernel, its initrds in order, its
//     disk image and its command line's words;
//   - enlist and commission images serve those environments, deploy images
//     the deploy environment of their name;
//   - without a commission image, the enlist image serves: the enlistment
//     initramfs is also the commissioning, deploy and erase environment
//     (rackd.mode= tells it which);
//   - a deploy image that is a disk image (raw or compressed) without a kernel of its own is
//     written by the commissioning environment in deploy mode: its deploy
//     environment is the commissioning one with that disk.
func EnvironmentsOf(ims []Image, arch string) Environments {
	var env Environments
	var disks []Image // deploy images that are disk images
	for _, im := range ims {
		if im.Arch != arch {
			continue
		}
		e := imageEnvironment(im)
		if im.Purpose == PurposeDeploy && e.Disk != nil && e.Kernel == "" {
			disks = append(disks, im)
			continue
		}
		switch im.Purpose {
		case PurposeEnlist:
			env.Enlist = e
		case PurposeCommission:
			env.Commission = e
		case PurposeDeploy:
			if env.Deploy == nil {
				env.Deploy = map[string]Environment{}
			}
			env.Deploy[im.Name] = e
		}
	}
	if !env.Commission.Available() {
		env.Commission = env.Enlist
	}
	for _, im := range disks {
		e := env.Commission
		e.Initrds, e.Args = slices.Clone(e.Initrds), slices.Clone(e.Args)
		e.Disk = imageEnvironment(im).Disk
		if env.Deploy == nil {
			env.Deploy = map[string]Environment{}
		}
		env.Deploy[im.Name] = e
	}
	return env
}

// imageEnvironment is the environment one image's files make.
func imageEnvironment(im Image) Environment {
	var e Environment
	for _, f := range im.Files {
		switch f.Role {
		case RoleKernel:
			if e.Kernel == "" {
				e.Kernel = f.Path
			}
		case RoleInitrd:
			e.Initrds = append(e.Initrds, f.Path)
		case RoleDisk:
			e.Disk = &DiskImage{Path: f.Path, SHA256: f.SHA256, Size: f.Size,
				Format: f.Format, RawSize: f.RawSize, RawSHA256: f.RawSHA256, Chunks: f.Chunks}
		}
	}
	e.Args = strings.Fields(im.Cmdline)
	return e
}
