package store_test

import (
	"strings"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

// authed is who secret authenticates as.
func authed(t *testing.T, s *store.Store, secret string) store.Actor {
	t.Helper()
	a, ok, err := s.Authenticate(secret)
	if err != nil || !ok {
		t.Fatalf("authenticate: %v %v", ok, err)
	}
	return a
}

// release releases a machine without a power driver to READY.
func release(t *testing.T, s *store.Store, hostname string) {
	t.Helper()
	m, err := s.Release(t.Context(), alice, hostname, "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.FinishRelease(t.Context(), m.ID, func(string) bool { return false }); err != nil {
		t.Fatalf("finish the release: %+v %v", res, err)
	}
	if m, _ := s.Machine(hostname); m.State != store.StateReady {
		t.Fatalf("released %s is %s", hostname, m.State)
	}
}

// fired reports whether ch is closed.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCheckRight: a right holds until what granted it goes, and then says
// why; the store signals the changes that are not machine events.
func TestCheckRight(t *testing.T) {
	tests := map[string]struct {
		// console: the right is on machine m1's console (held by alice,
		// root is an admin); else the token's alone.
		console bool
		user    string
		// change is what happens after the right was granted; signal
		// says whether AccessChanged must fire for it.
		change func(t *testing.T, s *store.Store, c *clock, who store.Actor, secrets map[string]string)
		signal bool
		// want is a part of the reason, "" while the right holds.
		want string
		code store.Code
	}{
		"nothing happens": {user: "alice", change: func(*testing.T, *store.Store, *clock, store.Actor, map[string]string) {}},
		"token revoked": {user: "alice", signal: true, want: "has been revoked", code: store.CodeUnauthorized,
			change: func(t *testing.T, s *store.Store, _ *clock, who store.Actor, _ map[string]string) {
				if _, err := s.RevokeToken(t.Context(), root, who.Token); err != nil {
					t.Fatal(err)
				}
			}},
		"another token of the user revoked": {user: "alice", signal: true,
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, _ map[string]string) {
				tk, _, err := s.CreateToken(t.Context(), alice, store.NewTokenRequest{Name: "ci"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.RevokeToken(t.Context(), root, tk.ID); err != nil {
					t.Fatal(err)
				}
			}},
		"user removed": {user: "bob", signal: true, want: "user bob has been removed", code: store.CodeUnauthorized,
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, _ map[string]string) {
				if _, err := s.RemoveUser(t.Context(), root, "bob"); err != nil {
					t.Fatal(err)
				}
			}},
		"token expired": {user: "alice", want: "has expired", code: store.CodeUnauthorized,
			change: func(t *testing.T, _ *store.Store, c *clock, _ store.Actor, _ map[string]string) { c.Add(2 * time.Hour) }},
		"console: nothing happens": {console: true, user: "alice",
			change: func(*testing.T, *store.Store, *clock, store.Actor, map[string]string) {}},
		"console: marked broken, the allocation kept": {console: true, user: "alice",
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, _ map[string]string) {
				transition(t, s, root, "m1", store.ActionMarkBroken)
			}},
		"console: released": {console: true, user: "alice", want: "m1 has been released", code: store.CodeForbidden,
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, _ map[string]string) {
				release(t, s, "m1")
			}},
		"console: released, then allocated to another user": {console: true, user: "alice", want: "no longer allocated to alice", code: store.CodeForbidden,
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, _ map[string]string) {
				release(t, s, "m1")
				allocate(t, s, bob, "m1", "")
			}},
		"console: released, then allocated to the same user": {console: true, user: "alice", want: "allocated again", code: store.CodeForbidden,
			change: func(t *testing.T, s *store.Store, c *clock, _ store.Actor, _ map[string]string) {
				release(t, s, "m1")
				c.Add(time.Second)
				allocate(t, s, alice, "m1", "")
			}},
		"console: adopted by another user": {console: true, user: "alice", want: "no longer allocated to alice", code: store.CodeForbidden,
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, secrets map[string]string) {
				if _, err := s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "m1", Token: secrets["m1"]}); err != nil {
					t.Fatal(err)
				}
			}},
		"console: machine deleted": {console: true, user: "root", want: "m1 has been deleted", code: store.CodeForbidden,
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, _ map[string]string) {
				release(t, s, "m1")
				if _, err := s.DeleteMachine(t.Context(), root, store.DeleteRequest{Machine: "m1"}); err != nil {
					t.Fatal(err)
				}
			}},
		"console: an admin's outlives the allocation": {console: true, user: "root",
			change: func(t *testing.T, s *store.Store, _ *clock, _ store.Actor, _ map[string]string) {
				release(t, s, "m1")
				allocate(t, s, bob, "m1", "")
			}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, c, secrets := tokenStore(t)
			// alice's token for the test expires in an hour.
			_, sec, err := s.CreateToken(t.Context(), alice, store.NewTokenRequest{Name: "brief", Expires: tokT0.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			secrets["alice"] = sec
			create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Arch: "amd64"})
			res := allocate(t, s, alice, "m1", "juju")
			secrets["m1"] = res.Token
			who := authed(t, s, secrets[tc.user])

			var r store.Right
			if tc.console {
				r, _, err = s.ConsoleRight(who, "m1")
			} else {
				r = store.UserRight(who)
			}
			if err != nil {
				t.Fatalf("grant: %v", err)
			}
			expires, err := s.CheckRight(r)
			if err != nil {
				t.Fatalf("check as granted: %v", err)
			}
			if tc.user == "alice" && !expires.Equal(tokT0.Add(time.Hour)) {
				t.Errorf("expires %v, want the token's expiry", expires)
			}
			changed := s.AccessChanged()
			tc.change(t, s, c, who, secrets)
			if got := fired(changed); got != tc.signal {
				t.Errorf("AccessChanged fired: %v, want %v", got, tc.signal)
			}
			_, err = s.CheckRight(r)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("the right no longer holds: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || store.CodeOf(err) != tc.code || !store.RightLost(err)):
				t.Fatalf("after the change: %v (code %q), want %q (%s)", err, store.CodeOf(err), tc.want, tc.code)
			}
		})
	}
}

func TestConsoleRightRefused(t *testing.T) {
	s, _, secrets := tokenStore(t)
	create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Arch: "amd64"})
	create(t, s, store.NewMachine{Hostname: "m2", State: store.StateReady, Arch: "amd64"})
	allocate(t, s, alice, "m1", "")
	for _, tc := range []struct{ user, machine string }{{"bob", "m1"}, {"alice", "m2"}} {
		if _, _, err := s.ConsoleRight(authed(t, s, secrets[tc.user]), tc.machine); store.CodeOf(err) != store.CodeForbidden {
			t.Errorf("%s on %s: %v, want forbidden", tc.user, tc.machine, err)
		}
	}
	if _, _, err := s.ConsoleRight(authed(t, s, secrets["root"]), "m3"); store.CodeOf(err) != store.CodeNotFound {
		t.Errorf("unknown machine: %v", err)
	}
}

// A revocation is a right's end from the moment it is decided: the reason
// is the revocation's even before its commit, and the removal's for the
// tokens of a removed user.
func TestRevocationReason(t *testing.T) {
	s, _, secrets := tokenStore(t)
	bobActor := authed(t, s, secrets["bob"])
	if _, err := s.RemoveUser(t.Context(), root, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckRight(store.UserRight(bobActor)); err == nil || err.Error() != "user bob has been removed" {
		t.Errorf("bob's right: %v", err)
	}
	a := authed(t, s, secrets["alice"])
	if _, err := s.RevokeToken(t.Context(), a, a.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckRight(store.UserRight(a)); err == nil || err.Error() != "token "+a.Token+" has been revoked" {
		t.Errorf("alice's right: %v", err)
	}
}

func TestRemoveUser(t *testing.T) {
	s, _, secrets := tokenStore(t)
	create(t, s, store.NewMachine{Hostname: "m1", State: store.StateReady, Arch: "amd64"})
	allocate(t, s, alice, "m1", "")
	if _, err := s.AddSSHKey(t.Context(), bob, "bob", storetest.SSHKey(t, "ed25519", 0, "")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateToken(t.Context(), bob, store.NewTokenRequest{Name: "laptop"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		actor store.Actor
		name  string
		code  store.Code
		want  string
	}{
		{alice, "bob", store.CodeForbidden, "only an admin"},
		{root, "carol", store.CodeNotFound, `no user "carol"`},
		{root, "alice", store.CodeConflict, "alice holds machines m1: release them first"},
		{root, "root", store.CodeConflict, "last admin"},
		{admin, "admin", store.CodeNotFound, ""}, // the actor is no user
	}
	for _, tc := range tests {
		_, err := s.RemoveUser(t.Context(), tc.actor, tc.name)
		if store.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s removes %s: %v, want %s %q", tc.actor.Name, tc.name, err, tc.code, tc.want)
		}
	}
	u, err := s.RemoveUser(t.Context(), root, "bob")
	if err != nil || u.Name != "bob" {
		t.Fatalf("remove bob: %+v %v", u, err)
	}
	if _, ok, _ := s.Authenticate(secrets["bob"]); ok {
		t.Error("bob's token still authenticates")
	}
	us, _ := s.Users()
	for _, u := range us {
		if u.Name == "bob" {
			t.Error("bob is still listed")
		}
	}
	if _, err := s.Tokens(root, "bob"); store.CodeOf(err) != store.CodeNotFound {
		t.Errorf("bob's tokens: %v", err)
	}
	// The name is free again, with nothing of the old user's.
	if _, _, err := s.CreateUser(t.Context(), root, "bob", false, ""); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.SSHKeys(root, "bob"); err != nil || len(keys) != 0 {
		t.Errorf("the new bob's keys: %v %v", keys, err)
	}
	if ts, err := s.Tokens(root, "bob"); err != nil || len(ts) != 1 {
		t.Errorf("the new bob's tokens: %v %v", ts, err)
	}
	if err := s.Check(); err != nil {
		t.Errorf("check: %v", err)
	}
	// With another admin, an admin may go.
	if _, _, err := s.CreateUser(t.Context(), root, "root2", true, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveUser(t.Context(), root, "root"); err != nil {
		t.Errorf("remove root with root2 left: %v", err)
	}
}
