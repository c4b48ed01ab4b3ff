package maasapi

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"rackd/store"
)

// Zones, resource pools and tags. rackd's zones and tags are labels on
// machines (PATCH /api/v1/machines/{id}, PUT machines/{system_id}/ here):
// a zone or a tag exists while a machine carries it, and MAAS's "default"
// zone always exists, holding the machines of no zone. rackd has no
// resource pools: every machine is in MAAS's "default" pool.

const (
	defaultZone   = "default"
	defaultZoneID = 1 // MAAS's default zone
	defaultPool   = "default"
	defaultPoolID = 0 // MAAS's default pool
)

type zoneJSON struct {
	ID          int    `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	ResourceURI string `json:"resource_uri"`
}

// zoneView is a machine zone as MAAS shows one ("" is the default zone).
func zoneView(name string) zoneJSON {
	if name == "" || name == defaultZone {
		return zoneJSON{ID: defaultZoneID, Name: defaultZone, ResourceURI: uri("zones", defaultZone)}
	}
	return zoneJSON{ID: stableID("zone", name), Name: name, ResourceURI: uri("zones", name)}
}

type poolJSON struct {
	ID          int    `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	ResourceURI string `json:"resource_uri"`
}

func poolView() poolJSON {
	return poolJSON{ID: defaultPoolID, Name: defaultPool, Description: "Default pool", ResourceURI: uri("resourcepools", strconv.Itoa(defaultPoolID))}
}

// labels is the sorted set of zones (or tags) machines carry.
func (s *Server) labels(of func(store.Machine) []string) ([]string, error) {
	ms, err := s.store.ListMachines(store.Filter{})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for _, l := range of(m) {
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func machineZones(m store.Machine) []string {
	if m.Zone == "" {
		return nil
	}
	return []string{m.Zone}
}

func zonesRead(s *Server, c *call) (any, error) {
	zones, err := s.labels(machineZones)
	if err != nil {
		return nil, err
	}
	out := []zoneJSON{zoneView(defaultZone)}
	for _, z := range zones {
		if z != defaultZone {
			out = append(out, zoneView(z))
		}
	}
	return out, nil
}

func zoneRead(s *Server, c *call) (any, error) {
	name := c.path("name")
	if name == defaultZone {
		return zoneView(name), nil
	}
	zones, err := s.labels(machineZones)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(zones, name) {
		return nil, errorf(http.StatusNotFound, "No Zone matches the given query: no machine is in zone %q", truncate(name, 64))
	}
	return zoneView(name), nil
}

func poolsRead(s *Server, c *call) (any, error) { return []poolJSON{poolView()}, nil }

func poolRead(s *Server, c *call) (any, error) {
	switch strings.TrimPrefix(strings.TrimPrefix(c.path("id"), "id:"), "name:") {
	case strconv.Itoa(defaultPoolID), defaultPool:
		return poolView(), nil
	}
	return nil, errorf(http.StatusNotFound, "No ResourcePool matches the given query: rackd has one pool, %q (id %d)", defaultPool, defaultPoolID)
}

type tagJSON struct {
	Name        string `json:"name"`
	Definition  string `json:"definition"`
	Comment     string `json:"comment"`
	KernelOpts  string `json:"kernel_opts"`
	ResourceURI string `json:"resource_uri"`
}

func tagView(t store.Tag) tagJSON {
	return tagJSON{Name: t.Name, Comment: t.Comment, ResourceURI: uri("tags", t.Name)}
}

func tagsRead(s *Server, c *call) (any, error) {
	tags, err := s.store.Tags()
	if err != nil {
		return nil, err
	}
	out := make([]tagJSON, len(tags))
	for i, t := range tags {
		out[i] = tagView(t)
	}
	return out, nil
}

// taggedMachines are the machines carrying tag (404 when the tag is
// neither defined nor carried).
func (s *Server) taggedMachines(tag string) ([]store.Machine, error) {
	if _, err := s.store.Tag(tag); err != nil {
		return nil, err
	}
	ms, err := s.store.ListMachines(store.Filter{})
	if err != nil {
		return nil, err
	}
	var out []store.Machine
	for _, m := range ms {
		if slices.Contains(m.Tags, tag) {
			out = append(out, m)
		}
	}
	return out, nil
}

func tagRead(s *Server, c *call) (any, error) {
	t, err := s.store.Tag(c.path("name"))
	if err != nil {
		return nil, err
	}
	return tagView(t), nil
}

// tagParams reads what a tag's create or update sends besides its name:
// the comment; a definition (MAAS's XPath over hardware details) and
// kernel options are refused, never ignored: rackd tags machines by hand
// and adds no kernel options by tag.
func tagParams(c *call) (comment *string) {
	if c.has("comment") {
		v := c.str("comment")
		comment = &v
	}
	if c.str("definition") != "" {
		c.fail("definition", "rackd does not tag machines by an XPath over their hardware details: put the tag on machines with op=update_nodes.")
	}
	if c.str("kernel_opts") != "" {
		c.fail("kernel_opts", "rackd adds no kernel options by tag: give them to the boot image instead.")
	}
	return comment
}

// tagsCreate defines a tag (admins), with no machine yet.
func tagsCreate(s *Server, c *call) (any, error) {
	name := c.str("name")
	if name == "" {
		c.fail("name", "This field is required.")
	}
	comment := tagParams(c)
	if err := c.check(); err != nil {
		return nil, err
	}
	var text string
	if comment != nil {
		text = *comment
	}
	t, err := s.store.DefineTag(c.ctx(), c.who, name, text)
	if err != nil {
		return nil, err
	}
	return tagView(t), nil
}

// tagUpdate renames a tag (on its machines too) or changes its comment.
func tagUpdate(s *Server, c *call) (any, error) {
	var patch store.TagPatch
	if c.has("name") {
		v := c.str("name")
		patch.Name = &v
	}
	patch.Comment = tagParams(c)
	if err := c.check(); err != nil {
		return nil, err
	}
	t, err := s.store.UpdateTag(c.ctx(), c.who, c.path("name"), patch)
	if err != nil {
		return nil, err
	}
	return tagView(t), nil
}

// tagMachines is op=machines: the machines with the tag that the caller
// may see, as machines/ shows them.
func tagMachines(s *Server, c *call) (any, error) {
	ms, err := s.taggedMachines(c.path("name"))
	if err != nil {
		return nil, err
	}
	return s.machineList(c, ms)
}

// tagUpdateNodes is op=update_nodes: add=system_id... and
// remove=system_id... in one transaction (the store's TagMachines, admins
// only). An unknown tag is made by the first machine given it.
func tagUpdateNodes(s *Server, c *call) (any, error) {
	add, remove := c.form["add"], c.form["remove"]
	if c.has("definition") {
		return nil, errorf(http.StatusNotImplemented, "op=update_nodes with a definition: rackd's tags are set on machines by hand, not by an XPath over hardware details")
	}
	if c.has("rack_controller") {
		return nil, errorf(http.StatusBadRequest, "rack_controller: rackd is its own rack controller")
	}
	added, removed, err := s.store.TagMachines(c.ctx(), c.who, c.path("name"), add, remove, "MAAS API tags update_nodes")
	if err != nil {
		return nil, err
	}
	return map[string]int{"added": added, "removed": removed}, nil
}

// tagDelete removes the tag: its definition, and the tag on every
// machine that carries it, at once.
func tagDelete(s *Server, c *call) (any, error) {
	if _, err := s.store.DeleteTag(c.ctx(), c.who, c.path("name")); err != nil {
		return nil, err
	}
	return emptyAnswer, nil
}
