package agent

import (
	"net/http"

	"rackd/api"
	"rackd/store"
)

func sshKeyView(k store.SSHKey) api.SSHKey {
	return api.SSHKey{ID: k.ID, User: k.User, Type: k.Type, Bits: k.Bits, Key: k.Key,
		Fingerprint: k.Fingerprint, Comment: k.Comment, Created: k.Created}
}

func (a *Agent) listSSHKeys(w http.ResponseWriter, r *http.Request, who store.Actor) {
	keys, err := a.store.SSHKeys(who, r.PathValue("name"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := make([]api.SSHKey, len(keys))
	for i, k := range keys {
		out[i] = sshKeyView(k)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) addSSHKey(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.AddSSHKey
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	k, err := a.store.AddSSHKey(r.Context(), who, r.PathValue("name"), req.Key)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("ssh key added", "user", k.User, "id", k.ID, "fingerprint", k.Fingerprint, "by", who.Name)
	writeJSON(w, http.StatusCreated, sshKeyView(k))
}

func (a *Agent) deleteSSHKey(w http.ResponseWriter, r *http.Request, who store.Actor) {
	k, err := a.store.DeleteSSHKey(r.Context(), who, r.PathValue("name"), r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("ssh key removed", "user", k.User, "id", k.ID, "fingerprint", k.Fingerprint, "by", who.Name)
	writeJSON(w, http.StatusOK, sshKeyView(k))
}
