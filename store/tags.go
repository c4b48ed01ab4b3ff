package store

import (
	"context"
	"slices"
)

// TagMachines adds tag to the machines of add and takes it off those of
// remove (ids or hostnames), in one transaction: every machine is changed
// or none is. A machine that already has (or lacks) the tag is left as it
// is. It returns how many machines gained and lost the tag. Admins only, as
// every change of a machine's record (UpdateMachine).
func (s *Store) TagMachines(ctx context.Context, actor Actor, tag string, add, remove []string, reason string) (added, removed int, err error) {
	if !actor.Admin {
		return 0, 0, errorf(CodeForbidden, "only an admin may change machines' tags")
	}
	if !tagRE.MatchString(tag) {
		return 0, 0, errorf(CodeInvalid, "invalid tag %q: 1-64 characters of [A-Za-z0-9_.:-]", tag)
	}
	if len(reason) > 1024 {
		return 0, 0, errorf(CodeInvalid, "reason is too long (at most 1024 bytes)")
	}
	err = s.update(ctx, func(t *Tx) error {
		added, removed = 0, 0
		for _, pass := range []struct {
			ids []string
			on  bool
		}{{add, true}, {remove, false}} {
			for _, id := range pass.ids {
				m, err := t.machine(id)
				if err != nil {
					return err
				}
				has := slices.Contains(m.Tags, tag)
				if has == pass.on {
					continue
				}
				tags := slices.DeleteFunc(slices.Clone(m.Tags), func(s string) bool { return s == tag })
				if pass.on {
					tags = append(tags, tag)
					added++
				} else {
					removed++
				}
				if _, err := t.updateMachine(actor, m.ID, MachinePatch{Tags: &tags, Reason: reason}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return added, removed, nil
}
