package maasapi

import (
	"net/http"
	"slices"
	"strings"
)

// capabilities are what version/ says rackd's API can do: the names MAAS
// 2.x and 3.x announce and their clients check (Juju refuses a MAAS
// without networks-management, network-deployment-ubuntu and
// storage-deployment-ubuntu).
var capabilities = []string{
	"authenticate-api",
	"bridging-automatic-ubuntu",
	"bridging-interface-ubuntu",
	"devices-management",
	"ipv6-deployment-ubuntu",
	"network-deployment-ubuntu",
	"networks-management",
	"static-ipaddresses",
	"storage-deployment-ubuntu",
}

// maasVersion is the MAAS release whose API rackd's answers follow.
const maasVersion = "3.5.0"

func version(s *Server, c *call) (any, error) {
	return map[string]any{
		"version":      maasVersion,
		"subversion":   "rackd " + s.opts.Version,
		"capabilities": capabilities,
	}, nil
}

func whoami(s *Server, c *call) (any, error) {
	return userView(c.who.Name, c.who.Admin), nil
}

// userView is a user as MAAS shows one.
func userView(name string, admin bool) map[string]any {
	return map[string]any{
		"username":     name,
		"email":        "",
		"is_superuser": admin,
		"is_local":     true,
		"resource_uri": Prefix + "users/" + name + "/",
	}
}

// describe is MAAS's API description, made from the route table: one
// resource per handler name, its path, its path parameters and its
// operations.
func describe(s *Server, c *call) (any, error) {
	type action struct {
		Name    string  `json:"name"`
		Method  string  `json:"method"`
		Op      *string `json:"op"`
		Restful bool    `json:"restful"`
		Doc     string  `json:"doc"`
	}
	type handler struct {
		Name    string   `json:"name"`
		Doc     string   `json:"doc"`
		Params  []string `json:"params"`
		Path    string   `json:"path"`
		URI     string   `json:"uri"`
		Actions []action `json:"actions"`
	}
	type resource struct {
		Name string   `json:"name"`
		Anon *handler `json:"anon"`
		Auth *handler `json:"auth"`
	}
	base := baseURL(c.r)
	byName := map[string]*handler{}
	anon := map[string]bool{}
	var names []string
	// One resource per handler and path, as MAAS describes a handler it
	// serves at two paths (VlanHandler) twice.
	for _, rt := range s.routes {
		key := rt.Handler + " " + rt.Path
		h := byName[key]
		if h == nil {
			h = &handler{Name: rt.Handler, Doc: rt.Handler, Params: pathParams(rt.Path), Path: Prefix + rt.Path,
				URI: base + Prefix + rt.Path, Actions: []action{}}
			byName[key] = h
			names = append(names, key)
			anon[key] = rt.Anonymous
		}
		anon[key] = anon[key] && rt.Anonymous
		a := action{Method: rt.Method, Restful: rt.Op == "", Doc: rt.Doc}
		if rt.Op != "" {
			op := rt.Op
			a.Op, a.Name = &op, op
		} else {
			a.Name = map[string]string{"GET": "read", "POST": "create", "PUT": "update", "DELETE": "delete"}[rt.Method]
		}
		h.Actions = append(h.Actions, a)
	}
	slices.Sort(names)
	out := map[string]any{"doc": "MAAS API (as served by rackd)", "hash": "rackd-" + s.opts.Version}
	var resources []resource
	var handlers []*handler
	for _, n := range names {
		h := byName[n]
		// A handler whose every operation answers without a key is
		// anonymous, as MAAS describes version/ and describe/.
		if anon[n] {
			resources = append(resources, resource{Name: h.Name, Anon: h})
		} else {
			resources = append(resources, resource{Name: h.Name, Auth: h})
		}
		handlers = append(handlers, h)
	}
	out["resources"] = resources
	out["handlers"] = handlers
	return out, nil
}

// pathParams are the names in braces of a route's path.
func pathParams(p string) []string {
	out := []string{}
	for _, seg := range strings.Split(p, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, strings.Trim(seg, "{}"))
		}
	}
	return out
}

// baseURL is the scheme and host the client reached.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
