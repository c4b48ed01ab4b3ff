package store_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"rackd/store"
	"rackd/store/storetest"
)

func TestUserFiles(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	// Before anyone stores a file there are no buckets: reads see none.
	if fs, err := s.UserFiles(alice, ""); err != nil || len(fs) != 0 {
		t.Fatalf("files of a fresh store: %v, %v", fs, err)
	}
	if _, _, err := s.ReadUserFile(alice, "x"); store.CodeOf(err) != store.CodeNotFound {
		t.Fatalf("read from a fresh store: %v, want %s", err, store.CodeNotFound)
	}
	if _, err := s.DeleteUserFile(ctx, alice, "x"); store.CodeOf(err) != store.CodeNotFound {
		t.Fatalf("delete from a fresh store: %v, want %s", err, store.CodeNotFound)
	}
	if _, err := s.PutUserFile(ctx, alice, "x", nil); store.CodeOf(err) != store.CodeForbidden {
		t.Fatalf("a file of someone who is no user: %v, want %s", err, store.CodeForbidden)
	}
	for _, u := range []string{"alice", "bob"} {
		if _, _, err := s.CreateUser(ctx, admin, u, false, ""); err != nil {
			t.Fatal(err)
		}
	}
	put := func(who store.Actor, name, content string) store.UserFile {
		t.Helper()
		f, err := s.PutUserFile(ctx, who, name, []byte(content))
		if err != nil {
			t.Fatalf("put %s's %q: %v", who.Name, name, err)
		}
		if f.Owner != who.Name || f.Name != name || f.Size != int64(len(content)) || len(f.Key) != 36 {
			t.Fatalf("put %s's %q: %+v", who.Name, name, f)
		}
		return f
	}
	state := put(alice, "env-provider-state", "state: 1")
	put(alice, "env-bootstrap-verify", "ok")
	put(alice, "other", "")
	put(bob, "env-provider-state", "bob's")

	fs, err := s.UserFiles(alice, "env-")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Name != "env-bootstrap-verify" || fs[1].Name != "env-provider-state" {
		t.Fatalf("alice's env- files: %+v", fs)
	}
	if fs, _ := s.UserFiles(alice, ""); len(fs) != 3 {
		t.Fatalf("alice's files: %+v", fs)
	}
	f, content, err := s.ReadUserFile(alice, "env-provider-state")
	if err != nil || string(content) != "state: 1" || f.Key != state.Key {
		t.Fatalf("read: %+v %q %v", f, content, err)
	}
	if _, content, err := s.ReadUserFile(alice, "other"); err != nil || content == nil || len(content) != 0 {
		t.Fatalf("read an empty file: %q (nil %v), %v", content, content == nil, err)
	}
	// A name is the caller's own file: bob sees his, not alice's, and
	// neither her key nor an admin's rights reach hers.
	if _, content, _ := s.ReadUserFile(bob, "env-provider-state"); string(content) != "bob's" {
		t.Fatalf("bob read %q", content)
	}
	if _, _, err := s.ReadUserFileByKey(bob, state.Key); store.CodeOf(err) != store.CodeNotFound {
		t.Fatalf("bob by alice's key: %v, want %s", err, store.CodeNotFound)
	}
	if _, _, err := s.ReadUserFile(admin, "env-provider-state"); store.CodeOf(err) != store.CodeNotFound {
		t.Fatalf("admin read alice's: %v, want %s", err, store.CodeNotFound)
	}
	if _, c, err := s.ReadUserFileByKey(alice, state.Key); err != nil || string(c) != "state: 1" {
		t.Fatalf("alice by key: %q, %v", c, err)
	}
	// Writing again replaces the content and keeps the key.
	again := put(alice, "env-provider-state", "state: 2")
	if again.Key != state.Key || !again.Created.Equal(state.Created) {
		t.Fatalf("rewritten: %+v, was %+v", again, state)
	}
	if _, c, _ := s.ReadUserFile(alice, "env-provider-state"); string(c) != "state: 2" {
		t.Fatalf("after rewrite: %q", c)
	}
	if _, err := s.DeleteUserFile(ctx, bob, "env-bootstrap-verify"); store.CodeOf(err) != store.CodeNotFound {
		t.Fatalf("bob deletes alice's: %v, want %s", err, store.CodeNotFound)
	}
	if _, err := s.DeleteUserFile(ctx, alice, "env-bootstrap-verify"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReadUserFile(alice, "env-bootstrap-verify"); store.CodeOf(err) != store.CodeNotFound {
		t.Fatalf("read after delete: %v", err)
	}
	if _, c, _ := s.ReadUserFile(bob, "env-provider-state"); string(c) != "bob's" {
		t.Fatalf("bob's file after alice's changes: %q", c)
	}
}

func TestUserFileBounds(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	if _, _, err := s.CreateUser(ctx, admin, "alice", false, ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		size    int
		problem string
	}{
		{"", 1, "empty"},
		{strings.Repeat("n", 256), 1, "at most 255"},
		{"a\nb", 1, "control character"},
		{"bad\xff", 1, "UTF-8"},
		{"big", store.MaxUserFileSize + 1, "at most"},
	} {
		_, err := s.PutUserFile(ctx, alice, tc.name, make([]byte, tc.size))
		if store.CodeOf(err) != store.CodeInvalid || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("put %q of %d bytes: %v, want %s saying %q", tc.name, tc.size, err, store.CodeInvalid, tc.problem)
		}
	}
	if _, err := s.PutUserFile(ctx, alice, strings.Repeat("n", 255), bytes.Repeat([]byte{1}, store.MaxUserFileSize)); err != nil {
		t.Fatalf("the largest name and file: %v", err)
	}
	// The bytes a user holds are bounded.
	big := make([]byte, store.MaxUserFileSize)
	n := store.MaxUserFileBytes/store.MaxUserFileSize - 1
	for i := range n {
		if _, err := s.PutUserFile(ctx, alice, fmt.Sprint("f", i), big); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
	}
	if _, err := s.PutUserFile(ctx, alice, "one-too-many", []byte{1}); store.CodeOf(err) != store.CodeConflict {
		t.Fatalf("over the bytes bound: %v, want %s", err, store.CodeConflict)
	}
	// Replacing a file counts its new size, not both.
	if _, err := s.PutUserFile(ctx, alice, "f0", []byte{1}); err != nil {
		t.Fatalf("replace with a smaller file: %v", err)
	}
}

func TestUserFileCount(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	if _, _, err := s.CreateUser(ctx, admin, "alice", false, ""); err != nil {
		t.Fatal(err)
	}
	// Concurrent puts share commits: a thousand fsyncs one after the
	// other would take seconds.
	var g errgroup.Group
	g.SetLimit(64)
	for i := range store.MaxUserFiles {
		g.Go(func() error {
			if _, err := s.PutUserFile(ctx, alice, fmt.Sprint("f", i), []byte("x")); err != nil {
				return fmt.Errorf("file %d: %w", i, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutUserFile(ctx, alice, "one-too-many", []byte("x")); store.CodeOf(err) != store.CodeConflict || !strings.Contains(err.Error(), "the most one may hold") {
		t.Fatalf("file %d: %v, want a %s refusal", store.MaxUserFiles+1, err, store.CodeConflict)
	}
	if _, err := s.PutUserFile(ctx, alice, "f7", []byte("y")); err != nil {
		t.Fatalf("replacing one at the bound: %v", err)
	}
}

// FuzzCheckUserFileName: a file name from a client is accepted only when
// it is 1 to 255 bytes of UTF-8 without control characters, and a refusal
// is a CodeInvalid saying why.
func FuzzCheckUserFileName(f *testing.F) {
	for _, s := range []string{"provider-state", "a/b/c", "", "\x00", "é", "\xff", strings.Repeat("x", 256), "tab\there", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := store.CheckUserFileName(name)
		ok := name != "" && len(name) <= 255 && utf8.ValidString(name) && !strings.ContainsFunc(name, unicode.IsControl)
		if (err == nil) != ok {
			t.Fatalf("CheckUserFileName(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && store.CodeOf(err) != store.CodeInvalid {
			t.Fatalf("CheckUserFileName(%q) = %v, not a %s", name, err, store.CodeInvalid)
		}
	})
}
