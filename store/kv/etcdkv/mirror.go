package etcdkv

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A mirror keeps in memory the records of some buckets, with their
// existence, sequence and version keys, each with its modification
// revision: loaded at one revision, then kept from a watch from the next,
// and updated at once by this DB's own commits. A transaction whose ctx
// allows it (kv.WithMirroredReads) reads those keys from the mirror
// instead of asking the cluster: a DHCP server choosing an address for an
// offer, or acknowledging a lease, then costs no read round trip at all,
// only the commit's. The commit compares each key's revision as the
// mirror had it, so a mirror behind the cluster costs a conflict and a
// run on the cluster's own records, never a wrong write.
//
// Each key's entry only moves forward (news older than the revision it
// holds is ignored), because the watch and this DB's commits report the
// same changes in either order. A deleted key keeps a tombstone with its
// revision until the watch is past it, so that an older change cannot
// bring it back.
type mirror struct {
	db      *DB
	buckets map[string]bool

	mu      sync.RWMutex
	ready   bool
	entries map[string]mirrorEntry
	// watched is the revision up to which the load and the watch have
	// applied every change; tombs the keys deleted after it.
	watched int64
	tombs   []string

	// gate, when set (by tests), is received from before each watch
	// response is applied: a mirror held behind the cluster.
	gate chan struct{}
}

type mirrorEntry struct {
	value []byte // nil: deleted
	mod   int64
}

// Mirror starts a mirror of the named buckets, loaded before it returns,
// kept until ctx ends. A DB has one mirror at most: while one runs, Mirror
// returns nil and keeps it.
func (d *DB) Mirror(ctx context.Context, buckets ...string) error {
	return d.mirror(ctx, nil, buckets)
}

func (d *DB) mirror(ctx context.Context, gate chan struct{}, buckets []string) error {
	m := &mirror{db: d, buckets: map[string]bool{}, gate: gate}
	for _, b := range buckets {
		m.buckets[b] = true
	}
	if !d.mir.CompareAndSwap(nil, m) {
		return nil
	}
	rev, err := m.load(ctx)
	if err != nil {
		d.mir.CompareAndSwap(m, nil)
		return err
	}
	go m.follow(ctx, rev)
	return nil
}

// covers reports whether key (a full engine key) is one the mirror keeps.
func (m *mirror) covers(key string) bool {
	rest, ok := strings.CutPrefix(key, m.db.prefix)
	if !ok || len(rest) < 2 || rest[1] != '/' {
		return false
	}
	switch rest[0] {
	case 'b':
		bucket, _, found := strings.Cut(rest[2:], "/")
		return found && m.buckets[bucket]
	case 'B', 'S', 'V':
		return m.buckets[rest[2:]]
	}
	return false
}

// get returns what the mirror holds at key: its value (nil: absent) and
// modification revision (0: absent); ok is false when the mirror cannot
// answer (not loaded, or not a key it keeps).
func (m *mirror) get(key string) (value []byte, mod int64, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.ready || !m.covers(key) {
		return nil, 0, false
	}
	e := m.entries[key]
	if e.value == nil {
		return nil, 0, true
	}
	return e.value, e.mod, true
}

// set records key's state at revision mod (value nil: deleted), unless the
// entry already reflects a later one. m.mu is held.
func (m *mirror) set(key string, value []byte, mod int64) {
	if e, ok := m.entries[key]; ok && e.mod >= mod {
		return
	}
	m.entries[key] = mirrorEntry{value: value, mod: mod}
	if value == nil {
		m.tombs = append(m.tombs, key)
	}
}

// committed applies one of this DB's own commits, at revision rev.
func (m *mirror) committed(rev int64, writes map[string]*[]byte, versions []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ready {
		return // a load is under way and will see it
	}
	for k, w := range writes {
		if !m.covers(k) {
			continue
		}
		if w == nil {
			m.set(k, nil, rev)
		} else {
			m.set(k, *w, rev)
		}
	}
	for _, k := range versions {
		if m.covers(k) {
			m.set(k, []byte{}, rev)
		}
	}
}

// load reads every key the mirror keeps at one revision and installs them;
// it returns the revision.
func (m *mirror) load(ctx context.Context) (int64, error) {
	var rev int64
	entries := map[string]mirrorEntry{}
	read := func(from, end string) error {
		for {
			opts := []clientv3.OpOption{clientv3.WithLimit(pageSize), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
			if end != "" {
				opts = append(opts, clientv3.WithRange(end))
			}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := m.db.cli.Get(ctx, from, opts...)
			if err != nil {
				return fmt.Errorf("etcdkv: load the mirror from %q: %w", from, err)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			for _, kv := range resp.Kvs {
				entries[string(kv.Key)] = mirrorEntry{value: present(kv.Value), mod: kv.ModRevision}
			}
			if end == "" || !resp.More || len(resp.Kvs) == 0 {
				return nil
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	for b := range m.buckets {
		start := m.db.prefix + "b/" + b + "/"
		if err := read(start, clientv3.GetPrefixRangeEnd(start)); err != nil {
			return 0, err
		}
		for _, kind := range []string{"B", "S", "V"} {
			if err := read(m.db.prefix+kind+"/"+b, ""); err != nil {
				return 0, err
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries, m.tombs, m.watched, m.ready = entries, nil, rev, true
	return rev, nil
}

// follow applies the cluster's changes from rev+1 until ctx ends; a
// compacted watch loads the mirror again.
func (m *mirror) follow(ctx context.Context, rev int64) {
	defer func() {
		m.mu.Lock()
		m.ready, m.entries, m.tombs = false, nil, nil
		m.mu.Unlock()
		m.db.mir.CompareAndSwap(m, nil)
	}()
	for {
		err := m.watch(ctx, rev+1)
		if ctx.Err() != nil {
			return
		}
		slog.Warn("etcdkv: the mirror missed changes; loading it again", "prefix", m.db.prefix, "err", err)
		m.mu.Lock()
		m.ready = false // until loaded: transactions read the cluster
		m.mu.Unlock()
		for {
			if rev, err = m.load(ctx); err == nil {
				break
			}
			slog.Error("etcdkv: load the mirror", "prefix", m.db.prefix, "err", err)
			select {
			case <-time.After(watchRetry):
			case <-ctx.Done():
				return
			}
		}
	}
}

// watch applies the changes from fromRev on until ctx ends or the
// revision to resume from is compacted away (its error is returned).
func (m *mirror) watch(ctx context.Context, fromRev int64) error {
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := m.db.cli.Watch(wctx, m.db.prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev))
		for resp := range wch {
			if resp.CompactRevision != 0 {
				cancel()
				return fmt.Errorf("%w: resuming from revision %d, compacted up to %d", ErrCompacted, fromRev, resp.CompactRevision)
			}
			if resp.Err() != nil {
				break // broken: resume
			}
			if len(resp.Events) == 0 {
				continue
			}
			if m.gate != nil {
				select {
				case <-m.gate:
				case <-ctx.Done():
					cancel()
					return ctx.Err()
				}
			}
			m.apply(resp.Events)
			fromRev = resp.Events[len(resp.Events)-1].Kv.ModRevision + 1
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case <-time.After(watchRetry):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// apply applies one watch response's events, in revision order.
func (m *mirror) apply(evs []*clientv3.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		if !m.covers(k) {
			continue
		}
		if ev.Type == mvccpb.DELETE {
			m.set(k, nil, ev.Kv.ModRevision)
		} else {
			m.set(k, present(ev.Kv.Value), ev.Kv.ModRevision)
		}
	}
	m.watched = max(m.watched, evs[len(evs)-1].Kv.ModRevision)
	// Tombstones the watch is past: nothing older can come any more.
	kept := m.tombs[:0]
	for _, k := range m.tombs {
		e, ok := m.entries[k]
		switch {
		case !ok || e.value != nil:
		case e.mod <= m.watched:
			delete(m.entries, k)
		default:
			kept = append(kept, k)
		}
	}
	m.tombs = kept
}
