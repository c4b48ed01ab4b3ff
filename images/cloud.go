package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// CloudImage is a bare disk image at a URL, as vendors publish their cloud
// images (raw, compressed or qcow2), with the digest the vendor publishes
// beside it. Imported, it is a deploy image with that one disk file, which
// the commissioning environment writes (see netboot/bootconf's
// EnvironmentsOf).
type CloudImage struct {
	// URL is the image's http or https URL.
	URL string
	// SHA256 is the image file's digest, or Checksums the URL of a
	// checksum list that names the file (SHA256SUMS, SHA512SUMS, or a
	// BSD-style CHECKSUM: see ParseChecksums). Exactly one is set.
	SHA256, Checksums string
	// Name is the image's name; empty means the URL's file name without
	// its extensions (.img, .raw, .qcow2, .gz, .xz, .zst), in the
	// characters a name may have.
	Name string
	// Arch is the image's architecture; empty means amd64.
	Arch string
	// OS and Series name the image as MAAS's clients ask for it
	// (optional; see Manifest).
	OS, Series string
}

// checkHTTPURL parses raw as an http or https URL with a host and no
// fragment.
func checkHTTPURL(what, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("images: import: %s: %w", what, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("images: import: %s %s: want http:// or https://", what, u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf("images: import: %s %s: no host", what, u.Redacted())
	case u.Fragment != "":
		return nil, fmt.Errorf("images: import: %s %s: a fragment names nothing on the server", what, u.Redacted())
	}
	return u, nil
}

// cloudSource is a CloudImage as a Source: its manifest is made up from
// the image's name, the digest and the size the server sends.
type cloudSource struct {
	image, sums *url.URL
	file        string // the image's file name, as a checksum list names it
	ci          CloudImage
	client      *http.Client
	stall       time.Duration

	// The image's response, from Manifest until Open takes it.
	resp   *http.Response
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// OpenCloudImage checks ci and returns a source for it. Nothing is
// fetched until Manifest, which fetches the checksum list (if any) and
// starts the image's download to learn its size; Open continues that
// download. The context given to Manifest must therefore last until the
// file is read, as Import's does.
func OpenCloudImage(ci CloudImage, opts URLOptions) (Source, error) {
	u, err := checkHTTPURL("URL", ci.URL)
	if err != nil {
		return nil, err
	}
	file := path.Base(u.Path)
	if u.Path == "" || strings.HasSuffix(u.Path, "/") || file == "." || file == "/" {
		return nil, fmt.Errorf("images: import: URL %s names no file: a cloud image URL ends in the image's file name", u.Redacted())
	}
	src := &cloudSource{image: u, file: file, ci: ci, client: opts.Client, stall: opts.StallTimeout}
	switch {
	case (ci.SHA256 == "") == (ci.Checksums == ""):
		return nil, errors.New("images: import: a cloud image needs exactly one of a sha256 and a checksums URL")
	case ci.SHA256 != "":
		src.ci.SHA256 = strings.ToLower(ci.SHA256)
		if !ValidHex(src.ci.SHA256) {
			return nil, fmt.Errorf("images: import: sha256 %q: want 64 hex digits", ci.SHA256)
		}
	default:
		if src.sums, err = checkHTTPURL("checksums URL", ci.Checksums); err != nil {
			return nil, err
		}
	}
	if src.ci.Name == "" {
		if src.ci.Name = cloudImageName(file); src.ci.Name == "" {
			return nil, fmt.Errorf("images: import: no name in the file name %q: give one", file)
		}
	}
	if src.ci.Arch == "" {
		src.ci.Arch = "amd64"
	}
	for _, c := range []struct{ field, v string }{{"name", src.ci.Name}, {"arch", src.ci.Arch}} {
		if err := checkName(c.field, c.v); err != nil {
			return nil, err
		}
	}
	if src.client == nil {
		src.client = defaultClient
	}
	if src.stall <= 0 {
		src.stall = StallTimeout
	}
	return src, nil
}

// cloudImageName is the image name a file name suggests: without the
// extensions of disk images and their compressions, every character a
// name may not have made '-', at most 64 characters.
func cloudImageName(file string) string {
	for {
		ext := strings.ToLower(path.Ext(file))
		switch ext {
		case ".img", ".raw", ".qcow2", ".gz", ".xz", ".zst", ".zstd":
			file = file[:len(file)-len(ext)]
			continue
		}
		break
	}
	b := []byte(file)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '+') {
			b[i] = '-'
		}
	}
	name := strings.TrimLeft(string(b), ".")
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

func (c *cloudSource) String() string { return c.image.Redacted() }

func (c *cloudSource) Close() error {
	if c.resp != nil {
		c.resp.Body.Close()
		c.cancel(nil)
		c.resp = nil
	}
	return nil
}

func (c *cloudSource) get(ctx context.Context, target *url.URL) (*http.Response, error) {
	return (&urlSource{client: c.client}).get(ctx, target)
}

// digests returns the vendor's digests of the image: the one given, or
// the checksum list's entry for the file.
func (c *cloudSource) digests(ctx context.Context) (Checksums, error) {
	if c.sums == nil {
		return Checksums{AlgoSHA256: c.ci.SHA256}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ResponseTimeout)
	defer cancel()
	resp, err := c.get(ctx, c.sums)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxChecksumsSize+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", c.sums.Redacted(), err)
	}
	name, err := url.PathUnescape(c.file)
	if err != nil {
		name = c.file
	}
	sums, err := ParseChecksums(data, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.sums.Redacted(), err)
	}
	return sums, nil
}

func (c *cloudSource) Manifest(ctx context.Context) ([]byte, error) {
	sums, err := c.digests(ctx)
	if err != nil {
		return nil, err
	}
	c.Close() // a second call starts again
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	resp, err := c.get(c.ctx, c.image)
	if err != nil {
		c.cancel(nil)
		return nil, err
	}
	c.resp = resp
	switch {
	case resp.ContentLength < 0:
		c.Close()
		return nil, fmt.Errorf("GET %s: the server does not say the image's size (no Content-Length)", c.image.Redacted())
	case resp.ContentLength == 0:
		c.Close()
		return nil, fmt.Errorf("GET %s: an empty file", c.image.Redacted())
	case resp.ContentLength > MaxFileSize:
		c.Close()
		return nil, fmt.Errorf("GET %s: %d bytes, more than the %d a disk image may be", c.image.Redacted(), resp.ContentLength, int64(MaxFileSize))
	}
	diskPath, err := url.PathUnescape(c.file)
	if err != nil || checkPath(diskPath) != nil {
		diskPath = "disk.img"
	}
	m := Manifest{Name: c.ci.Name, Arch: c.ci.Arch, Purpose: PurposeDeploy, OS: c.ci.OS, Series: c.ci.Series, Files: []File{{
		Path: diskPath, Role: RoleDisk, SHA256: sums[AlgoSHA256], SHA512: sums[AlgoSHA512], Size: resp.ContentLength}}}
	return json.Marshal(m)
}

func (c *cloudSource) Open(ctx context.Context, f File) (io.ReadCloser, error) {
	if c.resp == nil {
		return nil, errors.New("images: cloud image: Open before Manifest")
	}
	resp, rctx, cancel := c.resp, c.ctx, c.cancel
	c.resp = nil // the reader owns it now
	r := &stallReader{body: resp.Body, cancel: cancel, ctx: rctx, what: c.image.Redacted(), stall: c.stall}
	r.timer = time.AfterFunc(c.stall, func() { cancel(errStalled) })
	return r, nil
}
