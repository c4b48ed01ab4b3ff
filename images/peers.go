package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
)

// PeerBlobPath is where an agent serves the blobs of its own store to the
// other agents of its cluster: GET PeerBlobPath + sha256.
const PeerBlobPath = "/api/v1/cluster/blobs/"

// Peer is another agent of the cluster, as it registered itself.
type Peer struct {
	Name string
	// URL is its base URL (its advertise_url), where PeerBlobPath is.
	URL string
}

// Fetcher brings blobs that the local store lacks from the other agents of
// a cluster: the image registry is shared, the blobs are not. A blob is
// streamed into the store and enters it only once its size and SHA-256 are
// right (Store.Add); a peer that sends other bytes, or none, is passed over
// for the next. Concurrent requests for one blob share one fetch.
type Fetcher struct {
	Store *Store
	// Peers lists the agents to ask, this one excluded.
	Peers func(ctx context.Context) ([]Peer, error)
	// Client reaches them (the cluster's client certificate and CA).
	Client *http.Client
	// Timeout bounds one peer's transfer (default 10 minutes); a blob of
	// unknown size (MaxUnsized) is cut off there too.
	Timeout time.Duration
	Log     *slog.Logger
	// Count, when set, is told each attempt's outcome: "ok", "missing"
	// (the peer has it not), "refused" (wrong size or SHA-256), "error".
	Count func(outcome string, bytes int64)

	group singleflight.Group
}

// MaxUnsized bounds a blob fetched without a known size (a chunk list,
// whose size the registry does not record).
const MaxUnsized = 256 << 20

// ErrNoPeer is returned (wrapped) when no peer had the blob.
var ErrNoPeer = errors.New("images: no peer agent has the blob")

// Fetch makes blob h (size bytes; -1 when unknown) present in the local
// store, from the first peer that has it right. The fetch goes on when ctx
// ends, for the next request of the same blob (a firmware that gave up
// retries); ctx only ends this caller's wait.
func (f *Fetcher) Fetch(ctx context.Context, h string, size int64) error {
	if !ValidHex(h) {
		return fmt.Errorf("%w: %q", ErrBadHash, h)
	}
	if f.Store.Has(h) {
		return nil
	}
	ch := f.group.DoChan(h, func() (any, error) {
		timeout := f.Timeout
		if timeout <= 0 {
			timeout = 10 * time.Minute
		}
		return nil, f.fetch(context.Background(), h, size, timeout)
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Fetcher) fetch(ctx context.Context, h string, size int64, timeout time.Duration) error {
	log := f.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	peers, err := f.Peers(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("images: list the peer agents: %w", err)
	}
	var errs []error
	for _, p := range peers {
		start := time.Now()
		n, outcome, err := f.fetchFrom(ctx, p, h, size, timeout)
		if f.Count != nil {
			f.Count(outcome, n)
		}
		if err == nil {
			log.Info("image blob fetched from a peer agent", "sha256", h, "bytes", n, "peer", p.Name, "seconds", time.Since(start).Seconds())
			return nil
		}
		if outcome != "missing" {
			log.Warn("image blob fetch from a peer agent failed", "sha256", h, "peer", p.Name, "outcome", outcome, "err", err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
	}
	return fmt.Errorf("%w %s (asked %d): %w", ErrNoPeer, h, len(peers), errors.Join(errs...))
}

// fetchFrom copies blob h from peer p into the store.
func (f *Fetcher) fetchFrom(ctx context.Context, p Peer, h string, size int64, timeout time.Duration) (int64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u, err := url.JoinPath(strings.TrimRight(p.URL, "/"), PeerBlobPath, h)
	if err != nil {
		return 0, "error", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "error", err
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		return 0, "error", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return 0, "missing", fmt.Errorf("%s: %s", u, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return 0, "error", fmt.Errorf("%s: %s", u, resp.Status)
	}
	var body io.Reader = resp.Body
	if size < 0 {
		body = io.LimitReader(resp.Body, MaxUnsized+1)
	}
	var n int64
	b, err := f.Store.Add(ctx, body, h, size, func(w int64) { n = w })
	if err != nil {
		if errors.Is(err, ErrMismatch) {
			return n, "refused", err
		}
		return n, "error", err
	}
	return b.Size, "ok", nil
}
