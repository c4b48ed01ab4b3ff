package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"rackd/api"
)

// unreadBody fails the test that reads it.
type unreadBody struct{ t *testing.T }

func (u unreadBody) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, http.ErrBodyReadAfterClose
}

func (u unreadBody) Close() error { return nil }

// TestEveryBodyCapped: every route that takes a body has a cap, and a body
// that declares one byte more is answered 413 before any of it is read.
// Routes that read no body (GET) have none; the appliance update streams
// its bundle under a cap of its own.
func TestEveryBodyCapped(t *testing.T) {
	ta := startAgent(t)
	h := ta.Handler()
	param := regexp.MustCompile(`\{[a-z0-9]+\}`)
	for _, rt := range routes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		limit := ta.bodyCap(rt.pattern)
		switch {
		case method == http.MethodGet || method == http.MethodHead || rt.pattern == "POST /api/v1/appliance/update":
			if limit != 0 {
				t.Errorf("%s: a cap of %d for a body it does not read", rt.pattern, limit)
			}
			continue
		case limit <= 0:
			t.Errorf("%s: no cap on its body", rt.pattern)
			continue
		case limit > deployBodyLimit:
			t.Errorf("%s: a cap of %d, more than a deploy's", rt.pattern, limit)
		}
		path = strings.Replace(path, "{action}", "deploy", 1)
		path = param.ReplaceAllString(path, "x")
		t.Run(rt.pattern, func(t *testing.T) {
			req := httptest.NewRequest(method, path, nil)
			req.Body, req.ContentLength = unreadBody{t}, limit+1
			req.Header.Set("Authorization", "Bearer "+ta.admin)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var e api.Error
			json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != http.StatusRequestEntityTooLarge || e.Code != api.CodeBodyTooLarge {
				t.Fatalf("%d %s, want 413 %s", rec.Code, rec.Body, api.CodeBodyTooLarge)
			}
		})
	}
}
