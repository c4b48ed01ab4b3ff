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

func TestTagDefinitions(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	a := create(t, s, store.NewMachine{Hostname: "a", Tags: []string{"gpu"}})
	b := create(t, s, store.NewMachine{Hostname: "b"})
	names := func() []string {
		t.Helper()
		all, err := s.Tags()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tg := range all {
			out = append(out, tg.Name)
		}
		return out
	}
	tags := func(id string) []string {
		t.Helper()
		m, err := s.Machine(id)
		if err != nil {
			t.Fatal(err)
		}
		return m.Tags
	}

	// Defined before any machine carries it, it exists, with its comment.
	tg, err := s.DefineTag(ctx, admin, "fast", "NVMe boxes")
	if err != nil || tg.Name != "fast" || tg.Comment != "NVMe boxes" || tg.Defined.IsZero() || tg.Machines != 0 {
		t.Fatalf("define: %+v, %v", tg, err)
	}
	if got := names(); !slices.Equal(got, []string{"fast", "gpu"}) {
		t.Fatalf("tags: %v", got)
	}
	_, err = s.DefineTag(ctx, admin, "fast", "")
	wantCode(t, err, store.CodeConflict)
	_, err = s.DefineTag(ctx, alice, "mine", "")
	wantCode(t, err, store.CodeForbidden)
	_, err = s.DefineTag(ctx, admin, "bad tag", "")
	wantCode(t, err, store.CodeInvalid)
	_, err = s.DefineTag(ctx, admin, "long", string(make([]byte, 2000)))
	wantCode(t, err, store.CodeInvalid)

	// Carried and untagged again, the definition stays.
	if _, _, err := s.TagMachines(ctx, admin, "fast", []string{a.ID, b.ID}, nil, ""); err != nil {
		t.Fatal(err)
	}
	if tg, err := s.Tag("fast"); err != nil || tg.Machines != 2 || tg.Comment != "NVMe boxes" {
		t.Fatalf("carried: %+v, %v", tg, err)
	}
	if _, _, err := s.TagMachines(ctx, admin, "fast", nil, []string{a.ID, b.ID}, ""); err != nil {
		t.Fatal(err)
	}
	if tg, err := s.Tag("fast"); err != nil || tg.Machines != 0 {
		t.Fatalf("untagged: %+v, %v", tg, err)
	}

	// A rename moves the tag on its machines; a name taken is refused
	// and changes nothing.
	if _, _, err := s.TagMachines(ctx, admin, "fast", []string{a.ID}, nil, ""); err != nil {
		t.Fatal(err)
	}
	before := snap(t, s)
	taken := "gpu"
	_, err = s.UpdateTag(ctx, admin, "fast", store.TagPatch{Name: &taken})
	wantCode(t, err, store.CodeConflict)
	before.mustEqual(t, snap(t, s))
	_, err = s.UpdateTag(ctx, alice, "fast", store.TagPatch{Name: &taken})
	wantCode(t, err, store.CodeForbidden)
	newName, comment := "nvme", "renamed"
	tg, err = s.UpdateTag(ctx, admin, "fast", store.TagPatch{Name: &newName, Comment: &comment})
	if err != nil || tg.Name != "nvme" || tg.Comment != "renamed" || tg.Machines != 1 {
		t.Fatalf("rename: %+v, %v", tg, err)
	}
	if !slices.Equal(tags(a.ID), []string{"gpu", "nvme"}) {
		t.Fatalf("a's tags after the rename: %v", tags(a.ID))
	}
	_, err = s.Tag("fast")
	wantCode(t, err, store.CodeNotFound)

	// A tag only carried by machines, renamed, stays undefined; given a
	// comment, it is defined.
	gpu2 := "gpu2"
	if tg, err := s.UpdateTag(ctx, admin, "gpu", store.TagPatch{Name: &gpu2}); err != nil || !tg.Defined.IsZero() || tg.Machines != 1 {
		t.Fatalf("rename carried-only: %+v, %v", tg, err)
	}
	c := "A100"
	if tg, err := s.UpdateTag(ctx, admin, "gpu2", store.TagPatch{Comment: &c}); err != nil || tg.Defined.IsZero() || tg.Comment != "A100" {
		t.Fatalf("comment a carried-only tag: %+v, %v", tg, err)
	}

	// Delete: the definition and the tag on every machine, at once.
	if _, err := s.DeleteTag(ctx, alice, "nvme"); store.CodeOf(err) != store.CodeForbidden {
		t.Fatalf("alice deletes a tag: %v", err)
	}
	if tg, err := s.DeleteTag(ctx, admin, "nvme"); err != nil || tg.Name != "nvme" {
		t.Fatalf("delete: %+v, %v", tg, err)
	}
	if !slices.Equal(tags(a.ID), []string{"gpu2"}) {
		t.Fatalf("a's tags after the delete: %v", tags(a.ID))
	}
	_, err = s.DeleteTag(ctx, admin, "nvme")
	wantCode(t, err, store.CodeNotFound)
	if got := names(); !slices.Equal(got, []string{"gpu2"}) {
		t.Fatalf("tags at the end: %v", got)
	}
}
