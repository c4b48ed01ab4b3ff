package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Overlay is a Source that asks a Renderer first and falls back to another
// Source (normally a Tree) for the names the renderer does not make. Every
// Open renders afresh: nothing is cached, so a machine whose state changed
// gets the new config on its very next request.
//
// Names with a "?" (the HTTP query form "ipxe?mac=...", see package
// httpboot) belong to the renderer alone: when it declines one, Open answers
// ErrNotFound rather than looking for a file of that name.
type Overlay struct {
	r    Renderer
	next Source
}

// NewOverlay returns an Overlay of r over next. Either may be nil: a nil
// renderer makes nothing, a nil next has no files.
func NewOverlay(r Renderer, next Source) *Overlay {
	return &Overlay{r: r, next: next}
}

// Open cleans name, then renders it or opens it from the next Source.
func (o *Overlay) Open(ctx context.Context, name string) (File, error) {
	p, err := Clean(name)
	if err != nil {
		return nil, err
	}
	if o.r != nil {
		b, ok, err := o.r.Render(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("files: rendering %q: %w", p, err)
		}
		if ok {
			return NewMemFile(b), nil
		}
	}
	if o.next == nil || strings.Contains(p, "?") {
		return nil, notFound(name, "", nil)
	}
	// p, not name: Clean is idempotent, and the next Source cleans again.
	return o.next.Open(ctx, p)
}

// MemFile is a File held in memory: what a Renderer made. Its ModTime is
// zero (it is made now, on request, and has no meaningful date), its ETag a
// hash of the content, and its Size (bytes.Reader's) the whole length.
type MemFile struct {
	*bytes.Reader
	etag string
}

// NewMemFile returns a MemFile of b. b must not change afterwards.
func NewMemFile(b []byte) *MemFile {
	sum := sha256.Sum256(b)
	return &MemFile{
		Reader: bytes.NewReader(b),
		// 96 bits: enough that two configs never share a tag by chance.
		etag: `"` + hex.EncodeToString(sum[:12]) + `"`,
	}
}

// ModTime is the zero time: see MemFile.
func (f *MemFile) ModTime() time.Time { return time.Time{} }

// ETag is the quoted hash of the content.
func (f *MemFile) ETag() string { return f.etag }

// Close does nothing; it makes MemFile an io.Closer.
func (f *MemFile) Close() error { return nil }
