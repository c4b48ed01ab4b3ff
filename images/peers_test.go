package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// peerServer serves body for every blob asked of it (or 404 when nil),
// counting the requests.
func peerServer(t *testing.T, body []byte, hits *atomic.Int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !strings.HasPrefix(r.URL.Path, PeerBlobPath) {
			t.Errorf("peer asked for %s", r.URL.Path)
		}
		if body == nil {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestFetchFromPeers: a peer without the blob and one with wrong bytes are
// passed over, the right bytes enter the store; concurrent callers share
// one fetch; no peer with it is an error that says so.
func TestFetchFromPeers(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	good := []byte("the kernel, byte for byte")
	sum := sha256.Sum256(good)
	h := hex.EncodeToString(sum[:])
	var missing, wrong, right atomic.Int64
	peers := []Peer{
		{Name: "empty", URL: peerServer(t, nil, &missing)},
		{Name: "liar", URL: peerServer(t, []byte("the kernel, byte for bytf"), &wrong)},
		{Name: "good", URL: peerServer(t, good, &right)},
	}
	var mu sync.Mutex
	outcomes := map[string]int{}
	f := &Fetcher{Store: s, Client: http.DefaultClient,
		Peers: func(context.Context) ([]Peer, error) { return peers, nil },
		Count: func(o string, _ int64) { mu.Lock(); outcomes[o]++; mu.Unlock() }}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- f.Fetch(context.Background(), h, int64(len(good))) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	fh, b, err := s.Open(h)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(fh)
	fh.Close()
	if string(got) != string(good) || b.Size != int64(len(good)) {
		t.Fatalf("stored %q", got)
	}
	// Up to one fetch per caller may start (a caller that came after the
	// first fetch ended finds the blob): never one peer asked twice by
	// callers waiting together, and the liar's bytes never kept.
	if outcomes["ok"] != 1 || outcomes["refused"] != 1 || outcomes["missing"] != 1 {
		t.Fatalf("outcomes %v, want one each of ok, refused, missing", outcomes)
	}
	if right.Load() != 1 {
		t.Fatalf("the good peer was asked %d times", right.Load())
	}
	// Present now: no peer is asked again.
	if err := f.Fetch(context.Background(), h, int64(len(good))); err != nil || right.Load() != 1 {
		t.Fatalf("second fetch: %v, %d requests", err, right.Load())
	}

	other := sha256.Sum256([]byte("nobody has this"))
	err = f.Fetch(context.Background(), hex.EncodeToString(other[:]), 15)
	if !errors.Is(err, ErrNoPeer) || !strings.Contains(err.Error(), "liar") {
		t.Fatalf("a blob nobody has: %v, want ErrNoPeer naming the peers", err)
	}
	if s.Has(hex.EncodeToString(other[:])) {
		t.Fatal("wrong bytes entered the store")
	}
}
