package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"rackd/api"
)

// ApplianceUpdateOptions are the query of an appliance update.
type ApplianceUpdateOptions struct {
	AllowDowngrade bool
	// NoReboot arms the update without rebooting the appliance.
	NoReboot bool
}

func (o ApplianceUpdateOptions) query() url.Values {
	q := url.Values{}
	if o.AllowDowngrade {
		q.Set("allow_downgrade", "1")
	}
	if o.NoReboot {
		q.Set("reboot", "0")
	}
	return q
}

// ApplianceUpdate streams a bundle of size bytes to the appliance (admin).
// Like Backup it has no timeout of its own (a slot image on a slow link
// takes what it takes): bound it with ctx. Wrap bundle to follow the
// upload's progress.
func (c *Client) ApplianceUpdate(ctx context.Context, bundle io.Reader, size int64, o ApplianceUpdateOptions) (api.ApplianceStatus, error) {
	resp, err := c.sendBody(ctx, c.stream, http.MethodPost, "/api/v1/appliance/update", o.query(), bundle, size, "application/octet-stream", "application/json")
	if err != nil {
		return api.ApplianceStatus{}, err
	}
	return c.decodeStatus(ctx, resp)
}

// ApplianceUpdateURL has the appliance fetch the bundle at bundleURL itself
// (admin); bound it with ctx, as the fetch and the write take a while.
func (c *Client) ApplianceUpdateURL(ctx context.Context, bundleURL string, o ApplianceUpdateOptions) (api.ApplianceStatus, error) {
	resp, err := c.send(ctx, c.stream, http.MethodPost, "/api/v1/appliance/update", o.query(), api.ApplianceUpdateRequest{URL: bundleURL}, "application/json")
	if err != nil {
		return api.ApplianceStatus{}, err
	}
	return c.decodeStatus(ctx, resp)
}

// ApplianceStatus returns the appliance's slots and last update (admin).
func (c *Client) ApplianceStatus(ctx context.Context) (api.ApplianceStatus, error) {
	var st api.ApplianceStatus
	_, err := c.call(ctx, http.MethodGet, "/api/v1/appliance/status", nil, nil, &st)
	return st, err
}

// ApplianceReset requests a factory reset at the next boot and, unless
// noReboot, reboots the appliance (admin).
func (c *Client) ApplianceReset(ctx context.Context, noReboot bool) (api.ApplianceStatus, error) {
	var st api.ApplianceStatus
	q := url.Values{}
	if noReboot {
		q.Set("reboot", "0")
	}
	_, err := c.call(ctx, http.MethodPost, "/api/v1/appliance/reset", q, api.ApplianceResetRequest{Confirm: true}, &st)
	return st, err
}

// decodeStatus reads the appliance status an update answers with.
func (c *Client) decodeStatus(ctx context.Context, resp *http.Response) (api.ApplianceStatus, error) {
	var st api.ApplianceStatus
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return st, c.transportErr(ctx, err)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("appliance update: unexpected answer from %s (is this rackd?): %w", c.base, err)
	}
	if dst, ok := ctx.Value(rawKey{}).(*json.RawMessage); ok && dst != nil {
		*dst = append((*dst)[:0], body...)
	}
	return st, nil
}
