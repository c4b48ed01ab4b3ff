package client

import (
	"context"
	"net/http"
	"net/url"

	"rackd/api"
)

// JoinCluster asks the agent to add a new appliance to its cluster (admin,
// over the cluster's TLS listener: the answer carries the shared keys).
func (c *Client) JoinCluster(ctx context.Context, req api.ClusterJoin) (api.ClusterJoined, error) {
	var r api.ClusterJoined
	_, err := c.call(ctx, http.MethodPost, "/api/v1/cluster/members", nil, req, &r)
	return r, err
}

// RemoveClusterMember removes the etcd member named name (admin).
func (c *Client) RemoveClusterMember(ctx context.Context, name string) (api.ClusterMember, error) {
	var r api.ClusterMember
	_, err := c.call(ctx, http.MethodDelete, "/api/v1/cluster/members/"+url.PathEscape(name), nil, nil, &r)
	return r, err
}

// ClusterStatus returns the agents sharing the store, what each leads, and
// the etcd cluster's members and health (admin).
func (c *Client) ClusterStatus(ctx context.Context) (api.ClusterStatus, error) {
	var r api.ClusterStatus
	_, err := c.call(ctx, http.MethodGet, "/api/v1/cluster", nil, nil, &r)
	return r, err
}
