package agent

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"rackd/api"
	"rackd/store/storetest"
)

func TestSSHKeysAPI(t *testing.T) {
	ta := startAgent(t)
	alice := ta.addUser(t, "alice", false)
	bob := ta.addUser(t, "bob", false)
	ed := storetest.SSHKey(t, "ed25519", 0, "")
	const keys = "/api/v1/users/alice/ssh-keys"

	var k api.SSHKey
	if status, raw := ta.call(t, alice, "POST", keys, api.AddSSHKey{Key: ed + " alice@laptop"}, &k); status != http.StatusCreated {
		t.Fatalf("alice adds her key: %d %s", status, raw)
	}
	if k.User != "alice" || k.Type != "ssh-ed25519" || k.Bits != 256 || k.Comment != "alice@laptop" || k.Key != ed+" alice@laptop" ||
		!strings.HasPrefix(k.Fingerprint, "SHA256:") || k.ID == "" || k.Created.IsZero() {
		t.Fatalf("added %+v", k)
	}
	// An admin adds one for her.
	var k2 api.SSHKey
	if status, raw := ta.call(t, ta.admin, "POST", keys, api.AddSSHKey{Key: storetest.SSHKey(t, "ecdsa", 384, "")}, &k2); status != http.StatusCreated {
		t.Fatalf("admin adds alice a key: %d %s", status, raw)
	}

	refusals := []struct {
		name, token, method, path string
		body                      any
		status                    int
		code, msg                 string
	}{
		{"duplicate, other comment", alice, "POST", keys, api.AddSSHKey{Key: ed + " another"}, 409, api.CodeConflict, "is already one of alice's keys (id " + k.ID + ")"},
		{"short rsa", alice, "POST", keys, api.AddSSHKey{Key: storetest.SSHKey(t, "rsa", 1024, "")}, 400, api.CodeBadRequest, "ssh key: rsa key of 1024 bits: at least 2048 needed"},
		{"garbage", alice, "POST", keys, api.AddSSHKey{Key: "hello"}, 400, api.CodeBadRequest, "ssh key: not a public key"},
		{"no key", alice, "POST", keys, api.AddSSHKey{}, 400, api.CodeBadRequest, "ssh key: empty"},
		{"unknown field", alice, "POST", keys, map[string]string{"pubkey": ed}, 400, api.CodeBadRequest, "pubkey"},
		{"bob lists alice's", bob, "GET", keys, nil, 403, api.CodeForbidden, "only an admin may manage another user's ssh keys"},
		{"bob adds to alice's", bob, "POST", keys, api.AddSSHKey{Key: ed}, 403, api.CodeForbidden, "another user's ssh keys"},
		{"bob removes alice's", bob, "DELETE", keys + "/" + k.ID, nil, 403, api.CodeForbidden, "another user's ssh keys"},
		{"bob removes it as his", bob, "DELETE", "/api/v1/users/bob/ssh-keys/" + k.ID, nil, 404, api.CodeNotFound, "user bob has no ssh key"},
		{"no such user", ta.admin, "GET", "/api/v1/users/carol/ssh-keys", nil, 404, api.CodeNotFound, `no user "carol"`},
		{"no token", "", "GET", keys, nil, 401, api.CodeUnauthorized, "missing token"},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			status, raw := ta.call(t, r.token, r.method, r.path, r.body, nil)
			if e := wantError(t, status, raw, r.status, r.code); !strings.Contains(e.Error, r.msg) {
				t.Fatalf("message %q, want it to contain %q", e.Error, r.msg)
			}
		})
	}

	// Bob may hold the same key as alice.
	if status, raw := ta.call(t, bob, "POST", "/api/v1/users/bob/ssh-keys", api.AddSSHKey{Key: ed}, nil); status != http.StatusCreated {
		t.Fatalf("bob adds alice's key as his: %d %s", status, raw)
	}
	var list []api.SSHKey
	if status, raw := ta.call(t, alice, "GET", keys, nil, &list); status != http.StatusOK || len(list) != 2 || list[0].ID != k.ID || list[1].ID != k2.ID {
		t.Fatalf("alice's keys: %d %s", status, raw)
	}
	var gone api.SSHKey
	if status, raw := ta.call(t, alice, "DELETE", keys+"/"+k.ID, nil, &gone); status != http.StatusOK || gone.ID != k.ID {
		t.Fatalf("alice removes her key: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "GET", keys, nil, &list); status != http.StatusOK || len(list) != 1 || list[0].ID != k2.ID {
		t.Fatalf("alice's keys, as the admin sees them after the removal: %d %s", status, raw)
	}
}

// Keys made by OpenSSH's ssh-keygen are accepted or refused as documented,
// and the fingerprint rackd reports is the one ssh-keygen -l prints.
func TestSSHKeysFromSSHKeygen(t *testing.T) {
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		t.Skip("ssh-keygen not installed: make test-deps installs it (openssh-client)")
	}
	ta := startAgent(t)
	alice := ta.addUser(t, "alice", false)
	dir := t.TempDir()
	tests := []struct {
		name, typ, bits string
		wantBits        int
		refusal         string // "" when accepted
	}{
		{"ed25519", "ed25519", "", 256, ""},
		{"ecdsa256", "ecdsa", "256", 256, ""},
		{"ecdsa384", "ecdsa", "384", 384, ""},
		{"ecdsa521", "ecdsa", "521", 521, ""},
		{"rsa2048", "rsa", "2048", 2048, ""},
		{"rsa1024", "rsa", "1024", 0, "ssh key: rsa key of 1024 bits: at least 2048 needed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, tc.name)
			args := []string{"-q", "-t", tc.typ, "-N", "", "-C", "alice@" + tc.name, "-f", file}
			if tc.bits != "" {
				args = append(args, "-b", tc.bits)
			}
			if out, err := exec.Command(keygen, args...).CombinedOutput(); err != nil {
				t.Fatalf("ssh-keygen %v: %v\n%s", args, err, out)
			}
			pub, err := os.ReadFile(file + ".pub")
			if err != nil {
				t.Fatal(err)
			}
			var k api.SSHKey
			status, raw := ta.call(t, alice, "POST", "/api/v1/users/alice/ssh-keys", api.AddSSHKey{Key: string(pub)}, &k)
			if tc.refusal != "" {
				if e := wantError(t, status, raw, 400, api.CodeBadRequest); e.Error != tc.refusal {
					t.Fatalf("refusal %q, want %q", e.Error, tc.refusal)
				}
				return
			}
			if status != http.StatusCreated {
				t.Fatalf("add %s: %d %s", pub, status, raw)
			}
			// ssh-keygen -l: "BITS SHA256:... COMMENT (TYPE)".
			out, err := exec.Command(keygen, "-l", "-E", "sha256", "-f", file+".pub").Output()
			if err != nil {
				t.Fatalf("ssh-keygen -l: %v", err)
			}
			f := strings.Fields(string(out))
			if len(f) < 2 || f[1] != k.Fingerprint || f[0] != strconv.Itoa(k.Bits) {
				t.Fatalf("ssh-keygen -l says %q; rackd says %d bits %s", out, k.Bits, k.Fingerprint)
			}
			if k.Bits != tc.wantBits || k.Key != strings.TrimSpace(string(pub)) || k.Comment != "alice@"+tc.name {
				t.Fatalf("stored %+v, from %q", k, pub)
			}
		})
	}
}
