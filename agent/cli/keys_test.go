package cli_test

import "testing"

func TestKeysVerbs(t *testing.T) {
	rotated := `{"file":"/var/lib/rackd/secrets.key","key":"0a1b2c3d","retired":["99887766"],"resealed":12}`
	runVerbCases(t, map[string]verbCase{
		"keys rotate": {
			args:   []string{"keys", "rotate"},
			routes: map[string]answer{"POST /api/v1/keys/rotate": {200, rotated}},
			want:   []seen{{Method: "POST", Path: "/api/v1/keys/rotate"}},
			stdout: "New secrets key 0a1b2c3d in /var/lib/rackd/secrets.key on the server: 12 secret(s) re-encrypted, retired 99887766.\n",
		},
		"keys rotate with lost secrets": {
			args: []string{"keys", "rotate"},
			routes: map[string]answer{"POST /api/v1/keys/rotate": {200,
				`{"file":"/s/secrets.key","key":"0a1b2c3d","retired":[],"resealed":0,"unreadable":["n1","n2"]}`}},
			want: []seen{{Method: "POST", Path: "/api/v1/keys/rotate"}},
			stdout: "New secrets key 0a1b2c3d in /s/secrets.key on the server: 0 secret(s) re-encrypted, no old key to retire.\n" +
				"Not re-encrypted (sealed under a lost key; set their BMC passwords again): n1, n2\n",
		},
		"keys rotate --json": {
			args:   []string{"keys", "rotate", "--json"},
			routes: map[string]answer{"POST /api/v1/keys/rotate": {200, rotated}},
			want:   []seen{{Method: "POST", Path: "/api/v1/keys/rotate"}},
			stdout: indent(t, rotated),
		},
		"keys rotate refused": {
			args:        []string{"keys", "rotate"},
			routes:      map[string]answer{"POST /api/v1/keys/rotate": {403, `{"error":"only an admin may rotate the secrets key","code":"forbidden"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/keys/rotate"}},
			code:        1,
			errContains: []string{"only an admin may rotate the secrets key (forbidden, HTTP 403)"},
		},
		"keys rotate takes no argument": {
			args: []string{"keys", "rotate", "now"}, code: 2,
			errContains: []string{`unexpected argument "now"`},
		},
	})
}
