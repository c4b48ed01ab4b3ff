package agent

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"rackd/api"
	"rackd/maasapi"
)

// maasGet is a GET of MAAS's API signed with a MAAS API key as gomaasapi
// signs (PLAINTEXT, values query-escaped).
func (ta *testAgent) maasGet(t *testing.T, key, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", ta.url+maasapi.Prefix+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		p := strings.SplitN(key, ":", 3)
		req.Header.Set("Authorization", fmt.Sprintf(`OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT", oauth_consumer_key="%s", oauth_token="%s", oauth_signature="%s", oauth_nonce="n", oauth_timestamp="1"`,
			url.QueryEscape(p[0]), url.QueryEscape(p[1]), url.QueryEscape("&"+p[2])))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTokenAsMAASKey: a token made through /api/v1 is a MAAS API key on
// the same listener, with its user's identity, until it is revoked.
func TestTokenAsMAASKey(t *testing.T) {
	ta := startAgent(t)
	ta.addUser(t, "alice", false)
	var tk api.Token
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/tokens", api.CreateToken{Name: "juju", User: "alice"}, &tk); status != 201 {
		t.Fatalf("create token: %d %s", status, raw)
	}
	if tk.MAASKey != "alice:"+tk.ID+":"+tk.Token {
		t.Fatalf("maas_api_key %q, want alice:%s:<secret>", tk.MAASKey, tk.ID)
	}
	if status, body := ta.maasGet(t, "", "version/"); status != 200 || !strings.Contains(body, "networks-management") {
		t.Fatalf("version/: %d %s", status, body)
	}
	if status, body := ta.maasGet(t, tk.MAASKey, "users/?op=whoami"); status != 200 || !strings.Contains(body, `"username":"alice"`) {
		t.Fatalf("whoami: %d %s", status, body)
	}
	if status, body := ta.maasGet(t, "", "users/?op=whoami"); status != 401 {
		t.Fatalf("whoami without a key: %d %s", status, body)
	}
	if status, body := ta.maasGet(t, tk.MAASKey, "nonesuch/"); status != 404 {
		t.Fatalf("an unknown MAAS path: %d %s, want MAAS's 404 (not the web UI)", status, body)
	}
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/tokens/"+tk.ID, nil, nil); status != 200 {
		t.Fatalf("revoke: %d %s", status, raw)
	}
	if status, body := ta.maasGet(t, tk.MAASKey, "users/?op=whoami"); status != 401 {
		t.Fatalf("whoami with a revoked token's key: %d %s, want 401", status, body)
	}
}

// TestMachineVisibility: both APIs apply one rule: another user's held
// machine does not exist for a user; an unowned one is seen by all. And
// releasing what one just released is the lifecycle's 409, never a 403.
func TestMachineVisibility(t *testing.T) {
	ta := startAgent(t)
	alice := ta.addUser(t, "alice", false)
	bob := ta.addUser(t, "bob", false)
	held := ta.addMachine(t, api.CreateMachine{Hostname: "held", MACs: []string{"52:54:00:00:00:01"}, State: "READY"})
	free := ta.addMachine(t, api.CreateMachine{Hostname: "free", MACs: []string{"52:54:00:00:00:02"}, State: "READY"})
	if status, raw := ta.call(t, alice, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "held", AgentName: "u"}, nil); status != 201 {
		t.Fatalf("allocate: %d %s", status, raw)
	}
	var list []api.Machine
	ta.call(t, bob, "GET", "/api/v1/machines", nil, &list)
	if len(list) != 1 || list[0].ID != free.ID {
		t.Errorf("bob lists %+v, want only the free machine", list)
	}
	for _, path := range []string{"/api/v1/machines/" + held.ID, "/api/v1/machines/held", "/api/v1/machines/" + held.ID + "/events"} {
		status, raw := ta.call(t, bob, "GET", path, nil, nil)
		wantError(t, status, raw, 404, api.CodeNotFound)
		if strings.Contains(string(raw), "alice") {
			t.Errorf("%s tells bob the holder: %s", path, raw)
		}
	}
	if status, raw := ta.call(t, bob, "GET", "/api/v1/machines/"+free.ID, nil, nil); status != 200 {
		t.Errorf("bob reads the free machine: %d %s", status, raw)
	}
	ta.call(t, alice, "GET", "/api/v1/machines", nil, &list)
	if len(list) != 2 {
		t.Errorf("alice lists %d machines, want 2", len(list))
	}
	if status, raw := ta.call(t, alice, "POST", "/api/v1/machines/held/release", nil, nil); status != 200 {
		t.Fatalf("release: %d %s", status, raw)
	}
	status, raw := ta.call(t, alice, "POST", "/api/v1/machines/held/release", nil, nil)
	wantError(t, status, raw, 409, api.CodeInvalidTransition)
}
