package agent

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"rackd/api"
)

func TestBearerToken(t *testing.T) {
	tests := map[string]struct {
		header, want string
		ok           bool
	}{
		"canonical":          {"Bearer abc", "abc", true},
		"lower case":         {"bearer abc", "abc", true},
		"upper case":         {"BEARER abc", "abc", true},
		"mixed case":         {"bEaReR abc", "abc", true},
		"several spaces":     {"Bearer   abc", "abc", true},
		"trailing space":     {"Bearer abc ", "abc", true},
		"token68 characters": {"Bearer a-b._~+/c==", "a-b._~+/c==", true},
		"empty":              {"", "", false},
		"scheme only":        {"Bearer", "", false},
		"scheme and space":   {"Bearer ", "", false},
		"other scheme":       {"Basic YWxhZGRpbjpvcGVuc2VzYW1l", "", false},
		"scheme prefix":      {"Bearerabc", "", false},
		"longer scheme":      {"Bearers abc", "", false},
		"no scheme":          {"abc", "", false},
		"two words":          {"Bearer abc def", "", false},
		"tab inside":         {"Bearer abc\tdef", "", false},
		"tab separator":      {"Bearer\tabc", "", false},
		"control character":  {"Bearer abc\x00", "", false},
		"delete character":   {"Bearer abc\x7f", "", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := bearerToken(tc.header)
			if got != tc.want || ok != tc.ok {
				t.Errorf("bearerToken(%q) = %q, %t; want %q, %t", tc.header, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// Any header either yields one word of printable characters, which the
// canonical header gives back unchanged, or nothing.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer abc", "BEARER  abc ", "Basic x", "Bearer", "Bearer a b", "Bearer \x00", " Bearer x", "Bearer é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := bearerToken(h)
		if !ok {
			if tok != "" {
				t.Fatalf("bearerToken(%q) refused but returned %q", h, tok)
			}
			return
		}
		if tok == "" || strings.ContainsFunc(tok, func(r rune) bool { return unicode.IsSpace(r) && r < 0x80 || r < ' ' || r == 0x7f }) {
			t.Fatalf("bearerToken(%q) = %q", h, tok)
		}
		if !strings.HasPrefix(strings.ToLower(strings.TrimLeft(h, " ")), "bearer ") {
			t.Fatalf("bearerToken(%q) accepted another scheme", h)
		}
		if again, ok := bearerToken("Bearer " + tok); !ok || again != tok {
			t.Fatalf("round trip of %q: %q, %t", tok, again, ok)
		}
	})
}

// The token routes: who may make, see and revoke which tokens, and that a
// revoked or expired token is refused.
func TestTokensAPI(t *testing.T) {
	ta := startAgent(t)
	bob := ta.addUser(t, "bob", false)
	other := ta.addUser(t, "other", false)

	var ci api.Token
	if status, raw := ta.call(t, bob, "POST", "/api/v1/tokens", api.CreateToken{Name: "ci", Expires: "30d"}, &ci); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, raw)
	}
	if ci.Token == "" || ci.User != "bob" || ci.Name != "ci" || ci.Expires == nil || ci.Expired ||
		ci.Expires.Sub(time.Now()) < 29*24*time.Hour || ci.Expires.Sub(time.Now()) > 30*24*time.Hour {
		t.Fatalf("created %+v", ci)
	}
	// The scheme's case does not matter.
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		req, _ := http.NewRequest("GET", ta.url+"/api/v1/version", nil)
		req.Header.Set("Authorization", scheme+" "+ci.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s <token>: %d", scheme, resp.StatusCode)
		}
	}
	var list []api.Token
	if status, raw := ta.call(t, ci.Token, "GET", "/api/v1/tokens", nil, &list); status != http.StatusOK {
		t.Fatalf("list: %d %s", status, raw)
	}
	if len(list) != 2 || list[0].Name != "ci" || !list[0].Current || list[1].Name != "default" || list[1].Current || list[0].Token != "" {
		t.Errorf("bob's tokens, listed with ci: %+v", list)
	}
	// An admin lists every user's, by user then name; the secrets stay
	// hidden.
	var all []api.Token
	if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/tokens?all=true", nil, &all); status != http.StatusOK {
		t.Fatalf("list all: %d %s", status, raw)
	}
	var got []string
	for _, tk := range all {
		got = append(got, tk.User+"/"+tk.Name)
		if tk.Token != "" {
			t.Errorf("the list shows %s's secret", tk.ID)
		}
	}
	if want := "admin/default bob/ci bob/default other/default"; strings.Join(got, " ") != want {
		t.Errorf("every user's tokens: %q, want %q", strings.Join(got, " "), want)
	}
	var defaultID string
	for _, tk := range list {
		if tk.Name == "default" {
			defaultID = tk.ID
		}
	}

	refusals := map[string]struct {
		token, method, path string
		body                any
		status              int
		code, msg           string
	}{
		"list another user's":          {bob, "GET", "/api/v1/tokens?user=other", nil, 403, "forbidden", "admin"},
		"admin lists an unknown user":  {ta.admin, "GET", "/api/v1/tokens?user=nobody", nil, 404, "not_found", "nobody"},
		"list every user's":            {bob, "GET", "/api/v1/tokens?all=true", nil, 403, "forbidden", "admin"},
		"all with a user":              {ta.admin, "GET", "/api/v1/tokens?all=true&user=bob", nil, 400, "bad_request", "no user"},
		"all neither true nor false":   {ta.admin, "GET", "/api/v1/tokens?all=yes", nil, 400, "bad_request", "true or false"},
		"revoke another user's":        {other, "DELETE", "/api/v1/tokens/" + ci.ID, nil, 404, "not_found", ci.ID},
		"revoke an unknown token":      {bob, "DELETE", "/api/v1/tokens/t-nothing", nil, 404, "not_found", "t-nothing"},
		"make one for another user":    {bob, "POST", "/api/v1/tokens", api.CreateToken{Name: "x", User: "other"}, 403, "forbidden", "admin"},
		"name taken":                   {bob, "POST", "/api/v1/tokens", api.CreateToken{Name: "ci"}, 409, "conflict", "already has a token"},
		"bad name":                     {bob, "POST", "/api/v1/tokens", api.CreateToken{Name: "my token"}, 400, "bad_request", "invalid token name"},
		"bad expiry":                   {bob, "POST", "/api/v1/tokens", api.CreateToken{Name: "x", Expires: "soon"}, 400, "bad_request", "invalid expiry"},
		"expiry in the past":           {bob, "POST", "/api/v1/tokens", api.CreateToken{Name: "x", Expires: "2020-01-01"}, 400, "bad_request", "not in the future"},
		"rotate the admin token, user": {bob, "POST", "/api/v1/admin-token/rotate", nil, 403, "forbidden", "admin"},
	}
	for name, tc := range refusals {
		t.Run(name, func(t *testing.T) {
			status, raw := ta.call(t, tc.token, tc.method, tc.path, tc.body, nil)
			e := wantError(t, status, raw, tc.status, tc.code)
			if !strings.Contains(e.Error, tc.msg) {
				t.Errorf("message %q does not mention %q", e.Error, tc.msg)
			}
		})
	}
	// The admin sees bob's tokens and makes one for him.
	list = nil
	if status, raw := ta.call(t, ta.admin, "GET", "/api/v1/tokens?user=bob", nil, &list); status != http.StatusOK || len(list) != 2 || list[0].Current {
		t.Errorf("admin lists bob's tokens: %d %s", status, raw)
	}
	var forBob api.Token
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "made-by-admin", User: "bob"}, &forBob); status != http.StatusCreated || forBob.User != "bob" {
		t.Fatalf("admin makes bob a token: %d %s", status, raw)
	}
	// Revocations: bob his own; the admin one of bob's. Both stop at once;
	// bob's other token still works.
	if status, raw := ta.call(t, bob, "DELETE", "/api/v1/tokens/"+ci.ID, nil, nil); status != http.StatusOK {
		t.Fatalf("bob revokes ci: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/tokens/"+forBob.ID, nil, nil); status != http.StatusOK {
		t.Fatalf("admin revokes bob's token: %d %s", status, raw)
	}
	for name, tok := range map[string]string{"revoked by bob": ci.Token, "revoked by the admin": forBob.Token} {
		status, raw := ta.call(t, tok, "GET", "/api/v1/version", nil, nil)
		t.Run(name, func(t *testing.T) { wantError(t, status, raw, http.StatusUnauthorized, api.CodeUnauthorized) })
	}
	if status, _ := ta.call(t, bob, "GET", "/api/v1/version", nil, nil); status != http.StatusOK {
		t.Errorf("bob's default token after the revocations: %d", status)
	}
	// A token may revoke itself: the revocation is not refused because of
	// itself, and the token is refused afterwards.
	if status, raw := ta.call(t, bob, "DELETE", "/api/v1/tokens/"+defaultID, nil, nil); status != http.StatusOK {
		t.Fatalf("bob's default token revokes itself: %d %s", status, raw)
	}
	status, raw := ta.call(t, bob, "GET", "/api/v1/tokens", nil, nil)
	wantError(t, status, raw, http.StatusUnauthorized, api.CodeUnauthorized)
}

// An expired token is refused, and listed as expired.
func TestTokenExpiresAPI(t *testing.T) {
	ta := startAgent(t)
	var tk api.Token
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "brief", Expires: "1s"}, &tk); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, raw)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, raw := ta.call(t, tk.Token, "GET", "/api/v1/version", nil, nil)
		if status == http.StatusUnauthorized {
			wantError(t, status, raw, http.StatusUnauthorized, api.CodeUnauthorized)
			break
		}
		if status != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("a token with an expiry of 1s, later: %d %s", status, raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var list []api.Token
	ta.call(t, ta.admin, "GET", "/api/v1/tokens", nil, &list)
	for _, x := range list {
		if x.ID == tk.ID && !x.Expired {
			t.Errorf("the expired token is listed as %+v", x)
		}
	}
}

// A request made with a token and waiting for the database behind a slow
// commit is refused when the token is revoked meanwhile.
func TestQueuedRequestRevoked(t *testing.T) {
	ta := startAgent(t)
	bob := ta.addUser(t, "bob", false)
	var tk api.Token
	if status, raw := ta.call(t, bob, "POST", "/api/v1/tokens", api.CreateToken{Name: "ci"}, &tk); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, raw)
	}
	// Every token of the test has been used and its use recorded: no
	// last-used write is queued while the writes below are counted.
	for _, tok := range []string{ta.admin, bob, tk.Token} {
		if status, raw := ta.call(t, tok, "GET", "/api/v1/version", nil, nil); status != http.StatusOK {
			t.Fatalf("version: %d %s", status, raw)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		recorded := 0
		for _, u := range []string{"admin", "bob"} {
			var list []api.Token
			ta.call(t, ta.admin, "GET", "/api/v1/tokens?user="+u, nil, &list)
			for _, x := range list {
				if x.LastUsed != nil {
					recorded++
				}
			}
		}
		if recorded == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 tokens have their use recorded", recorded)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The slow request: creating a machine, whose commit is held.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func() {
		if _, err := ta.Store().Machine("node001"); err != nil {
			return
		}
		once.Do(func() {
			close(held)
			<-release
		})
	}
	ta.commitHook.Store(&hook)
	var wg sync.WaitGroup
	wg.Go(func() {
		if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines", readyMachine(1), nil); status != http.StatusCreated {
			t.Errorf("the slow request: %d %s", status, raw)
		}
	})
	<-held
	// The second request, with the token, waits for the committer.
	type answer struct {
		status int
		raw    []byte
	}
	second := make(chan answer, 1)
	wg.Go(func() {
		// An allocation, which would succeed (node001 is READY).
		status, raw := ta.call(t, tk.Token, "POST", "/api/v1/allocations", api.AllocateRequest{AgentName: "queued"}, nil)
		second <- answer{status, raw}
	})
	waitQueued(t, ta, 1)
	revoked := make(chan answer, 1)
	wg.Go(func() {
		status, raw := ta.call(t, bob, "DELETE", "/api/v1/tokens/"+tk.ID, nil, nil)
		revoked <- answer{status, raw}
	})
	// The revocation is in force once the token is refused at the door:
	// counting queued writes cannot tell the revocation's deletion from a
	// background write (a power poll, a last-used touch), and releasing the
	// commit before the token is marked dead would let the allocation
	// through legitimately.
	deadline = time.Now().Add(10 * time.Second)
	for {
		if status, _ := ta.call(t, tk.Token, "GET", "/api/v1/version", nil, nil); status == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the revoked token still authenticates after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	got := <-second
	wantError(t, got.status, got.raw, http.StatusUnauthorized, api.CodeUnauthorized)
	if r := <-revoked; r.status != http.StatusOK {
		t.Errorf("revoke: %d %s", r.status, r.raw)
	}
	wg.Wait()
	if m, err := ta.Store().Machine("node001"); err != nil || m.Owner != "" {
		t.Errorf("after the refused allocation node001 is %+v, %v", m, err)
	}
}

func waitQueued(t *testing.T, ta *testAgent, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ta.Store().QueuedWrites() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes wait for the committer, want %d", ta.Store().QueuedWrites(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Rotating the admin token: the file gets a new token that works, the old
// one is refused at once.
func TestRotateAdminTokenAPI(t *testing.T) {
	ta := startAgent(t)
	old := ta.admin
	var rot api.AdminTokenRotation
	if status, raw := ta.call(t, old, "POST", "/api/v1/admin-token/rotate", nil, &rot); status != http.StatusOK {
		t.Fatalf("rotate: %d %s", status, raw)
	}
	if rot.File != ta.AdminTokenPath() || rot.Token.Name != adminTokenName || rot.Token.User != adminUser || len(rot.Revoked) != 1 || rot.Token.Token != "" {
		t.Errorf("rotation: %+v", rot)
	}
	data, err := os.ReadFile(ta.AdminTokenPath())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(ta.AdminTokenPath())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin token file mode: %v, %v", fi.Mode(), err)
	}
	fresh := strings.TrimSpace(string(data))
	if fresh == old {
		t.Fatal("the file still holds the old token")
	}
	status, raw := ta.call(t, old, "GET", "/api/v1/version", nil, nil)
	wantError(t, status, raw, http.StatusUnauthorized, api.CodeUnauthorized)
	if status, raw := ta.call(t, fresh, "GET", "/api/v1/users", nil, nil); status != http.StatusOK {
		t.Errorf("the new admin token: %d %s", status, raw)
	}
	ta.admin = fresh
}
