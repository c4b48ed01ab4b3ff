package etcdkv

import (
	"context"
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Unavailable reports whether err is the cluster not answering, for want
// of a quorum or of a reachable member: the call ran out of time, etcd gave
// up on the proposal (its own timeout, no leader, a leader lost), or no
// member could be reached. Such a call may be tried again once the cluster
// is back; it is no refusal.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, e := range []error{rpctypes.ErrTimeout, rpctypes.ErrNoLeader, rpctypes.ErrLeaderChanged,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrNotCapable} {
		if errors.Is(err, e) {
			return true
		}
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		case codes.Unknown:
			// A deadline met while the client waited for a member
			// comes back so.
			return strings.Contains(s.Message(), context.DeadlineExceeded.Error())
		}
	}
	return false
}
