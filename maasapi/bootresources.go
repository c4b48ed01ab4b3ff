package maasapi

import (
	"net/http"
	"strconv"
	"strings"

	"rackd/store"
)

// boot-resources/: rackd's imported images (GET /api/v1/images), as MAAS
// shows uploaded boot resources. Bootloaders are rackd's own and not
// listed. Images are imported through /api/v1/images/import (the CLI's
// rackd images import): MAAS's upload and import answer 501 saying so.

type bootResourceJSON struct {
	ID           int     `json:"id"`
	Type         string  `json:"type"`
	Name         string  `json:"name"`
	Architecture string  `json:"architecture"`
	Subarches    string  `json:"subarches"`
	Title        string  `json:"title"`
	LastDeployed *string `json:"last_deployed"`
	ResourceURI  string  `json:"resource_uri"`
}

// bootResourceView is an image as MAAS shows a boot resource: named by
// its os and series, titled by its own name; "amd64/generic" for its
// architecture.
func bootResourceView(im store.Image) bootResourceJSON {
	id := stableID("bootresource", im.Name+"/"+im.Arch)
	return bootResourceJSON{ID: id, Type: "Uploaded", Name: imageMAASName(im), Architecture: im.Arch + "/generic",
		Subarches: "generic", Title: im.Name, ResourceURI: uri("boot-resources", strconv.Itoa(id))}
}

// imageMAASName is the name MAAS's clients see for an image: its os and
// series ("ubuntu/jammy"; "custom/NAME" for an image of no known os), the
// names a deploy's osystem and distro_series choose it by.
func imageMAASName(im store.Image) string {
	os, series := imageOS(im)
	return os + "/" + series
}

func (s *Server) bootResources() ([]bootResourceJSON, error) {
	ims, err := s.store.Images()
	if err != nil {
		return nil, err
	}
	out := []bootResourceJSON{}
	for _, im := range ims {
		if im.Purpose == store.PurposeBootloader {
			continue
		}
		out = append(out, bootResourceView(im))
	}
	return out, nil
}

// bootResourcesRead lists them; type= filters by MAAS's types ("uploaded";
// rackd has no synced or generated resources).
func bootResourcesRead(s *Server, c *call) (any, error) {
	typ := strings.ToLower(c.str("type"))
	if err := c.check(); err != nil {
		return nil, err
	}
	rs, err := s.bootResources()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "", "all", "uploaded":
		return rs, nil
	case "synced", "generated":
		return []bootResourceJSON{}, nil
	}
	return nil, &apiError{status: http.StatusBadRequest, fields: map[string][]string{
		"type": {"Select a valid choice: all, synced, generated, uploaded."}}}
}

func bootResourceRead(s *Server, c *call) (any, error) {
	rs, err := s.bootResources()
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if strconv.Itoa(r.ID) == c.path("id") {
			return r, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "No BootResource matches the given query: %q", truncate(c.path("id"), 32))
}
