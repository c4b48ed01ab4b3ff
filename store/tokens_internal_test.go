package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A write queued behind a slow commit on behalf of a token is refused when
// its turn comes if the token was revoked, or expired, while it waited; a
// token still good goes through.
func TestQueuedWriteReauthorised(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		// meanwhile runs while the write waits; it may queue writes of its
		// own (wait for them with waitQueued).
		meanwhile func(t *testing.T, s *Store, clock *testClock, tk Token) (done func())
		want      Code
	}{
		"still valid": {func(*testing.T, *Store, *testClock, Token) func() { return func() {} }, ""},
		"revoked": {func(t *testing.T, s *Store, _ *testClock, tk Token) func() {
			errc := make(chan error, 1)
			go func() {
				_, err := s.RevokeToken(context.Background(), Actor{Name: "root", Admin: true}, tk.ID)
				errc <- err
			}()
			waitQueued(t, s, 2) // the write, then the revocation
			return func() {
				if err := <-errc; err != nil {
					t.Errorf("revoke: %v", err)
				}
			}
		}, CodeUnauthorized},
		"revoked by itself": {func(t *testing.T, s *Store, _ *testClock, tk Token) func() {
			errc := make(chan error, 1)
			self := Actor{Name: "alice", Token: tk.ID}
			go func() {
				_, err := s.RevokeToken(WithActor(context.Background(), self), self, tk.ID)
				errc <- err
			}()
			waitQueued(t, s, 2)
			return func() {
				if err := <-errc; err != nil {
					t.Errorf("a token revoking itself: %v", err)
				}
			}
		}, CodeUnauthorized},
		"expired": {func(_ *testing.T, _ *Store, c *testClock, _ Token) func() {
			c.set(t0.Add(time.Hour))
			return func() {}
		}, CodeUnauthorized},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := &testClock{now: t0}
			s := openTest(t, Options{Now: clock.get}, true)
			ctx := context.Background()
			if _, _, err := s.CreateUser(ctx, testAdmin, "alice", false, ""); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.CreateUser(ctx, testAdmin, "root", true, ""); err != nil {
				t.Fatal(err)
			}
			tk, secret, err := s.CreateToken(ctx, Actor{Name: "alice"}, NewTokenRequest{Name: "ci", Expires: t0.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			who, ok, err := s.Authenticate(secret)
			if err != nil || !ok {
				t.Fatalf("authenticate: %t, %v", ok, err)
			}
			// The slow request: it holds the committer until released.
			release := blockCommitter(t, s)
			var wg sync.WaitGroup
			// The request authenticated with tk, queued behind it.
			result := make(chan error, 1)
			wg.Go(func() {
				_, _, err := s.CreateToken(WithActor(ctx, who), who, NewTokenRequest{Name: "made-while-queued"})
				result <- err
			})
			waitQueued(t, s, 1)
			done := tc.meanwhile(t, s, clock, tk)
			release()
			err = <-result
			if tc.want == "" && err != nil {
				t.Errorf("queued write: %v, want success", err)
			}
			if tc.want != "" && CodeOf(err) != tc.want {
				t.Errorf("queued write: %v, want %s", err, tc.want)
			}
			done()
			wg.Wait()
			ts, err := s.Tokens(Actor{Name: "alice"}, "")
			if err != nil {
				t.Fatal(err)
			}
			made := false
			for _, x := range ts {
				made = made || x.Name == "made-while-queued"
			}
			if made != (tc.want == "") {
				t.Errorf("the queued write made its token: %t", made)
			}
		})
	}
}

// A revoked token is refused by Authenticate from the moment the revocation
// is decided, before its deletion commits.
func TestRevokedAtOnce(t *testing.T) {
	s := openTest(t, Options{}, true)
	ctx := context.Background()
	if _, _, err := s.CreateUser(ctx, testAdmin, "alice", false, ""); err != nil {
		t.Fatal(err)
	}
	tk, secret, err := s.CreateToken(ctx, Actor{Name: "alice"}, NewTokenRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	release := blockCommitter(t, s)
	var wg sync.WaitGroup
	revoked := make(chan error, 1)
	wg.Go(func() {
		_, err := s.RevokeToken(ctx, Actor{Name: "alice"}, tk.ID)
		revoked <- err
	})
	waitQueued(t, s, 1)
	if _, ok, _ := s.Authenticate(secret); ok {
		t.Error("a token whose revocation waits for the committer still authenticates")
	}
	release()
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if _, ok, _ := s.Authenticate(secret); ok {
		t.Error("a revoked token authenticates")
	}
	if s.tokens.isRevoked(tk.ID) {
		t.Error("the in-memory mark outlives the committed revocation")
	}
}

// queued waits until n operations wait for the committer.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) get() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
