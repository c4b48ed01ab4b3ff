package maasapi

import (
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"rackd/store"
)

// The operations of machines/ and machines/{system_id}/. Each reads its
// parameters, calls the one domain operation /api/v1 calls for the same
// thing, and answers the machine as MAAS shows it.

// machineFilters are the machines/ filters rackd serves; maasFilters the
// ones MAAS has that rackd cannot apply, refused rather than ignored.
var (
	machineFilters = []string{"id", "hostname", "mac_address", "agent_name", "zone", "pool", "status", "tags",
		"arch", "owner", "domain"}
	unservedFilters = []string{"not_id", "not_hostname", "not_mac_address", "not_agent_name", "not_in_zone",
		"not_in_pool", "not_tags", "cpu_count", "mem", "pod", "not_pod", "pod_type", "not_pod_type", "fabrics",
		"not_fabrics", "fabric_classes", "not_fabric_classes", "interfaces", "storage", "subnets", "not_subnets",
		"link_speed", "vlans", "not_vlans", "devices", "simple_status", "not_simple_status"}
)

// statusFilter reads machines/?status=: MAAS's status word ("ready",
// "failed_deployment"), its number, or its name ("Failed deployment").
func statusFilter(v string) (func(store.Machine) bool, bool) {
	v = strings.TrimSpace(v)
	for _, st := range statuses {
		if strings.EqualFold(v, st.filter) || strings.EqualFold(v, st.name) || v == strconv.Itoa(st.code) {
			code := st.code
			return func(m store.Machine) bool { return statusOf(m).code == code }, true
		}
	}
	return nil, false
}

func machinesRead(s *Server, c *call) (any, error) {
	for _, f := range unservedFilters {
		if c.has(f) {
			c.fail(f, "rackd does not filter machines by "+f+": filter the answer yourself.")
		}
	}
	ids, hostnames, macs, tags := c.list("id"), c.list("hostname"), c.list("mac_address"), c.list("tags")
	agent, zone, pool, arch, owner, domain := c.str("agent_name"), c.str("zone"), c.str("pool"), c.str("arch"), c.str("owner"), c.str("domain")
	var keep func(store.Machine) bool
	if v := c.str("status"); v != "" {
		var ok bool
		if keep, ok = statusFilter(v); !ok {
			c.fail("status", fmt.Sprintf("Unknown status %q: use MAAS's words (ready, allocated, deploying, deployed, failed_deployment, releasing...).", truncate(v, 32)))
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	ms, err := s.store.ListMachines(store.Filter{AgentName: agent, Owner: owner})
	if err != nil {
		return nil, err
	}
	v, err := s.newViewCtx()
	if err != nil {
		return nil, err
	}
	var picked []store.Machine
	for _, m := range ms {
		if store.MayView(c.who, m, m.ID) != nil || (keep != nil && !keep(m)) {
			continue
		}
		if len(ids) > 0 && !slices.Contains(ids, m.ID) {
			continue
		}
		if len(macs) > 0 && !slices.ContainsFunc(m.MACs, func(x string) bool {
			return slices.ContainsFunc(macs, func(y string) bool { return strings.EqualFold(x, y) })
		}) {
			continue
		}
		if zone != "" && zoneView(m.Zone).Name != zone || pool != "" && pool != poolView().Name {
			continue
		}
		if arch != "" && arch != m.Arch && arch != maasArch(m.Arch) {
			continue
		}
		if !containsAll(m.Tags, tags) {
			continue
		}
		picked = append(picked, m)
	}
	if err := s.prefetch(v, picked); err != nil {
		return nil, err
	}
	out := []machineJSON{}
	for _, m := range picked {
		mv := s.machineView(v, m)
		if len(hostnames) > 0 && !slices.Contains(hostnames, m.Hostname) && !slices.Contains(hostnames, mv.FQDN) {
			continue
		}
		if domain != "" && mv.Domain.Name != domain {
			continue
		}
		out = append(out, mv)
	}
	return out, nil
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// Allocation. The constraints rackd matches are the store's
// (store.Constraints); those MAAS has and rackd cannot honour are refused
// with a 400 naming them, never ignored.

// unservedConstraints: rackd has no such notion to match.
var unservedConstraints = map[string]string{
	"subnets":            "rackd does not match machines by subnet",
	"fabrics":            "rackd has one fabric: fabrics cannot select a machine",
	"not_fabrics":        "rackd has one fabric: not_fabrics cannot select a machine",
	"fabric_classes":     "rackd has no fabric classes",
	"not_fabric_classes": "rackd has no fabric classes",
	"link_speed":         "rackd does not know link speeds",
	"pod":                "rackd has no pods (VM hosts)",
	"not_pod":            "rackd has no pods (VM hosts)",
	"pod_type":           "rackd has no pods (VM hosts)",
	"not_pod_type":       "rackd has no pods (VM hosts)",
	"devices":            "rackd does not match machines by PCI or USB device",
	"bridge_all":         "rackd does not configure bridges",
	"bridge_type":        "rackd does not configure bridges",
	"bridge_stp":         "rackd does not configure bridges",
	"bridge_fd":          "rackd does not configure bridges",
}

// tokenPrefixes are how a MAAS client hands rackd an allocation token in
// allocate's comment (gomaasapi and python-libmaas cannot send a parameter
// of their own): a word "rackd-token=TOKEN" of the comment.
var tokenPrefixes = []string{"rackd-token=", "rackd_token="}

// allocationToken is the allocation token of an allocate call: the
// rackd_token parameter, or the rackd-token= word of its comment.
func allocationToken(c *call) string {
	if t := c.str("rackd_token"); t != "" {
		return t
	}
	for _, w := range strings.Fields(c.str("comment")) {
		for _, p := range tokenPrefixes {
			if t, ok := strings.CutPrefix(w, p); ok && t != "" {
				return t
			}
		}
	}
	return ""
}

// storageSpec is one element of allocate's storage=: label:size(tags),
// size in GB.
type storageSpec struct {
	label string
	bytes int64
	tags  []string
}

// parseStorage reads storage= ("root:20,data:100(ssd)", a label optional).
func parseStorage(v string) ([]storageSpec, error) {
	var parts []string
	depth, start := 0, 0
	for i, r := range v {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, v[start:i])
				start = i + 1
			}
		}
		if depth < 0 || depth > 1 {
			return nil, fmt.Errorf("unbalanced parentheses in %q", truncate(v, 64))
		}
	}
	parts = append(parts, v[start:])
	if len(parts) > 64 {
		return nil, fmt.Errorf("%d storage constraints: at most 64", len(parts))
	}
	var out []storageSpec
	for i, p := range parts {
		p = strings.TrimSpace(p)
		sp := storageSpec{}
		if l, rest, ok := strings.Cut(p, ":"); ok {
			sp.label, p = l, rest
		} else {
			sp.label = strconv.Itoa(i)
		}
		if open := strings.IndexByte(p, '('); open >= 0 {
			if !strings.HasSuffix(p, ")") {
				return nil, fmt.Errorf("constraint %q: its tags must end with ')'", truncate(parts[i], 32))
			}
			for _, t := range strings.Split(p[open+1:len(p)-1], ",") {
				if t = strings.TrimSpace(t); t != "" {
					sp.tags = append(sp.tags, t)
				}
			}
			p = p[:open]
		}
		gb, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || gb <= 0 || gb > 1e6 || math.IsNaN(gb) {
			return nil, fmt.Errorf("constraint %q: the size must be a number of GB above 0", truncate(parts[i], 32))
		}
		sp.bytes = int64(gb * 1e9)
		if slices.ContainsFunc(out, func(o storageSpec) bool { return o.label == sp.label }) {
			return nil, fmt.Errorf("storage label %q is used twice", truncate(sp.label, 32))
		}
		out = append(out, sp)
	}
	return out, nil
}

// allocateParams reads allocate's parameters into a store request and the
// words MAAS's "no match" answer names them by.
func allocateParams(s *Server, c *call) (store.AllocateRequest, []storageSpec, []string, error) {
	req := store.AllocateRequest{AgentName: c.str("agent_name"), Token: allocationToken(c)}
	var said []string
	say := func(k, v string) {
		if v != "" {
			said = append(said, k+"="+v)
		}
	}
	for k, why := range unservedConstraints {
		if v := c.str(k); v != "" && !(strings.HasPrefix(k, "bridge_") && (v == "false" || v == "0")) {
			c.fail(k, why+": this constraint cannot be honoured.")
		}
	}
	if c.boolean("dry_run", false) {
		c.fail("dry_run", "rackd does not serve dry runs: allocate, then release.")
	}
	if v := c.str("interfaces"); v != "" {
		c.fail("interfaces", "rackd has no spaces, VLANs or fabrics to match interfaces against: this constraint cannot be honoured.")
	}
	for _, ns := range c.list("not_subnets") {
		// rackd has no spaces: a machine is in none, so "not in space X"
		// holds for every machine. Any other subnet is refused.
		if sp, ok := strings.CutPrefix(ns, "space:"); !ok || sp == "" {
			c.fail("not_subnets", fmt.Sprintf("%q: rackd honours not_subnets=space:NAME only (it has no spaces, so every machine is in none).", truncate(ns, 32)))
		}
	}
	name, sysid := c.str("name"), c.str("system_id")
	say("name", name)
	say("system_id", sysid)
	if arch := c.str("arch"); arch != "" {
		a, _, _ := strings.Cut(arch, "/")
		req.Constraints.Arch = a
		say("arch", arch)
	}
	req.Constraints.MinCPU = c.integer("cpu_count", 0, 1<<20, 0)
	req.Constraints.MinMemoryMB = c.integer("mem", 0, 1<<40, 0)
	if req.Constraints.MinCPU > 0 {
		say("cpu_count", strconv.Itoa(req.Constraints.MinCPU))
	}
	if req.Constraints.MinMemoryMB > 0 {
		say("mem", strconv.Itoa(req.Constraints.MinMemoryMB))
	}
	req.Constraints.Tags, req.Constraints.NotTags = c.list("tags"), c.list("not_tags")
	say("tags", strings.Join(req.Constraints.Tags, ","))
	say("not_tags", strings.Join(req.Constraints.NotTags, ","))
	req.Constraints.Zone, req.Constraints.NotZones = c.str("zone"), c.list("not_in_zone")
	say("zone", req.Constraints.Zone)
	say("not_in_zone", strings.Join(req.Constraints.NotZones, ","))
	if p := c.str("pool"); p != "" && p != poolView().Name {
		c.fail("pool", fmt.Sprintf("No such pool: %q (rackd has one, %q).", truncate(p, 32), poolView().Name))
	}
	notPool := slices.Contains(c.list("not_in_pool"), poolView().Name)
	var storage []storageSpec
	if v := c.str("storage"); v != "" {
		var err error
		if storage, err = parseStorage(v); err != nil {
			c.fail("storage", err.Error()+".")
		}
		for _, sp := range storage {
			if len(sp.tags) > 0 {
				c.fail("storage", fmt.Sprintf("%s: rackd's disks carry no tags, so (%s) cannot be honoured.", sp.label, strings.Join(sp.tags, ",")))
			}
			req.Constraints.Disks = append(req.Constraints.Disks, sp.bytes)
		}
		say("storage", v)
	}
	say("agent_name", req.AgentName)
	if err := c.check(); err != nil {
		return req, nil, nil, err
	}
	if notPool {
		return req, nil, said, noMatch(said, "every machine is in the pool \"default\"")
	}
	// The machine asked for, by name (hostname or FQDN) or system_id.
	switch {
	case sysid != "" && name != "":
		m, err := s.findMachine(c, name)
		if err != nil || m.ID != sysid {
			return req, nil, said, noMatch(said, "name and system_id name different machines")
		}
		req.Name = m.ID
	case sysid != "" || name != "":
		m, err := s.findMachine(c, firstOf(sysid, name))
		if err != nil {
			return req, nil, said, noMatch(said, "no such machine")
		}
		req.Name = m.ID
	}
	if req.Token != "" && req.Name == "" {
		return req, nil, said, &apiError{status: http.StatusBadRequest,
			fields: map[string][]string{"comment": {"An allocation token adopts one machine: give its name too."}}}
	}
	return req, storage, said, nil
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// findMachine is the machine a caller names by system_id, hostname or
// FQDN, if the caller may see it.
func (s *Server) findMachine(c *call, name string) (store.Machine, error) {
	m, err := s.store.Machine(name)
	if store.CodeOf(err) == store.CodeNotFound {
		if host, _, ok := strings.Cut(name, "."); ok {
			if hm, herr := s.store.Machine(host); herr == nil {
				if mv, verr := s.oneMachine(hm); verr == nil && mv.FQDN == name {
					m, err = hm, nil
				}
			}
		}
	}
	if err != nil {
		return m, err
	}
	if err := store.MayView(c.who, m, name); err != nil {
		return m, err
	}
	return m, nil
}

// noMatch is MAAS's answer when no machine can be allocated: a 409 whose
// text gomaasapi reports as its no-match error (no Retry-After: gomaasapi
// would retry).
func noMatch(said []string, why string) error {
	cons := strings.Join(said, " ")
	if cons == "" {
		cons = "(none)"
	}
	return errorf(http.StatusConflict, "No available machine matches constraints: %s (%s)", cons, why)
}

func machinesAllocate(s *Server, c *call) (any, error) {
	req, storage, said, err := allocateParams(s, c)
	if err != nil {
		return nil, err
	}
	res, err := s.ops.Allocate(c.ctx(), c.who, req)
	if err != nil {
		switch store.CodeOf(err) {
		case store.CodeNoAvailableMachine, store.CodeAllocated, store.CodeNotFound, store.CodeInvalidTransition:
			why := err.Error()
			if req.Name != "" {
				// What the store says of a machine names its holder:
				// only for those who may see it.
				if m, merr := s.store.Machine(req.Name); merr != nil || store.MayView(c.who, m, req.Name) != nil {
					why = "no such machine"
				}
			}
			return nil, noMatch(said, why)
		}
		return nil, err
	}
	mv, err := s.oneMachine(res.Machine)
	if err != nil {
		return nil, err
	}
	mv.ConstraintsByType = &constraintsByType{}
	if len(storage) > 0 {
		var disks []store.Disk
		if res.Machine.Inventory != nil {
			disks = res.Machine.Inventory.Disks
		}
		want := make([]int64, len(storage))
		for i, sp := range storage {
			want[i] = sp.bytes
		}
		if idx, ok := store.MatchDisks(want, disks); ok {
			mv.ConstraintsByType.Storage = map[string][]int{}
			for i, sp := range storage {
				mv.ConstraintsByType.Storage[sp.label] = []int{blockDeviceID(res.Machine, idx[i])}
			}
		}
	}
	mv.AllocationToken = res.Token
	return mv, nil
}

// releasable says what releasing m does: release it, nothing (it is
// released or being released), or refuse it in its state.
func releasable(m store.Machine) (release bool, refuse bool) {
	switch {
	case m.Owner == "" && (m.State == store.StateReady || m.State == store.StateReleasing):
		return false, false
	case m.Owner != "":
		return true, false
	}
	return false, true
}

func machinesRelease(s *Server, c *call) (any, error) {
	ids := c.list("machines")
	comment := c.str("comment")
	if len(ids) == 0 {
		c.fail("machines", "This field is required.")
	}
	if len(ids) > 1000 {
		c.fail("machines", "At most 1000 machines at once.")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	// All or nothing, as MAAS: every machine known and releasable before
	// any is released.
	var unknown, refused []string
	var todo []store.Machine
	for _, id := range ids {
		m, err := s.store.Machine(id)
		if err == nil {
			err = store.MayView(c.who, m, id)
		}
		if store.CodeOf(err) == store.CodeNotFound {
			unknown = append(unknown, id)
			continue
		}
		if err != nil {
			return nil, err
		}
		release, refuse := releasable(m)
		if refuse {
			refused = append(refused, fmt.Sprintf("%s (%s)", m.ID, statusOf(m).name))
		}
		if release {
			todo = append(todo, m)
		}
	}
	if len(unknown) > 0 {
		return nil, errorf(http.StatusBadRequest, "Unknown machine(s): %s.", strings.Join(unknown, ", "))
	}
	if len(refused) > 0 {
		return nil, errorf(http.StatusConflict, "Machine(s) cannot be released in their current state: %s.", strings.Join(refused, ", "))
	}
	released := []string{}
	for _, m := range todo {
		if _, err := s.ops.Release(c.ctx(), c.who, m.ID, comment, false); err != nil {
			return nil, err
		}
		released = append(released, m.ID)
	}
	return released, nil
}

// powerParams is a machine's power parameters as MAAS shows them: never
// the credentials (rackd's API never lets them out).
func powerParams(m store.Machine) map[string]string {
	out := map[string]string{}
	if m.Power.Address != "" {
		out["power_address"] = m.Power.Address
	}
	if m.Power.BootMode != "" {
		out["boot_mode"] = m.Power.BootMode
	}
	return out
}

func machinesPowerParameters(s *Server, c *call) (any, error) {
	if !c.who.Admin {
		return nil, errorf(http.StatusForbidden, "only an admin may read power parameters")
	}
	ids := c.list("id")
	ms, err := s.store.ListMachines(store.Filter{})
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, m := range ms {
		if len(ids) == 0 || slices.Contains(ids, m.ID) {
			out[m.ID] = powerParams(m)
		}
	}
	return out, nil
}

func machinePowerParameters(s *Server, c *call) (any, error) {
	if !c.who.Admin {
		return nil, errorf(http.StatusForbidden, "only an admin may read power parameters")
	}
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	return powerParams(m), nil
}

func machineRead(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	return s.oneMachine(m)
}

// Power parameters MAAS's forms take, as power_parameters_NAME: the ones
// rackd keeps (power_pass is sealed, never shown).
const ppPrefix = "power_parameters_"

// powerPatch reads power_type and power_parameters_* into a patch.
func powerPatch(c *call, p *store.PowerPatch) {
	if c.has("power_type") {
		d := c.str("power_type")
		p.Driver = &d
	}
	str := func(name string) *string {
		if !c.has(ppPrefix + name) {
			return nil
		}
		v := c.str(ppPrefix + name)
		return &v
	}
	p.Address, p.Username, p.Password = str("power_address"), str("power_user"), str("power_pass")
	if bm := str("boot_mode"); bm != nil {
		p.BootMode = bm
	}
	for k := range c.form {
		if rest, ok := strings.CutPrefix(k, ppPrefix); ok {
			switch rest {
			case "power_address", "power_user", "power_pass", "boot_mode", "skip_check":
			default:
				c.fail(k, "rackd's power drivers take power_address, power_user, power_pass and boot_mode only.")
			}
		}
	}
}

func machinesCreate(s *Server, c *call) (any, error) {
	nm := store.NewMachine{Hostname: c.str("hostname"), MACs: c.list("mac_addresses"), Zone: c.str("zone"),
		CPUCount: c.integer("cpu_count", 0, 1<<20, 0), MemoryMB: c.integer("memory", 0, 1<<40, 0)}
	if a := c.str("architecture"); a != "" {
		nm.Arch, _, _ = strings.Cut(a, "/")
	}
	if nm.Zone == defaultZone {
		nm.Zone = ""
	}
	var pp store.PowerPatch
	powerPatch(c, &pp)
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	nm.Power = store.PowerParams{Driver: deref(pp.Driver), Address: deref(pp.Address), Username: deref(pp.Username),
		Password: deref(pp.Password), BootMode: deref(pp.BootMode)}
	if nm.Power.Driver == "manual" {
		nm.Power.Driver = ""
	}
	commission := c.boolean("commission", true)
	if p := c.str("pool"); p != "" && p != poolView().Name {
		c.fail("pool", fmt.Sprintf("No such pool: %q.", truncate(p, 32)))
	}
	if d := c.str("domain"); d != "" {
		c.fail("domain", "A machine's domain is its subnet's, in rackd.")
	}
	if len(nm.MACs) == 0 {
		c.fail("mac_addresses", "This field is required.")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err := s.ops.Create(c.ctx(), c.who, nm)
	if err != nil {
		return nil, err
	}
	if commission && m.Power.Driver != "" {
		if m, err = s.ops.Transition(c.ctx(), c.who, store.TransitionRequest{Machine: m.ID, Action: store.ActionCommission,
			Reason: "created through MAAS's API"}); err != nil {
			return nil, err
		}
	}
	return s.oneMachine(m)
}

func machineUpdate(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	var p store.MachinePatch
	if c.has("hostname") {
		h := c.str("hostname")
		p.Hostname = &h
	}
	if c.has("architecture") {
		a, _, _ := strings.Cut(c.str("architecture"), "/")
		p.Arch = &a
	}
	if c.has("cpu_count") {
		n := c.integer("cpu_count", 0, 1<<20, 0)
		p.CPUCount = &n
	}
	if c.has("memory") {
		n := c.integer("memory", 0, 1<<40, 0)
		p.MemoryMB = &n
	}
	if c.has("zone") {
		z := c.str("zone")
		if z == defaultZone {
			z = ""
		}
		p.Zone = &z
	}
	powerPatch(c, &p.Power)
	if d := p.Power.Driver; d != nil && (*d == "manual" || *d == "") {
		// MAAS's manual power: rackd's machine without a driver.
		p.ClearPower, p.Power = true, store.PowerPatch{}
	}
	if v := c.str("pool"); v != "" && v != poolView().Name {
		c.fail("pool", fmt.Sprintf("No such pool: %q.", truncate(v, 32)))
	}
	if v := c.str("domain"); v != "" {
		c.fail("domain", "A machine's domain is its subnet's, in rackd.")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err = s.ops.Update(c.ctx(), c.who, m.ID, p)
	if err != nil {
		return nil, err
	}
	return s.oneMachine(m)
}

func machineDelete(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	if _, err := s.ops.Delete(c.ctx(), c.who, store.DeleteRequest{Machine: m.ID, Force: c.boolean("force", false)}); err != nil {
		return nil, err
	}
	return emptyAnswer, nil
}

// deployBodyLimit is a deploy's body: up to store.MaxUserData of user
// data in base64, and room for the rest.
var deployBodyLimit = int64(base64.StdEncoding.EncodedLen(store.MaxUserData)) + 64<<10

// decodeUserData reads deploy's user_data: standard base64, line breaks
// allowed, at most store.MaxUserData decoded.
func decodeUserData(c *call) []byte {
	s := strings.NewReplacer("\n", "", "\r", "").Replace(c.str("user_data"))
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		c.fail("user_data", "It must be base64: "+err.Error()+".")
		return nil
	}
	if len(b) > store.MaxUserData {
		c.fail("user_data", fmt.Sprintf("It is %d bytes decoded: at most %d.", len(b), store.MaxUserData))
		return nil
	}
	return b
}

// deployOptions MAAS has that rackd's deploy cannot do: refused when set.
var deployOptions = map[string]string{
	"install_kvm":          "rackd does not install KVM hosts",
	"register_vmhost":      "rackd does not register VM hosts",
	"install_rackd":        "rackd does not install MAAS rack controllers",
	"enable_hw_sync":       "rackd does not sync hardware",
	"ephemeral_deploy":     "rackd always installs to disk",
	"bridge_all":           "rackd does not configure bridges",
	"bridge_stp":           "rackd does not configure bridges",
	"vcenter_registration": "rackd does not register with vCenter",
}

func machineDeploy(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	ud := decodeUserData(c)
	for k, why := range deployOptions {
		if c.boolean(k, false) {
			c.fail(k, why+".")
		}
	}
	// hwe_kernel is accepted: rackd boots the image's own kernel.
	_ = c.str("hwe_kernel")
	if err := c.check(); err != nil {
		return nil, err
	}
	image, err := s.deployImage(m, c.str("osystem"), c.str("distro_series"))
	if err != nil {
		return nil, err
	}
	if m.Owner == "" && m.State == store.StateReady {
		// MAAS allocates a Ready machine its caller deploys.
		res, err := s.ops.Allocate(c.ctx(), c.who, store.AllocateRequest{Name: m.ID, AgentName: c.str("agent_name")})
		if err != nil {
			return nil, err
		}
		m = res.Machine
	}
	m, err = s.ops.Deploy(c.ctx(), c.who, store.DeployRequest{Machine: m.ID, Image: image, Reason: c.str("comment"), UserData: ud})
	if err != nil {
		return nil, err
	}
	return s.oneMachine(m)
}

func machineRelease(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	erase := c.boolean("erase", false) || c.boolean("secure_erase", false) || c.boolean("quick_erase", false)
	if c.str("scripts") != "" {
		c.fail("scripts", "rackd runs no release scripts (erase=true erases the disks).")
	}
	_ = c.boolean("force", false)
	if err := c.check(); err != nil {
		return nil, err
	}
	release, refuse := releasable(m)
	if !release && !refuse {
		// Released already, or being released: nothing to do.
		return s.oneMachine(m)
	}
	m, err = s.ops.Release(c.ctx(), c.who, m.ID, c.str("comment"), erase)
	if err != nil {
		return nil, err
	}
	return s.oneMachine(m)
}

func machineSetOwnerData(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	set := map[string]string{}
	for k := range c.form {
		set[k] = c.str(k)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err = s.store.SetOwnerData(c.ctx(), c.who, m.ID, set)
	if err != nil {
		return nil, err
	}
	return s.oneMachine(m)
}

// powerAction queues a power request and answers the machine.
func powerAction(action store.PowerAction) func(*Server, *call) (any, error) {
	return func(s *Server, c *call) (any, error) {
		m, err := s.visibleMachine(c)
		if err != nil {
			return nil, err
		}
		if c.str("user_data") != "" {
			c.fail("user_data", "rackd hands user data to a deployment only (op=deploy).")
		}
		if sm := c.str("stop_mode"); sm != "" && sm != "hard" && sm != "soft" {
			c.fail("stop_mode", "Want hard or soft.")
		}
		if err := c.check(); err != nil {
			return nil, err
		}
		if _, err := s.ops.RequestPower(c.ctx(), c.who, m.ID, action, c.str("comment")); err != nil {
			return nil, err
		}
		if m, err = s.store.Machine(m.ID); err != nil {
			return nil, err
		}
		return s.oneMachine(m)
	}
}

// machineQueryPowerState answers the power state rackd last observed (its
// power queue polls the BMC); it does not wait for a new reading.
func machineQueryPowerState(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	mv, err := s.oneMachine(m)
	if err != nil {
		return nil, err
	}
	return map[string]string{"state": mv.PowerState}, nil
}

// commissionOptions MAAS has that rackd's commissioning does not do.
var commissionOptions = []string{"enable_ssh", "skip_networking", "skip_storage"}

func machineCommission(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	for _, k := range commissionOptions {
		if c.boolean(k, false) {
			c.fail(k, "rackd's commissioning does not take "+k+".")
		}
	}
	for _, k := range []string{"commissioning_scripts", "testing_scripts"} {
		if v := c.str(k); v != "" && v != "none" {
			c.fail(k, "rackd runs its own commissioning and no scripts of MAAS's.")
		}
	}
	// skip_bmc_config is accepted: rackd sets a BMC up only when no
	// operator has configured its power.
	c.boolean("skip_bmc_config", false)
	if err := c.check(); err != nil {
		return nil, err
	}
	m, err = s.ops.Transition(c.ctx(), c.who, store.TransitionRequest{Machine: m.ID, Action: store.ActionCommission,
		Reason: c.str("comment")})
	if err != nil {
		return nil, err
	}
	return s.oneMachine(m)
}

// machineAbort is MAAS's abort: who may is who may edit the machine (its
// owner, for a deployment, or an admin), and MAAS aborts a commissioning,
// a deployment or a disk erasing only (a plain release is refused as MAAS
// refuses any other state). What an abort does is rackd's one operation
// (Ops.Abort): a commissioning goes back to New (or Ready when the
// hardware was known), a deployment to Allocated, and an erasing release
// is Broken, as MAAS's abort of a disk erasing fails it.
func machineAbort(s *Server, c *call) (any, error) {
	m, err := s.visibleMachine(c)
	if err != nil {
		return nil, err
	}
	if err := store.MayAct(c.who, m, store.ActionAbort); err != nil {
		return nil, err
	}
	switch {
	case m.State == store.StateCommissioning, m.State == store.StateDeploying,
		m.State == store.StateReleasing && m.Erase:
	default:
		return nil, errorf(http.StatusConflict, "Cannot abort in current state: machine %s is %s; rackd aborts a commissioning, a deployment or a disk erasing.", m.Hostname, statusOf(m).name)
	}
	m, err = s.ops.Abort(c.ctx(), c.who, m.ID, c.str("comment"))
	if err != nil {
		return nil, err
	}
	return s.oneMachine(m)
}

func lifecycleAction(action store.Action) func(*Server, *call) (any, error) {
	return func(s *Server, c *call) (any, error) {
		m, err := s.visibleMachine(c)
		if err != nil {
			return nil, err
		}
		m, err = s.ops.Transition(c.ctx(), c.who, store.TransitionRequest{Machine: m.ID, Action: action, Reason: c.str("comment")})
		if err != nil {
			return nil, err
		}
		return s.oneMachine(m)
	}
}
