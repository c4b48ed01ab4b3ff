package store_test

import (
	"context"
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

func TestSetOwnerData(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	m := ready(t, s, "node1")
	if _, err := s.SetOwnerData(ctx, alice, m.ID, map[string]string{"k": "v"}); store.CodeOf(err) != store.CodeConflict {
		t.Fatalf("owner data of a free machine: %v, want conflict", err)
	}
	if _, err := s.Allocate(ctx, alice, store.AllocateRequest{Name: m.ID}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		actor store.Actor
		set   map[string]string
		code  store.Code
	}{
		{"another user: no such machine", bob, map[string]string{"k": "v"}, store.CodeNotFound},
		{"bad key", alice, map[string]string{"a b": "v"}, store.CodeInvalid},
		{"empty key", alice, map[string]string{"": "v"}, store.CodeInvalid},
		{"long value", alice, map[string]string{"k": strings.Repeat("x", store.MaxOwnerDataValue+1)}, store.CodeInvalid},
		{"not UTF-8", alice, map[string]string{"k": "\xff"}, store.CodeInvalid},
	} {
		if _, err := s.SetOwnerData(ctx, c.actor, m.ID, c.set); store.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	got, err := s.SetOwnerData(ctx, alice, m.ID, map[string]string{"a": "1", "b": "2"})
	if err != nil || got.OwnerData["a"] != "1" || got.OwnerData["b"] != "2" {
		t.Fatalf("set: %v %v", got.OwnerData, err)
	}
	if got, err = s.SetOwnerData(ctx, admin, m.ID, map[string]string{"a": ""}); err != nil || len(got.OwnerData) != 1 {
		t.Fatalf("an admin removes a key: %v %v", got.OwnerData, err)
	}
	many := map[string]string{}
	for i := range store.MaxOwnerDataKeys {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if _, err := s.SetOwnerData(ctx, alice, m.ID, many); store.CodeOf(err) != store.CodeInvalid {
		t.Fatalf("too many keys: %v", err)
	}
	if _, err := s.Release(ctx, alice, m.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Machine(m.ID); got.OwnerData != nil {
		t.Fatalf("owner data %v outlives the allocation", got.OwnerData)
	}
}

func TestMayView(t *testing.T) {
	free := store.Machine{Hostname: "free"}
	held := store.Machine{Hostname: "held", Owner: "alice"}
	for _, c := range []struct {
		actor store.Actor
		m     store.Machine
		ok    bool
	}{
		{alice, free, true}, {bob, free, true}, {alice, held, true}, {bob, held, false}, {admin, held, true},
	} {
		err := store.MayView(c.actor, c.m, "x")
		if (err == nil) != c.ok || (err != nil && (store.CodeOf(err) != store.CodeNotFound || strings.Contains(err.Error(), "held"))) {
			t.Errorf("%s sees %s: %v", c.actor.Name, c.m.Hostname, err)
		}
	}
}

func TestMatchDisks(t *testing.T) {
	disks := []store.Disk{{Name: "sda", SizeBytes: 100}, {Name: "sdb", SizeBytes: 500}, {Name: "sdc", SizeBytes: 50}}
	for _, c := range []struct {
		want []int64
		idx  []int
		ok   bool
	}{
		{[]int64{90}, []int{1}, true},
		{[]int64{90, 400}, []int{0, 1}, true},
		{[]int64{60, 60}, []int{1, 0}, true},
		{[]int64{10, 10, 10}, []int{1, 0, 2}, true},
		{[]int64{600}, nil, false},
		{[]int64{200, 200}, nil, false},
		{[]int64{1, 1, 1, 1}, nil, false},
	} {
		idx, ok := store.MatchDisks(c.want, disks)
		if ok != c.ok || (ok && !slicesEqual(idx, c.idx)) {
			t.Errorf("MatchDisks(%v) = %v %v, want %v %v", c.want, idx, ok, c.idx, c.ok)
		}
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAllocateNotTagsNotZones(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	a := ready(t, s, "a")
	b := ready(t, s, "b")
	gpu := []string{"gpu"}
	zone := "rack2"
	if _, err := s.UpdateMachine(ctx, admin, a.ID, store.MachinePatch{Tags: &gpu}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateMachine(ctx, admin, b.ID, store.MachinePatch{Zone: &zone}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		c    store.Constraints
		want string
	}{
		{store.Constraints{NotTags: []string{"gpu"}}, "b"},
		{store.Constraints{NotZones: []string{"rack2"}}, "a"},
		{store.Constraints{Zone: "default"}, "a"},
		{store.Constraints{NotZones: []string{"default"}}, "b"},
	} {
		res, err := s.Allocate(ctx, alice, store.AllocateRequest{Constraints: c.c})
		if err != nil || res.Machine.Hostname != c.want {
			t.Errorf("%+v: %s %v, want %s", c.c, res.Machine.Hostname, err, c.want)
			continue
		}
		if _, err := s.Release(ctx, alice, res.Machine.ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CompleteRelease(ctx, res.Machine.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func TestImageOSSeries(t *testing.T) {
	for _, c := range []struct {
		im         store.Image
		os, series string
	}{
		{store.Image{Name: "jammy-server-cloudimg-amd64"}, "ubuntu", "jammy"},
		{store.Image{Name: "ubuntu-24.04-server-cloudimg-amd64"}, "ubuntu", "noble"},
		{store.Image{Name: "noble"}, "ubuntu", "noble"},
		{store.Image{Name: "debian-12-genericcloud-amd64"}, "debian", "bookworm"},
		{store.Image{Name: "Rocky-9-GenericCloud"}, "custom", "rocky-9-genericcloud"},
		{store.Image{Name: "x", OS: "ubuntu", Series: "focal"}, "ubuntu", "focal"},
		{store.Image{Name: "mine", Series: "gold"}, "custom", "gold"},
	} {
		if os, series := store.ImageOSSeries(c.im); os != c.os || series != c.series {
			t.Errorf("%+v: %s/%s, want %s/%s", c.im, os, series, c.os, c.series)
		}
	}
}
