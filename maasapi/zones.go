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

func tagView(name string) tagJSON { return tagJSON{Name: name, ResourceURI: uri("tags", name)} }

func machineTags(m store.Machine) []string { return m.Tags }

func tagsRead(s *Server, c *call) (any, error) {
	tags, err := s.labels(machineTags)
	if err != nil {
		return nil, err
	}
	out := make([]tagJSON, len(tags))
	for i, t := range tags {
		out[i] = tagView(t)
	}
	return out, nil
}

// taggedMachines are the machines carrying tag, 404 when none does.
func (s *Server) taggedMachines(tag string) ([]store.Machine, error) {
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
	if len(out) == 0 {
		return nil, errorf(http.StatusNotFound, "No Tag matches the given query: no machine carries the tag %q", truncate(tag, 64))
	}
	return out, nil
}

func tagRead(s *Server, c *call) (any, error) {
	if _, err := s.taggedMachines(c.path("name")); err != nil {
		return nil, err
	}
	return tagView(c.path("name")), nil
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

// tagDelete takes the tag off every machine that carries it.
func tagDelete(s *Server, c *call) (any, error) {
	ms, err := s.taggedMachines(c.path("name"))
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	if _, _, err := s.store.TagMachines(c.ctx(), c.who, c.path("name"), nil, ids, "MAAS API tag delete"); err != nil {
		return nil, err
	}
	return emptyAnswer, nil
}
