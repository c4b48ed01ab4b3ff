package maasapi

import (
	"fmt"
	"net/http"
	"strings"
)

// Route is one operation of MAAS's API as rackd serves it.
type Route struct {
	// Method is GET, POST, PUT or DELETE.
	Method string
	// Path is under Prefix, with MAAS's trailing slash, path parameters
	// in braces: "machines/", "machines/{system_id}/".
	Path string
	// Op is the op parameter that selects the operation ("allocate");
	// empty for the method itself (read, update, delete the resource).
	Op string
	// Handler is MAAS's name for the resource's handler
	// ("MachinesHandler", "MachineHandler"): describe/ groups the routes
	// by it, and python-libmaas binds its classes by it.
	Handler string
	// Handle answers the call: a value written as JSON with 200, a raw
	// answer, or an error (apiError, a store refusal, a failure).
	Handle func(s *Server, c *call) (any, error)
	// Anonymous routes answer without a key; MAAS has only version/ and
	// describe/ so.
	Anonymous bool
	// BodyLimit bounds the request body; 0: Options.MaxBodyBytes.
	BodyLimit int64
	// Doc says what it does, one line (describe/ shows it).
	Doc string
}

func (rt *Route) check() error {
	name := fmt.Sprintf("route %s %s op=%q", rt.Method, rt.Path, rt.Op)
	switch {
	case rt.Method != http.MethodGet && rt.Method != http.MethodPost && rt.Method != http.MethodPut && rt.Method != http.MethodDelete:
		return fmt.Errorf("maasapi: %s: method must be GET, POST, PUT or DELETE", name)
	case !strings.HasSuffix(rt.Path, "/") || strings.HasPrefix(rt.Path, "/"):
		return fmt.Errorf("maasapi: %s: a path is relative to the prefix and ends with a slash", name)
	case rt.Anonymous && rt.Method != http.MethodGet:
		return fmt.Errorf("maasapi: %s: only a GET may be anonymous", name)
	case rt.Handle == nil || rt.Doc == "" || !strings.HasSuffix(rt.Handler, "Handler"):
		return fmt.Errorf("maasapi: %s: needs Handle, Doc and a Handler name ending in Handler", name)
	case rt.Method == http.MethodPost && rt.Op == "" && !strings.HasSuffix(rt.Path, "s/"):
		// MAAS creates with an op-less POST on a collection only.
		return fmt.Errorf("maasapi: %s: an op-less POST creates, on a collection", name)
	}
	return nil
}

// routes is MAAS's API as rackd serves it: every entry is one (method,
// path, op). describe/ is made from it, and a test holds docs/MAAS-API.md
// to it.
//
// To serve a resource: write its handlers in a file of its own (zones.go:
// func zonesRead(s *Server, c *call) (any, error)), then append its entries
// here, one per (method, path, op), with MAAS's handler name (describe/
// and python-libmaas need it), a one-line Doc, and a BodyLimit when its
// body can exceed Options.MaxBodyBytes (files/ add). A handler reads its
// parameters through c (c.str, c.list, c.integer, c.boolean; c.check
// answers MAAS's 400 of field errors), reads the store through s.store, and
// changes machines only through s.ops; it returns a store refusal as it is
// (server.go puts it into MAAS's words) or errorf(status, ...) for its own.
// Then list the entries in docs/MAAS-API.md's table of served operations.
func routes() []Route {
	return append([]Route{
		{Method: "GET", Path: "version/", Handler: "VersionHandler", Handle: version, Anonymous: true,
			Doc: "The API's version, subversion and capabilities."},
		{Method: "GET", Path: "describe/", Handler: "DescribeHandler", Handle: describe, Anonymous: true,
			Doc: "Every resource served, with its operations (python-libmaas builds its client from it)."},
		{Method: "GET", Path: "users/", Op: "whoami", Handler: "UsersHandler", Handle: whoami,
			Doc: "The user the API key belongs to."},
	}, resourceRoutes()...) // resources.go: zones, pools, tags, networks, addresses, DNS, images, files
}
