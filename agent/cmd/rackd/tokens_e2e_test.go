package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"rackd/api"
)

// curlAPI calls the daemon with curl (a real HTTP client that is not Go's)
// and returns the HTTP status and the body.
func curlAPI(t *testing.T, d *daemon, authorization, method, path, body string) (int, string) {
	t.Helper()
	args := []string{"-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method, "-H", "Authorization: " + authorization}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
	}
	out, err := exec.Command("curl", append(args, d.url+path)...).Output()
	if err != nil {
		t.Fatalf("curl %s %s: %v", method, path, err)
	}
	text := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(text, '\n')
	var status int
	if _, err := fmt.Sscan(text[i+1:], &status); err != nil {
		t.Fatalf("curl's status %q: %v", text[i+1:], err)
	}
	return status, text[:max(i, 0)]
}

// A token's life seen from outside: made with the CLI, used with curl
// (any case of the scheme), revoked with the CLI, refused with 401. Then the
// admin token is rotated, by the CLI and by serve --rotate-admin-token.
func TestTokensAgainstDaemon(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	state := t.TempDir()
	d := startDaemon(t, state)
	asAdmin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	must := func(env []string, args ...string) string { t.Helper(); return mustCLI(t, d, env, args...) }
	var tk api.Token
	if err := json.Unmarshal([]byte(must(asAdmin, "tokens", "create", "--name", "ci", "--expires", "30d", "--json")), &tk); err != nil || tk.Token == "" {
		t.Fatalf("tokens create --json: %v %+v", err, tk)
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		if status, body := curlAPI(t, d, scheme+" "+tk.Token, "GET", "/api/v1/version", ""); status != 200 || !strings.Contains(body, `"schema"`) {
			t.Fatalf("curl with %q: %d %s", scheme, status, body)
		}
	}
	if status, body := curlAPI(t, d, "Bearer "+tk.Token, "POST", "/api/v1/machines",
		`{"hostname":"node01","macs":["52:54:00:00:00:01"],"state":"READY"}`); status != 201 {
		t.Fatalf("curl creates a machine with the new token: %d %s", status, body)
	}
	if out := must(asAdmin, "tokens", "list"); !strings.Contains(out, tk.ID) || !strings.Contains(out, "ci") {
		t.Fatalf("tokens list:\n%s", out)
	}
	if out := must(asAdmin, "tokens", "revoke", tk.ID); !strings.Contains(out, "Revoked token "+tk.ID) {
		t.Fatalf("tokens revoke:\n%s", out)
	}
	status, body := curlAPI(t, d, "Bearer "+tk.Token, "GET", "/api/v1/version", "")
	if status != 401 || !strings.Contains(body, `"unauthorized"`) {
		t.Fatalf("curl with the revoked token: %d %s", status, body)
	}
	if code, _, errs := runCLI(t, d, []string{"RACKD_TOKEN=" + tk.Token}, "machines", "list"); code != 1 || !strings.Contains(errs, "HTTP 401") {
		t.Fatalf("CLI with the revoked token: exit %d, %q", code, errs)
	}

	// Rotation through the API: the CLI reads the new file afterwards.
	old := adminToken(t, state)
	must(asAdmin, "tokens", "rotate-admin")
	if status, _ := curlAPI(t, d, "Bearer "+old, "GET", "/api/v1/version", ""); status != 401 {
		t.Fatalf("the admin token before rotation: %d, want 401", status)
	}
	rotated := adminToken(t, state)
	if status, _ := curlAPI(t, d, "Bearer "+rotated, "GET", "/api/v1/users", ""); status != 200 {
		t.Fatalf("the rotated admin token: %d", status)
	}
	must(asAdmin, "machines", "list")

	// Rotation at start-up, which needs no token.
	d.stop(t)
	d = startDaemon(t, state, "--rotate-admin-token")
	if status, _ := curlAPI(t, d, "Bearer "+rotated, "GET", "/api/v1/version", ""); status != 401 {
		t.Fatalf("the admin token before serve --rotate-admin-token: %d, want 401", status)
	}
	if status, body := curlAPI(t, d, "Bearer "+adminToken(t, state), "GET", "/api/v1/machines", ""); status != 200 || !strings.Contains(body, "node01") {
		t.Fatalf("the admin token after serve --rotate-admin-token: %d %s", status, body)
	}
}
