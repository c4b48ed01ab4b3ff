package store_test

import (
	"context"
	"slices"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

func TestTagMachines(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	a := create(t, s, store.NewMachine{Hostname: "a", Tags: []string{"gpu"}})
	b := create(t, s, store.NewMachine{Hostname: "b"})
	tags := func(id string) []string {
		t.Helper()
		m, err := s.Machine(id)
		if err != nil {
			t.Fatal(err)
		}
		return m.Tags
	}
	added, removed, err := s.TagMachines(ctx, admin, "ssd", []string{a.ID, "b"}, nil, "by a test")
	if err != nil || added != 2 || removed != 0 {
		t.Fatalf("tag both: +%d -%d, %v", added, removed, err)
	}
	if !slices.Equal(tags(a.ID), []string{"gpu", "ssd"}) || !slices.Equal(tags(b.ID), []string{"ssd"}) {
		t.Fatalf("tags: %v %v", tags(a.ID), tags(b.ID))
	}
	// Again: nothing to do, nothing counted.
	if added, removed, err := s.TagMachines(ctx, admin, "ssd", []string{a.ID}, nil, ""); err != nil || added != 0 || removed != 0 {
		t.Fatalf("tag again: +%d -%d, %v", added, removed, err)
	}
	if added, removed, err := s.TagMachines(ctx, admin, "ssd", nil, []string{b.ID, a.ID}, ""); err != nil || added != 0 || removed != 2 {
		t.Fatalf("untag: +%d -%d, %v", added, removed, err)
	}
	// One unknown machine: nobody changes.
	before := snap(t, s)
	_, _, err = s.TagMachines(ctx, admin, "x", []string{a.ID, "nosuch"}, nil, "")
	wantCode(t, err, store.CodeNotFound)
	before.mustEqual(t, snap(t, s))
	_, _, err = s.TagMachines(ctx, alice, "x", []string{a.ID}, nil, "")
	wantCode(t, err, store.CodeForbidden)
	_, _, err = s.TagMachines(ctx, admin, "bad tag", []string{a.ID}, nil, "")
	wantCode(t, err, store.CodeInvalid)
	before.mustEqual(t, snap(t, s))
}
