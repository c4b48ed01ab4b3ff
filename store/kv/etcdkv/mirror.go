package etcdkv

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A mirror keeps in memory the records of some buckets, with their
// existence, sequence and version keys, each with its modification
// revision: loaded by ViewRev at its snapshot's revision, then kept by
// Watch from the next, and updated at once by this DB's own commits. A
// transaction whose ctx allows it (kv.WithMirroredReads) reads those keys
// from the mirror instead of asking the cluster: a DHCP server choosing an
// address for an offer, or acknowledging a lease, then costs no read round
// trip at all, only the commit's. The commit compares each key's revision
// as the mirror had it, so a mirror behind the cluster costs a conflict
// and a run on the cluster's own records, never a wrong write.
//
// The mirror has no watch of its own: the one that follows the DB (ViewRev,
// then Watch) keeps it, and Watch applies each revision to it before it
// hands the revision to its caller. So whoever follows the DB and reports
// how far it has got never reports a revision whose changes the mirror
// does not show yet: the two cannot drift apart, because there is one
// stream and the mirror comes first in it.
//
// Each key's entry only moves forward (news older than the revision it
// holds is ignored), because the watch and this DB's commits report the
// same changes in either order. A deleted key keeps a tombstone with its
// revision until the watch is past it, so that an older change cannot
// bring it back.
type mirror struct {
	db      *DB
	buckets map[string]bool

	mu sync.RWMutex
	// ready: loaded and followed; until then, and again once the watch
	// that kept it has ended, transactions read the cluster.
	ready   bool
	entries map[string]mirrorEntry
	// watched is the revision up to which the load and the watch have
	// applied every change; tombs the keys deleted after it.
	watched int64
	tombs   []string
}

type mirrorEntry struct {
	value []byte // nil: deleted
	mod   int64
}

// Mirror keeps the named buckets in memory for the transactions that ask
// for it (kv.WithMirroredReads), from the next ViewRev on, which loads
// them at its snapshot, and for as long as a Watch follows from there,
// which applies each revision to them before it hands it over. It is for
// a DB that one caller follows that way (the store on etcd). A DB has one
// mirror: a second call changes nothing.
func (d *DB) Mirror(buckets ...string) {
	m := &mirror{db: d, buckets: map[string]bool{}}
	for _, b := range buckets {
		m.buckets[b] = true
	}
	d.mir.CompareAndSwap(nil, m)
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

// load reads every key the mirror keeps at revision rev and installs them.
func (m *mirror) load(ctx context.Context, rev int64) error {
	entries := map[string]mirrorEntry{}
	read := func(from, end string) error {
		for {
			opts := []clientv3.OpOption{clientv3.WithRev(rev), clientv3.WithLimit(pageSize),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
			if end != "" {
				opts = append(opts, clientv3.WithRange(end))
			}
			resp, err := m.db.cli.Get(ctx, from, opts...)
			if err != nil {
				return fmt.Errorf("etcdkv: load the mirror from %q at revision %d: %w", from, rev, err)
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
			return err
		}
		for _, kind := range []string{"B", "S", "V"} {
			if err := read(m.db.prefix+kind+"/"+b, ""); err != nil {
				return err
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries, m.tombs, m.watched, m.ready = entries, nil, rev, true
	return nil
}

// drop forgets the mirror's contents: nothing keeps it any more (the
// watch that did has ended), so transactions read the cluster until the
// next ViewRev loads it again.
func (m *mirror) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready, m.entries, m.tombs = false, nil, nil
}

// apply applies the events of one revision, rev, as the watch delivers
// them.
func (m *mirror) apply(rev int64, evs []*clientv3.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ready {
		return // not loaded: the next load reads past it
	}
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
	m.watched = max(m.watched, rev)
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
