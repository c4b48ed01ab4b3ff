package cli_test

import "testing"

const (
	tokenCI   = `{"id":"t-ci","user":"bob","name":"ci","created":"2025-01-01T00:00:00Z","expires":"2025-01-31T00:00:00Z","expired":false}`
	tokenList = `[` + tokenCI + `,{"id":"t-def","user":"bob","name":"default","created":"2025-01-01T00:00:00Z","expired":false,"last_used":"2025-01-02T00:00:00Z","current":true},` +
		`{"id":"t-old","user":"bob","name":"old","created":"2024-01-01T00:00:00Z","expires":"2024-02-01T00:00:00Z","expired":true}]`
)

func TestTokenVerbs(t *testing.T) {
	runVerbCases(t, map[string]verbCase{
		"tokens create": {
			args: []string{"tokens", "create", "--name", "ci", "--expires", "30d"},
			routes: map[string]answer{"POST /api/v1/tokens": {201,
				`{"id":"t-ci","user":"bob","name":"ci","token":"secret-ci","created":"2025-01-01T00:00:00Z","expires":"2025-01-31T00:00:00Z","expired":false}`}},
			want: []seen{{Method: "POST", Path: "/api/v1/tokens", Body: `{"name":"ci","expires":"30d"}`}},
			contains: []string{"Created token t-ci (ci) for bob; it expires 2025-01-31T00:00:00Z.\n", "Token: secret-ci\n",
				"shown once", "rackd tokens revoke t-ci"},
		},
		"tokens create for another user, no expiry": {
			args:     []string{"tokens", "create", "--name=deploy", "--user=bob"},
			routes:   map[string]answer{"POST /api/v1/tokens": {201, `{"id":"t-d","user":"bob","name":"deploy","token":"s","created":"2025-01-01T00:00:00Z","expired":false}`}},
			want:     []seen{{Method: "POST", Path: "/api/v1/tokens", Body: `{"name":"deploy","user":"bob"}`}},
			contains: []string{"for bob; it does not expire.\n"},
		},
		"tokens create --json": {
			args:   []string{"tokens", "create", "--name", "ci", "--json"},
			routes: map[string]answer{"POST /api/v1/tokens": {201, tokenCI}},
			want:   []seen{{Method: "POST", Path: "/api/v1/tokens", Body: `{"name":"ci"}`}},
			stdout: indent(t, tokenCI),
		},
		"tokens create without a name": {
			args: []string{"tokens", "create"}, code: 2,
			errContains: []string{"--name is required"},
		},
		"tokens create, bad expiry": {
			args: []string{"tokens", "create", "--name", "ci", "--expires", "soon"}, code: 2,
			errContains: []string{`invalid expiry "soon"`},
		},
		"tokens create refused": {
			args:        []string{"tokens", "create", "--name", "ci"},
			routes:      map[string]answer{"POST /api/v1/tokens": {409, `{"error":"user bob already has a token named \"ci\"","code":"conflict"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/tokens", Body: `{"name":"ci"}`}},
			code:        1,
			errContains: []string{`already has a token named "ci" (conflict, HTTP 409)`},
		},
		"tokens list": {
			args:   []string{"tokens", "list"},
			routes: map[string]answer{"GET /api/v1/tokens": {200, tokenList}},
			want:   []seen{{Method: "GET", Path: "/api/v1/tokens"}},
			stdout: "ID       NAME     USER  CREATED               EXPIRES                         LAST USED\n" +
				"t-ci     ci       bob   2025-01-01T00:00:00Z  2025-01-31T00:00:00Z            never\n" +
				"t-def *  default  bob   2025-01-01T00:00:00Z  never                           2025-01-02T00:00:00Z\n" +
				"t-old    old      bob   2024-01-01T00:00:00Z  2024-02-01T00:00:00Z (expired)  never\n",
		},
		"tokens list --user": {
			args:   []string{"tokens", "list", "--user", "bob", "--json"},
			routes: map[string]answer{"GET /api/v1/tokens": {200, tokenList}},
			want:   []seen{{Method: "GET", Path: "/api/v1/tokens", Query: "user=bob"}},
			stdout: indent(t, tokenList),
		},
		"tokens list --all": {
			args:     []string{"tokens", "list", "--all"},
			routes:   map[string]answer{"GET /api/v1/tokens": {200, tokenList}},
			want:     []seen{{Method: "GET", Path: "/api/v1/tokens", Query: "all=true"}},
			contains: []string{"t-ci", "t-def *"},
		},
		"tokens list --all --user": {
			args: []string{"tokens", "list", "--all", "--user", "bob"}, code: 2,
			errContains: []string{"--all and --user exclude each other"},
		},
		"tokens revoke": {
			args:   []string{"tokens", "revoke", "t-ci"},
			routes: map[string]answer{"DELETE /api/v1/tokens/t-ci": {200, tokenCI}},
			want:   []seen{{Method: "DELETE", Path: "/api/v1/tokens/t-ci"}},
			stdout: "Revoked token t-ci (ci) of bob.\n",
		},
		"tokens revoke unknown": {
			args:        []string{"tokens", "revoke", "t-x"},
			routes:      map[string]answer{},
			want:        []seen{{Method: "DELETE", Path: "/api/v1/tokens/t-x"}},
			code:        1,
			errContains: []string{"(not_found, HTTP 404)"},
		},
		"tokens revoke without an id": {
			args: []string{"tokens", "revoke"}, code: 2,
			errContains: []string{"rackd tokens revoke: missing ID"},
		},
		"tokens rotate-admin": {
			args: []string{"tokens", "rotate-admin"},
			routes: map[string]answer{"POST /api/v1/admin-token/rotate": {200,
				`{"file":"/var/lib/rackd/admin.token","token":{"id":"t-new","user":"admin","name":"admin.token","created":"2025-01-01T00:00:00Z","expired":false},"revoked":["t-old"]}`}},
			want:   []seen{{Method: "POST", Path: "/api/v1/admin-token/rotate"}},
			stdout: "Wrote a new admin token (t-new) to /var/lib/rackd/admin.token on the server; revoked t-old.\n",
		},
	})
}
