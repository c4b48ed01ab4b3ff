package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"
)

// API tokens. A user holds any number of named tokens, each possibly
// expiring; a token is stored as its hash only (the secret is shown once,
// when it is made). A revoked or expired token stops working at once, for
// requests still waiting for the committer too:
//
//   - Revoke marks the token dead in memory before it queues the deletion, so
//     Authenticate refuses it from that moment, not from the commit.
//   - Every write queued with a ctx from WithActor is authorised again by the
//     committer, inside the transaction that makes it (checkCaller): a
//     request authenticated before the revocation, then queued behind a slow
//     commit, is refused when its turn comes.

// Token is one API credential of a user. Only its hash is kept.
type Token struct {
	ID      string    `json:"id"`
	User    string    `json:"user"`
	Name    string    `json:"name"`
	Hash    string    `json:"hash"`
	Created time.Time `json:"created"`
	// Expires is when the token stops working; zero: never.
	Expires time.Time `json:"expires,omitzero"`
	// LastUsed is when the token last authenticated a request, to
	// LastUsedResolution: it is written at most that often per token.
	LastUsed time.Time `json:"last_used,omitzero"`
}

// Expired reports whether the token no longer works at now.
func (tk Token) Expired(now time.Time) bool {
	return !tk.Expires.IsZero() && !now.Before(tk.Expires)
}

// LastUsedResolution is how stale a token's LastUsed may be: a token in use
// costs one write per this period, not one per request.
const LastUsedResolution = time.Minute

// lastUsedDelay is how long a last-used write may wait for others to share
// its commit: it is bookkeeping, and nobody waits for it.
const lastUsedDelay = 500 * time.Millisecond

// DefaultTokenName is the name of the token a user is created with.
const DefaultTokenName = "default"

var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@:/+-]{0,63}$`)

func newTokenID() string {
	b := make([]byte, 5)
	rand.Read(b) // never fails (crypto/rand panics instead)
	return "t-" + idEncoding.EncodeToString(b)
}

// tokenState is what the store keeps in memory about tokens.
type tokenState struct {
	mu sync.Mutex
	// revoked holds tokens whose revocation is decided but maybe not yet
	// committed, with why (for CheckRight). An entry goes once the
	// deletion is durable; it stays when the commit failed, so that the
	// token is refused until a restart (failing closed) and the revocation
	// can be retried.
	revoked map[string]string
	// touching holds tokens with a last-used write queued.
	touching map[string]bool
}

func newTokenState() *tokenState {
	return &tokenState{revoked: map[string]string{}, touching: map[string]bool{}}
}

func (ts *tokenState) isRevoked(id string) bool { return ts.revokedWhy(id) != "" }

// revokedWhy is why id's revocation was decided; "" when it was not.
func (ts *tokenState) revokedWhy(id string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.revoked[id]
}

// setRevoked marks ids revoked for why; an empty why unmarks them.
func (ts *tokenState) setRevoked(ids []string, why string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, id := range ids {
		if why != "" {
			if why == revokedToken {
				ts.revoked[id] = "token " + id + " has been revoked"
			} else {
				ts.revoked[id] = why
			}
		} else {
			delete(ts.revoked, id)
		}
	}
}

// revokedToken is setRevoked's why for a token revoked for itself: the
// reason names it.
const revokedToken = "revoked"

// startTouch reports whether the caller should queue a last-used write for
// id (none is queued yet).
func (ts *tokenState) startTouch(id string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.touching[id] {
		return false
	}
	ts.touching[id] = true
	return true
}

func (ts *tokenState) endTouch(id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.touching, id)
}

type actorKey struct{}

// WithActor returns a ctx whose writes are made on behalf of a, who
// authenticated with a token (a.Token): each write queued with it runs only
// if that token is still valid when the committer reaches it, and is
// refused with CodeUnauthorized otherwise. An actor without a token (rackd
// itself) is not checked.
func WithActor(ctx context.Context, a Actor) context.Context {
	if a.Token == "" {
		return ctx
	}
	return context.WithValue(ctx, actorKey{}, a.Token)
}

// withoutActor drops the check WithActor asked for (a revocation must not be
// refused because of itself).
func withoutActor(ctx context.Context) context.Context {
	return context.WithValue(ctx, actorKey{}, "")
}

// checkCaller refuses an operation queued on behalf of a token that has been
// revoked or has expired since the request was authenticated.
func (s *Store) checkCaller(ctx context.Context, t *Tx) error {
	id, _ := ctx.Value(actorKey{}).(string)
	if id == "" {
		return nil
	}
	return s.checkToken(t, id)
}

func (s *Store) checkToken(t *Tx, id string) error {
	if s.tokens.isRevoked(id) {
		return errorf(CodeUnauthorized, "token %s has been revoked", id)
	}
	var tk Token
	found, err := t.get(bucketAPITokens, []byte(id), &tk)
	switch {
	case err != nil:
		return err
	case !found:
		return errorf(CodeUnauthorized, "token %s has been revoked", id)
	case tk.Expired(t.now):
		return errorf(CodeUnauthorized, "token %s has expired", id)
	}
	return nil
}

// NewTokenRequest asks for a token.
type NewTokenRequest struct {
	// User is whose token it is; empty: the actor's own. Only an admin may
	// make tokens for someone else.
	User string
	Name string
	// Expires is when it stops working; zero: never. It must be later than
	// now.
	Expires time.Time
	// Secret is the token itself; empty: a new random one. (rackd chooses
	// the admin token file's secret before the user exists.)
	Secret string
}

// CreateToken makes a token and returns it with its secret, which is not
// kept anywhere: it is shown once.
func (s *Store) CreateToken(ctx context.Context, actor Actor, req NewTokenRequest) (Token, string, error) {
	if req.User == "" {
		req.User = actor.Name
	}
	if req.User != actor.Name && !actor.Admin {
		return Token{}, "", errorf(CodeForbidden, "only an admin may make tokens for another user")
	}
	if !tokenNameRE.MatchString(req.Name) {
		return Token{}, "", errorf(CodeInvalid, "invalid token name %q: use 1 to 64 letters, digits and _ . @ : / + - (not first)", req.Name)
	}
	secret := req.Secret
	if secret == "" {
		secret = NewToken()
	}
	tk := Token{ID: newTokenID(), User: req.User, Name: req.Name, Hash: HashToken(secret), Expires: req.Expires.UTC()}
	err := s.update(ctx, func(t *Tx) error {
		if err := t.checkNewToken(tk, nil); err != nil {
			return err
		}
		return t.putToken(&tk)
	})
	if err != nil {
		return Token{}, "", err
	}
	return tk, secret, nil
}

// checkNewToken checks every rule a new token must meet in t, where the
// tokens replaced are about to go.
func (t *Tx) checkNewToken(tk Token, replaced []string) error {
	var u User
	if found, err := t.get(bucketUsers, []byte(tk.User), &u); err != nil {
		return err
	} else if !found {
		return errorf(CodeNotFound, "no user %q", tk.User)
	}
	if !tk.Expires.IsZero() && !tk.Expires.After(t.now) {
		return errorf(CodeInvalid, "expiry %s is not in the future", tk.Expires.Format(time.RFC3339))
	}
	// A token names one user: indexing it again would hand the first
	// user's logins to the second.
	if id := t.getRaw(bucketTokens, []byte(tk.Hash)); id != nil && !slices.Contains(replaced, string(id)) {
		return errorf(CodeConflict, "that token is already in use: choose another, or let rackd make one")
	}
	var clash bool
	err := t.forEachToken(func(o Token) error {
		clash = clash || (o.User == tk.User && o.Name == tk.Name && !slices.Contains(replaced, o.ID))
		return nil
	})
	if err != nil {
		return err
	}
	if clash {
		return errorf(CodeConflict, "user %s already has a token named %q: revoke it or choose another name", tk.User, tk.Name)
	}
	return nil
}

// putToken stores a new token and its index entry.
func (t *Tx) putToken(tk *Token) error {
	tk.Created = t.now
	if err := t.put(bucketAPITokens, []byte(tk.ID), tk); err != nil {
		return err
	}
	return t.putRaw(bucketTokens, []byte(tk.Hash), []byte(tk.ID))
}

func (t *Tx) deleteToken(tk Token) error {
	if err := t.del(bucketTokens, []byte(tk.Hash)); err != nil {
		return err
	}
	return t.del(bucketAPITokens, []byte(tk.ID))
}

// forEachToken calls fn with every token. It decodes what the walk read
// rather than reading each token again: on an engine that compares every
// key a transaction read (etcd, 128 comparisons and writes a
// transaction), a read per token would make every new token's
// transaction grow with the rack's tokens; the walk is one comparison.
func (t *Tx) forEachToken(fn func(Token) error) error {
	b := t.bucket(bucketAPITokens)
	return b.ForEach(func(k, v []byte) error {
		var tk Token
		if err := json.Unmarshal(v, &tk); err != nil {
			return fmt.Errorf("decode %s/%s: %w", bucketAPITokens, k, err)
		}
		return fn(tk)
	})
}

// Tokens lists a user's tokens by name (hashes included: callers outside
// the store leave them out). An empty user is the actor's own; only an
// admin may list another user's.
func (s *Store) Tokens(actor Actor, user string) ([]Token, error) {
	if user == "" {
		user = actor.Name
	}
	if user != actor.Name && !actor.Admin {
		return nil, errorf(CodeForbidden, "only an admin may list another user's tokens")
	}
	var out []Token
	err := s.view(func(t *Tx) error {
		if found, err := t.get(bucketUsers, []byte(user), &User{}); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "no user %q", user)
		}
		return t.forEachToken(func(tk Token) error {
			if tk.User == user {
				out = append(out, tk)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// AllTokens lists every user's tokens, by user then name (hashes included:
// callers outside the store leave them out). Only an admin may.
func (s *Store) AllTokens(actor Actor) ([]Token, error) {
	if !actor.Admin {
		return nil, errorf(CodeForbidden, "only an admin may list every user's tokens")
	}
	var out []Token
	err := s.view(func(t *Tx) error {
		return t.forEachToken(func(tk Token) error {
			out = append(out, tk)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].User != out[j].User {
			return out[i].User < out[j].User
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// RevokeToken deletes a token; it is refused from the moment the revocation
// is decided (see the top of this file). A user may revoke their own tokens,
// an admin anyone's; to anyone else the token does not exist (CodeNotFound,
// so that ids cannot be probed).
func (s *Store) RevokeToken(ctx context.Context, actor Actor, id string) (Token, error) {
	var tk Token
	err := s.view(func(t *Tx) error {
		found, err := t.get(bucketAPITokens, []byte(id), &tk)
		if err != nil {
			return err
		}
		if !found || (tk.User != actor.Name && !actor.Admin) {
			return errorf(CodeNotFound, "no token %q", id)
		}
		return nil
	})
	if err != nil {
		return Token{}, err
	}
	err = s.revoke(ctx, actor, []string{id}, revokedToken, func(t *Tx) error {
		var now Token
		if found, err := t.get(bucketAPITokens, []byte(id), &now); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "no token %q", id)
		}
		return t.deleteToken(now)
	})
	if err != nil {
		return Token{}, err
	}
	return tk, nil
}

// revoke marks ids dead at once, for why (revokedToken: for themselves),
// then runs fn (which deletes them) as actor. The actor's own token is
// checked by fn's caller rules, not by checkCaller: revoking the token one
// calls with must work. The streams opened with the tokens are told at
// once (AccessChanged), and again at the commit.
func (s *Store) revoke(ctx context.Context, actor Actor, ids []string, why string, fn func(*Tx) error) error {
	s.tokens.setRevoked(ids, why)
	s.access.fire()
	// Once decided, a revocation is not undone by a caller that hangs up.
	err := s.update(withoutActor(context.WithoutCancel(ctx)), func(t *Tx) error {
		if actor.Token != "" && !slices.Contains(ids, actor.Token) {
			if err := s.checkToken(t, actor.Token); err != nil {
				return err
			}
		}
		if err := fn(t); err != nil {
			return err
		}
		t.afterCommit(func() {
			s.tokens.setRevoked(ids, "")
			s.access.fire()
		})
		return nil
	})
	if err != nil && CodeOf(err) != "" {
		// Refused: nothing is deleted, so nothing is held dead (a token
		// already gone is refused either way).
		s.tokens.setRevoked(ids, "")
	}
	return err
}

// ReplaceTokens gives user a new token named name with the given secret and
// deletes, in the same transaction, the user's other tokens of that name and
// the token whose secret is old (when it belongs to user). rackd rotates the
// admin token file with it: the old file's token and any earlier rotation's
// stop working together, at once. It returns the new token and the ids of
// those deleted.
func (s *Store) ReplaceTokens(ctx context.Context, actor Actor, user, name, secret, old string) (Token, []string, error) {
	if !actor.Admin {
		return Token{}, nil, errorf(CodeForbidden, "only an admin may replace tokens")
	}
	if !tokenNameRE.MatchString(name) {
		return Token{}, nil, errorf(CodeInvalid, "invalid token name %q", name)
	}
	oldHash := ""
	if old != "" {
		oldHash = HashToken(old)
	}
	// What goes: decided here, marked dead at once, and decided again in
	// the transaction (a token of that name made meanwhile goes too).
	doomed := func(t *Tx) ([]Token, error) {
		var out []Token
		err := t.forEachToken(func(tk Token) error {
			if tk.User == user && (tk.Name == name || tk.Hash == oldHash) {
				out = append(out, tk)
			}
			return nil
		})
		return out, err
	}
	var ids []string
	err := s.view(func(t *Tx) error {
		ts, err := doomed(t)
		for _, tk := range ts {
			ids = append(ids, tk.ID)
		}
		return err
	})
	if err != nil {
		return Token{}, nil, err
	}
	tk := Token{ID: newTokenID(), User: user, Name: name, Hash: HashToken(secret)}
	var deleted []string
	err = s.revoke(ctx, actor, ids, revokedToken, func(t *Tx) error {
		// A token of that name made since the look above goes too.
		ts, err := doomed(t)
		if err != nil {
			return err
		}
		deleted = deleted[:0]
		for _, o := range ts {
			deleted = append(deleted, o.ID)
		}
		if err := t.checkNewToken(tk, deleted); err != nil {
			return err
		}
		for _, o := range ts {
			if err := t.deleteToken(o); err != nil {
				return err
			}
		}
		return t.putToken(&tk)
	})
	if err != nil {
		return Token{}, nil, err
	}
	return tk, deleted, nil
}
