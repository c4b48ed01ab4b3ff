package store

import (
	"context"
	"maps"
	"regexp"
	"unicode/utf8"
)

// Owner data: what the owner of an allocation keeps on its machine (MAAS's
// owner_data; Juju records its model, controller and unit there). It lives
// in the machine's record, is changed only by its owner or an admin, and
// goes when the allocation ends.

// Bounds of a machine's owner data.
const (
	MaxOwnerDataKeys  = 100
	MaxOwnerDataKey   = 255
	MaxOwnerDataValue = 4096
)

var ownerDataKeyRE = regexp.MustCompile(`^[A-Za-z0-9_.:/@+-]+$`)

// SetOwnerData changes the owner data of a held machine: each key of set
// takes its value, an empty value removes the key. Only the machine's owner
// or an admin may, while the machine is held; to anyone else the machine
// is refused as MayView says (CodeNotFound when they may not see it).
func (s *Store) SetOwnerData(ctx context.Context, actor Actor, idOrName string, set map[string]string) (Machine, error) {
	for k, v := range set {
		switch {
		case len(k) == 0 || len(k) > MaxOwnerDataKey || !ownerDataKeyRE.MatchString(k):
			return Machine{}, errorf(CodeInvalid, "owner data key %q: want 1 to %d of letters, digits and _ . : / @ + -", truncateString(k, 64), MaxOwnerDataKey)
		case len(v) > MaxOwnerDataValue:
			return Machine{}, errorf(CodeInvalid, "owner data %s: its value is %d bytes, at most %d", k, len(v), MaxOwnerDataValue)
		case !utf8.ValidString(v):
			return Machine{}, errorf(CodeInvalid, "owner data %s: its value is not UTF-8", k)
		}
	}
	var m Machine
	err := s.update(ctx, func(t *Tx) error {
		var err error
		if m, err = t.machine(idOrName); err != nil {
			return err
		}
		if err := MayView(actor, m, idOrName); err != nil {
			return err
		}
		if m.Owner == "" || !holds(m.State) {
			return errorf(CodeConflict, "machine %s is %s and held by nobody: owner data belongs to an allocation", m.Hostname, m.State)
		}
		if !actor.Admin && m.Owner != actor.Name {
			return errorf(CodeForbidden, "machine %s is not yours: only its owner or an admin may set its owner data", m.Hostname)
		}
		data := maps.Clone(m.OwnerData)
		if data == nil {
			data = map[string]string{}
		}
		for k, v := range set {
			if v == "" {
				delete(data, k)
			} else {
				data[k] = v
			}
		}
		if len(data) > MaxOwnerDataKeys {
			return errorf(CodeInvalid, "machine %s would have %d owner data keys, at most %d", m.Hostname, len(data), MaxOwnerDataKeys)
		}
		if len(data) == 0 {
			data = nil
		}
		m.OwnerData = data
		return t.putMachine(&m)
	})
	return m, err
}

// MayView is who may see a machine: an admin any, anyone a machine nobody
// holds, a user the machines they hold; another user's held machine does
// not exist for them: refused with the words Machine uses for a machine
// that does not exist (asked is the id or name the caller gave), so that
// names cannot be probed.
func MayView(actor Actor, m Machine, asked string) error {
	if actor.Admin || m.Owner == "" || m.Owner == actor.Name {
		return nil
	}
	return errorf(CodeNotFound, "machine %q not found", asked)
}

func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
