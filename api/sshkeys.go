package api

import "time"

// SSHKey is one of a user's SSH public keys.
type SSHKey struct {
	ID   string `json:"id"`
	User string `json:"user"`
	// Type is the key's algorithm (ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa...).
	Type string `json:"type"`
	Bits int    `json:"bits"`
	// Key is the canonical authorized_keys line: type, base64, comment.
	Key string `json:"key"`
	// Fingerprint is the SHA-256 fingerprint as ssh-keygen -l prints it.
	Fingerprint string    `json:"fingerprint"`
	Comment     string    `json:"comment,omitempty"`
	Created     time.Time `json:"created"`
}

// AddSSHKey is the body of POST /api/v1/users/{name}/ssh-keys: one public
// key in authorized_keys form.
type AddSSHKey struct {
	Key string `json:"key"`
}
