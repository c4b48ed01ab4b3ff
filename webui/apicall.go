package webui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"rackd/api"
)

// apiResult is an answer of the API handler.
type apiResult struct {
	Status int
	Body   []byte
}

// OK reports a 2xx answer.
func (a apiResult) OK() bool { return a.Status >= 200 && a.Status < 300 }

// Message is the API's own wording of a refusal (its error field), or the
// status when the body says nothing.
func (a apiResult) Message() string {
	var e api.Error
	if json.Unmarshal(a.Body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return fmt.Sprintf("the API answered %d %s", a.Status, http.StatusText(a.Status))
}

// Decode reads a 2xx answer's JSON into v.
func (a apiResult) Decode(v any) error {
	if !a.OK() {
		return errors.New(a.Message())
	}
	if err := json.Unmarshal(a.Body, v); err != nil {
		return fmt.Errorf("decode the API's answer: %w", err)
	}
	return nil
}

// recorder is a minimal http.ResponseWriter that keeps what the API
// handler answers.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// call serves one API request in process, as the session's user: the
// session's token is its bearer token, so the API decides exactly as it
// would for the CLI. body, when not nil, is sent as JSON.
func (u *UI) call(r *http.Request, s *reqSession, method, path string, body any) apiResult {
	var rd io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return apiResult{Status: http.StatusInternalServerError, Body: errorBody("encode request: " + err.Error())}
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, rd)
	if err != nil {
		return apiResult{Status: http.StatusBadRequest, Body: errorBody(err.Error())}
	}
	req.RemoteAddr = r.RemoteAddr
	req.Host = r.Host
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("User-Agent", "rackd-webui")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{h: http.Header{}}
	u.opts.API.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return apiResult{Status: rec.status, Body: rec.body.Bytes()}
}

func errorBody(msg string) []byte {
	b, _ := json.Marshal(api.Error{Error: msg, Code: api.CodeBadRequest})
	return b
}

// get decodes the API's answer to GET path into v; on refusal it returns
// the API's message.
func (u *UI) get(r *http.Request, s *reqSession, path string, v any) error {
	return u.call(r, s, http.MethodGet, path, nil).Decode(v)
}

// seg escapes one path segment of an API path.
func seg(s string) string { return url.PathEscape(s) }

// done ends a form POST: the API's refusal, or the notice, is flashed and
// the browser goes back to the page (Post/Redirect/Get). A script's request
// (it sends its CSRF token as X-CSRF-Token, never a form field) gets the
// API's refusal itself, status and JSON, so that it can tell a 403 from a
// page.
func (u *UI) done(w http.ResponseWriter, r *http.Request, s *reqSession, res apiResult, back, notice string) {
	if !res.OK() && r.Header.Get("X-CSRF-Token") != "" {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(res.Status)
		w.Write(res.Body)
		return
	}
	if !res.OK() {
		u.sessions.addFlash(s.session, flash{Error: true, Text: res.Message()})
	} else if notice != "" {
		u.sessions.addFlash(s.session, flash{Text: notice})
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}
