package store

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

var userRE = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,63}$`)

// CreateUser adds a user with one token, named DefaultTokenName. An empty
// token makes one; the token is returned (it is shown once: only its hash is
// stored).
func (s *Store) CreateUser(ctx context.Context, actor Actor, name string, admin bool, token string) (User, string, error) {
	if !actor.Admin {
		return User{}, "", errorf(CodeForbidden, "only an admin may add users")
	}
	if !userRE.MatchString(name) {
		return User{}, "", errorf(CodeInvalid, "invalid user name %q: use lower-case letters, digits and . _ - (at most 64)", name)
	}
	if name == System.Name || name == "rackd/watchdog" {
		return User{}, "", errorf(CodeConflict, "user name %q is reserved", name)
	}
	if token == "" {
		token = NewToken()
	}
	u := User{Name: name, Admin: admin}
	tk := Token{ID: newTokenID(), User: name, Name: DefaultTokenName, Hash: HashToken(token)}
	err := s.update(ctx, func(t *Tx) error {
		if found, err := t.get(bucketUsers, []byte(name), &User{}); err != nil {
			return err
		} else if found {
			return errorf(CodeConflict, "user %q already exists", name)
		}
		if t.getRaw(bucketTokens, []byte(tk.Hash)) != nil {
			return errorf(CodeConflict, "that token is already in use: choose another, or let rackd make one")
		}
		u.Created = t.now
		if err := t.put(bucketUsers, []byte(name), u); err != nil {
			return err
		}
		return t.putToken(&tk)
	})
	if err != nil {
		return User{}, "", err
	}
	return u, token, nil
}

// HasUsers reports whether any user exists (false on a new database).
func (s *Store) HasUsers() (bool, error) {
	var any bool
	err := s.view(func(t *Tx) error {
		k, _ := t.tx.Bucket(bucketUsers).Cursor().First()
		any = k != nil
		return nil
	})
	return any, err
}

// Authenticate returns the user a token belongs to, with the token's id in
// Actor.Token. A revoked or expired token, or one that names nobody, is not
// found. A token last used more than LastUsedResolution ago has its
// LastUsed queued for writing; the caller does not wait for it.
func (s *Store) Authenticate(token string) (Actor, bool, error) {
	if token == "" {
		return Actor{}, false, nil
	}
	var (
		u     User
		tk    Token
		found bool
		now   time.Time
	)
	err := s.view(func(t *Tx) error {
		now = t.now
		id := t.getRaw(bucketTokens, []byte(HashToken(token)))
		if id == nil {
			return nil
		}
		if ok, err := t.get(bucketAPITokens, id, &tk); err != nil || !ok {
			return err
		}
		var err error
		found, err = t.get(bucketUsers, []byte(tk.User), &u)
		return err
	})
	if err != nil || !found || tk.Expired(now) || s.tokens.isRevoked(tk.ID) {
		return Actor{}, false, err
	}
	if now.Sub(tk.LastUsed) >= LastUsedResolution {
		s.touchToken(tk.ID)
	}
	return Actor{Name: u.Name, Admin: u.Admin, Token: tk.ID}, true, nil
}

// touchToken queues the write of a token's LastUsed, unless one is queued
// already. It never blocks: when the write queue is full the write is
// dropped (the next request tries again).
func (s *Store) touchToken(id string) {
	if !s.tokens.startTouch(id) {
		return
	}
	err := s.tryUpdateAsync(lastUsedDelay, func(t *Tx) error {
		var tk Token
		if found, err := t.get(bucketAPITokens, []byte(id), &tk); err != nil || !found {
			return err // revoked meanwhile: nothing to note
		}
		if t.now.Sub(tk.LastUsed) < LastUsedResolution {
			return nil
		}
		tk.LastUsed = t.now.Truncate(time.Second)
		return t.put(bucketAPITokens, []byte(id), tk)
	}, func(error) { s.tokens.endTouch(id) })
	if err != nil {
		s.tokens.endTouch(id)
	}
}

// Users lists the users by name.
func (s *Store) Users() ([]User, error) {
	var out []User
	err := s.view(func(t *Tx) error {
		return t.tx.Bucket(bucketUsers).ForEach(func(k, _ []byte) error {
			var u User
			if _, err := t.get(bucketUsers, k, &u); err != nil {
				return err
			}
			out = append(out, u)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// RemoveUser deletes a user, with their tokens and SSH keys, and returns it
// as it was. Their tokens are refused from the moment the removal is
// decided, as a revocation's (RevokeToken), and the streams they opened end
// (CheckRight: "user NAME has been removed"). Only an admin may remove
// users. Refused: an unknown user (CodeNotFound); the last admin, who alone
// could add users again; a user who holds machines (CodeConflict, naming
// them: release them first, or have someone adopt them).
func (s *Store) RemoveUser(ctx context.Context, actor Actor, name string) (User, error) {
	if !actor.Admin {
		return User{}, errorf(CodeForbidden, "only an admin may remove users")
	}
	// What goes: decided here, refused at once, and decided again in the
	// transaction (a token made meanwhile goes too).
	tokensOf := func(t *Tx) ([]Token, error) {
		var out []Token
		err := t.forEachToken(func(tk Token) error {
			if tk.User == name {
				out = append(out, tk)
			}
			return nil
		})
		return out, err
	}
	var u User
	var ids []string
	err := s.view(func(t *Tx) error {
		if err := t.checkRemoveUser(name, &u); err != nil {
			return err
		}
		ts, err := tokensOf(t)
		for _, tk := range ts {
			ids = append(ids, tk.ID)
		}
		return err
	})
	if err != nil {
		return User{}, err
	}
	err = s.revoke(ctx, actor, ids, fmt.Sprintf("user %s has been removed", name), func(t *Tx) error {
		if err := t.checkRemoveUser(name, &u); err != nil {
			return err
		}
		ts, err := tokensOf(t)
		if err != nil {
			return err
		}
		keys, err := t.sshKeysOf(name)
		if err != nil {
			return err
		}
		for _, tk := range ts {
			if err := t.deleteToken(tk); err != nil {
				return err
			}
		}
		for _, k := range keys {
			if err := t.del(bucketSSHKeys, sshKeyKey(name, k.ID)); err != nil {
				return err
			}
		}
		return t.del(bucketUsers, []byte(name))
	})
	if err != nil {
		return User{}, err
	}
	return u, nil
}

// checkRemoveUser checks that name may be removed in t and reads it into u.
func (t *Tx) checkRemoveUser(name string, u *User) error {
	if found, err := t.get(bucketUsers, []byte(name), u); err != nil {
		return err
	} else if !found {
		return errorf(CodeNotFound, "no user %q", name)
	}
	admins := 0
	err := t.tx.Bucket(bucketUsers).ForEach(func(k, _ []byte) error {
		var o User
		if _, err := t.get(bucketUsers, k, &o); err != nil {
			return err
		}
		if o.Admin {
			admins++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if u.Admin && admins <= 1 {
		return errorf(CodeConflict, "user %s is the last admin: add another admin first", name)
	}
	var held []string
	err = t.tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
		var m struct {
			Hostname string `json:"hostname"`
			Owner    string `json:"owner"`
		}
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("decode machine %s: %w", k, err)
		}
		if m.Owner == name {
			held = append(held, m.Hostname)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(held) > 0 {
		sort.Strings(held)
		more := ""
		if len(held) > 10 {
			more = fmt.Sprintf(" and %d more", len(held)-10)
			held = held[:10]
		}
		return errorf(CodeConflict, "user %s holds machines %s%s: release them first", name, strings.Join(held, ", "), more)
	}
	return nil
}
