package store

import (
	"sync"
	"time"
)

// Rights of long-lived streams. A request is authorised once, when it
// arrives; a stream that stays open (a machine's serial console, the web
// UI's live updates) must stop as soon as what authorised it stops holding.
// A Right is what the stream was opened with; CheckRight says whether it
// still holds and, when not, why. The store signals (AccessChanged) every
// change a right may rest on: a token revoked, a user removed, and, through
// the machine events (OnEvent), a machine allocated, adopted or released.
// A token's expiry is a moment, not a change: CheckRight gives it, for the
// holder to check again then.

// Right is what a long-lived stream was authorised by.
type Right struct {
	// Actor is who opened it, with the token they authenticated with
	// (Actor.Token; none: rackd itself, which holds no token).
	Actor Actor
	// Machine is the id of the machine the right is on (a console); empty
	// for a right that rests on the token and its user alone.
	Machine string
	// Hostname is the machine's, for the reasons given.
	Hostname string
	// alloc is, for a right on a machine granted by its allocation (not by
	// being an admin), the allocation it was granted on: a release, even
	// one followed by a new allocation to the same user, ends it, and so
	// does another user's adoption.
	alloc *Allocation
}

// UserRight is the right of a stream opened with a token alone (the web
// UI's live updates): it holds while the token is neither revoked nor
// expired and its user exists.
func UserRight(actor Actor) Right { return Right{Actor: actor} }

// ConsoleRight is actor's right to the serial console of a machine (an id or
// hostname): an admin's, or the user's it is allocated to (who deploys and
// debugs it). Console output is not for every user: what is typed there,
// passwords included, is echoed. It is refused with CodeForbidden
// otherwise, and the machine is returned as it was read.
func (s *Store) ConsoleRight(actor Actor, idOrName string) (Right, Machine, error) {
	var m Machine
	err := s.view(func(t *Tx) error {
		var err error
		m, err = t.machine(idOrName)
		return err
	})
	if err != nil {
		return Right{}, m, err
	}
	r := Right{Actor: actor, Machine: m.ID, Hostname: m.Hostname}
	switch {
	case actor.Admin:
	case m.Allocation != nil && m.Owner == actor.Name && m.Allocation.Owner == actor.Name:
		a := *m.Allocation
		r.alloc = &a
	default:
		return Right{}, m, errorf(CodeForbidden, "the console of %s is for admins and the user it is allocated to", m.Hostname)
	}
	return r, m, nil
}

// CheckRight reports whether r still holds. While it does, it returns nil
// and the moment it ends by itself (its token's expiry; zero: never). Once
// it does not, the error (CodeUnauthorized or CodeForbidden) says why, in
// words for the one whose stream ends: the token was revoked or has expired,
// the user was removed or is no longer an admin, the machine was released,
// deleted or is allocated to someone else. Any other error is a failure to
// read the store, which says nothing about the right.
func (s *Store) CheckRight(r Right) (time.Time, error) {
	var expires time.Time
	err := s.view(func(t *Tx) error {
		var u User
		if found, err := t.get(bucketUsers, []byte(r.Actor.Name), &u); err != nil {
			return err
		} else if !found {
			if r.Actor.Token == "" {
				return nil // rackd itself
			}
			return errorf(CodeUnauthorized, "user %s has been removed", r.Actor.Name)
		}
		if id := r.Actor.Token; id != "" {
			if why := s.tokens.revokedWhy(id); why != "" {
				return errorf(CodeUnauthorized, "%s", why)
			}
			var tk Token
			found, err := t.get(bucketAPITokens, []byte(id), &tk)
			switch {
			case err != nil:
				return err
			case !found || tk.User != r.Actor.Name:
				return errorf(CodeUnauthorized, "token %s has been revoked", id)
			case tk.Expired(t.now):
				return errorf(CodeUnauthorized, "token %s has expired", id)
			}
			expires = tk.Expires
		}
		if r.Machine == "" {
			return nil
		}
		var m Machine
		if found, err := t.get(bucketMachines, []byte(r.Machine), &m); err != nil {
			return err
		} else if !found {
			return errorf(CodeForbidden, "machine %s has been deleted", r.Hostname)
		}
		if r.alloc == nil {
			if !u.Admin {
				return errorf(CodeForbidden, "user %s is no longer an admin", u.Name)
			}
			return nil
		}
		a := m.Allocation
		switch {
		case a == nil || m.Owner == "":
			return errorf(CodeForbidden, "machine %s has been released: it is no longer allocated to %s", m.Hostname, r.Actor.Name)
		case a.Owner != r.Actor.Name || m.Owner != r.Actor.Name:
			return errorf(CodeForbidden, "machine %s is no longer allocated to %s", m.Hostname, r.Actor.Name)
		case !a.Created.Equal(r.alloc.Created) || a.TokenHash != r.alloc.TokenHash:
			return errorf(CodeForbidden, "machine %s has been released and allocated again: the allocation the console was opened on has ended", m.Hostname)
		}
		return nil
	})
	return expires, err
}

// RightLost reports whether err, from CheckRight, says that the right no
// longer holds (rather than that the store could not be read).
func RightLost(err error) bool {
	switch CodeOf(err) {
	case CodeUnauthorized, CodeForbidden:
		return true
	}
	return false
}

// signal is a channel closed, and replaced, at each occurrence of
// something.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (g *signal) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch
}

func (g *signal) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.ch)
	g.ch = make(chan struct{})
}

// AccessChanged returns a channel closed the next time something a Right
// rests on, other than a machine's allocation, may have changed: a token
// revoked (from the moment it is decided, as Authenticate refuses it) or
// deleted, a user removed, here or, on a shared engine, by another agent
// (or possibly so: after the watch had to load everything again). A
// machine's allocation changes with a machine event (OnEvent). Take the
// channel before checking, so that no change falls between the two.
func (s *Store) AccessChanged() <-chan struct{} { return s.access.wait() }
