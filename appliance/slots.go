package appliance

import (
	"fmt"
	"sort"
)

// Slot names a system slot: "a" or "b".
type Slot string

const (
	SlotA Slot = "a"
	SlotB Slot = "b"
)

// ParseSlot accepts "a" or "b".
func ParseSlot(s string) (Slot, error) {
	switch Slot(s) {
	case SlotA, SlotB:
		return Slot(s), nil
	}
	return "", fmt.Errorf("slot %q: want a or b", s)
}

// Valid reports whether s is a or b.
func (s Slot) Valid() bool { return s == SlotA || s == SlotB }

// Other is the other slot.
func (s Slot) Other() Slot {
	if s == SlotB {
		return SlotA
	}
	return SlotB
}

// GoodSlot is the slot the environment knows good: rackd_good, and slot a
// when it is unset or not a slot (grub.cfg's default).
func GoodSlot(env *Env) Slot {
	if s := Slot(env.Get(EnvGood)); s.Valid() {
		return s
	}
	return SlotA
}

// SelectSlot is what the appliance's grub.cfg does at boot, as a pure
// function: the slot to boot, whether it is a trial boot (rackd.trial=1 on
// the kernel command line), and the environment GRUB saves before booting.
//
//	rackd_try  rackd_tries   boots          trial  saves
//	a|b        1             rackd_try      yes    rackd_tries=0
//	a|b        0 or unset    rackd_good     no     -
//	unset      any           rackd_good     no     -
//	other      any           rackd_good     no     -
//
// rackd_good unset or not a slot is slot a. rackd_reset=1 (a factory reset
// requested) does not change the slot: GRUB clears it (saves rackd_reset=)
// and adds rackd.factory_reset=1; ResetRequested tells.
func SelectSlot(env *Env) (slot Slot, trial bool, newEnv *Env) {
	newEnv = env.Clone()
	if ResetRequested(env) {
		newEnv.Set(EnvReset, "")
	}
	if try := Slot(env.Get(EnvTry)); try.Valid() && env.Get(EnvTries) == "1" {
		newEnv.Set(EnvTries, "0")
		return try, true, newEnv
	}
	return GoodSlot(env), false, newEnv
}

// ResetRequested reports whether the environment asks for a factory reset
// at the next boot.
func ResetRequested(env *Env) bool { return env.Get(EnvReset) == "1" }

// ArmTry makes the next boot a one-shot trial of slot.
func ArmTry(env *Env, slot Slot) *Env {
	e := env.Clone()
	e.Set(EnvTry, string(slot))
	e.Set(EnvTries, "1")
	return e
}

// RequestReset asks GRUB for a factory reset at the next boot.
func RequestReset(env *Env) *Env {
	e := env.Clone()
	e.Set(EnvReset, "1")
	return e
}

// BootOutcome is what the after-boot rules make of a boot.
type BootOutcome int

const (
	// BootNormal: a boot of the good slot with no try pending; nothing to do.
	BootNormal BootOutcome = iota
	// BootTrial: the booted slot is on trial; MarkGood it once rackd is
	// healthy within the health window, else record why and reboot (GRUB
	// then boots rackd_good).
	BootTrial
	// BootTryFailed: the good slot booted although a try was armed and
	// GRUB had started it: the try did not come up. The returned
	// environment clears rackd_try; the status records the failure.
	BootTryFailed
	// BootTryPending: a non-trial boot with a try still armed but not yet
	// started (the boot menu picked a slot by hand): leave it armed.
	BootTryPending
)

func (o BootOutcome) String() string {
	switch o {
	case BootNormal:
		return "normal"
	case BootTrial:
		return "trial"
	case BootTryFailed:
		return "try failed"
	case BootTryPending:
		return "try pending"
	}
	return fmt.Sprintf("BootOutcome(%d)", int(o))
}

// AfterBoot is what the init does with the environment once booted:
//
//	trial  rackd_try       rackd_tries  outcome         env written
//	yes    any             any          BootTrial       rackd_tries=0 (in case GRUB could not save it)
//	no     unset           any          BootNormal      -
//	no     set, a slot     0 or unset   BootTryFailed   rackd_try=, rackd_tries=0
//	no     set, a slot     1            BootTryPending  -
//	no     set, not slot   any          BootNormal      rackd_try=, rackd_tries=0
//
// failed is the slot whose try failed (BootTryFailed only). The returned
// environment is a copy; it equals env when nothing needs writing.
func AfterBoot(env *Env, booted Slot, trial bool) (outcome BootOutcome, failed Slot, newEnv *Env) {
	newEnv = env.Clone()
	if trial {
		newEnv.Set(EnvTries, "0")
		return BootTrial, "", newEnv
	}
	raw := env.Get(EnvTry)
	if raw == "" {
		return BootNormal, "", newEnv
	}
	try := Slot(raw)
	if !try.Valid() {
		newEnv.Set(EnvTry, "")
		newEnv.Set(EnvTries, "0")
		return BootNormal, "", newEnv
	}
	if env.Get(EnvTries) == "1" {
		return BootTryPending, "", newEnv
	}
	newEnv.Set(EnvTry, "")
	newEnv.Set(EnvTries, "0")
	return BootTryFailed, try, newEnv
}

// MarkGood is the environment after a trial boot of booted came up healthy:
// it becomes the good slot and the try is over.
func MarkGood(env *Env, booted Slot) *Env {
	e := env.Clone()
	e.Set(EnvGood, string(booted))
	e.Set(EnvTry, "")
	e.Set(EnvTries, "0")
	return e
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
