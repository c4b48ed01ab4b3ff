package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Check verifies the invariants that the operations keep, across the whole
// database, and returns every violation it finds (nil when all hold):
// indexes point at records that agree with them, every held machine has its
// allocation and no other machine has one, and every token
// belongs to its user and every user's token to it. Tests run it after every
// scenario; operators can run it after a restore.
func (s *Store) Check() error {
	// A damaged file makes bbolt panic: that is a finding too.
	var err error
	if gerr := guard(func() error { err = s.check(); return nil }); gerr != nil {
		return gerr
	}
	return err
}

func (s *Store) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	err := s.view(func(t *Tx) error {
		machines := map[string]Machine{}
		err := t.tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
			var m Machine
			if err := json.Unmarshal(v, &m); err != nil {
				bad("machine %s: undecodable: %v", k, err)
				return nil
			}
			if m.ID != string(k) {
				bad("machine %s: stored under key %s", m.ID, k)
			}
			if !m.State.Valid() {
				bad("machine %s: unknown state %q", m.ID, m.State)
			}
			machines[m.ID] = m
			return nil
		})
		if err != nil {
			return err
		}
		for id, m := range machines {
			if got := string(t.getRaw(bucketHostnames, []byte(m.Hostname))); got != id {
				bad("machine %s: hostname %s indexed to %q", id, m.Hostname, got)
			}
			for _, mac := range m.MACs {
				if got := string(t.getRaw(bucketMACs, []byte(mac))); got != id {
					bad("machine %s: MAC %s indexed to %q", id, mac, got)
				}
			}
			found := m.Allocation != nil
			var a Allocation
			if found {
				a = *m.Allocation
			}
			switch {
			case holds(m.State) && !found:
				bad("machine %s is %s but has no allocation", id, m.State)
			case found && !holds(m.State) && m.State != StateBroken:
				bad("machine %s is %s but has an allocation (owner %s)", id, m.State, a.Owner)
			case found && (a.Owner != m.Owner || a.AgentName != m.AgentName):
				bad("machine %s: owner/agent %s/%q differ from its allocation's %s/%q", id, m.Owner, m.AgentName, a.Owner, a.AgentName)
			case !found && m.Owner != "":
				bad("machine %s has owner %s but no allocation", id, m.Owner)
			}
		}
		index := func(bucket []byte, has func(Machine, string) bool) {
			t.tx.Bucket(bucket).ForEach(func(k, v []byte) error {
				m, ok := machines[string(v)]
				if !ok || !has(m, string(k)) {
					bad("%s index: %s -> %s does not match a machine", bucket, k, v)
				}
				return nil
			})
		}
		for id, m := range machines {
			if got := string(t.getRaw(bucketFree, []byte(m.Hostname))); isFree(m) != (got == id) {
				bad("machine %s (%s, owner %q): free index says %q", id, m.State, m.Owner, got)
			}
		}
		index(bucketFree, func(m Machine, k string) bool { return m.Hostname == k && isFree(m) })
		index(bucketHostnames, func(m Machine, k string) bool { return m.Hostname == k })
		index(bucketMACs, func(m Machine, k string) bool { return slices.Contains(m.MACs, k) })
		t.tx.Bucket(bucketUsers).ForEach(func(k, v []byte) error {
			var u User
			if err := json.Unmarshal(v, &u); err != nil {
				bad("user %s: undecodable: %v", k, err)
			} else if got := string(t.getRaw(bucketTokens, []byte(u.TokenHash))); got != u.Name {
				bad("user %s: token indexed to %q", k, got)
			}
			return nil
		})
		return t.tx.Bucket(bucketTokens).ForEach(func(k, v []byte) error {
			var u User
			if found, err := t.get(bucketUsers, v, &u); err != nil || !found || u.TokenHash != string(k) {
				bad("token index entry for user %s does not match the user", v)
			}
			return nil
		})
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
