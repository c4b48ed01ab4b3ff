package client

import (
	"context"
	"net/http"
	"net/url"

	"rackd/api"
)

// CreateToken makes an API token (POST /api/v1/tokens). The answer's Token,
// the secret, is shown only here.
func (c *Client) CreateToken(ctx context.Context, req api.CreateToken) (api.Token, error) {
	var tk api.Token
	_, err := c.call(ctx, http.MethodPost, "/api/v1/tokens", nil, req, &tk)
	return tk, err
}

// ListTokens lists the caller's tokens, or (admin) user's when user is not
// empty.
func (c *Client) ListTokens(ctx context.Context, user string) ([]api.Token, error) {
	var q url.Values
	if user != "" {
		q = url.Values{"user": {user}}
	}
	var ts []api.Token
	_, err := c.call(ctx, http.MethodGet, "/api/v1/tokens", q, nil, &ts)
	return ts, err
}

// ListAllTokens lists every user's tokens, by user then name (admin).
func (c *Client) ListAllTokens(ctx context.Context) ([]api.Token, error) {
	var ts []api.Token
	_, err := c.call(ctx, http.MethodGet, "/api/v1/tokens", url.Values{"all": {"true"}}, nil, &ts)
	return ts, err
}

// RevokeToken revokes the token with id and returns it as it was.
func (c *Client) RevokeToken(ctx context.Context, id string) (api.Token, error) {
	var tk api.Token
	p, err := segmentPath("/api/v1/tokens/", "token id", id, "")
	if err != nil {
		return tk, err
	}
	_, err = c.call(ctx, http.MethodDelete, p, nil, nil, &tk)
	return tk, err
}

// RotateAdminToken has the server write a new admin token file and revoke
// the old admin token (admin).
func (c *Client) RotateAdminToken(ctx context.Context) (api.AdminTokenRotation, error) {
	var r api.AdminTokenRotation
	_, err := c.call(ctx, http.MethodPost, "/api/v1/admin-token/rotate", nil, nil, &r)
	return r, err
}
