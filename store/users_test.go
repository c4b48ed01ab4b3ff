package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

func TestCreateUserNames(t *testing.T) {
	tests := map[string]struct {
		actor store.Actor
		name  string
		code  store.Code // "" for success
	}{
		"plain":                {admin, "alice", ""},
		"underscore first":     {admin, "_svc", ""},
		"dots and dashes":      {admin, "juju.ctl-2_x", ""},
		"64 characters":        {admin, strings.Repeat("a", 64), ""},
		"empty":                {admin, "", store.CodeInvalid},
		"upper case":           {admin, "Alice", store.CodeInvalid},
		"digit first":          {admin, "1alice", store.CodeInvalid},
		"dash first":           {admin, "-alice", store.CodeInvalid},
		"space":                {admin, "al ice", store.CodeInvalid},
		"slash":                {admin, "a/b", store.CodeInvalid},
		"65 characters":        {admin, strings.Repeat("a", 65), store.CodeInvalid},
		"trailing newline":     {admin, "alice\n", store.CodeInvalid},
		"reserved rackd":       {admin, "rackd", store.CodeConflict},
		"reserved watchdog":    {admin, "rackd/watchdog", store.CodeInvalid},
		"non-admin":            {alice, "bob", store.CodeForbidden},
		"non-admin, bad name":  {alice, "", store.CodeForbidden},
		"system may add users": {store.System, "bob", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			u, token, err := s.CreateUser(t.Context(), tc.actor, tc.name, false, "")
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if users, _ := s.Users(); len(users) != 0 {
					t.Errorf("a refused CreateUser left users %+v", users)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.Name != tc.name || u.Admin || token == "" || u.Created.IsZero() {
				t.Errorf("CreateUser = %+v, %q", u, token)
			}
			if got, ok, err := s.Authenticate(token); err != nil || !ok || got.Name != tc.name {
				t.Errorf("Authenticate(the new user's token) = %+v, %t, %v", got, ok, err)
			}
		})
	}
}

func TestUsers(t *testing.T) {
	s := storetest.New(t)
	if has, err := s.HasUsers(); err != nil || has {
		t.Fatalf("HasUsers on a new store = %t, %v", has, err)
	}
	_, rootToken, err := s.CreateUser(t.Context(), store.System, "root", true, "")
	if err != nil {
		t.Fatal(err)
	}
	if has, _ := s.HasUsers(); !has {
		t.Fatal("HasUsers = false after CreateUser")
	}
	const chosen = "a-token-chosen-by-the-operator-0123456789"
	bobUser, bobToken, err := s.CreateUser(t.Context(), store.Actor{Name: "root", Admin: true}, "bob", false, chosen)
	if err != nil || bobToken != chosen {
		t.Fatalf("CreateUser with a token = %q, %v; want the token back", bobToken, err)
	}
	_, aliceToken, err := s.CreateUser(t.Context(), admin, "alice", false, "")
	if err != nil {
		t.Fatal(err)
	}
	if rootToken == aliceToken || len(rootToken) < 40 {
		t.Errorf("made-up tokens %q and %q: want long and distinct", rootToken, aliceToken)
	}

	tests := map[string]struct {
		token string
		want  store.Actor
		ok    bool
	}{
		"admin":          {rootToken, store.Actor{Name: "root", Admin: true}, true},
		"chosen token":   {chosen, store.Actor{Name: "bob"}, true},
		"made-up token":  {aliceToken, store.Actor{Name: "alice"}, true},
		"empty":          {"", store.Actor{}, false},
		"unknown":        {"nope", store.Actor{}, false},
		"prefix":         {rootToken[:len(rootToken)-1], store.Actor{}, false},
		"the hash":       {store.HashToken(rootToken), store.Actor{}, false},
		"other case":     {strings.ToUpper(chosen), store.Actor{}, false},
		"trailing space": {chosen + " ", store.Actor{}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok, err := s.Authenticate(tc.token)
			if ok && got.Token == "" {
				t.Errorf("Authenticate(%q) names no token id", tc.token)
			}
			got.Token = ""
			if err != nil || ok != tc.ok || got != tc.want {
				t.Errorf("Authenticate(%q) = %+v, %t, %v; want %+v, %t", tc.token, got, ok, err, tc.want, tc.ok)
			}
		})
	}

	// Refusals: a taken name, a taken token. Neither changes anybody.
	_, _, err = s.CreateUser(t.Context(), admin, "bob", true, "")
	wantCode(t, err, store.CodeConflict)
	_, _, err = s.CreateUser(t.Context(), admin, "carol", true, chosen)
	wantCode(t, err, store.CodeConflict)
	if got, ok, _ := s.Authenticate(chosen); !ok || got.Name != "bob" || got.Admin {
		t.Errorf("after the refusals bob's token authenticates %+v, %t", got, ok)
	}

	users, err := s.Users()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range users {
		names = append(names, u.Name)
		if u.Name == "bob" && !reflect.DeepEqual(u, bobUser) {
			t.Errorf("Users has bob as %+v, CreateUser returned %+v", u, bobUser)
		}
	}
	if got := strings.Join(names, " "); got != "alice bob root" {
		t.Errorf("Users = %q, want alice bob root", got)
	}
}

// Secrets are stored as hashes only: neither a user's token nor an allocation
// token may appear anywhere in the database file.
func TestTokensStoredHashed(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.FileName)
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, userToken, err := s.CreateUser(t.Context(), admin, "alice", false, "")
	if err != nil {
		t.Fatal(err)
	}
	ready(t, s, "web1")
	first := allocate(t, s, alice, "web1", "juju")
	adopted, err := s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "web1", AgentName: "x", Token: first.Token})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{
		"user token":       userToken,
		"allocation token": first.Token,
		"adoption token":   adopted.Token,
	}
	for name, token := range tests {
		t.Run(name, func(t *testing.T) {
			if token == "" {
				t.Fatal("no token")
			}
			if bytes.Contains(raw, []byte(token)) {
				t.Errorf("the database file holds the plaintext %s", name)
			}
		})
	}
	// The scan can see stored strings: the hashes are there.
	for _, token := range []string{userToken, adopted.Token} {
		if !bytes.Contains(raw, []byte(store.HashToken(token))) {
			t.Errorf("hash of %q not found in the file: the scan is blind", token)
		}
	}
}
