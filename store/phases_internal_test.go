package store

import (
	"context"
	"encoding/json"
	"rackd/store/kv"
	"strings"
	"testing"
)

// Check finds a credential outside its phase, a phase without one, and an
// erase flag outside a release.
func TestCheckFindsCredentialDamage(t *testing.T) {
	for name, tc := range map[string]struct {
		damage func(m *Machine)
		want   string
	}{
		"credential of an idle machine": {func(m *Machine) {
			m.State, m.Credential = StateReady, &Credential{Phase: PhaseDeploy}
		}, "is READY but holds a deploy credential"},
		"phase without credential":    {func(m *Machine) { m.Credential = nil }, "in its commission phase without a credential"},
		"credential of another phase": {func(m *Machine) { m.Credential.Phase = PhaseErase }, "with a credential for erase"},
		"erase flag outside a release": {func(m *Machine) {
			m.State, m.Credential, m.Erase = StateReady, nil, true
		}, "with the erase flag"},
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, Options{}, false)
			m := mustCreatePowered(t, s, "c1", 1, StateNew, PowerParams{Driver: "manual"})
			m, err := s.Transition(context.Background(), testAdmin, TransitionRequest{Machine: m.ID, Action: ActionCommission})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("before the damage: %v", err)
			}
			tc.damage(&m)
			err = s.kv.Update(context.Background(), func(tx kv.Tx) error {
				data, err := json.Marshal(m)
				if err != nil {
					return err
				}
				return tx.Bucket(bucketMachines).Put([]byte(m.ID), data)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v, want %q", err, tc.want)
			}
		})
	}
}
