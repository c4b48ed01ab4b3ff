package etcdkv

import "context"

// MirrorGated is Mirror whose watch applies a response only once a value
// is sent on gate: a test holds the mirror behind the cluster with it.
func (d *DB) MirrorGated(ctx context.Context, gate chan struct{}, buckets ...string) error {
	return d.mirror(ctx, gate, buckets)
}
