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

// MaxManifestSize bounds the manifest file read by ImportDir.
const MaxManifestSize = 1 << 20

// Purposes and roles accepted in a manifest.
const (
	PurposeEnlist     = "enlist"
	PurposeCommission = "commission"
	PurposeDeploy     = "deploy"

	RoleKernel     = "kernel"
	RoleInitrd     = "initrd"
	RoleImage      = "image"
	RoleBootloader = "bootloader"
)

// Manifest describes one boot image: rackd-image.json.
type Manifest struct {
	Name    string `json:"name"`
	Arch    string `json:"arch"`
	Purpose string `json:"purpose"`
	Files   []File `json:"files"`
}

// File is one artefact of an image, Path relative to the image directory.
type File struct {
	Path   string `json:"path"`
	Role   string `json:"role"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
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
	case PurposeEnlist, PurposeCommission, PurposeDeploy:
	default:
		return fmt.Errorf("images: manifest: purpose %q: want enlist, commission or deploy", m.Purpose)
	}
	if len(m.Files) == 0 {
		return errors.New("images: manifest: no files")
	}
	seen := make(map[string]bool, len(m.Files))
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
		default:
			return fmt.Errorf("images: manifest: files[%d]: role %q: want kernel, initrd, image or bootloader", i, f.Role)
		}
		if !ValidHex(f.SHA256) {
			return fmt.Errorf("images: manifest: files[%d]: sha256 %q: want 64 lowercase hex characters", i, f.SHA256)
		}
		if f.Size < 0 {
			return fmt.Errorf("images: manifest: files[%d]: negative size %d", i, f.Size)
		}
	}
	return nil
}

// checkName accepts 1..64 characters of [A-Za-z0-9._+-], not starting with '.'.
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
