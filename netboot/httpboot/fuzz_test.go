package httpboot

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzHandler sends requests with arbitrary decoded paths and raw queries
// (what net/http hands a handler after parsing, so including what a client
// cannot put on the wire unescaped) to a handler over a tree that sits
// beside a secret and holds symlinks to it. The secret is never served,
// nothing panics, and every answer is one of the handler's codes.
//
// Run: go test -run XXX -fuzz FuzzHandler ./netboot/httpboot/
func FuzzHandler(f *testing.F) {
	for _, s := range []struct{ path, query string }{
		{"/boot/images/kernel", ""},
		{"/boot/ipxe", "mac=" + mac},
		{"/boot/ipxe", "mac=../../secret"},
		{"/boot/ipxe", "mac=%2e%2e%2f%2e%2e%2fsecret"},
		{"/boot/ipxe", "mac=a&mac=b"},
		{"/boot/ipxe", "mac=%zz"},
		{"/boot/../secret", ""},
		{"/boot/../../etc/passwd", ""},
		{"/boot//etc/passwd", ""},
		{"/boot/escape", ""},
		{"/boot/images/escape-rel", ""},
		{"/boot/etc-link/passwd", ""},
		{"/boot/a\x00b", ""},
		{"/boot/" + strings.Repeat("x", 300), ""},
		{"/boot/", ""},
		{"/secret", ""},
	} {
		f.Add(s.path, s.query)
	}
	fx := newFixture(f)
	allowed := map[int]bool{}
	for _, c := range codes {
		allowed[c] = true
	}
	f.Fuzz(func(t *testing.T, path, query string) {
		req := &http.Request{
			Method:     http.MethodGet,
			URL:        &url.URL{Path: path, RawQuery: query},
			Header:     http.Header{},
			RemoteAddr: "192.0.2.1:1234",
		}
		req = req.WithContext(t.Context())
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, req)
		if !allowed[rec.Code] {
			t.Fatalf("%q ? %q: code %d", path, query, rec.Code)
		}
		if bytes.Contains(rec.Body.Bytes(), []byte("SECRET")) {
			t.Fatalf("%q ? %q served the secret outside the tree", path, query)
		}
	})
}

// FuzzName checks the query-form contract of Name on arbitrary URLs: a path
// outside Prefix is no name; otherwise the name is the path after "/boot",
// followed by "?mac=" and the value exactly when there is one mac.
//
// Run: go test -run XXX -fuzz FuzzName ./netboot/httpboot/
func FuzzName(f *testing.F) {
	f.Add("/boot/ipxe", "mac=52:54:00:12:34:56")
	f.Add("/boot/ipxe", "mac=a&mac=b")
	f.Add("/boot/x", "mac")
	f.Add("/boot/x", "%")
	f.Add("/bootx", "")
	f.Fuzz(func(t *testing.T, path, query string) {
		u := &url.URL{Path: path, RawQuery: query}
		name, ok, err := Name(u)
		if ok != strings.HasPrefix(path, Prefix) {
			t.Fatalf("%q: ok=%v", path, ok)
		}
		if !ok || err != nil {
			return
		}
		rest := strings.TrimPrefix(path, "/boot")
		q, _ := url.ParseQuery(query)
		want := rest
		if macs := q["mac"]; len(macs) == 1 {
			want += "?mac=" + macs[0]
		}
		if name != want {
			t.Fatalf("Name(%q ? %q) = %q, want %q", path, query, name, want)
		}
	})
}
