package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var tokT0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// tokenStore is a store with users alice and bob (plain) and root (admin),
// on a clock the test moves. secrets has each user's first token.
func tokenStore(t *testing.T, opts ...func(*store.Options)) (s *store.Store, c *clock, secrets map[string]string) {
	t.Helper()
	c = &clock{now: tokT0}
	s = storetest.New(t, append([]func(*store.Options){func(o *store.Options) { o.Now = c.Now }}, opts...)...)
	secrets = map[string]string{}
	for _, u := range []struct {
		name  string
		admin bool
	}{{"alice", false}, {"bob", false}, {"root", true}} {
		_, secret, err := s.CreateUser(t.Context(), admin, u.name, u.admin, "")
		if err != nil {
			t.Fatal(err)
		}
		secrets[u.name] = secret
	}
	return s, c, secrets
}

var root = store.Actor{Name: "root", Admin: true}

func TestCreateToken(t *testing.T) {
	tests := map[string]struct {
		actor store.Actor
		req   store.NewTokenRequest
		code  store.Code // "" for success
	}{
		"own":                    {alice, store.NewTokenRequest{Name: "ci"}, ""},
		"own, expiring":          {alice, store.NewTokenRequest{Name: "ci", Expires: tokT0.Add(time.Hour)}, ""},
		"name with punctuation":  {alice, store.NewTokenRequest{Name: "ci/jenkins@rack-2:main.v1+x_y"}, ""},
		"64-character name":      {alice, store.NewTokenRequest{Name: strings.Repeat("n", 64)}, ""},
		"admin for another user": {root, store.NewTokenRequest{User: "alice", Name: "ci"}, ""},
		"chosen secret":          {alice, store.NewTokenRequest{Name: "ci", Secret: "a-secret-chosen-by-alice-0123456789"}, ""},
		"user for another user":  {alice, store.NewTokenRequest{User: "bob", Name: "ci"}, store.CodeForbidden},
		"admin, unknown user":    {root, store.NewTokenRequest{User: "carol", Name: "ci"}, store.CodeNotFound},
		"actor without a user":   {store.Actor{Name: "carol"}, store.NewTokenRequest{Name: "ci"}, store.CodeNotFound},
		"empty name":             {alice, store.NewTokenRequest{}, store.CodeInvalid},
		"65-character name":      {alice, store.NewTokenRequest{Name: strings.Repeat("n", 65)}, store.CodeInvalid},
		"space in name":          {alice, store.NewTokenRequest{Name: "my ci"}, store.CodeInvalid},
		"dash first":             {alice, store.NewTokenRequest{Name: "-ci"}, store.CodeInvalid},
		"newline":                {alice, store.NewTokenRequest{Name: "ci\n"}, store.CodeInvalid},
		"expired already":        {alice, store.NewTokenRequest{Name: "ci", Expires: tokT0.Add(-time.Second)}, store.CodeInvalid},
		"expires now":            {alice, store.NewTokenRequest{Name: "ci", Expires: tokT0}, store.CodeInvalid},
		"name taken":             {alice, store.NewTokenRequest{Name: store.DefaultTokenName}, store.CodeConflict},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, _, _ := tokenStore(t)
			before, _ := s.Tokens(root, "alice")
			tk, secret, err := s.CreateToken(t.Context(), tc.actor, tc.req)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				if after, _ := s.Tokens(root, "alice"); len(after) != len(before) {
					t.Errorf("a refused CreateToken left tokens %+v", after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantUser := tc.req.User
			if wantUser == "" {
				wantUser = tc.actor.Name
			}
			if tk.User != wantUser || tk.Name != tc.req.Name || !tk.Expires.Equal(tc.req.Expires) ||
				!tk.Created.Equal(tokT0) || !strings.HasPrefix(tk.ID, "t-") || tk.Hash != store.HashToken(secret) {
				t.Errorf("CreateToken = %+v", tk)
			}
			if tc.req.Secret != "" && secret != tc.req.Secret {
				t.Errorf("secret %q, want the chosen one", secret)
			}
			got, ok, err := s.Authenticate(secret)
			if err != nil || !ok || got != (store.Actor{Name: wantUser, Admin: false, Token: tk.ID}) {
				t.Errorf("Authenticate(new token) = %+v, %t, %v", got, ok, err)
			}
		})
	}
}

// A token's life: made, used, listed, expired or revoked; who may see and
// revoke it.
func TestTokenLifecycle(t *testing.T) {
	s, c, secrets := tokenStore(t)
	ctx := t.Context()
	ci, ciSecret, err := s.CreateToken(ctx, alice, store.NewTokenRequest{Name: "ci", Expires: tokT0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	laptop, laptopSecret, err := s.CreateToken(ctx, alice, store.NewTokenRequest{Name: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	bobs, bobSecret, err := s.CreateToken(ctx, bob, store.NewTokenRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	names := func(actor store.Actor, user string) string {
		t.Helper()
		ts, err := s.Tokens(actor, user)
		if err != nil {
			t.Fatalf("Tokens(%s, %q): %v", actor.Name, user, err)
		}
		var out []string
		for _, tk := range ts {
			if tk.User != user && user != "" {
				t.Errorf("Tokens(%q) lists %s's token %s", user, tk.User, tk.ID)
			}
			out = append(out, tk.Name)
		}
		return strings.Join(out, " ")
	}
	listings := map[string]struct {
		actor store.Actor
		user  string
		want  string
		code  store.Code
	}{
		"own":                 {alice, "", "ci default laptop", ""},
		"own by name":         {alice, "alice", "ci default laptop", ""},
		"admin, another user": {root, "bob", "ci default", ""},
		"admin, own":          {root, "", "default", ""},
		"user, another user":  {alice, "bob", "", store.CodeForbidden},
		"admin, unknown user": {root, "carol", "", store.CodeNotFound},
	}
	for name, tc := range listings {
		t.Run("list/"+name, func(t *testing.T) {
			if tc.code != "" {
				_, err := s.Tokens(tc.actor, tc.user)
				wantCode(t, err, tc.code)
				return
			}
			if got := names(tc.actor, tc.user); got != tc.want {
				t.Errorf("Tokens = %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("list every user's", func(t *testing.T) {
		ts, err := s.AllTokens(root)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tk := range ts {
			got = append(got, tk.User+"/"+tk.Name)
		}
		if want := "alice/ci alice/default alice/laptop bob/ci bob/default root/default"; strings.Join(got, " ") != want {
			t.Errorf("AllTokens = %q, want %q", strings.Join(got, " "), want)
		}
		_, err = s.AllTokens(alice)
		wantCode(t, err, store.CodeForbidden)
	})

	works := func(secret string) bool {
		t.Helper()
		_, ok, err := s.Authenticate(secret)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Expiry: the token works until the instant it expires, and is still
	// listed (so that its owner sees why it stopped).
	c.Add(time.Hour - time.Second)
	if !works(ciSecret) {
		t.Fatal("ci token refused a second before it expires")
	}
	c.Add(time.Second)
	if works(ciSecret) {
		t.Fatal("ci token still works at its expiry")
	}
	if got := names(alice, ""); got != "ci default laptop" {
		t.Errorf("after expiry alice's tokens are %q", got)
	}

	revokes := []struct {
		name  string
		actor store.Actor
		id    string
		code  store.Code
	}{
		{"another user's", alice, bobs.ID, store.CodeNotFound},
		{"unknown", alice, "t-nothing", store.CodeNotFound},
		{"own", alice, laptop.ID, ""},
		{"own, again", alice, laptop.ID, store.CodeNotFound},
		{"own, expired", alice, ci.ID, ""},
		{"admin, another user's", root, bobs.ID, ""},
	}
	for _, tc := range revokes {
		_, err := s.RevokeToken(ctx, tc.actor, tc.id)
		if tc.code != "" {
			if store.CodeOf(err) != tc.code {
				t.Errorf("revoke %s: %v, want %s", tc.name, err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("revoke %s: %v", tc.name, err)
		}
	}
	for secret, want := range map[string]bool{laptopSecret: false, ciSecret: false, bobSecret: false} {
		if works(secret) != want {
			t.Errorf("after the revocations a token works: %t, want %t", !want, want)
		}
	}
	if !works(secrets["bob"]) {
		t.Error("bob's other token stopped working too")
	}
	if got := names(alice, ""); got != "default" {
		t.Errorf("after the revocations alice's tokens are %q", got)
	}
	// The revoked token's secret may be used again as a new token: it names
	// nobody any more.
	if _, _, err := s.CreateToken(ctx, bob, store.NewTokenRequest{Name: "again", Secret: laptopSecret}); err != nil {
		t.Errorf("reuse a revoked secret: %v", err)
	}
}

// LastUsed is written at most once per token per LastUsedResolution, in the
// background: many requests cost one write.
func TestTokenLastUsed(t *testing.T) {
	var commits atomic.Int64
	s, c, _ := tokenStore(t, func(o *store.Options) { o.OnCommit = func(int, time.Duration) { commits.Add(1) } })
	tk, secret, err := s.CreateToken(t.Context(), alice, store.NewTokenRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() time.Time {
		ts, err := s.Tokens(alice, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			if x.ID == tk.ID {
				return x.LastUsed
			}
		}
		t.Fatal("token gone")
		return time.Time{}
	}
	waitLastUsed := func(want time.Time) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !lastUsed().Equal(want) {
			if time.Now().After(deadline) {
				t.Fatalf("LastUsed = %v, want %v", lastUsed(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !lastUsed().IsZero() {
		t.Fatalf("a new token has LastUsed %v", lastUsed())
	}
	before := commits.Load()
	for range 50 {
		if _, ok, _ := s.Authenticate(secret); !ok {
			t.Fatal("refused")
		}
	}
	waitLastUsed(tokT0)
	// A write after the last-used one (nudged, so it commits now) proves
	// that no other last-used write is still queued: the queue is FIFO.
	if _, _, err := s.CreateToken(t.Context(), bob, store.NewTokenRequest{Name: "marker"}); err != nil {
		t.Fatal(err)
	}
	if n := commits.Load() - before; n != 2 {
		t.Errorf("50 authentications and a write made %d commits, want 2", n)
	}
	c.Add(LastUsedHalf)
	s.Authenticate(secret)
	c.Add(store.LastUsedResolution - LastUsedHalf)
	s.Authenticate(secret)
	waitLastUsed(tokT0.Add(store.LastUsedResolution))
}

// LastUsedHalf is less than store.LastUsedResolution.
const LastUsedHalf = store.LastUsedResolution / 2

// Rotating a token: the new one works, the old one and earlier rotations
// stop, in one step.
func TestReplaceTokens(t *testing.T) {
	s, _, users := tokenStore(t)
	ctx := t.Context()
	oldSecret := users["root"]
	var secrets []string
	for i := range 3 {
		secret := store.NewToken()
		tk, gone, err := s.ReplaceTokens(ctx, store.System, "root", "admin.token", secret, oldSecret)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Name != "admin.token" || tk.User != "root" || len(gone) != 1 {
			t.Errorf("rotation %d: %+v, deleted %v; want one deleted", i, tk, gone)
		}
		secrets = append(secrets, oldSecret)
		oldSecret = secret
	}
	for i, secret := range secrets {
		if _, ok, _ := s.Authenticate(secret); ok {
			t.Errorf("secret %d still works after rotation", i)
		}
	}
	if a, ok, _ := s.Authenticate(oldSecret); !ok || a.Name != "root" || !a.Admin {
		t.Errorf("the last rotation's token: %+v, %t", a, ok)
	}
	// Only tokens of that user go: a secret of another user's is ignored.
	bobSecret := users["bob"]
	if _, gone, err := s.ReplaceTokens(ctx, store.System, "root", "admin.token", store.NewToken(), bobSecret); err != nil || len(gone) != 1 {
		t.Fatalf("rotate naming bob's secret: deleted %v, %v", gone, err)
	}
	if _, ok, _ := s.Authenticate(bobSecret); !ok {
		t.Error("rotating root's token revoked bob's")
	}
	if _, _, err := s.ReplaceTokens(ctx, alice, "root", "admin.token", store.NewToken(), ""); store.CodeOf(err) != store.CodeForbidden {
		t.Errorf("a plain user replaces root's token: %v", err)
	}
}

// Secrets of named tokens are stored as hashes only.
func TestNamedTokensStoredHashed(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.FileName)
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateUser(t.Context(), admin, "alice", false, ""); err != nil {
		t.Fatal(err)
	}
	tk, secret, err := s.CreateToken(t.Context(), alice, store.NewTokenRequest{Name: "ci", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	rotated := store.NewToken()
	if _, _, err := s.ReplaceTokens(t.Context(), store.System, "alice", "file", rotated, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string]string{"created": secret, "rotated": rotated} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the database file holds the plaintext of the %s token", name)
		}
	}
	if !bytes.Contains(raw, []byte(tk.Hash)) || !bytes.Contains(raw, []byte(tk.ID)) {
		t.Error("the token's hash or id is not in the file: the scan is blind")
	}
}
