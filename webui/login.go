package webui

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"rackd/api"
)

type loginData struct {
	Next  string
	Token string // the login form's anti-forgery value
	Error string
}

// safeNext keeps a post-login destination on this site. It reads next as
// a browser reads a Location (the URL parser first strips leading and
// trailing C0 controls and spaces and removes every tab, CR and LF: "/\t/x"
// is "//x", another host) and accepts only what is then a path of this
// server: no scheme, no host, one leading "/" not followed by another "/",
// no "\" anywhere (a browser reads it as "/" in an http URL, and the path
// cleaning of http.Redirect may bring one to the front), no other control
// character. It answers the normalised path, which is what a browser would
// follow; anything else is "/".
func safeNext(next string) string {
	n := browserNormal(next)
	if !strings.HasPrefix(n, "/") || strings.HasPrefix(n, "//") || strings.ContainsRune(n, '\\') {
		return "/"
	}
	u, err := url.Parse(n) // refuses any control character left
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return "/"
	}
	return n
}

// browserNormal is what the WHATWG URL parser does to its input before it
// parses it: leading and trailing C0 controls and spaces stripped, every
// ASCII tab and newline removed.
func browserNormal(s string) string {
	for s != "" && s[0] <= ' ' {
		s = s[1:]
	}
	for s != "" && s[len(s)-1] <= ' ' {
		s = s[:len(s)-1]
	}
	return tabNewline.Replace(s)
}

var tabNewline = strings.NewReplacer("\t", "", "\n", "", "\r", "")

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	if s := u.currentSession(r); s != nil {
		if _, ok, err := u.opts.Authenticate(s.token); err == nil && ok && u.now().Before(s.expires) {
			http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
			return
		}
	}
	u.showLogin(w, r, http.StatusOK, "")
}

func (u *UI) showLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	tok := randomID()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: tok, Path: "/login", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: 3600})
	u.render(w, r, nil, status, "login", "Log in", "", loginData{Next: safeNext(r.FormValue("next")), Token: tok, Error: msg})
}

// login opens a session for a valid API token.
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	// The login form's anti-forgery value is a cookie's (double submit):
	// checked against the body's first field before the rest is read.
	c, err := r.Cookie(loginCookie)
	if err == nil && sameOrigin(r) {
		_, err = u.readForm(w, r, loginFormBytes, c.Value)
	} else {
		err = errCSRF
	}
	if errors.Is(err, errCSRF) {
		u.renderStatus(w, r, nil, http.StatusForbidden, "Refused",
			"The login form's CSRF token is missing or wrong: open the login page again.")
		return
	}
	if err != nil {
		u.formError(w, r, nil, err)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	actor, ok, err := u.opts.Authenticate(token)
	if err != nil {
		u.log.Error("webui: login", "err", err)
		u.showLogin(w, r, http.StatusServiceUnavailable, "rackd could not check the token; retry.")
		return
	}
	if !ok {
		u.log.Info("webui: login refused", "remote", r.RemoteAddr)
		u.showLogin(w, r, http.StatusUnauthorized, "That token is not valid (unknown, revoked or expired).")
		return
	}
	now := u.now()
	expires := now.Add(u.opts.SessionLifetime)
	// The token's own expiry, as the API shows it to its holder.
	var toks []api.Token
	probe := &reqSession{session: &session{token: token}, actor: actor}
	if err := u.get(r, probe, "/api/v1/tokens", &toks); err == nil {
		for _, t := range toks {
			if t.Current && t.Expires != nil && t.Expires.Before(expires) {
				expires = *t.Expires
			}
		}
	}
	s := u.sessions.open(token, expires, now)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: s.id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, Expires: expires.UTC().Truncate(time.Second)})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/login", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	u.log.Info("webui: login", "user", actor.Name, "remote", r.RemoteAddr)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// logout ends the session (the token itself stays valid: it is the API's).
func (u *UI) logout(w http.ResponseWriter, r *http.Request, s *reqSession) {
	u.sessions.drop(s.id)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
