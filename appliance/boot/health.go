package boot

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// HealthURL is rackd's health endpoint on the loopback, at the port of its
// listen address.
func HealthURL(port int) string { return fmt.Sprintf("http://127.0.0.1:%d/healthz", port) }

// Check is one GET of the health URL: nil on 200, else what was wrong
// (the 503's body says which part of rackd is not ready).
func Check(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	// rackd's answer is JSON whose status says, in words, what is not
	// ready ("not ready: DHCP interface eth1 not bound"); anything else
	// is quoted as it is.
	var h struct {
		Status string `json:"status"`
	}
	why := strings.Join(strings.Fields(string(body)), " ")
	if json.Unmarshal(body, &h) == nil && h.Status != "" {
		why = h.Status
	}
	return fmt.Errorf("/healthz: %d %s", resp.StatusCode, why)
}

// WaitHealthy polls url every poll until it answers 200 or window has
// passed since start. It returns nil once healthy, else the last failure.
func WaitHealthy(ctx context.Context, c *http.Client, url string, start time.Time, window, poll time.Duration) error {
	deadline := start.Add(window)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	last := fmt.Errorf("/healthz: no answer within %s", window)
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, min(5*time.Second, poll+time.Second))
		err := Check(attempt, c, url)
		cancelAttempt()
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			last = err
		}
		if err := sleepCtx(ctx, poll); err != nil {
			return fmt.Errorf("not healthy within %s: %w", window, last)
		}
	}
}
