package agent

import (
	"context"
	"net/http"
	"path/filepath"

	"rackd/api"
	"rackd/store"
)

// SecretsKeyFile is, inside the state directory, the keyring that seals the
// machines' BMC passwords in the database (store/secrets.go). It lives
// outside the database so that a backup holds ciphertext only: restoring
// one needs this file too.
const SecretsKeyFile = "secrets.key"

// SecretsKeyPath is the keyring file's path.
func (a *Agent) SecretsKeyPath() string { return filepath.Join(a.cfg.StateDir, SecretsKeyFile) }

// rotateKeys makes a new secrets key and re-encrypts every secret under it.
func (a *Agent) rotateKeys(w http.ResponseWriter, r *http.Request, who store.Actor) {
	// A client that hangs up does not stop a rotation halfway (which would
	// be safe, but leave two keys in the file until the next one).
	rot, err := a.store.RotateSecrets(context.WithoutCancel(r.Context()), who)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("secrets key rotated", "key", rot.Key, "retired", rot.Retired, "resealed", rot.Resealed,
		"unreadable", rot.Unreadable, "by", who.Name)
	writeJSON(w, http.StatusOK, api.KeyRotation{File: a.SecretsKeyPath(), Key: rot.Key, Retired: rot.Retired,
		Resealed: rot.Resealed, Unreadable: rot.Unreadable})
}
