package client

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"rackd/api"
)

// PowerActions are the actions RequestPower accepts.
var PowerActions = []string{"on", "off", "cycle", "query"}

// RequestPower queues a power action on a machine and returns the pending
// request (the server answered 202: it is durable, not done).
func (c *Client) RequestPower(ctx context.Context, idOrName string, req api.PowerAction) (api.PowerRequest, error) {
	var r api.PowerRequest
	p, err := idPath("/api/v1/machines/", idOrName, "/power")
	if err != nil {
		return r, err
	}
	_, err = c.call(ctx, http.MethodPost, p, nil, req, &r)
	return r, err
}

// PowerRequest returns a power request by id.
func (c *Client) PowerRequest(ctx context.Context, id string) (api.PowerRequest, error) {
	var r api.PowerRequest
	p, err := idPath("/api/v1/power/requests/", id, "")
	if err != nil {
		return r, err
	}
	_, err = c.call(ctx, http.MethodGet, p, nil, nil, &r)
	return r, err
}

// MachinePower returns a machine's desired and observed power and its open
// requests.
func (c *Client) MachinePower(ctx context.Context, idOrName string) (api.MachinePower, error) {
	var mp api.MachinePower
	p, err := idPath("/api/v1/machines/", idOrName, "/power")
	if err != nil {
		return mp, err
	}
	_, err = c.call(ctx, http.MethodGet, p, nil, nil, &mp)
	return mp, err
}

// PowerFinal reports whether a power request's state is final.
func PowerFinal(state string) bool {
	return state == "done" || state == "failed" || state == "superseded"
}

// WaitPower polls a power request every interval until it is final or ctx
// ends. A superseded request is followed to the request that stands for it,
// so the answer is the fate of what was asked.
func (c *Client) WaitPower(ctx context.Context, id string, interval time.Duration) (api.PowerRequest, error) {
	for range 1000 { // superseded chains are short; this only bounds a loop
		r, err := c.PowerRequest(ctx, id)
		if err != nil {
			return r, err
		}
		if r.State == "superseded" && r.SupersededBy != "" {
			id = r.SupersededBy
			continue
		}
		if PowerFinal(r.State) {
			return r, nil
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, fmt.Errorf("waiting for power request %s (still %s): %w", id, r.State, ctx.Err())
		case <-t.C:
		}
	}
	return api.PowerRequest{}, fmt.Errorf("power request %s: too many superseded hops", id)
}
