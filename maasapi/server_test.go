package maasapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

// storeOps calls the store's operations directly: the agent's do the same
// plus metrics and the releaser, which these tests do not look at.
type storeOps struct{ st *store.Store }

func (o storeOps) Create(ctx context.Context, who store.Actor, nm store.NewMachine) (store.Machine, error) {
	return o.st.CreateMachine(ctx, who, nm)
}

func (o storeOps) Update(ctx context.Context, who store.Actor, machine string, p store.MachinePatch) (store.Machine, error) {
	return o.st.UpdateMachine(ctx, who, machine, p)
}

func (o storeOps) Delete(ctx context.Context, who store.Actor, req store.DeleteRequest) (store.Machine, error) {
	return o.st.DeleteMachine(ctx, who, req)
}

func (o storeOps) Allocate(ctx context.Context, who store.Actor, req store.AllocateRequest) (store.AllocateResult, error) {
	return o.st.Allocate(ctx, who, req)
}

func (o storeOps) Release(ctx context.Context, who store.Actor, machine, reason string, erase bool) (store.Machine, error) {
	return o.st.StartRelease(ctx, who, machine, reason, erase)
}

func (o storeOps) Deploy(ctx context.Context, who store.Actor, req store.DeployRequest) (store.Machine, error) {
	return o.st.Deploy(ctx, who, req)
}

func (o storeOps) Transition(ctx context.Context, who store.Actor, req store.TransitionRequest) (store.Machine, error) {
	return o.st.Transition(ctx, who, req)
}

func (o storeOps) RequestPower(ctx context.Context, who store.Actor, machine string, action store.PowerAction, reason string) (store.PowerRequest, error) {
	return o.st.RequestPower(ctx, who, machine, action, reason)
}

func (o storeOps) Abort(ctx context.Context, who store.Actor, machine, reason string) (store.Machine, error) {
	return o.st.Abort(ctx, who, machine, reason)
}

// testServer is a Server over a fresh store, served by httptest.
type testServer struct {
	st  *store.Store
	srv *Server
	url string // the server's root; the API is at url + Prefix
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	st := storetest.New(t)
	srv, err := New(st, storeOps{st}, Options{Version: "test", MaxBodyBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &testServer{st: st, srv: srv, url: hs.URL}
}

// key makes a user (admin or not) and returns its MAAS API key and the
// token's id.
func (ts *testServer) key(t *testing.T, user string, admin bool) (string, string) {
	t.Helper()
	_, secret, err := ts.st.CreateUser(context.Background(), store.System, user, admin, "")
	if err != nil {
		t.Fatal(err)
	}
	toks, err := ts.st.Tokens(store.System, user)
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens of %s: %v %v", user, toks, err)
	}
	return Key(user, toks[0].ID, secret), toks[0].ID
}

// oauthHeader signs as gomaasapi does: PLAINTEXT, every value
// url.QueryEscape'd, realm empty.
func oauthHeader(key string) string {
	parts := strings.SplitN(key, ":", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	kv := [][2]string{{"realm", ""}, {"oauth_consumer_key", parts[0]}, {"oauth_token", parts[1]},
		{"oauth_signature_method", "PLAINTEXT"}, {"oauth_signature", "&" + parts[2]},
		{"oauth_timestamp", "1700000000"}, {"oauth_nonce", "abc"}, {"oauth_version", "1.0"}}
	var out []string
	for _, p := range kv {
		out = append(out, fmt.Sprintf(`%s="%s"`, p[0], url.QueryEscape(p[1])))
	}
	return "OAuth " + strings.Join(out, ", ")
}

// do sends a request with the given Authorization header ("" for none) and
// body (url.Values as urlencoded, []byte as is with ctype).
func (ts *testServer) do(t *testing.T, auth, method, path string, body any, ctype string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case url.Values:
		rd, ctype = strings.NewReader(b.Encode()), "application/x-www-form-urlencoded"
	case []byte:
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, ts.url+Prefix+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestAuthentication(t *testing.T) {
	ts := newTestServer(t)
	key, id := ts.key(t, "alice", false)
	parts := strings.Split(key, ":")
	bobKey, _ := ts.key(t, "bob", false)
	bobSecret := strings.Split(bobKey, ":")[2]
	cases := []struct {
		name, auth, path string
		want             int
		body             string // a word the answer must contain
	}{
		{"good key", oauthHeader(key), "users/?op=whoami", 200, `"username":"alice"`},
		{"no trailing slash", oauthHeader(key), "users?op=whoami", 200, `"username":"alice"`},
		{"python's encoding", "OAuth oauth_nonce=\"1\", oauth_timestamp=\"2\", oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", " +
			"oauth_consumer_key=\"alice\", oauth_token=\"" + id + "\", oauth_signature=\"%26" + parts[2] + "\"", "users/?op=whoami", 200, "alice"},
		{"scheme in lower case, no realm", strings.Replace(strings.Replace(oauthHeader(key), "OAuth", "oauth", 1), `realm="", `, "", 1), "users/?op=whoami", 200, "alice"},
		{"no header", "", "users/?op=whoami", 401, "Authorization required"},
		{"bearer", "Bearer " + parts[2], "users/?op=whoami", 401, "wants OAuth"},
		{"wrong secret", oauthHeader(parts[0] + ":" + parts[1] + ":nope"), "users/?op=whoami", 401, "invalid API key"},
		{"another user's secret", oauthHeader(parts[0] + ":" + parts[1] + ":" + bobSecret), "users/?op=whoami", 401, "invalid API key"},
		{"wrong token id", oauthHeader(parts[0] + ":t-zzzzzzzz:" + parts[2]), "users/?op=whoami", 401, "invalid API key"},
		{"wrong consumer", oauthHeader("bob:" + parts[1] + ":" + parts[2]), "users/?op=whoami", 401, "invalid API key"},
		{"missing consumer key", oauthHeader(":" + parts[1] + ":" + parts[2]), "users/?op=whoami", 401, "oauth_consumer_key is missing"},
		{"missing token", oauthHeader(parts[0] + "::" + parts[2]), "users/?op=whoami", 401, "oauth_token is missing"},
		{"HMAC", strings.Replace(oauthHeader(key), "PLAINTEXT", "HMAC-SHA1", 1), "users/?op=whoami", 401, "HMAC-SHA1"},
		{"signature without &", strings.Replace(oauthHeader(key), "%26", "", 1), "users/?op=whoami", 401, "oauth_signature"},
		{"unquoted", "OAuth oauth_consumer_key=alice", "users/?op=whoami", 401, "quoted"},
		{"twice", oauthHeader(key) + `, oauth_token="x"`, "users/?op=whoami", 401, "twice"},
		{"unclosed quote", `OAuth oauth_token="abc`, "users/?op=whoami", 401, "not closed"},
		{"bad escape", `OAuth oauth_token="%zz"`, "users/?op=whoami", 401, "percent-encoded"},
		{"version anonymous", "", "version/", 200, "networks-management"},
		{"describe anonymous", "", "describe/", 200, "VersionHandler"},
		{"version with a bad key still answers", oauthHeader(parts[0] + ":" + parts[1] + ":nope"), "version/", 200, "capabilities"},
		{"unknown op", oauthHeader(key), "users/?op=frobnicate", 501, "op=frobnicate"},
		{"unknown op, anonymous", "", "version/?op=frobnicate", 501, "op=frobnicate"},
		{"unknown path", oauthHeader(key), "nonesuch/", 404, "Unknown API endpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, hdr := ts.do(t, c.auth, "GET", c.path, nil, "")
			if status != c.want || !strings.Contains(body, c.body) {
				t.Fatalf("got %d %q, want %d with %q", status, body, c.want, c.body)
			}
			if status == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Errorf("a 401 without WWW-Authenticate")
			}
		})
	}

	// Revoking the token kills the key at once.
	if _, err := ts.st.RevokeToken(context.Background(), store.System, id); err != nil {
		t.Fatal(err)
	}
	if status, body, _ := ts.do(t, oauthHeader(key), "GET", "users/?op=whoami", nil, ""); status != 401 {
		t.Fatalf("revoked key: got %d %q, want 401", status, body)
	}
}

func TestVersion(t *testing.T) {
	ts := newTestServer(t)
	status, body, hdr := ts.do(t, "", "GET", "version/", nil, "")
	if status != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %s %q", status, hdr.Get("Content-Type"), body)
	}
	var v struct {
		Version, Subversion string
		Capabilities        []string
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version == "" || v.Subversion != "rackd test" {
		t.Errorf("version %+v", v)
	}
	for _, c := range []string{"networks-management", "static-ipaddresses", "network-deployment-ubuntu", "storage-deployment-ubuntu"} {
		found := false
		for _, h := range v.Capabilities {
			found = found || h == c
		}
		if !found {
			t.Errorf("capability %s missing from %v", c, v.Capabilities)
		}
	}
}

func TestRouteTable(t *testing.T) {
	// New refuses a table that breaks its rules; the real one passes.
	if _, err := New(storetest.New(t), nil, Options{}); err != nil {
		t.Fatal(err)
	}
	bad := []Route{
		{Method: "PATCH", Path: "x/", Handler: "XHandler", Handle: version, Doc: "x"},
		{Method: "GET", Path: "/x/", Handler: "XHandler", Handle: version, Doc: "x"},
		{Method: "GET", Path: "x", Handler: "XHandler", Handle: version, Doc: "x"},
		{Method: "POST", Path: "xs/", Op: "a", Handler: "XHandler", Handle: version, Doc: "x", Anonymous: true},
		{Method: "GET", Path: "x/", Handler: "X", Handle: version, Doc: "x"},
		{Method: "GET", Path: "x/", Handler: "XHandler", Doc: "x"},
		{Method: "POST", Path: "x/{id}/", Handler: "XHandler", Handle: version, Doc: "x"},
	}
	for _, rt := range bad {
		if err := rt.check(); err == nil {
			t.Errorf("route %+v passes the check", rt)
		}
	}
}

func TestDecodeForm(t *testing.T) {
	mp := func(fields map[string]string, files map[string]string) ([]byte, string) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		for k, v := range fields {
			w.WriteField(k, v)
		}
		for k, v := range files {
			fw, _ := w.CreateFormFile(k, k+".bin")
			fw.Write([]byte(v))
		}
		w.Close()
		return b.Bytes(), w.FormDataContentType()
	}
	body, ctype := mp(map[string]string{"name": "node1", "agent_name": "u"}, map[string]string{"file": "content"})
	f, err := decodeForm(ctype, bytes.NewReader(body), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.cleanup()
	if f.values.Get("name") != "node1" || f.values.Get("agent_name") != "u" || len(f.files["file"]) != 1 {
		t.Fatalf("multipart: %v %v", f.values, f.files)
	}
	f, err = decodeForm("application/x-www-form-urlencoded", strings.NewReader("tags=a&tags=b&mem=1024"), 1<<20)
	if err != nil || len(f.values["tags"]) != 2 || f.values.Get("mem") != "1024" {
		t.Fatalf("urlencoded: %v %v", f.values, err)
	}
	big := strings.Repeat("x", 2000)
	bigMP, bigCtype := mp(map[string]string{"user_data": big}, nil)
	many := strings.Repeat("a=1&", maxFormValues+1)
	for _, c := range []struct {
		name, ctype string
		body        []byte
		limit       int64
		want        string
	}{
		{"urlencoded too large", "application/x-www-form-urlencoded", []byte("a=" + big), 1000, "larger than 1000 bytes"},
		{"multipart too large", bigCtype, bigMP, 1000, "larger than 1000 bytes"},
		{"too many values", "application/x-www-form-urlencoded", []byte(many), 1 << 20, "at most 1000"},
		{"json", "application/json", []byte(`{"a":1}`), 1 << 20, "not JSON"},
		{"no boundary", "multipart/form-data", []byte("x"), 1 << 20, "boundary"},
		{"bad multipart", "multipart/form-data; boundary=zz", []byte("garbage"), 1 << 20, "malformed multipart"},
		{"bad urlencoded", "application/x-www-form-urlencoded", []byte("a=%zz"), 1 << 20, "malformed urlencoded"},
		{"body without a type", "", []byte("a=1"), 1 << 20, "without a Content-Type"},
		{"other type", "text/plain", []byte("a=1"), 1 << 20, "not accepted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeForm(c.ctype, bytes.NewReader(c.body), c.limit)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestDescribe: describe/ lists every route, by handler, as python-libmaas
// reads it: the anonymous handlers under "anon", the others under "auth",
// each action with its method and op.
func TestDescribe(t *testing.T) {
	ts := newTestServer(t)
	status, body, _ := ts.do(t, "", "GET", "describe/", nil, "")
	if status != 200 {
		t.Fatalf("describe/: %d %s", status, body)
	}
	var d struct {
		Resources []struct {
			Name       string
			Anon, Auth *struct {
				Name, Path, URI string
				Params          []string
				Actions         []struct {
					Name, Method string
					Op           *string
					Restful      bool
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, r := range d.Resources {
		h := r.Auth
		if h == nil {
			h = r.Anon
		}
		if h == nil || h.Name != r.Name || !strings.HasPrefix(h.Path, Prefix) || !strings.HasSuffix(h.URI, h.Path) {
			t.Fatalf("resource %+v", r)
		}
		if (r.Anon != nil) != (r.Name == "VersionHandler" || r.Name == "DescribeHandler") {
			t.Errorf("%s anonymous: %v", r.Name, r.Anon != nil)
		}
		for _, a := range h.Actions {
			op := ""
			if a.Op != nil {
				op = *a.Op
			}
			served[a.Method+" "+strings.TrimPrefix(h.Path, Prefix)+" "+op] = true
		}
	}
	for _, rt := range ts.srv.Routes() {
		if !served[rt.Method+" "+rt.Path+" "+rt.Op] {
			t.Errorf("describe/ lacks %s %s op=%q", rt.Method, rt.Path, rt.Op)
		}
	}
	if len(served) != len(ts.srv.Routes()) {
		t.Errorf("describe/ lists %d actions, the table has %d routes", len(served), len(ts.srv.Routes()))
	}
}
