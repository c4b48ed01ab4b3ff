package cli_test

import (
	"path/filepath"
	"strings"
	"testing"

	"rackd/agent/cli"
)

const (
	sshKey1 = `{"id":"k-1","user":"alice","type":"ssh-ed25519","bits":256,"key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop","fingerprint":"SHA256:abc","comment":"alice@laptop","created":"2025-01-01T00:00:00Z","future":1}`
	sshKey2 = `{"id":"k-2","user":"alice","type":"ssh-rsa","bits":3072,"key":"ssh-rsa AAAAB3 ","fingerprint":"SHA256:def","created":"2025-01-02T00:00:00Z"}`
	edLine  = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop"
	rsaLine = "ssh-rsa AAAAB3NzaC1yc2E"
)

func TestSSHKeyVerbs(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	writeFile(t, keys, "# alice's keys\n\n"+edLine+"\n   \n  "+rsaLine+"  \n")
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "# nothing\n\n")
	const path = "/api/v1/users/alice/ssh-keys"
	added := answer{201, sshKey1}
	runVerbCases(t, map[string]verbCase{
		"add from a file": {
			args:   []string{"users", "ssh-keys", "add", "alice", keys},
			routes: map[string]answer{"POST " + path: added},
			want: []seen{{Method: "POST", Path: path, Body: `{"key":"` + edLine + `"}`},
				{Method: "POST", Path: path, Body: `{"key":"` + rsaLine + `"}`}},
			stdout: "Added ssh-ed25519 key k-1 SHA256:abc to alice.\nAdded ssh-ed25519 key k-1 SHA256:abc to alice.\n",
		},
		"add --json": {
			args:     []string{"users", "ssh-keys", "add", "alice", keys, "--json"},
			routes:   map[string]answer{"POST " + path: added},
			want:     []seen{{Method: "POST", Path: path, Body: `{"key":"` + edLine + `"}`}, {Method: "POST", Path: path, Body: `{"key":"` + rsaLine + `"}`}},
			contains: []string{`"id": "k-1"`, `"fingerprint": "SHA256:abc"`},
		},
		"add refused": {
			args:   []string{"users", "ssh-keys", "add", "alice", keys},
			routes: map[string]answer{"POST " + path: {400, `{"error":"ssh key: rsa key of 1024 bits: at least 2048 needed","code":"bad_request"}`}},
			want:   []seen{{Method: "POST", Path: path, Body: `{"key":"` + edLine + `"}`}, {Method: "POST", Path: path, Body: `{"key":"` + rsaLine + `"}`}},
			code:   1,
			errContains: []string{keys + " line 3: ssh key: rsa key of 1024 bits: at least 2048 needed (bad_request, HTTP 400)\n",
				keys + " line 5: ssh key", "rackd: 2 of 2 keys not added\n"},
		},
		"add for another user, forbidden": {
			args:        []string{"users", "ssh-keys", "add", "bob", keys},
			routes:      map[string]answer{"POST /api/v1/users/bob/ssh-keys": {403, `{"error":"only an admin may manage another user's ssh keys","code":"forbidden"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/users/bob/ssh-keys", Body: `{"key":"` + edLine + `"}`}, {Method: "POST", Path: "/api/v1/users/bob/ssh-keys", Body: `{"key":"` + rsaLine + `"}`}},
			code:        1,
			errContains: []string{"another user's ssh keys (forbidden, HTTP 403)"},
		},
		"add from a file with no keys": {
			args:        []string{"users", "ssh-keys", "add", "alice", empty},
			code:        1,
			errContains: []string{"rackd: " + empty + " holds no keys"},
		},
		"add from a missing file": {
			args:        []string{"users", "ssh-keys", "add", "alice", filepath.Join(dir, "nope")},
			code:        1,
			errContains: []string{"no such file"},
		},
		"list": {
			args:   []string{"users", "ssh-keys", "list", "alice"},
			routes: map[string]answer{"GET " + path: {200, "[" + sshKey1 + "," + sshKey2 + "]"}},
			want:   []seen{{Method: "GET", Path: path}},
			stdout: `ID   TYPE         BITS  FINGERPRINT  COMMENT       CREATED
k-1  ssh-ed25519  256   SHA256:abc   alice@laptop  2025-01-01T00:00:00Z
k-2  ssh-rsa      3072  SHA256:def   -             2025-01-02T00:00:00Z
`,
		},
		"rm": {
			args:   []string{"users", "ssh-keys", "rm", "alice", "k-1"},
			routes: map[string]answer{"DELETE " + path + "/k-1": {200, sshKey1}},
			want:   []seen{{Method: "DELETE", Path: path + "/k-1"}},
			stdout: "Removed ssh-ed25519 key k-1 SHA256:abc from alice.\n",
		},
		"rm unknown": {
			args:        []string{"users", "ssh-keys", "rm", "alice", "k-9"},
			routes:      map[string]answer{"DELETE " + path + "/k-9": {404, `{"error":"user alice has no ssh key \"k-9\"","code":"not_found"}`}},
			want:        []seen{{Method: "DELETE", Path: path + "/k-9"}},
			code:        1,
			errContains: []string{`user alice has no ssh key "k-9" (not_found, HTTP 404)`},
		},
		"rm without id": {
			args:        []string{"users", "ssh-keys", "rm", "alice"},
			code:        2,
			errContains: []string{"missing ID", "Usage: rackd users ssh-keys rm NAME ID"},
		},
	})
}

func TestSSHKeysAddStdin(t *testing.T) {
	for _, args := range [][]string{{"users", "ssh-keys", "add", "alice", "-"}, {"users", "ssh-keys", "add", "alice"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			isolate(t)
			const path = "/api/v1/users/alice/ssh-keys"
			f := newFake(t, map[string]answer{"POST " + path: {201, sshKey1}})
			t.Setenv("RACKD_URL", f.srv.URL)
			t.Setenv("RACKD_TOKEN", "tok")
			cli.SetStdin(t, strings.NewReader(edLine+"\n"))
			code, stdout, stderr := run(t, args...)
			if code != 0 || stdout != "Added ssh-ed25519 key k-1 SHA256:abc to alice.\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			checkRequests(t, f.requests(), []seen{{Method: "POST", Path: path, Body: `{"key":"` + edLine + `"}`}})
		})
	}
}
