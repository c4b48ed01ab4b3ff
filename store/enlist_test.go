package store_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

const testUUID = "5c7a1f2e-0b3d-4e5f-8a9b-0c1d2e3f4a5b"

func TestEnlistCreatesAndRecognises(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	m1, m2 := nextMAC(), nextMAC()
	req := store.EnlistRequest{Arch: "amd64", MACs: []string{m1, m2}, CPUCount: 4, MemoryMB: 2048,
		SystemUUID: "5C7A1F2E-0B3D-4E5F-8A9B-0C1D2E3F4A5B",
		Inventory:  store.Inventory{Disks: []store.Disk{{Name: "vda", SizeBytes: 1 << 30}}, Vendor: "QEMU", BMCAddress: "10.0.0.9"}}
	res, err := s.Enlist(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Machine
	if !res.Created || m.State != store.StateNew || m.CPUCount != 4 || m.MemoryMB != 2048 || m.SystemUUID != testUUID ||
		m.Inventory == nil || m.Inventory.Vendor != "QEMU" || len(m.Inventory.Disks) != 1 || m.Hostname == "" {
		t.Fatalf("enlisted %+v", res)
	}
	stored, err := s.Machine(m.ID)
	if err != nil || !reflect.DeepEqual(stored, m) {
		t.Fatalf("stored %+v, %v\nreturned %+v", stored, err, m)
	}
	evs, _ := s.Events(m.ID, 0)
	if len(evs) != 1 || evs[0].Actor != store.Enlister.Name || evs[0].To != store.StateNew {
		t.Errorf("events %+v", evs)
	}

	// Known by a MAC (even alone, in another order, with new MACs besides),
	// by the UUID with all-new MACs: never modified, never duplicated.
	for name, again := range map[string]store.EnlistRequest{
		"same":      req,
		"one mac":   {MACs: []string{nextMAC(), m2}, CPUCount: 99},
		"uuid only": {MACs: []string{nextMAC()}, SystemUUID: testUUID, Hostname: "renamed"},
	} {
		res, err := s.Enlist(ctx, again)
		if err != nil || res.Created || res.Machine.ID != m.ID || res.By == "" {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
	}
	after, _ := s.Machine(m.ID)
	if !reflect.DeepEqual(after, m) {
		t.Errorf("a known machine was modified:\n%+v\n%+v", after, m)
	}
	all, _ := s.ListMachines(store.Filter{})
	if len(all) != 1 {
		t.Errorf("%d machines", len(all))
	}
}

func TestEnlistHostnames(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	mk := func(hostname string) store.Machine {
		t.Helper()
		res, err := s.Enlist(ctx, store.EnlistRequest{Hostname: hostname, MACs: []string{nextMAC()}})
		if err != nil || !res.Created {
			t.Fatalf("enlist %q: %+v %v", hostname, res, err)
		}
		return res.Machine
	}
	a := mk("")
	if want := "node-" + fmt.Sprintf("%x", []byte{0x52, 0x54, 0})[:6]; a.Hostname[:11] != want {
		t.Errorf("generated hostname %q, want it to start with %q", a.Hostname, want)
	}
	if b := mk("Web1"); b.Hostname != "web1" {
		t.Errorf("hostname %q", b.Hostname)
	}
	// A taken name does not stop an enlistment.
	if c := mk("web1"); c.Hostname == "web1" || c.Hostname == "" {
		t.Errorf("hostname %q", c.Hostname)
	}
	if _, err := s.Enlist(ctx, store.EnlistRequest{Hostname: "bad_name!", MACs: []string{nextMAC()}}); store.CodeOf(err) != store.CodeInvalid {
		t.Errorf("bad hostname: %v", err)
	}
	if _, err := s.Enlist(ctx, store.EnlistRequest{MACs: []string{"nope"}}); store.CodeOf(err) != store.CodeInvalid {
		t.Errorf("bad MAC: %v", err)
	}
}

func TestEnlistCommission(t *testing.T) {
	s := storetest.New(t)
	res, err := s.Enlist(context.Background(), store.EnlistRequest{MACs: []string{nextMAC()}, Commission: true})
	if err != nil || res.Machine.State != store.StateCommissioning {
		t.Fatalf("%+v %v", res, err)
	}
	evs, _ := s.Events(res.Machine.ID, 0)
	if len(evs) != 2 || evs[1].Action != string(store.ActionCommission) {
		t.Errorf("events %+v", evs)
	}
}

func TestEnlistPlaceholderUUIDs(t *testing.T) {
	s := storetest.New(t)
	for i, u := range []string{"00000000-0000-0000-0000-000000000000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
		"03000200-0400-0500-0006-000700080009", "Not Settable", ""} {
		if got := store.NormalizeSystemUUID(u); got != "" {
			t.Errorf("NormalizeSystemUUID(%q) = %q", u, got)
		}
		// Two machines with the same placeholder are two machines.
		for range 2 {
			res, err := s.Enlist(context.Background(), store.EnlistRequest{MACs: []string{nextMAC()}, SystemUUID: u})
			if err != nil || !res.Created {
				t.Fatalf("%d %q: %+v %v", i, u, res, err)
			}
		}
	}
}

func TestEnlistRace(t *testing.T) {
	// Machines retrying at once with the same MAC: exactly one is created.
	s := storetest.New(t)
	m := nextMAC()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for range 20 {
		wg.Go(func() {
			res, err := s.Enlist(context.Background(), store.EnlistRequest{MACs: []string{m}, SystemUUID: testUUID})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if res.Created {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 {
		t.Errorf("%d machines created", created)
	}
}

func TestMachineOfMACs(t *testing.T) {
	s := storetest.New(t)
	m1, m2 := nextMAC(), nextMAC()
	res, err := s.Enlist(context.Background(), store.EnlistRequest{Arch: "arm64", MACs: []string{m1}})
	if err != nil {
		t.Fatal(err)
	}
	got, found, err := s.MachineOfMACs([]string{m2, m1})
	if err != nil || !found || got.ID != res.Machine.ID || got.State != store.StateNew {
		t.Errorf("%+v %v %v", got, found, err)
	}
	if _, found, err := s.MachineOfMACs([]string{m2}); found || err != nil {
		t.Errorf("unknown MAC found: %v %v", found, err)
	}
	if _, found, _ := s.MachineOfMACs(nil); found {
		t.Error("no MACs found something")
	}
}
