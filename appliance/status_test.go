package appliance

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestStatusFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "appliance", "status.json")
	s, err := LoadStatus(p)
	if err != nil || s.Slot(SlotA).State != StateUnknown || s.LastUpdate != nil {
		t.Fatalf("missing file: %+v %v", s, err)
	}
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	s.SetSlot(SlotA, SlotStatus{Version: "v1", Build: 1, State: StateGood})
	s.Booted = SlotA
	s.LastUpdate = &UpdateRecord{Version: "v2", Build: 2, Slot: SlotB, Started: now, Result: ResultArmed}
	if err := SaveStatus(p, s); err != nil {
		t.Fatal(err)
	}
	back, err := LoadStatus(p)
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("%+v %v", back, err)
	}
	raw, _ := os.ReadFile(p)
	for _, k := range []string{`"slots"`, `"booted"`, `"last_update"`, `"state": "good"`, `"result": "armed"`} {
		if !strings.Contains(string(raw), k) {
			t.Errorf("status file has no %s:\n%s", k, raw)
		}
	}
	os.WriteFile(p, []byte("{"), 0o644)
	if _, err := LoadStatus(p); err == nil {
		t.Fatal("loaded a broken status file")
	}
}

func TestRecordBoot(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	armed := Status{Booted: SlotA, Slots: map[Slot]SlotStatus{
		SlotA: {Version: "v1", Build: 1, State: StateGood},
		SlotB: {Version: "v2", Build: 2, State: StateTrying},
	}, LastUpdate: &UpdateRecord{Version: "v2", Build: 2, Slot: SlotB, Started: t0, Finished: t0, Result: ResultArmed}}

	// Trial boot of b, healthy.
	s := RecordBoot(armed, SlotB, "v2", 2, BootTrial, "", t1)
	if s.Booted != SlotB || s.Slot(SlotB).State != StateTrying {
		t.Fatalf("trial boot: %+v", s)
	}
	g := RecordTrialGood(s, SlotB, t1)
	if g.Slot(SlotB).State != StateGood || g.LastUpdate.Result != ResultGood || !g.LastUpdate.Finished.Equal(t1) {
		t.Fatalf("good: %+v %+v", g, g.LastUpdate)
	}
	if armed.LastUpdate.Result != ResultArmed || s.LastUpdate.Result != ResultArmed {
		t.Fatal("the Record functions changed their argument")
	}

	// Trial boot of b, not healthy: it records why, then the good slot's
	// boot finds the failed try and keeps that reason.
	f := RecordTrialFailed(s, SlotB, "rackd exited 3 times", t1)
	back := RecordBoot(f, SlotA, "v1", 1, BootTryFailed, SlotB, t1.Add(time.Minute))
	if back.Booted != SlotA || back.Slot(SlotB).State != StateFailed || back.LastUpdate.Result != ResultFailed || back.LastUpdate.Reason != "rackd exited 3 times" || !back.LastUpdate.Finished.Equal(t1) {
		t.Fatalf("fallback after a recorded failure: %+v %+v", back, back.LastUpdate)
	}
	// The trial never got to record anything (a kernel panic).
	back = RecordBoot(armed, SlotA, "v1", 1, BootTryFailed, SlotB, t1)
	if back.LastUpdate.Reason != "the new slot did not come up" || back.LastUpdate.Result != ResultFailed || back.LastUpdate.Version != "v2" {
		t.Fatalf("fallback with no record: %+v", back.LastUpdate)
	}
	// No record at all (a status file lost): still says what failed.
	back = RecordBoot(Status{}, SlotA, "v1", 1, BootTryFailed, SlotB, t1)
	if back.LastUpdate == nil || back.LastUpdate.Slot != SlotB || back.Slot(SlotA).State != StateGood {
		t.Fatalf("fallback with no status: %+v", back)
	}
}

func TestDescriptorFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run", "appliance.json")
	d := Descriptor{Booted: SlotA, Version: "v1", Build: 5, Slots: map[Slot]string{SlotA: "/dev/vda3", SlotB: "/dev/vda4"},
		GrubEnv: "/esp/grub/grubenv", PublicKey: "/slot/bundle.pub", StatusFile: "/data/appliance/status.json", DataDevice: "/dev/vda5"}
	if err := SaveDescriptor(p, d); err != nil {
		t.Fatal(err)
	}
	back, err := LoadDescriptor(p)
	if err != nil || !reflect.DeepEqual(back, d) {
		t.Fatalf("%+v %v", back, err)
	}
	if d.Inactive() != SlotB {
		t.Fatal("Inactive")
	}
	bad := d
	bad.Booted = "c"
	bad.Slots = map[Slot]string{SlotA: "/dev/vda3"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "slot b") || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("Validate: %v", err)
	}
}
