package webui

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"rackd/store"
)

// SessionCookie is the name of the session's cookie.
const SessionCookie = "rackd_session"

// loginCookie carries the login form's anti-forgery value (double submit:
// before a session exists there is no server-side token to compare with).
const loginCookie = "rackd_login"

// maxSessions bounds the sessions kept in memory; beyond it the oldest go.
const maxSessions = 10000

// session is one login. Sessions live in memory only: a restart of rackd
// logs everyone out.
type session struct {
	id    string
	token string // the API token it was opened with
	csrf  string
	// expires is min(the token's expiry, the session lifetime).
	expires time.Time
	created time.Time
	// actor is who the token authenticated as on the current request.
	actor   store.Actor
	flashes []flash
	// ended is closed when the session is dropped (a logout, its token
	// found dead, too many sessions): its live updates end.
	ended chan struct{}
}

type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func newSessions() *sessions { return &sessions{m: map[string]*session{}} }

// randomID is 32 random bytes, base64url.
func randomID() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (ss *sessions) open(token string, expires, now time.Time) *session {
	s := &session{id: randomID(), token: token, csrf: randomID(), expires: expires, created: now, ended: make(chan struct{})}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		var oldest *session
		for _, o := range ss.m {
			if !now.Before(o.expires) {
				ss.forget(o)
				continue
			}
			if oldest == nil || o.created.Before(oldest.created) {
				oldest = o
			}
		}
		if len(ss.m) >= maxSessions && oldest != nil {
			ss.forget(oldest)
		}
	}
	ss.m[s.id] = s
	return s
}

func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[id]
}

func (ss *sessions) drop(id string) {
	ss.mu.Lock()
	if s := ss.m[id]; s != nil {
		ss.forget(s)
	}
	ss.mu.Unlock()
}

// forget drops s; ss.mu is held.
func (ss *sessions) forget(s *session) {
	delete(ss.m, s.id)
	close(s.ended)
}

func (ss *sessions) addFlash(s *session, f flash) {
	ss.mu.Lock()
	if len(s.flashes) < 20 {
		s.flashes = append(s.flashes, f)
	}
	ss.mu.Unlock()
}

func (ss *sessions) takeFlashes(s *session) []flash {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f := s.flashes
	s.flashes = nil
	return f
}

// reqSession is a session as one request sees it: the shared record
// (whose fields but flashes never change) and who its token authenticated
// as on this request.
type reqSession struct {
	*session
	actor store.Actor
	// since is the hub's mark taken before the handler reads anything:
	// the page's live updates resume after it.
	since uint64
	// files are the form's uploads, by field name.
	files map[string][]byte
}

// authed runs h for a request with a live session whose token still
// authenticates: the token is checked on every request, so a revoked or
// expired token ends the session at once. Requests that change state must
// come from this origin and carry the session's CSRF token; their form is
// read (at most formBytes) before h runs.
func (u *UI) authed(h func(http.ResponseWriter, *http.Request, *reqSession)) http.Handler {
	return u.authedForm(formBytes, h)
}

// authedForm is authed for a form whose body may be up to limit bytes.
func (u *UI) authedForm(limit int64, h func(http.ResponseWriter, *http.Request, *reqSession)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := u.currentSession(r)
		if s == nil {
			u.toLogin(w, r)
			return
		}
		if !u.now().Before(s.expires) {
			u.endSession(w, r, s)
			return
		}
		actor, ok, err := u.opts.Authenticate(s.token)
		if err != nil {
			u.log.Error("webui: authenticate session", "err", err)
			u.renderStatus(w, r, nil, http.StatusServiceUnavailable, "Unavailable", "rackd could not check your session; retry.")
			return
		}
		if !ok {
			u.endSession(w, r, s)
			return
		}
		rs := &reqSession{session: s, actor: actor, since: u.hub.Mark()}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !sameOrigin(r) {
				u.renderStatus(w, r, rs, http.StatusForbidden, "Refused", "This request came from another site: refused.")
				return
			}
			// The form is read here, its anti-forgery value first, and
			// its share of the budget of bodies is given back before h
			// runs (h's own API requests read bodies too).
			files, err := u.readForm(w, r, limit, s.csrf)
			if errors.Is(err, errCSRF) {
				u.renderStatus(w, r, rs, http.StatusForbidden, "Refused", "The form's CSRF token is missing or wrong: reload the page and try again.")
				return
			}
			if err != nil {
				u.formError(w, r, rs, err)
				return
			}
			rs.files = files
		}
		h(w, r, rs)
	})
}

// sameOrigin refuses what a browser says came from another site: a
// Sec-Fetch-Site other than same-origin or none (typed, bookmarked), or an
// Origin whose host is not this one.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		ou, err := url.Parse(o)
		if err != nil || o == "null" || !strings.EqualFold(ou.Host, r.Host) {
			return false
		}
	}
	return true
}

func (u *UI) currentSession(r *http.Request) *session {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	return u.sessions.get(c.Value)
}

// endSession forgets the session and its cookie and sends the browser to
// the login page.
func (u *UI) endSession(w http.ResponseWriter, r *http.Request, s *session) {
	u.sessions.drop(s.id)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	u.toLogin(w, r)
}

// toLogin sends a page request to the login page (coming back to it after),
// and answers anything else 401.
func (u *UI) toLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path == "/events" || r.URL.Path == "/images/imports" {
		u.renderStatus(w, r, nil, http.StatusUnauthorized, "Logged out", "Your session has ended: log in again.")
		return
	}
	target := "/login"
	if next := r.URL.RequestURI(); next != "/" {
		target += "?next=" + url.QueryEscape(next)
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}
