package images

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// ManifestName is the manifest file name inside an image directory.
const ManifestName = "rackd-image.json"

// MaxManifestSize bounds the manifest file an import reads.
const MaxManifestSize = 1 << 20

// MaxFileSize bounds one file of an image. Boot artefacts are kernels,
// initrds and root file system images; the bound keeps a typo in a
// manifest's size from letting an import fill the disk.
const MaxFileSize = 64 << 30

// MaxCmdline bounds a manifest's kernel command line. The kernel's own
// limit (COMMAND_LINE_SIZE) is 2048 bytes on x86 and arm64, and rackd's
// arguments and the initrd names share it.
const MaxCmdline = 1024

// Purposes and roles accepted in a manifest.
const (
	PurposeEnlist     = "enlist"
	PurposeCommission = "commission"
	PurposeDeploy     = "deploy"
	PurposeBootloader = "bootloader"

	RoleKernel     = "kernel"
	RoleInitrd     = "initrd"
	RoleImage      = "image"
	RoleBootloader = "bootloader"
	// RoleDisk is a raw disk image that a deploy image's environment
	// writes to the machine's disk (at most one per image).
	RoleDisk = "disk"
)

// Manifest describes one boot image: rackd-image.json. See the package
// documentation for the format.
type Manifest struct {
	Name    string `json:"name"`
	Arch    string `json:"arch"`
	Purpose string `json:"purpose"`
	// Cmdline is the image's own kernel arguments, space-separated
	// (optional). rackd appends them to its own when it boots the image.
	Cmdline string `json:"cmdline,omitempty"`
	// OS and Series name a deploy image as MAAS's clients ask for one
	// (osystem "ubuntu", distro_series "noble"); optional: without them
	// rackd reads them from the image's name (store.ImageOSSeries).
	OS     string `json:"os,omitempty"`
	Series string `json:"series,omitempty"`
	Files  []File `json:"files"`
}

// Args returns the kernel arguments of Cmdline, one word each.
func (m *Manifest) Args() []string { return strings.Fields(m.Cmdline) }

// File is one artefact of an image, Path relative to the image directory.
type File struct {
	Path string `json:"path"`
	Role string `json:"role"`
	// SHA256 and Size are of the file as it is read. A file may give
	// SHA512 instead of SHA256, or both: every digest given is checked.
	SHA256 string `json:"sha256,omitempty"`
	SHA512 string `json:"sha512,omitempty"`
	Size   int64  `json:"size"`
	// Format, RawSize and RawSHA256 belong to a disk file (optional):
	// what the file is (FormatRaw, FormatGzip, FormatXZ, FormatZstd or
	// FormatQCOW2), and the size and digest of the raw disk image it
	// holds. The import learns all three from the content; whatever the
	// manifest says must agree with it.
	Format    string `json:"format,omitempty"`
	RawSize   int64  `json:"raw_size,omitempty"`
	RawSHA256 string `json:"raw_sha256,omitempty"`
	// Chunks is the import's, never a manifest's: the digest of the blob
	// that holds a disk file's chunk list (the SHA-256 of each
	// chunksum.Size chunk of the raw disk image, in chunksum's encoding),
	// stored beside it; empty for other files.
	Chunks string `json:"-"`
}

// ParseManifest decodes and validates a manifest strictly: unknown
// fields, trailing data, bad enums, unsafe paths and malformed digests
// are refused.
func ParseManifest(data []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("images: manifest: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("images: manifest: trailing data after JSON object")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the manifest's fields.
func (m *Manifest) Validate() error {
	if err := checkName("name", m.Name); err != nil {
		return err
	}
	if err := checkName("arch", m.Arch); err != nil {
		return err
	}
	switch m.Purpose {
	case PurposeEnlist, PurposeCommission, PurposeDeploy, PurposeBootloader:
	default:
		return fmt.Errorf("images: manifest: purpose %q: want enlist, commission, deploy or bootloader", m.Purpose)
	}
	if err := CheckOSSeries(m.OS, m.Series); err != nil {
		return fmt.Errorf("images: manifest: %w", err)
	}
	if (m.OS != "" || m.Series != "") && m.Purpose != PurposeDeploy {
		return fmt.Errorf("images: manifest: os and series name a deploy image, not a %s one", m.Purpose)
	}
	if err := CheckCmdline(m.Cmdline); err != nil {
		return fmt.Errorf("images: manifest: %w", err)
	}
	if len(m.Files) == 0 {
		return errors.New("images: manifest: no files")
	}
	seen := make(map[string]bool, len(m.Files))
	disks := 0
	for i, f := range m.Files {
		if err := checkPath(f.Path); err != nil {
			return fmt.Errorf("images: manifest: files[%d]: %w", i, err)
		}
		if seen[f.Path] {
			return fmt.Errorf("images: manifest: files[%d]: duplicate path %q", i, f.Path)
		}
		seen[f.Path] = true
		switch f.Role {
		case RoleKernel, RoleInitrd, RoleImage, RoleBootloader:
		case RoleDisk:
			if m.Purpose != PurposeDeploy {
				return fmt.Errorf("images: manifest: files[%d]: role disk belongs to a deploy image, not %s", i, m.Purpose)
			}
			if disks++; disks > 1 {
				return fmt.Errorf("images: manifest: files[%d]: a second disk file: a deploy image writes one disk image", i)
			}
			if f.Size == 0 {
				return fmt.Errorf("images: manifest: files[%d]: an empty disk image", i)
			}
		default:
			return fmt.Errorf("images: manifest: files[%d]: role %q: want kernel, initrd, image, bootloader or disk", i, f.Role)
		}
		switch {
		case f.SHA256 == "" && f.SHA512 == "":
			return fmt.Errorf("images: manifest: files[%d]: no sha256 (or sha512)", i)
		case f.SHA256 != "" && !ValidHex(f.SHA256):
			return fmt.Errorf("images: manifest: files[%d]: sha256 %q: want 64 lowercase hex characters", i, f.SHA256)
		case f.SHA512 != "" && !validHexLen(f.SHA512, 128):
			return fmt.Errorf("images: manifest: files[%d]: sha512 %q: want 128 lowercase hex characters", i, f.SHA512)
		}
		if f.Size < 0 || f.Size > MaxFileSize {
			return fmt.Errorf("images: manifest: files[%d]: size %d: want 0 to %d bytes", i, f.Size, int64(MaxFileSize))
		}
		if err := f.checkDisk(); err != nil {
			return fmt.Errorf("images: manifest: files[%d]: %w", i, err)
		}
	}
	return nil
}

// checkDisk checks the disk fields: only a disk file has them, and they
// are well formed.
func (f File) checkDisk() error {
	if f.Role != RoleDisk {
		if f.Format != "" || f.RawSize != 0 || f.RawSHA256 != "" {
			return fmt.Errorf("format, raw_size and raw_sha256 belong to a disk file, not a %s", f.Role)
		}
		return nil
	}
	switch f.Format {
	case "", FormatRaw, FormatGzip, FormatXZ, FormatZstd, FormatQCOW2:
	default:
		return fmt.Errorf("format %q: want raw, gzip, xz, zstd or qcow2", f.Format)
	}
	if f.RawSize < 0 || f.RawSize > MaxFileSize {
		return fmt.Errorf("raw_size %d: want 1 to %d bytes", f.RawSize, int64(MaxFileSize))
	}
	if f.RawSHA256 != "" && !ValidHex(f.RawSHA256) {
		return fmt.Errorf("raw_sha256 %q: want 64 lowercase hex characters", f.RawSHA256)
	}
	return nil
}

// checkName accepts 1..64 characters of [A-Za-z0-9._+-], not starting with '.'.
// CheckOSSeries checks a deploy image's os and series (either may be
// empty): 1-64 of lower-case letters, digits and . _ -, a letter or digit
// first.
func CheckOSSeries(os, series string) error {
	for _, f := range [][2]string{{"os", os}, {"series", series}} {
		v := f[1]
		if v == "" {
			continue
		}
		ok := len(v) <= 64 && (v[0] >= 'a' && v[0] <= 'z' || v[0] >= '0' && v[0] <= '9')
		for i := 0; ok && i < len(v); i++ {
			c := v[i]
			ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		}
		if !ok {
			return fmt.Errorf("%s %q: want 1-64 of lower-case letters, digits and . _ - (a letter or digit first)", f[0], v)
		}
	}
	return nil
}

func checkName(field, s string) error {
	if s == "" || len(s) > 64 || s[0] == '.' {
		return fmt.Errorf("images: manifest: %s %q: want 1-64 characters of [A-Za-z0-9._+-]", field, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '+') {
			return fmt.Errorf("images: manifest: %s %q: want 1-64 characters of [A-Za-z0-9._+-]", field, s)
		}
	}
	return nil
}

// checkPath accepts a clean, relative, slash-separated path with no ".."
// element, no backslash and no control characters.
func checkPath(p string) error {
	switch {
	case p == "" || len(p) > 1024:
		return fmt.Errorf("path %q: empty or too long", p)
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q: not UTF-8", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q: absolute", p)
	case strings.ContainsAny(p, "\\:"):
		return fmt.Errorf("path %q: backslash or colon", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("path %q: control character", p)
		}
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("path %q: contains \"..\"", p)
		}
	}
	if path.Clean(p) != p || p == "." {
		return fmt.Errorf("path %q: not clean", p)
	}
	return nil
}

// argChars are the characters allowed in a kernel argument besides ASCII
// letters and digits: the set netboot/bootconf accepts (its argChars),
// none of which is special to GRUB, pxelinux, iPXE or the kernel's own
// parser. Refusing at import time means an image the renderer would
// refuse never reaches the registry.
const argChars = "._~:/,=+@%-"

// reservedArgs are argument prefixes an image may not set: rackd.* is
// rackd's own (the URL the environment calls back, the machine's identity
// and token) and must not be overridden by a later duplicate, and initrd=
// is how pxelinux and iPXE name the initrds rackd lists.
var reservedArgs = []string{"rackd.", "initrd="}

// CheckCmdline checks a manifest's kernel command line: at most MaxCmdline
// bytes of space-separated words, each made of [A-Za-z0-9._~:/,=+@%-] and
// none starting with rackd. or initrd=. Quotes, backslashes, $, control
// characters and newlines are refused rather than escaped, because the
// loaders' configs have no escape that works for all of them.
func CheckCmdline(s string) error {
	if len(s) > MaxCmdline {
		return fmt.Errorf("cmdline is %d bytes long, at most %d", len(s), MaxCmdline)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(argChars, c) >= 0 {
			continue
		}
		return fmt.Errorf("cmdline %q: character %q at byte %d is not allowed (want words of [A-Za-z0-9%s] separated by spaces)", s, c, i, argChars)
	}
	for _, a := range strings.Fields(s) {
		for _, r := range reservedArgs {
			if strings.HasPrefix(a, r) {
				return fmt.Errorf("cmdline argument %q: %s* is reserved for rackd", a, r)
			}
		}
	}
	return nil
}
