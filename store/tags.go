package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
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

// Tag definitions. A tag exists while a machine carries it, as it always
// has, or while it is defined: a definition is a tag made before (or kept
// after) any machine carries it, with a comment (the tag of MAAS's API and
// Terraform's maas_tag, which is created empty and then put on machines).
// Definitions are records of their own bucket, made by the first tag
// defined (a database where nobody defined one has none; readers treat a
// missing bucket as no definitions).
var bucketTagDefs = []byte("tag_defs") // name -> Tag

// Tag is a tag as the API shows it: a defined tag has its comment and the
// time it was defined; a tag only carried by machines has neither.
type Tag struct {
	Name    string    `json:"name"`
	Comment string    `json:"comment,omitempty"`
	Defined time.Time `json:"defined,omitzero"`
	// Machines counts the machines carrying it (not stored).
	Machines int `json:"machines"`
}

// maxTagComment bounds a tag's comment.
const maxTagComment = 1024

func checkTag(name, comment string) error {
	if !tagRE.MatchString(name) {
		return errorf(CodeInvalid, "invalid tag %q: 1-64 characters of [A-Za-z0-9_.:-]", name)
	}
	if len(comment) > maxTagComment {
		return errorf(CodeInvalid, "the tag's comment is %d bytes: at most %d", len(comment), maxTagComment)
	}
	return nil
}

// tags returns every tag, defined or carried, by name.
func (t *Tx) tags() ([]Tag, error) {
	byName := map[string]*Tag{}
	if b := t.tx.Bucket(bucketTagDefs); b != nil {
		err := b.ForEach(func(k, v []byte) error {
			var tg Tag
			if err := json.Unmarshal(v, &tg); err != nil {
				return fmt.Errorf("decode %s/%q: %w", bucketTagDefs, k, err)
			}
			byName[tg.Name] = &tg
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	err := t.tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
		var m Machine
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("decode machine %q: %w", k, err)
		}
		for _, name := range m.Tags {
			tg := byName[name]
			if tg == nil {
				tg = &Tag{Name: name}
				byName[name] = tg
			}
			tg.Machines++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Tag, 0, len(byName))
	for _, tg := range byName {
		out = append(out, *tg)
	}
	slices.SortFunc(out, func(a, b Tag) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Tags lists every tag, defined or carried by a machine, by name.
func (s *Store) Tags() ([]Tag, error) {
	var out []Tag
	err := s.view(func(t *Tx) error {
		var err error
		out, err = t.tags()
		return err
	})
	return out, err
}

// tag returns one tag, CodeNotFound when it is neither defined nor carried.
func (t *Tx) tag(name string) (Tag, error) {
	all, err := t.tags()
	if err != nil {
		return Tag{}, err
	}
	for _, tg := range all {
		if tg.Name == name {
			return tg, nil
		}
	}
	return Tag{}, errorf(CodeNotFound, "no tag %q: none is defined and no machine carries it", name)
}

// Tag returns one tag, CodeNotFound when it is neither defined nor carried.
func (s *Store) Tag(name string) (Tag, error) {
	var out Tag
	err := s.view(func(t *Tx) error {
		var err error
		out, err = t.tag(name)
		return err
	})
	return out, err
}

// DefineTag defines a tag with its comment (admins only): CodeConflict if
// it is defined already. A tag machines carry already may be defined: it
// keeps its machines and gains the comment.
func (s *Store) DefineTag(ctx context.Context, actor Actor, name, comment string) (Tag, error) {
	if !actor.Admin {
		return Tag{}, errorf(CodeForbidden, "only an admin may define tags")
	}
	if err := checkTag(name, comment); err != nil {
		return Tag{}, err
	}
	var out Tag
	err := s.update(ctx, func(t *Tx) error {
		if b := t.tx.Bucket(bucketTagDefs); b != nil && b.Get([]byte(name)) != nil {
			return errorf(CodeConflict, "the tag %q is defined already", name)
		}
		if _, err := t.tx.CreateBucketIfNotExists(bucketTagDefs); err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketTagDefs, err)
		}
		if err := t.put(bucketTagDefs, []byte(name), Tag{Name: name, Comment: comment, Defined: t.now}); err != nil {
			return err
		}
		var err error
		out, err = t.tag(name)
		return err
	})
	return out, err
}

// TagPatch changes a tag: its name (on every machine carrying it too) and
// its comment; nil leaves a field as it is.
type TagPatch struct {
	Name    *string
	Comment *string
}

// UpdateTag changes tag name as patch says, in one transaction (admins
// only). A rename moves the tag on every machine carrying it and refuses a
// name another tag has; changing the comment of a tag only carried by
// machines defines it.
func (s *Store) UpdateTag(ctx context.Context, actor Actor, name string, patch TagPatch) (Tag, error) {
	if !actor.Admin {
		return Tag{}, errorf(CodeForbidden, "only an admin may change tags")
	}
	var out Tag
	err := s.update(ctx, func(t *Tx) error {
		old, err := t.tag(name)
		if err != nil {
			return err
		}
		next := old
		if patch.Name != nil {
			next.Name = *patch.Name
		}
		if patch.Comment != nil {
			next.Comment = *patch.Comment
		}
		if err := checkTag(next.Name, next.Comment); err != nil {
			return err
		}
		if next.Name != name {
			if _, err := t.tag(next.Name); err == nil {
				return errorf(CodeConflict, "cannot rename the tag %q to %q: that tag exists", name, next.Name)
			} else if CodeOf(err) != CodeNotFound {
				return err
			}
			if err := t.retagMachines(actor, name, &next.Name, "tag "+name+" renamed "+next.Name); err != nil {
				return err
			}
			if b := t.tx.Bucket(bucketTagDefs); b != nil && b.Get([]byte(name)) != nil {
				if err := t.del(bucketTagDefs, []byte(name)); err != nil {
					return err
				}
			}
		}
		if old.Defined.IsZero() && patch.Comment == nil && next.Name != name {
			// A carried-only tag renamed stays carried-only.
			out, err = t.tag(next.Name)
			return err
		}
		if next.Defined.IsZero() {
			next.Defined = t.now
		}
		if _, err := t.tx.CreateBucketIfNotExists(bucketTagDefs); err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketTagDefs, err)
		}
		next.Machines = 0
		if err := t.put(bucketTagDefs, []byte(next.Name), next); err != nil {
			return err
		}
		out, err = t.tag(next.Name)
		return err
	})
	return out, err
}

// DeleteTag removes tag name: its definition and the tag on every machine
// carrying it, in one transaction (admins only). It returns the tag as it
// was.
func (s *Store) DeleteTag(ctx context.Context, actor Actor, name string) (Tag, error) {
	if !actor.Admin {
		return Tag{}, errorf(CodeForbidden, "only an admin may delete tags")
	}
	var out Tag
	err := s.update(ctx, func(t *Tx) error {
		var err error
		if out, err = t.tag(name); err != nil {
			return err
		}
		if err := t.retagMachines(actor, name, nil, "tag "+name+" deleted"); err != nil {
			return err
		}
		if b := t.tx.Bucket(bucketTagDefs); b != nil && b.Get([]byte(name)) != nil {
			return t.del(bucketTagDefs, []byte(name))
		}
		return nil
	})
	return out, err
}

// retagMachines replaces tag name on every machine carrying it by *to, or
// takes it off when to is nil.
func (t *Tx) retagMachines(actor Actor, name string, to *string, reason string) error {
	var ids []string
	err := t.tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
		var m Machine
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("decode machine %q: %w", k, err)
		}
		if slices.Contains(m.Tags, name) {
			ids = append(ids, m.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		m, err := t.machine(id)
		if err != nil {
			return err
		}
		tags := slices.DeleteFunc(slices.Clone(m.Tags), func(s string) bool { return s == name })
		if to != nil && !slices.Contains(tags, *to) {
			tags = append(tags, *to)
		}
		if _, err := t.updateMachine(actor, m.ID, MachinePatch{Tags: &tags, Reason: reason}); err != nil {
			return err
		}
	}
	return nil
}

// checkTagDefs verifies the tag definitions for Check: every record
// decodes, is stored under its own name, and that name is a valid tag.
func (t *Tx) checkTagDefs(bad func(string, ...any)) {
	b := t.tx.Bucket(bucketTagDefs)
	if b == nil {
		return
	}
	b.ForEach(func(k, v []byte) error {
		var tg Tag
		if err := json.Unmarshal(v, &tg); err != nil {
			bad("tag definition %q does not decode: %v", k, err)
			return nil
		}
		if tg.Name != string(k) {
			bad("tag definition %q is stored under %q", tg.Name, k)
		}
		if err := checkTag(tg.Name, tg.Comment); err != nil {
			bad("tag definition %q: %v", k, err)
		}
		return nil
	})
}
