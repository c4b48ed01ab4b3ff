package maasapi

import (
	"fmt"
	"net/http"
	"strings"

	"rackd/store"
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

		// machines.go, machineops.go
		{Method: "GET", Path: "machines/", Handler: "MachinesHandler", Handle: machinesRead,
			Doc: "The machines the caller may see (theirs and the unowned), filtered by id, hostname, mac_address, agent_name, zone, pool, status, tags, arch, owner, domain."},
		{Method: "POST", Path: "machines/", Handler: "MachinesHandler", Handle: machinesCreate,
			Doc: "Admins: add a machine (hostname, architecture, mac_addresses, power_type, power_parameters_*, zone, cpu_count, memory); commission=true (the default) commissions one with a power driver."},
		{Method: "POST", Path: "machines/", Op: "allocate", Handler: "MachinesHandler", Handle: machinesAllocate,
			Doc: "Allocate a machine by name or system_id, or by constraints (arch, cpu_count, mem, tags, not_tags, zone, not_in_zone, pool, storage), under agent_name; comment=\"rackd-token=TOKEN\" hands over an allocation. 409 when none matches."},
		{Method: "POST", Path: "machines/", Op: "release", Handler: "MachinesHandler", Handle: machinesRelease,
			Doc: "Release the machines of machines= (all or none), with comment."},
		{Method: "GET", Path: "machines/", Op: "power_parameters", Handler: "MachinesHandler", Handle: machinesPowerParameters,
			Doc: "Admins: the power parameters of the machines of id= (all by default), without credentials."},
		{Method: "GET", Path: "machines/{system_id}/", Handler: "MachineHandler", Handle: machineRead,
			Doc: "One machine."},
		{Method: "PUT", Path: "machines/{system_id}/", Handler: "MachineHandler", Handle: machineUpdate,
			Doc: "Admins: change hostname, architecture, cpu_count, memory, zone, power_type and power_parameters_*."},
		{Method: "DELETE", Path: "machines/{system_id}/", Handler: "MachineHandler", Handle: machineDelete,
			Doc: "Admins: delete a machine (force=true while it is held or busy)."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "deploy", Handler: "MachineHandler", Handle: machineDeploy,
			BodyLimit: deployBodyLimit,
			Doc:       "Deploy: distro_series and osystem choose the image, user_data (base64) goes to cloud-init, hwe_kernel is accepted; a Ready machine is allocated first."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "release", Handler: "MachineHandler", Handle: machineRelease,
			Doc: "Release (from Allocated, Deploying, Deployed or Failed deployment), with comment; erase=true erases the disks first."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "set_owner_data", Handler: "MachineHandler", Handle: machineSetOwnerData,
			Doc: "The owner: set owner data key=value (an empty value removes the key); it goes with the allocation."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "power_on", Handler: "MachineHandler", Handle: powerAction(store.PowerOn),
			Doc: "The owner or an admin: queue a power-on."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "power_off", Handler: "MachineHandler", Handle: powerAction(store.PowerOff),
			Doc: "The owner or an admin: queue a power-off (stop_mode accepted)."},
		{Method: "GET", Path: "machines/{system_id}/", Op: "query_power_state", Handler: "MachineHandler", Handle: machineQueryPowerState,
			Doc: "The power state rackd last observed: on, off or unknown."},
		{Method: "GET", Path: "machines/{system_id}/", Op: "power_parameters", Handler: "MachineHandler", Handle: machinePowerParameters,
			Doc: "Admins: the machine's power parameters, without credentials."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "commission", Handler: "MachineHandler", Handle: machineCommission,
			Doc: "Admins: commission (skip_bmc_config accepted; enable_ssh, skip_networking, skip_storage and scripts refused)."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "abort", Handler: "MachineHandler", Handle: machineAbort,
			Doc: "The owner (a deployment) or an admin: abort a commissioning (back to New, or Ready when commissioned before), a deployment (back to Allocated) or a disk erasing (Broken); the machine is powered off and its phase's credential dies."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "mark_broken", Handler: "MachineHandler", Handle: lifecycleAction(store.ActionMarkBroken),
			Doc: "Admins: mark the machine Broken, with comment."},
		{Method: "POST", Path: "machines/{system_id}/", Op: "mark_fixed", Handler: "MachineHandler", Handle: lifecycleAction(store.ActionMarkFixed),
			Doc: "Admins: mark a Broken machine fixed (Ready when commissioned, else New)."},
	}, resourceRoutes()...) // resources.go: zones, pools, tags, networks, addresses, DNS, images, files
}
