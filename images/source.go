package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"time"
)

// A Source is where an import reads an image from: a directory (OpenDir)
// or an HTTP(S) URL (OpenURL).
type Source interface {
	// Manifest returns the manifest's bytes, at most MaxManifestSize.
	Manifest(ctx context.Context) ([]byte, error)
	// Open opens the manifest file f for reading. Import checks size and
	// checksum itself; a source may refuse earlier when it can tell.
	Open(ctx context.Context, f File) (io.ReadCloser, error)
	// Close releases the source.
	Close() error
	// String names the source in messages.
	String() string
}

// readManifest reads at most MaxManifestSize bytes from r.
func readManifest(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("manifest larger than %d bytes", MaxManifestSize)
	}
	return data, nil
}

// dirSource reads an image directory through an os.Root, so that neither
// a manifest path nor a symlink in the directory can reach outside it.
type dirSource struct{ root *os.Root }

// OpenDir opens the image directory dir, which holds rackd-image.json and
// the files it lists.
func OpenDir(dir string) (Source, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("images: import: %w", err)
	}
	return dirSource{root}, nil
}

func (d dirSource) Manifest(context.Context) ([]byte, error) {
	f, err := d.root.Open(ManifestName)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readManifest(f)
}

func (d dirSource) Open(_ context.Context, f File) (io.ReadCloser, error) {
	fh, err := d.root.Open(f.Path)
	if err != nil {
		return nil, err
	}
	fi, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		fh.Close()
		return nil, errors.New("not a regular file")
	}
	return fh, nil
}

func (d dirSource) Close() error   { return d.root.Close() }
func (d dirSource) String() string { return d.root.Name() }

// Timeouts of URL imports. A whole import has no deadline of its own (a
// disk image over a slow link may take hours; the caller's context bounds
// it): a download that stops delivering for StallTimeout fails instead.
const (
	// DialTimeout bounds connecting to the server.
	DialTimeout = 30 * time.Second
	// ResponseTimeout bounds the wait for a response's headers, and the
	// whole manifest fetch.
	ResponseTimeout = 60 * time.Second
	// StallTimeout is how long a download may deliver no byte at all.
	StallTimeout = 60 * time.Second
)

// URLOptions tunes OpenURL. The zero value is usable.
type URLOptions struct {
	// Client does the requests; nil means a client with the timeouts
	// above and the environment's proxy settings.
	Client *http.Client
	// StallTimeout overrides StallTimeout when > 0.
	StallTimeout time.Duration
}

// urlSource fetches an image over HTTP(S): the manifest at base, and each
// file at its manifest path resolved against the manifest's URL, the way a
// browser resolves a relative link.
type urlSource struct {
	manifest *url.URL
	client   *http.Client
	stall    time.Duration
}

// defaultClient is shared so connections are reused across files.
var defaultClient = &http.Client{
	Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   DialTimeout,
		ResponseHeaderTimeout: ResponseTimeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   2,
		ForceAttemptHTTP2:     true,
	},
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return fmt.Errorf("redirect to %s: want http or https", req.URL.Redacted())
		}
		return nil
	},
}

// OpenURL checks raw and returns a source for it. raw is an http or https
// URL naming a rackd-image.json, or a directory holding one (a URL whose
// last path element is not rackd-image.json gets "/rackd-image.json"
// added). Nothing is fetched until Manifest.
func OpenURL(raw string, opts URLOptions) (Source, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("images: import: URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("images: import: URL %s: want http:// or https://", u.Redacted())
	case u.Host == "":
		return nil, fmt.Errorf("images: import: URL %s: no host", u.Redacted())
	case u.Fragment != "":
		return nil, fmt.Errorf("images: import: URL %s: a fragment names nothing on the server", u.Redacted())
	}
	if path.Base(u.Path) != ManifestName {
		u = u.JoinPath(ManifestName)
	}
	src := &urlSource{manifest: u, client: opts.Client, stall: opts.StallTimeout}
	if src.client == nil {
		src.client = defaultClient
	}
	if src.stall <= 0 {
		src.stall = StallTimeout
	}
	return src, nil
}

func (u *urlSource) String() string { return u.manifest.Redacted() }
func (u *urlSource) Close() error   { return nil }

// get fetches target and insists on 200 OK: a 206, a redirect loop's last
// answer or an error page is not the file.
func (u *urlSource) get(ctx context.Context, target *url.URL) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, err
	}
	// The checksum is of the bytes as listed: a transparently
	// decompressed body would not match it.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", target.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", target.Redacted(), resp.Status)
	}
	return resp, nil
}

func (u *urlSource) Manifest(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, ResponseTimeout)
	defer cancel()
	resp, err := u.get(ctx, u.manifest)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > MaxManifestSize {
		return nil, fmt.Errorf("GET %s: manifest of %d bytes, at most %d", u, resp.ContentLength, MaxManifestSize)
	}
	return readManifest(resp.Body)
}

// fileURL resolves a manifest path (checked by Validate: clean, relative,
// no "..") against the manifest's URL. Building a URL from the path,
// rather than parsing it, escapes '?', '#', '%' and spaces in names.
func (u *urlSource) fileURL(p string) *url.URL {
	return u.manifest.ResolveReference(&url.URL{Path: p})
}

func (u *urlSource) Open(ctx context.Context, f File) (io.ReadCloser, error) {
	target := u.fileURL(f.Path)
	ctx, cancel := context.WithCancelCause(ctx)
	resp, err := u.get(ctx, target)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if resp.ContentLength >= 0 && resp.ContentLength != f.Size {
		resp.Body.Close()
		cancel(nil)
		return nil, fmt.Errorf("GET %s: the server sends %d bytes, the manifest says %d", target.Redacted(), resp.ContentLength, f.Size)
	}
	r := &stallReader{body: resp.Body, cancel: cancel, ctx: ctx, what: target.Redacted(), stall: u.stall}
	r.timer = time.AfterFunc(u.stall, func() { cancel(errStalled) })
	return r, nil
}

var errStalled = errors.New("download stalled")

// stallReader cancels its request when no byte arrives for stall, and
// says so in the error it returns instead of a bare "context canceled".
type stallReader struct {
	body   io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	stall  time.Duration
	what   string
}

func (r *stallReader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	if n > 0 {
		r.timer.Reset(r.stall)
	}
	if err != nil && err != io.EOF {
		if errors.Is(context.Cause(r.ctx), errStalled) {
			return n, fmt.Errorf("GET %s: no data for %s: %w", r.what, r.stall, errStalled)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return n, fmt.Errorf("GET %s: connection closed early (truncated download): %w", r.what, err)
		}
		return n, fmt.Errorf("GET %s: %w", r.what, err)
	}
	return n, err
}

func (r *stallReader) Close() error {
	r.timer.Stop()
	err := r.body.Close()
	r.cancel(nil)
	return err
}
