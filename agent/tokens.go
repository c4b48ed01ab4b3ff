package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"rackd/api"
	"rackd/internal/atomicfile"
	"rackd/maasapi"
	"rackd/store"
)

// adminUser is the user rackd creates on a new database; the admin token
// file holds one of its tokens, named adminTokenName.
const (
	adminUser      = "admin"
	adminTokenName = "admin.token"
)

func tokenView(tk store.Token, secret string, who store.Actor, now time.Time) api.Token {
	v := api.Token{ID: tk.ID, User: tk.User, Name: tk.Name, Token: secret, Created: tk.Created,
		Expired: tk.Expired(now), Current: tk.ID == who.Token && who.Token != ""}
	if secret != "" {
		v.MAASKey = maasapi.Key(tk.User, tk.ID, secret)
	}
	if !tk.Expires.IsZero() {
		v.Expires = &tk.Expires
	}
	if !tk.LastUsed.IsZero() {
		v.LastUsed = &tk.LastUsed
	}
	return v
}

func (a *Agent) listTokens(w http.ResponseWriter, r *http.Request, who store.Actor) {
	q := r.URL.Query()
	var ts []store.Token
	var err error
	switch all := q.Get("all"); all {
	case "", "false":
		ts, err = a.store.Tokens(who, q.Get("user"))
	case "true":
		if q.Get("user") != "" {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, "all=true lists every user's tokens: it takes no user")
			return
		}
		ts, err = a.store.AllTokens(who)
	default:
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("all=%q: want true or false", all))
		return
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	now := time.Now()
	out := make([]api.Token, len(ts))
	for i, tk := range ts {
		out[i] = tokenView(tk, "", who, now)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) createToken(w http.ResponseWriter, r *http.Request, who store.Actor) {
	var req api.CreateToken
	if a.decodeBody(w, r, &req, false) != nil {
		return
	}
	now := time.Now()
	expires, err := api.ParseExpiry(req.Expires, now)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	tk, secret, err := a.store.CreateToken(r.Context(), who, store.NewTokenRequest{User: req.User, Name: req.Name, Expires: expires})
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("token created", "token", tk.ID, "user", tk.User, "name", tk.Name, "expires", tk.Expires, "by", who.Name)
	writeJSON(w, http.StatusCreated, tokenView(tk, secret, who, now))
}

func (a *Agent) revokeToken(w http.ResponseWriter, r *http.Request, who store.Actor) {
	tk, err := a.store.RevokeToken(r.Context(), who, r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.log.Info("token revoked", "token", tk.ID, "user", tk.User, "name", tk.Name, "by", who.Name)
	writeJSON(w, http.StatusOK, tokenView(tk, "", who, time.Now()))
}

func (a *Agent) rotateAdminToken(w http.ResponseWriter, r *http.Request, who store.Actor) {
	tk, revoked, err := a.RotateAdminToken(r.Context(), who)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.AdminTokenRotation{File: a.AdminTokenPath(),
		Token: tokenView(tk, "", who, time.Now()), Revoked: revoked})
}

// RotateAdminToken gives the admin user a new token, writes it to the admin
// token file and revokes the token the file held before (and any earlier
// rotation's), all of them at once. The new token is committed before the
// file is written: if writing the file fails, the old token is dead anyway
// (that is what was asked for) and running rackd serve --rotate-admin-token
// again, which needs no token, writes a new one.
func (a *Agent) RotateAdminToken(ctx context.Context, who store.Actor) (store.Token, []string, error) {
	path := a.AdminTokenPath()
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return store.Token{}, nil, fmt.Errorf("read the admin token file: %w", err)
	}
	secret := store.NewToken()
	tk, revoked, err := a.store.ReplaceTokens(ctx, who, adminUser, adminTokenName, secret, strings.TrimSpace(string(old)))
	if err != nil {
		return store.Token{}, nil, err
	}
	if err := atomicfile.WriteFile(path, []byte(secret+"\n"), atomicfile.Options{Perm: 0o600}); err != nil {
		a.log.Error("the admin token was rotated but its file could not be written: the old token no longer works; run rackd serve --rotate-admin-token to write a new one",
			"path", path, "err", err)
		return store.Token{}, nil, fmt.Errorf("write the admin token file: %w", err)
	}
	a.log.Info("admin token rotated", "path", path, "token", tk.ID, "revoked", revoked, "by", who.Name)
	return tk, revoked, nil
}
