package store

import (
	"context"
	"regexp"
	"sort"
)

var userRE = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,63}$`)

// CreateUser adds a user. An empty token makes one; the token is returned
// (it is shown once: only its hash is stored).
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
	u := User{Name: name, Admin: admin, TokenHash: HashToken(token)}
	err := s.update(ctx, func(t *Tx) error {
		if found, err := t.get(bucketUsers, []byte(name), &User{}); err != nil {
			return err
		} else if found {
			return errorf(CodeConflict, "user %q already exists", name)
		}
		// A token names one user: indexing it again would hand the first
		// user's logins to the second.
		if t.getRaw(bucketTokens, []byte(u.TokenHash)) != nil {
			return errorf(CodeConflict, "that token is already in use: choose another, or let rackd make one")
		}
		u.Created = t.now
		if err := t.put(bucketUsers, []byte(name), u); err != nil {
			return err
		}
		return t.putRaw(bucketTokens, []byte(u.TokenHash), []byte(name))
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

// Authenticate returns the user a token belongs to.
func (s *Store) Authenticate(token string) (Actor, bool, error) {
	if token == "" {
		return Actor{}, false, nil
	}
	var (
		u     User
		found bool
	)
	err := s.view(func(t *Tx) error {
		name := t.getRaw(bucketTokens, []byte(HashToken(token)))
		if name == nil {
			return nil
		}
		var err error
		found, err = t.get(bucketUsers, name, &u)
		return err
	})
	if err != nil || !found {
		return Actor{}, false, err
	}
	return Actor{Name: u.Name, Admin: u.Admin}, true, nil
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
