package etcdkv_test

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"rackd/store/kv"
	"rackd/store/kv/etcdkv"
)

// TestUnavailable: the forms in which a cluster that does not answer
// reaches the engine's callers are told from refusals and conflicts.
func TestUnavailable(t *testing.T) {
	for err, want := range map[error]bool{
		fmt.Errorf("commit: %w", context.DeadlineExceeded):                              true,
		fmt.Errorf("get: %w", status.Error(codes.Unknown, "context deadline exceeded")): true,
		fmt.Errorf("get: %w", status.Error(codes.Unavailable, "connection refused")):    true,
		fmt.Errorf("commit: %w", rpctypes.ErrNoLeader):                                  true,
		fmt.Errorf("commit: %w", rpctypes.ErrTimeout):                                   true,
		fmt.Errorf("get: %w", status.Error(codes.Unknown, "something else")):            false,
		etcdkv.ErrConflict:                    false,
		fmt.Errorf("%w: fence", kv.ErrFenced): false,
		fmt.Errorf("commit: %w", status.Error(codes.InvalidArgument, "too many operations")): false,
	} {
		if got := etcdkv.Unavailable(err); got != want {
			t.Errorf("Unavailable(%v) = %v, want %v", err, got, want)
		}
	}
}
