package client

import (
	"context"
	"net/http"

	"rackd/api"
)

// RotateKeys has the server make a new secrets key, re-encrypt every BMC
// secret under it and retire the old key (admin).
func (c *Client) RotateKeys(ctx context.Context) (api.KeyRotation, error) {
	var r api.KeyRotation
	_, err := c.call(ctx, http.MethodPost, "/api/v1/keys/rotate", nil, nil, &r)
	return r, err
}
