package enlist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Backoff is the retry policy while rackd is unreachable or busy.
type Backoff struct {
	// Initial is the first wait; each failure doubles it up to Max.
	Initial, Max time.Duration
	// Attempt bounds one request (connect, send, answer).
	Attempt time.Duration
	// Tries bounds the attempts of one call; 0 means retry until the
	// context ends (a real machine has nothing better to do).
	Tries int
}

// DefaultBackoff suits a rack: a few seconds between tries, never more than
// half a minute.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 30 * time.Second, Attempt: 15 * time.Second}

// wait returns the pause before attempt n (1-based) with ±50 % jitter, so
// that a rack of machines powered on together does not retry in step.
func (b Backoff) wait(n int, rnd func() float64) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return time.Duration(float64(d) * (0.5 + rnd()))
}

// Client calls rackd's metadata endpoints.
type Client struct {
	// Base is rackd's URL, e.g. http://10.0.0.1:5240.
	Base *url.URL
	// HTTP is the client used; nil means a plain one (timeouts come from
	// Backoff.Attempt).
	HTTP    *http.Client
	Backoff Backoff
	// Progress, when set, is told about each failed attempt before the
	// wait.
	Progress func(msg string)
	// Sleep waits between attempts; nil means a timer (tests pass a fake
	// clock).
	Sleep func(context.Context, time.Duration) error
	// rnd is the jitter's source, a seam for tests.
	rnd func() float64
}

// PermanentError is a refusal that retrying cannot change (a 4xx other than
// 429): the request itself is wrong.
type PermanentError struct {
	Status int
	Code   string
	Msg    string
}

func (e *PermanentError) Error() string {
	return fmt.Sprintf("rackd refused the request (%d %s): %s", e.Status, e.Code, e.Msg)
}

// retryAfterError is a transient failure with the server's own idea of when
// to come back.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// WhoAmI asks rackd whether a machine with these MACs is known.
func (c *Client) WhoAmI(ctx context.Context, macs []string) (WhoAmI, error) {
	q := url.Values{"mac": macs}
	var out WhoAmI
	err := c.retry(ctx, "whoami", func(ctx context.Context) error {
		status, body, err := c.do(ctx, http.MethodGet, PathWhoAmI+"?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return refusal(status, body)
		}
		if err := json.Unmarshal(body, &out); err != nil || !out.Action.Valid() {
			return fmt.Errorf("whoami: unexpected answer %q", clip(string(body)))
		}
		return nil
	})
	return out, err
}

// Enlist sends the inventory. A machine rackd already knows is not an
// error: known reports it, with the action rackd wants.
func (c *Client) Enlist(ctx context.Context, inv Inventory) (res Enlisted, known bool, err error) {
	data, err := json.Marshal(inv)
	if err != nil {
		return Enlisted{}, false, fmt.Errorf("encode inventory: %w", err)
	}
	err = c.retry(ctx, "enlist", func(ctx context.Context) error {
		status, body, err := c.do(ctx, http.MethodPost, PathEnlist, data)
		if err != nil {
			return err
		}
		switch status {
		case http.StatusCreated:
			if err := json.Unmarshal(body, &res); err != nil || !res.Action.Valid() {
				return fmt.Errorf("enlist: unexpected answer %q", clip(string(body)))
			}
			return nil
		case http.StatusConflict:
			var r Refusal
			if json.Unmarshal(body, &r) == nil && r.Code == CodeAlreadyKnown && r.Action.Valid() {
				res, known = Enlisted{Action: r.Action}, true
				return nil
			}
		}
		return refusal(status, body)
	})
	return res, known, err
}

// MaxSeed bounds the seed the client accepts: a FAT image of a few MiB
// holds the largest user-data rackd takes (1 MiB) many times over.
const MaxSeed = 16 << 20

// ErrNoSeed is rackd's answer that the deployment has no seed (404): the
// image is deployed without one.
var ErrNoSeed = errors.New("rackd has no seed for this deployment")

// Seed fetches the deployment's NoCloud seed (GET /metadata/v1/seed with
// the phase credential as a Bearer token): the CIDATA file system image
// to write to the disk, at most MaxSeed bytes. A 404 is ErrNoSeed.
func (c *Client) Seed(ctx context.Context, token string) ([]byte, error) {
	var seed []byte
	err := c.retry(ctx, "seed", func(ctx context.Context) error {
		status, body, err := c.doLimit(ctx, http.MethodGet, PathSeed, token, nil, MaxSeed+1)
		if err != nil {
			return err
		}
		switch {
		case status == http.StatusNotFound:
			return ErrNoSeed
		case status != http.StatusOK:
			return refusal(status, body)
		case len(body) == 0:
			return &PermanentError{Status: status, Msg: "the seed is empty"}
		case len(body) > MaxSeed:
			return &PermanentError{Status: status, Msg: fmt.Sprintf("the seed is larger than %d bytes", MaxSeed)}
		}
		seed = body
		return nil
	})
	return seed, err
}

// refusal classifies a non-success answer: 429 and 5xx are worth another
// try, other statuses are permanent.
func refusal(status int, body []byte) error {
	var r Refusal
	if json.Unmarshal(body, &r) != nil || r.Error == "" {
		r.Error = strings.TrimSpace(clip(string(body)))
	}
	if status == http.StatusTooManyRequests || status >= 500 {
		return fmt.Errorf("rackd answered %d %s: %s", status, r.Code, r.Error)
	}
	return &PermanentError{Status: status, Code: r.Code, Msg: r.Error}
}

// do sends one request bounded by Backoff.Attempt and reads the answer (at
// most 1 MiB).
func (c *Client) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return c.doAuth(ctx, method, path, "", body)
}

// doAuth is do with a Bearer token (none when empty).
func (c *Client) doAuth(ctx context.Context, method, path, token string, body []byte) (int, []byte, error) {
	return c.doLimit(ctx, method, path, token, body, 1<<20)
}

// doLimit is doAuth reading at most limit bytes of the answer.
func (c *Client) doLimit(ctx context.Context, method, path, token string, body []byte, limit int64) (int, []byte, error) {
	if c.Base == nil {
		return 0, nil, &PermanentError{Msg: "no rackd URL"}
	}
	attempt := c.Backoff.Attempt
	if attempt <= 0 {
		attempt = DefaultBackoff.Attempt
	}
	ctx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	u := strings.TrimSuffix(c.Base.String(), "/") + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, &PermanentError{Msg: err.Error()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			return 0, nil, &retryAfterError{err: refusal(resp.StatusCode, data), after: time.Duration(s) * time.Second}
		}
	}
	return resp.StatusCode, data, nil
}

// retry runs fn until it succeeds, fails permanently, runs out of tries or
// ctx ends, waiting with jittered exponential backoff in between.
func (c *Client) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	sleep, rnd := c.Sleep, c.rnd
	if sleep == nil {
		sleep = sleepCtx
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	b := c.Backoff
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max < b.Initial {
		b.Max = max(b.Initial, DefaultBackoff.Max)
	}
	for n := 1; ; n++ {
		err := fn(ctx)
		var perm *PermanentError
		if err == nil || errors.As(err, &perm) || errors.Is(err, ErrNoSeed) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		if b.Tries > 0 && n >= b.Tries {
			return fmt.Errorf("%s: giving up after %d attempts: %w", what, n, err)
		}
		wait := b.wait(n, rnd)
		var ra *retryAfterError
		if errors.As(err, &ra) {
			wait = max(wait, ra.after)
		}
		if c.Progress != nil {
			c.Progress(fmt.Sprintf("%s attempt %d failed: %v; retrying in %s", what, n, err, wait.Round(100*time.Millisecond)))
		}
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, serr, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
