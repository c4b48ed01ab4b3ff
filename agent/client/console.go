package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"rackd/api"
)

// ConsoleUpgrade is the protocol of the console route's connection upgrade.
const ConsoleUpgrade = "rackd-console"

// Console attaches to a machine's serial console (GET
// /api/v1/machines/{id}/console, an HTTP/1.1 upgrade). What the machine
// prints is read from the returned connection; with write, what is written
// to it is typed on the console (without, it is ignored). Closing it
// detaches. A console held by someone else is an *APIError with code
// api.CodeConsoleBusy that names them.
func (c *Client) Console(ctx context.Context, idOrName string, write bool) (io.ReadWriteCloser, error) {
	p, err := idPath("/api/v1/machines/", idOrName, "/console")
	if err != nil {
		return nil, err
	}
	u := c.base + p
	if write {
		u += "?write=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("bad rackd URL %q: %w", c.base, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", ConsoleUpgrade)
	req.Header.Set("User-Agent", c.ua)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return nil, c.transportErr(ctx, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if resp.StatusCode < 300 {
			return nil, fmt.Errorf("console of %s: rackd at %s answered %d, not a connection upgrade (a proxy in the way?)", idOrName, c.base, resp.StatusCode)
		}
		return nil, readAPIError(resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("console of %s: the upgraded connection is not writable", idOrName)
	}
	return rwc, nil
}

// ConsoleLog lists the boots kept in a machine's console log.
func (c *Client) ConsoleLog(ctx context.Context, idOrName string) ([]api.ConsoleBoot, error) {
	p, err := idPath("/api/v1/machines/", idOrName, "/console-log")
	if err != nil {
		return nil, err
	}
	var out []api.ConsoleBoot
	_, err = c.call(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// ConsoleBoot writes one boot's recorded console output to w (boot 0: the
// newest) and returns its number.
func (c *Client) ConsoleBoot(ctx context.Context, idOrName string, boot int, w io.Writer) (int, error) {
	which := "latest"
	if boot > 0 {
		which = strconv.Itoa(boot)
	}
	p, err := idPath("/api/v1/machines/", idOrName, "/console-log/"+which)
	if err != nil {
		return 0, err
	}
	resp, err := c.send(ctx, c.api, http.MethodGet, p, nil, nil, "application/octet-stream")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, _ := strconv.Atoi(resp.Header.Get("X-Rackd-Boot"))
	if _, err := io.Copy(w, io.LimitReader(resp.Body, maxBody)); err != nil {
		return n, c.transportErr(ctx, err)
	}
	return n, nil
}
