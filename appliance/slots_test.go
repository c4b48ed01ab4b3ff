package appliance

import (
	"reflect"
	"testing"
)

// The boot-time table grub.cfg implements.
func TestSelectSlot(t *testing.T) {
	cases := []struct {
		env       map[string]string
		slot      Slot
		trial     bool
		changed   map[string]string // variables newEnv changes
		factReset bool
	}{
		{map[string]string{}, SlotA, false, nil, false},
		{map[string]string{EnvGood: "b"}, SlotB, false, nil, false},
		{map[string]string{EnvGood: "x"}, SlotA, false, nil, false},
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "1"}, SlotB, true, map[string]string{EnvTries: "0"}, false},
		{map[string]string{EnvGood: "b", EnvTry: "a", EnvTries: "1"}, SlotA, true, map[string]string{EnvTries: "0"}, false},
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "0"}, SlotA, false, nil, false},
		{map[string]string{EnvGood: "a", EnvTry: "b"}, SlotA, false, nil, false},
		{map[string]string{EnvGood: "a", EnvTry: "", EnvTries: "1"}, SlotA, false, nil, false},
		{map[string]string{EnvGood: "a", EnvTry: "c", EnvTries: "1"}, SlotA, false, nil, false},
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "2"}, SlotA, false, nil, false},
		{map[string]string{EnvGood: "b", EnvReset: "1"}, SlotB, false, map[string]string{EnvReset: ""}, true},
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "1", EnvReset: "1"}, SlotB, true, map[string]string{EnvReset: "", EnvTries: "0"}, true},
	}
	for _, c := range cases {
		env := EnvOf(c.env)
		before := env.Map()
		slot, trial, newEnv := SelectSlot(env)
		if slot != c.slot || trial != c.trial || ResetRequested(env) != c.factReset {
			t.Errorf("%v: slot %s trial %v reset %v, want %s %v %v", c.env, slot, trial, ResetRequested(env), c.slot, c.trial, c.factReset)
		}
		want := EnvOf(c.env).Map()
		for k, v := range c.changed {
			want[k] = v
		}
		if !reflect.DeepEqual(newEnv.Map(), want) {
			t.Errorf("%v: saves %v, want %v", c.env, newEnv.Map(), want)
		}
		if !reflect.DeepEqual(env.Map(), before) {
			t.Errorf("%v: SelectSlot changed its argument", c.env)
		}
	}
}

// The after-boot table the init applies.
func TestAfterBoot(t *testing.T) {
	cases := []struct {
		env     map[string]string
		booted  Slot
		trial   bool
		outcome BootOutcome
		failed  Slot
		changed map[string]string
	}{
		{map[string]string{EnvGood: "a"}, SlotA, false, BootNormal, "", nil},
		{map[string]string{EnvGood: "a", EnvTry: "", EnvTries: "0"}, SlotA, false, BootNormal, "", nil},
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "0"}, SlotB, true, BootTrial, "", nil},
		// GRUB could not save rackd_tries=0: the init does.
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "1"}, SlotB, true, BootTrial, "", map[string]string{EnvTries: "0"}},
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "0"}, SlotA, false, BootTryFailed, SlotB, map[string]string{EnvTry: ""}},
		{map[string]string{EnvGood: "b", EnvTry: "a"}, SlotB, false, BootTryFailed, SlotA, map[string]string{EnvTry: "", EnvTries: "0"}},
		{map[string]string{EnvGood: "a", EnvTry: "b", EnvTries: "1"}, SlotA, false, BootTryPending, "", nil},
		{map[string]string{EnvGood: "a", EnvTry: "zz", EnvTries: "1"}, SlotA, false, BootNormal, "", map[string]string{EnvTry: "", EnvTries: "0"}},
	}
	for _, c := range cases {
		outcome, failed, newEnv := AfterBoot(EnvOf(c.env), c.booted, c.trial)
		if outcome != c.outcome || failed != c.failed {
			t.Errorf("%v booted %s trial %v: %v %q, want %v %q", c.env, c.booted, c.trial, outcome, failed, c.outcome, c.failed)
		}
		want := EnvOf(c.env).Map()
		for k, v := range c.changed {
			want[k] = v
		}
		if !reflect.DeepEqual(newEnv.Map(), want) {
			t.Errorf("%v booted %s trial %v: env %v, want %v", c.env, c.booted, c.trial, newEnv.Map(), want)
		}
	}
}

// A whole update cycle through the rules: arm, GRUB boots the trial, then
// either it is marked good or the next boot falls back.
func TestBootCycle(t *testing.T) {
	env := EnvOf(map[string]string{EnvGood: "a", EnvTry: "", EnvTries: "0", EnvReset: ""})
	env = ArmTry(env, SlotB)

	slot, trial, env2 := SelectSlot(env)
	if slot != SlotB || !trial {
		t.Fatalf("armed: boots %s trial %v", slot, trial)
	}
	if o, _, _ := AfterBoot(env2, slot, trial); o != BootTrial {
		t.Fatalf("trial boot: %v", o)
	}
	good := MarkGood(env2, slot)
	if s, tr, _ := SelectSlot(good); s != SlotB || tr {
		t.Fatalf("after good: boots %s trial %v", s, tr)
	}
	if o, _, _ := AfterBoot(good, SlotB, false); o != BootNormal {
		t.Fatalf("after good: %v", o)
	}

	// The trial did not come up: the init reboots, or it hung and the
	// watchdog did; GRUB falls back by itself.
	slot, trial, env3 := SelectSlot(env2)
	if slot != SlotA || trial {
		t.Fatalf("after failed trial: boots %s trial %v", slot, trial)
	}
	o, failed, env4 := AfterBoot(env3, slot, trial)
	if o != BootTryFailed || failed != SlotB {
		t.Fatalf("after failed trial: %v %s", o, failed)
	}
	if s, tr, _ := SelectSlot(env4); s != SlotA || tr {
		t.Fatal("try not cleared")
	}
	if o, _, _ := AfterBoot(env4, SlotA, false); o != BootNormal {
		t.Fatalf("the boot after: %v", o)
	}
	// A factory reset request survives the cycle until GRUB takes it.
	r := RequestReset(env4)
	if _, _, after := SelectSlot(r); !ResetRequested(r) || ResetRequested(after) {
		t.Fatal("reset request")
	}
}

func TestSlot(t *testing.T) {
	if SlotA.Other() != SlotB || SlotB.Other() != SlotA {
		t.Fatal("Other")
	}
	for _, s := range []string{"a", "b"} {
		if _, err := ParseSlot(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"", "A", "c", "ab"} {
		if _, err := ParseSlot(s); err == nil {
			t.Fatalf("ParseSlot(%q)", s)
		}
	}
}
