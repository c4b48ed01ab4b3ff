package client

import (
	"context"
	"net/http"

	"rackd/api"
)

func sshKeysPath(user, suffix string) (string, error) {
	return segmentPath("/api/v1/users/", "user name", user, "/ssh-keys"+suffix)
}

// SSHKeys lists a user's SSH public keys, oldest first.
func (c *Client) SSHKeys(ctx context.Context, user string) ([]api.SSHKey, error) {
	var out []api.SSHKey
	p, err := sshKeysPath(user, "")
	if err != nil {
		return nil, err
	}
	_, err = c.call(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// AddSSHKey adds one public key (an authorized_keys line) to a user's keys.
func (c *Client) AddSSHKey(ctx context.Context, user, key string) (api.SSHKey, error) {
	var out api.SSHKey
	p, err := sshKeysPath(user, "")
	if err != nil {
		return out, err
	}
	_, err = c.call(ctx, http.MethodPost, p, nil, api.AddSSHKey{Key: key}, &out)
	return out, err
}

// DeleteSSHKey removes one of a user's keys and returns it as it was.
func (c *Client) DeleteSSHKey(ctx context.Context, user, id string) (api.SSHKey, error) {
	var out api.SSHKey
	p, err := sshKeysPath(user, "/")
	if err == nil {
		p, err = segmentPath(p, "ssh key id", id, "")
	}
	if err != nil {
		return out, err
	}
	_, err = c.call(ctx, http.MethodDelete, p, nil, nil, &out)
	return out, err
}
