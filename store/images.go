package store

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Image purposes.
const (
	PurposeEnlist     = "enlist"
	PurposeCommission = "commission"
	PurposeDeploy     = "deploy"
	// PurposeBootloader images carry the network bootloaders (pxelinux.0,
	// bootx64.efi, ...) served under their fixed names.
	PurposeBootloader = "bootloader"
)

// maxCmdline bounds an image's kernel command line (images.MaxCmdline).
const maxCmdline = 1024

// ImageFile is one artefact of an image, stored in the images blob store
// under its SHA-256.
type ImageFile struct {
	Path   string `json:"path"`
	Role   string `json:"role"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Format, RawSize and RawSHA256 belong to a disk file: raw, gzip, xz
	// or zstd, and the size and SHA-256 of the raw disk image (for a raw
	// one its own). Records written before they existed have none, which
	// reads as raw.
	Format    string `json:"format,omitempty"`
	RawSize   int64  `json:"raw_size,omitempty"`
	RawSHA256 string `json:"raw_sha256,omitempty"`
	// Chunks is the SHA-256 of the blob holding a disk file's chunk list
	// (the digest of each 4 MiB chunk of the raw disk image), which the
	// deploy environment verifies in parallel. Records written before it
	// existed have none: their deployments hash the whole stream. The
	// blob is the image's as its files' are (ImageBlobInUse).
	Chunks string `json:"chunks,omitempty"`
}

// Image is one imported boot image, unique by name and architecture.
type Image struct {
	Name    string `json:"name"`
	Arch    string `json:"arch"`
	Purpose string `json:"purpose"`
	// Cmdline is the image's own kernel arguments, space-separated,
	// rendered after rackd's when the image boots. Absent in records
	// written before it existed, which is the same as empty.
	Cmdline string `json:"cmdline,omitempty"`
	// OS and Series name a deploy image the way MAAS's clients ask for
	// one (osystem "ubuntu", distro_series "jammy"): set at import, from
	// the import request or the image's manifest; empty in records
	// written before they existed. ImageOSSeries defaults them.
	OS      string      `json:"os,omitempty"`
	Series  string      `json:"series,omitempty"`
	Files   []ImageFile `json:"files"`
	Created time.Time   `json:"created"`
}

var (
	imageNameRE = regexp.MustCompile(`^[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,63}$`)
	sha256RE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	osSeriesRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
)

func imageKey(name, arch string) []byte { return []byte(name + "/" + arch) }

func validateImage(im Image) error {
	if !imageNameRE.MatchString(im.Name) {
		return errorf(CodeInvalid, "invalid image name %q: want 1-64 characters of [A-Za-z0-9._+-], not starting with '.'", im.Name)
	}
	for what, v := range map[string]string{"os": im.OS, "series": im.Series} {
		if v != "" && !osSeriesRE.MatchString(v) {
			return errorf(CodeInvalid, "invalid image %s %q: want 1-64 of lower-case letters, digits and . _ - (not first)", what, v)
		}
	}
	if !imageNameRE.MatchString(im.Arch) {
		return errorf(CodeInvalid, "invalid image arch %q: want 1-64 characters of [A-Za-z0-9._+-], not starting with '.'", im.Arch)
	}
	switch im.Purpose {
	case PurposeEnlist, PurposeCommission, PurposeDeploy, PurposeBootloader:
	default:
		return errorf(CodeInvalid, "invalid image purpose %q: want enlist, commission, deploy or bootloader", im.Purpose)
	}
	// The images package checks the command line's words; the store keeps
	// its own invariant that no record can carry a line break into a
	// boot config.
	if len(im.Cmdline) > maxCmdline {
		return errorf(CodeInvalid, "image cmdline of %d bytes, at most %d", len(im.Cmdline), maxCmdline)
	}
	for i := 0; i < len(im.Cmdline); i++ {
		if c := im.Cmdline[i]; c < 0x20 || c >= 0x7f {
			return errorf(CodeInvalid, "image cmdline: character %q at byte %d: want printable ASCII", c, i)
		}
	}
	if len(im.Files) == 0 {
		return errorf(CodeInvalid, "image %s/%s has no files", im.Name, im.Arch)
	}
	for i, f := range im.Files {
		if f.Path == "" {
			return errorf(CodeInvalid, "image file %d: empty path", i)
		}
		if !sha256RE.MatchString(f.SHA256) {
			return errorf(CodeInvalid, "image file %q: invalid sha256 %q", f.Path, f.SHA256)
		}
		if f.Size < 0 {
			return errorf(CodeInvalid, "image file %q: negative size", f.Path)
		}
		switch f.Format {
		case "", "raw":
		case "gzip", "xz", "zstd":
			if f.RawSize <= 0 {
				return errorf(CodeInvalid, "image file %q: a %s disk image without its raw size", f.Path, f.Format)
			}
		default:
			return errorf(CodeInvalid, "image file %q: format %q: want raw, gzip, xz or zstd", f.Path, f.Format)
		}
		if f.RawSize < 0 {
			return errorf(CodeInvalid, "image file %q: negative raw size", f.Path)
		}
		if f.RawSHA256 != "" && !sha256RE.MatchString(f.RawSHA256) {
			return errorf(CodeInvalid, "image file %q: invalid raw sha256 %q", f.Path, f.RawSHA256)
		}
		if f.Chunks != "" && !sha256RE.MatchString(f.Chunks) {
			return errorf(CodeInvalid, "image file %q: invalid chunk list sha256 %q", f.Path, f.Chunks)
		}
	}
	return nil
}

// PutImage records an image, replacing any existing image of the same name
// and architecture. Only an admin may.
func (s *Store) PutImage(ctx context.Context, actor Actor, im Image) (Image, error) {
	if !actor.Admin {
		return Image{}, errorf(CodeForbidden, "only an admin may import images")
	}
	if err := validateImage(im); err != nil {
		return Image{}, err
	}
	im.Files = append([]ImageFile(nil), im.Files...)
	err := s.update(ctx, func(t *Tx) error {
		im.Created = t.now
		return t.put(bucketImages, imageKey(im.Name, im.Arch), im)
	})
	if err != nil {
		return Image{}, err
	}
	return im, nil
}

// Images lists the images by name, then architecture.
func (s *Store) Images() ([]Image, error) {
	var out []Image
	err := s.view(func(t *Tx) error {
		return t.tx.Bucket(bucketImages).ForEach(func(k, _ []byte) error {
			var im Image
			if _, err := t.get(bucketImages, k, &im); err != nil {
				return err
			}
			out = append(out, im)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Arch < out[j].Arch
	})
	return out, err
}

// DeleteImage removes an image's record and returns it (its blobs are the
// caller's to remove: see ImageBlobInUse). Only an admin may.
func (s *Store) DeleteImage(ctx context.Context, actor Actor, name, arch string) (Image, error) {
	if !actor.Admin {
		return Image{}, errorf(CodeForbidden, "only an admin may delete images")
	}
	var im Image
	err := s.update(ctx, func(t *Tx) error {
		key := imageKey(name, arch)
		found, err := t.get(bucketImages, key, &im)
		if err != nil {
			return err
		}
		if !found {
			return errorf(CodeNotFound, "no image %s/%s", name, arch)
		}
		return t.del(bucketImages, key)
	})
	if err != nil {
		return Image{}, err
	}
	return im, nil
}

// ImageBlobsInUse returns every blob digest (files and chunk lists) some
// recorded image names.
func (s *Store) ImageBlobsInUse() (map[string]bool, error) {
	used := map[string]bool{}
	err := s.view(func(t *Tx) error {
		clear(used) // an engine may run a view again
		return t.tx.Bucket(bucketImages).ForEach(func(k, _ []byte) error {
			var im Image
			if _, err := t.get(bucketImages, k, &im); err != nil {
				return err
			}
			for _, f := range im.Files {
				for _, h := range []string{f.SHA256, f.Chunks} {
					if h != "" {
						used[h] = true
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read the image registry: %w", err)
	}
	return used, nil
}

// ImageBlobInUse reports whether any recorded image has a file, or a
// disk file's chunk list, with the given SHA-256. A read error counts as in use, so blobs are never removed
// on doubt.
func (s *Store) ImageBlobInUse(sha string) bool {
	used, err := s.ImageBlobsInUse()
	return err != nil || used[sha]
}

// checkDeployImage is the rule for what a deploy may install: an image of
// that name imported for the machine's arch, of purpose deploy. Anything
// else is refused (CodeInvalid) naming the deploy images that are imported
// for that arch: a machine sent to DEPLOYING with an image it cannot boot
// would wait there, its boot config saying what is missing, until the
// watchdog gave up.
func (t *Tx) checkDeployImage(m Machine, name string) error {
	if name == "" {
		return errorf(CodeInvalid, "machine %s: a deploy needs an image (%s)", m.Hostname, t.deployImagesOf(m.Arch))
	}
	var im Image
	found, err := t.get(bucketImages, imageKey(name, m.Arch), &im)
	switch {
	case err != nil:
		return err
	case !found:
		return errorf(CodeInvalid, "machine %s: image %s is not imported for %s (%s)", m.Hostname, name, m.Arch, t.deployImagesOf(m.Arch))
	case im.Purpose != PurposeDeploy:
		return errorf(CodeInvalid, "image %s/%s has purpose %s, not deploy", im.Name, im.Arch, im.Purpose)
	}
	return nil
}

// deployImagesOf says which deploy images are imported for arch, for the
// refusals of checkDeployImage.
func (t *Tx) deployImagesOf(arch string) string {
	var names []string
	suffix := []byte("/" + arch)
	t.tx.Bucket(bucketImages).ForEach(func(k, _ []byte) error {
		if !bytes.HasSuffix(k, suffix) {
			return nil
		}
		var im Image
		if found, err := t.get(bucketImages, k, &im); err == nil && found && im.Arch == arch && im.Purpose == PurposeDeploy {
			names = append(names, im.Name)
		}
		return nil
	})
	if len(names) == 0 {
		return "no deploy image is imported for " + arch + ": import one with rackd images import"
	}
	return "deploy images imported for " + arch + ": " + strings.Join(names, ", ")
}
