package etcdkv

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"rackd/store/kv"
)

// ErrCompacted is returned by Watch when the revision it was to resume
// from has been compacted away: changes were lost, and whoever keeps state
// from the watch must load it again (ViewRev) and watch from there.
var ErrCompacted = kv.ErrCompacted

// Change is one record written or deleted by a commit.
type Change = kv.Change

// watchRetry bounds the pause before a broken watch starts again.
const watchRetry = time.Second

// Watch calls fn, in revision order, for every revision from fromRev on
// that changed anything under the engine's prefix, with the records it
// changed (none for a commit that touched only the engine's own keys), until
// ctx ends (it then returns ctx's error) or fn fails (its error is
// returned). A watch broken by the cluster (a member lost, the leader
// lost) starts again from the revision after the last one delivered, so no
// revision is missed or delivered twice; ErrCompacted says the revision to
// resume from is gone.
//
// Watch keeps the mirror (see Mirror) loaded by the ViewRev it follows:
// each revision is applied to the mirror before fn is called with it, so
// once fn has seen a revision, mirrored reads show it too. When Watch
// returns the mirror is dropped (nothing keeps it any more; transactions
// read the cluster) until the next ViewRev loads it. One Watch at a time
// follows a DB that has a mirror.
func (d *DB) Watch(ctx context.Context, fromRev int64, fn func(rev int64, changes []Change) error) error {
	if m := d.mir.Load(); m != nil {
		defer m.drop()
	}
	bprefix := d.prefix + "b/"
	for {
		// WithRequireLeader: a member cut off from the others ends the
		// watch (and it resumes on another) instead of going quiet.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := d.cli.Watch(wctx, d.prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev))
		err := func() error {
			for resp := range wch {
				if resp.CompactRevision != 0 {
					return fmt.Errorf("%w: resuming from revision %d, compacted up to %d", ErrCompacted, fromRev, resp.CompactRevision)
				}
				if err := resp.Err(); err != nil {
					return nil // broken: resume
				}
				evs := resp.Events
				for len(evs) > 0 {
					rev := evs[0].Kv.ModRevision
					n := 0
					for n < len(evs) && evs[n].Kv.ModRevision == rev {
						n++
					}
					if d.beforeApply != nil {
						d.beforeApply(rev)
					}
					if m := d.mir.Load(); m != nil {
						m.apply(rev, evs[:n])
					}
					var changes []Change
					for range n {
						ev := evs[0]
						evs = evs[1:]
						k := string(ev.Kv.Key)
						if !strings.HasPrefix(k, bprefix) {
							continue
						}
						bucket, key, _ := strings.Cut(k[len(bprefix):], "/")
						c := Change{Bucket: bucket, Key: []byte(key)}
						if ev.Type == mvccpb.PUT {
							c.Value = present(ev.Kv.Value)
							c.Created = ev.Kv.CreateRevision == ev.Kv.ModRevision
						}
						changes = append(changes, c)
					}
					if err := fn(rev, changes); err != nil {
						return err
					}
					fromRev = rev + 1
				}
			}
			return nil
		}()
		cancel()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-time.After(watchRetry):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// LastChange returns the revision of the last commit at or before rev
// that changed anything under the engine's prefix (0: none). Every commit
// that deletes a record also writes its bucket's version key, so the most
// recently modified key under the prefix, as of rev, is that commit's.
func (d *DB) LastChange(ctx context.Context, rev int64) (int64, error) {
	resp, err := d.cli.Get(ctx, d.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return 0, fmt.Errorf("etcdkv: the last change under %s at revision %d: %w", d.prefix, rev, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}
