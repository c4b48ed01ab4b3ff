// Package storetest makes throw-away stores for tests.
package storetest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"rackd/store"
)

// New opens a store on a fresh file in t.TempDir(). When the test ends it
// checks the store's invariants (a violation fails the test) and closes it.
func New(t testing.TB, opts ...func(*store.Options)) *store.Store {
	t.Helper()
	var o store.Options
	for _, f := range opts {
		f(&o)
	}
	s, err := store.Open(filepath.Join(t.TempDir(), store.FileName), o)
	if err != nil {
		t.Fatalf("storetest: open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("storetest: invariants broken at the end of the test:\n%v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("storetest: close: %v", err)
		}
	})
	return s
}

// Admin is an admin actor for tests.
var Admin = store.Actor{Name: "admin", Admin: true}

// DeployImages records a deploy image of each name for arch (one disk file
// whose blob does not exist: enough for a deploy's transaction, which only
// asks that the image be imported), so that a test can deploy it.
func DeployImages(t testing.TB, s *store.Store, arch string, names ...string) {
	t.Helper()
	for _, name := range names {
		im := store.Image{Name: name, Arch: arch, Purpose: store.PurposeDeploy,
			Files: []store.ImageFile{{Path: name + ".img", Role: "disk", SHA256: strings.Repeat("d", 64), Size: 1 << 20}}}
		if _, err := s.PutImage(context.Background(), Admin, im); err != nil {
			t.Fatalf("storetest: import deploy image %s/%s: %v", name, arch, err)
		}
	}
}
