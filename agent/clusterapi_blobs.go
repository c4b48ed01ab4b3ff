package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/api"
	"rackd/cluster"
	"rackd/images"
	"rackd/internal/etcdmember"
	"rackd/netboot/files"
	"rackd/store"
)

// errNotRegistered: the blob asked for is in no image of the registry, so
// no peer is asked for it (a client cannot make agents fetch arbitrary
// digests from each other).
var errNotRegistered = errors.New("not a blob of any registered image")

// newBlobFetcher makes the fetcher of blobs from peer agents, on a store in
// etcd whose appliance has the cluster's client certificate; peers lists
// the other agents.
func (a *Agent) newBlobFetcher(peers func(context.Context) ([]images.Peer, error)) error {
	tc, err := etcdmember.ClientTLS(ClusterDir(a.cfg.StateDir))
	if err != nil {
		return err
	}
	fetches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "images", Name: "peer_fetches_total",
		Help: "Attempts to fetch an image blob missing here from a peer agent, by outcome (ok, missing, refused: wrong size or SHA-256, error).",
	}, []string{"outcome"})
	fetched := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "images", Name: "peer_fetch_bytes_total",
		Help: "Bytes of image blobs fetched from peer agents and kept.",
	})
	for _, o := range []string{"ok", "missing", "refused", "error"} {
		fetches.WithLabelValues(o)
	}
	a.metrics.reg.MustRegister(fetches, fetched)
	tr := &http.Transport{TLSClientConfig: tc, ResponseHeaderTimeout: 30 * time.Second}
	a.onClose("peer blob client", func() error { tr.CloseIdleConnections(); return nil })
	a.blobFetcher = &images.Fetcher{Store: a.images, Peers: peers, Client: &http.Client{Transport: tr},
		Log: a.log.With("service", "images"),
		Count: func(outcome string, n int64) {
			fetches.WithLabelValues(outcome).Inc()
			if outcome == "ok" {
				fetched.Add(float64(n))
			}
		}}
	return nil
}

// peerAgents are the other agents registered in the cluster, by their
// advertise_url.
func (a *Agent) peerAgents(ctx context.Context) ([]images.Peer, error) {
	st, err := cluster.Status(ctx, a.etcd, a.cfg.Store.EtcdPrefix)
	if err != nil {
		return nil, err
	}
	var ps []images.Peer
	for _, ag := range st.Agents {
		if ag.Name != a.cluster.Name() && ag.AdvertiseURL != "" {
			ps = append(ps, images.Peer{Name: ag.Name, URL: ag.AdvertiseURL})
		}
	}
	return ps, nil
}

// fetchBlob brings blob h from a peer agent, if the registry names it.
func (a *Agent) fetchBlob(ctx context.Context, h string) error {
	size, ok := a.registeredBlob(h)
	if !ok {
		return errNotRegistered
	}
	return a.blobFetcher.Fetch(ctx, h, size)
}

// registeredBlob says whether an image of the registry has blob h, and its
// size (-1 for a chunk list, whose size is not recorded).
func (a *Agent) registeredBlob(h string) (int64, bool) {
	ims, err := a.store.Images()
	if err != nil {
		return 0, false
	}
	for _, im := range ims {
		for _, f := range im.Files {
			if f.SHA256 == h {
				return f.Size, true
			}
			if f.Chunks == h {
				return -1, true
			}
		}
	}
	return 0, false
}

// peerBlob serves a blob of this agent's own store to another agent of the
// cluster, which presents the cluster's client certificate (checked by the
// TLS listener against the cluster CA). It never asks a peer in turn.
func (a *Agent) peerBlob(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || !slices.Contains(r.TLS.VerifiedChains[0][0].ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		writeError(w, http.StatusUnauthorized, api.CodeUnauthorized,
			"peer blobs are for the cluster's agents: present the cluster's client certificate on its TLS listener")
		return
	}
	h := r.PathValue("sha256")
	if !images.ValidHex(h) {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "not a sha256 (64 lowercase hex characters)")
		return
	}
	f, _, err := a.images.Open(h)
	if errors.Is(err, images.ErrNotFound) {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such blob on this agent")
		return
	}
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"`+h+`"`)
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// blobSource is the boot tree's source of blobs and bootloaders, fetching
// from peer agents when there is a fetcher (set before the boot files are
// made, in New).
func (a *Agent) blobSource(next files.Source) blobSource {
	bs := blobSource{blobs: a.images, loaders: &a.bootloaders, next: next}
	if a.blobFetcher != nil {
		bs.fetch = a.fetchBlob
	}
	return bs
}
