package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"rackd/power"
)

// NewMachine describes a machine to create.
type NewMachine struct {
	Hostname string
	Arch     string
	MACs     []string
	CPUCount int
	MemoryMB int
	Tags     []string
	Zone     string
	Power    PowerParams
	// State is StateNew (the default), StateReady (hardware known: skip
	// commissioning) or StateDeployed (adopt a running machine; the creator
	// becomes its owner).
	State State
	// AgentName labels the allocation of a machine created DEPLOYED.
	AgentName string
	// systemUUID and inventory are set by Enlist only: what a machine says
	// about itself is not the API's to forge.
	systemUUID string
	inventory  *Inventory
}

var (
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
	archRE     = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	tagRE      = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
	idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
)

// NormalizeMAC returns mac in the canonical form rackd stores and compares
// (lower case, colon separated, 6 octets), or an error that says why not.
func NormalizeMAC(mac string) (string, error) {
	hw, err := net.ParseMAC(strings.TrimSpace(mac))
	if err != nil || len(hw) != 6 {
		return "", errorf(CodeInvalid, "invalid MAC address %q: want six octets like 52:54:00:12:34:56", mac)
	}
	return hw.String(), nil
}

// normalize validates nm and puts it in canonical form.
func (nm *NewMachine) normalize() error {
	if err := nm.normalizeFields(); err != nil {
		return err
	}
	switch nm.State {
	case "":
		nm.State = StateNew
	case StateNew, StateReady, StateDeployed:
	default:
		return errorf(CodeInvalid, "a machine can be created NEW, READY or DEPLOYED, not %q", nm.State)
	}
	return nil
}

// normalizeFields validates what a machine's record says about it, whatever
// its state: the same rules for a machine being added (normalize) and one
// being changed (UpdateMachine).
func (nm *NewMachine) normalizeFields() error {
	nm.Hostname = strings.ToLower(strings.TrimSpace(nm.Hostname))
	if len(nm.Hostname) > 253 || !hostnameRE.MatchString(nm.Hostname) {
		return errorf(CodeInvalid, "invalid hostname %q: use letters, digits and dashes, labels of at most 63 characters", nm.Hostname)
	}
	if nm.Arch == "" {
		nm.Arch = "amd64"
	}
	if !archRE.MatchString(nm.Arch) {
		return errorf(CodeInvalid, "invalid arch %q: want a name like amd64 or arm64", nm.Arch)
	}
	if len(nm.MACs) == 0 {
		return errorf(CodeInvalid, "a machine needs at least one MAC address")
	}
	if len(nm.MACs) > 64 {
		return errorf(CodeInvalid, "too many MAC addresses (%d, at most 64)", len(nm.MACs))
	}
	seen := map[string]bool{}
	for i, m := range nm.MACs {
		n, err := NormalizeMAC(m)
		if err != nil {
			return err
		}
		if seen[n] {
			return errorf(CodeInvalid, "MAC address %s is listed twice", n)
		}
		seen[n] = true
		nm.MACs[i] = n
	}
	if nm.CPUCount < 0 || nm.MemoryMB < 0 {
		return errorf(CodeInvalid, "cpu_count and memory_mb cannot be negative")
	}
	if len(nm.Tags) > 64 {
		return errorf(CodeInvalid, "too many tags (%d, at most 64)", len(nm.Tags))
	}
	for _, t := range nm.Tags {
		if !tagRE.MatchString(t) {
			return errorf(CodeInvalid, "invalid tag %q: use letters, digits and . _ : -", t)
		}
	}
	if err := nm.Power.validate(); err != nil {
		return err
	}
	if len(nm.Zone) > 64 {
		return errorf(CodeInvalid, "zone name too long")
	}
	return nil
}

var driverRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// validate checks power parameters as far as the store can tell without
// knowing the drivers: a driver name, and nothing else without one.
func (p *PowerParams) validate() error {
	p.Driver = strings.ToLower(strings.TrimSpace(p.Driver))
	p.Address = strings.TrimSpace(p.Address)
	if p.Driver == "" {
		if p.Address != "" || p.Username != "" || p.Password != "" || p.CipherSuite != 0 || p.TLSFingerprint != "" || p.InsecureTLS || p.BootMode != "" {
			return errorf(CodeInvalid, "power address, credentials and cipher suite need a power driver (ipmi, manual)")
		}
		return nil
	}
	if !driverRE.MatchString(p.Driver) {
		return errorf(CodeInvalid, "invalid power driver %q: want a name like ipmi or manual", p.Driver)
	}
	if len(p.Address) > 255 || strings.ContainsFunc(p.Address, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errorf(CodeInvalid, "invalid power address %q: want HOST or HOST:PORT", p.Address)
	}
	if len(p.Username) > 64 || len(p.Password) > 256 {
		return errorf(CodeInvalid, "power username (at most 64 bytes) or password (at most 256) too long")
	}
	if p.CipherSuite < 0 || p.CipherSuite > 17 {
		return errorf(CodeInvalid, "IPMI cipher suite %d: want 0 (the driver's default) to 17", p.CipherSuite)
	}
	p.BootMode = strings.ToLower(strings.TrimSpace(p.BootMode))
	if p.BootMode != "" && p.BootMode != "uefi" && p.BootMode != "legacy" {
		return errorf(CodeInvalid, "power boot mode %q: want uefi, legacy or empty (as the BMC has it)", p.BootMode)
	}
	if p.TLSFingerprint != "" {
		fp, err := power.NormalizeFingerprint(p.TLSFingerprint)
		if err != nil {
			return errorf(CodeInvalid, "power %v", err)
		}
		p.TLSFingerprint = fp
	}
	if p.Driver != "redfish" && (p.TLSFingerprint != "" || p.InsecureTLS || p.BootMode != "") {
		return errorf(CodeInvalid, "TLS fingerprint, insecure TLS and boot mode are for the redfish power driver, not %s", p.Driver)
	}
	if p.TLSFingerprint != "" && p.InsecureTLS {
		return errorf(CodeInvalid, "power TLS: a pinned fingerprint and insecure TLS exclude each other; choose one")
	}
	return nil
}

func newID() string {
	b := make([]byte, 5)
	rand.Read(b) // never fails (crypto/rand panics instead)
	return "m-" + idEncoding.EncodeToString(b)
}

// CreateMachine adds a machine in one transaction: the record, its hostname
// and MAC indexes, an allocation when it is created DEPLOYED, and the event.
// A duplicate hostname or MAC is refused with CodeConflict.
func (s *Store) CreateMachine(ctx context.Context, actor Actor, nm NewMachine) (Machine, error) {
	if !actor.Admin {
		return Machine{}, errorf(CodeForbidden, "only an admin may add machines")
	}
	nm.MACs = slices.Clone(nm.MACs)
	if err := nm.normalize(); err != nil {
		return Machine{}, err
	}
	var m Machine
	err := s.update(ctx, func(t *Tx) error {
		var err error
		m, err = t.createMachine(actor, nm)
		return err
	})
	return m, err
}

// createMachine is CreateMachine inside a transaction, for nm already
// normalised.
func (t *Tx) createMachine(actor Actor, nm NewMachine) (Machine, error) {
	var m Machine
	err := func() error {
		if id := t.getRaw(bucketHostnames, []byte(nm.Hostname)); id != nil {
			return errorf(CodeConflict, "hostname %q is already used by machine %s", nm.Hostname, id)
		}
		for _, mac := range nm.MACs {
			if id := t.getRaw(bucketMACs, []byte(mac)); id != nil {
				// A retired machine keeps its MACs: say how to free them.
				if old, err := t.machine(string(id)); err == nil {
					return errorf(CodeConflict, "MAC address %s already belongs to machine %s (%s, %s): rackd machines rm %s deletes it",
						mac, id, old.Hostname, old.State, old.Hostname)
				}
				return errorf(CodeConflict, "MAC address %s already belongs to machine %s", mac, id)
			}
			recs, err := t.addressesOfMAC(mac)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Kind == KindReserved {
					return errorf(CodeConflict, "MAC address %s has the reservation %s (an unmanaged device): release it first", mac, r.IP)
				}
			}
		}
		id := newID()
		for t.getRaw(bucketMachines, []byte(id)) != nil {
			id = newID()
		}
		m = Machine{
			ID: id, Hostname: nm.Hostname, State: nm.State, Arch: nm.Arch,
			MACs: nm.MACs, CPUCount: nm.CPUCount, MemoryMB: nm.MemoryMB,
			Tags: nm.Tags, Zone: nm.Zone, Power: nm.Power,
			SystemUUID: nm.systemUUID, Inventory: nm.inventory,
			Commissioned: nm.State != StateNew,
			StateSince:   t.now, Created: t.now, Updated: t.now,
		}
		if nm.State == StateDeployed {
			m.Owner, m.AgentName = actor.Name, nm.AgentName
			// Adopted as running: nobody was ever given a token for it.
			m.Allocation = &Allocation{Owner: actor.Name, AgentName: nm.AgentName, Created: t.now}
		}
		if err := t.putMachine(&m); err != nil {
			return err
		}
		return t.addEvent(Event{Machine: id, Actor: actor.Name, Action: "create", To: m.State})
	}()
	return m, err
}

// putMachine writes m and its indexes, and stamps m.Updated so that what the
// caller returns is what was stored. Callers change hostnames and MACs only
// through here, so the indexes cannot drift from the records.
func (t *Tx) putMachine(m *Machine) error {
	if err := t.sealSecrets(m); err != nil {
		return err
	}
	var old Machine
	found, err := t.get(bucketMachines, []byte(m.ID), &old)
	if err != nil {
		return err
	}
	if !found || old.Hostname != m.Hostname {
		if found {
			if err := t.del(bucketHostnames, []byte(old.Hostname)); err != nil {
				return err
			}
			if err := t.del(bucketFree, []byte(old.Hostname)); err != nil {
				return err
			}
		}
		if err := t.putRaw(bucketHostnames, []byte(m.Hostname), []byte(m.ID)); err != nil {
			return err
		}
	}
	for _, mac := range old.MACs {
		if !slices.Contains(m.MACs, mac) {
			if err := t.del(bucketMACs, []byte(mac)); err != nil {
				return err
			}
		}
	}
	for _, mac := range m.MACs {
		if !slices.Contains(old.MACs, mac) {
			if err := t.putRaw(bucketMACs, []byte(mac), []byte(m.ID)); err != nil {
				return err
			}
		}
	}
	if old.SystemUUID != m.SystemUUID {
		if err := t.indexUUID(old.SystemUUID, m.SystemUUID, m.ID); err != nil {
			return err
		}
	}
	if isFree(*m) {
		if err := t.putRaw(bucketFree, []byte(m.Hostname), []byte(m.ID)); err != nil {
			return err
		}
	} else if found && isFree(old) {
		if err := t.del(bucketFree, []byte(old.Hostname)); err != nil {
			return err
		}
	}
	m.Updated = t.now
	return t.put(bucketMachines, []byte(m.ID), *m)
}

// isFree reports whether allocate-by-constraints may hand m out. The free
// index holds exactly these machines, so that an allocation looks at
// candidates only, not at every machine of the rack.
func isFree(m Machine) bool { return m.State == StateReady && m.Owner == "" }

// machine finds a machine by id or hostname.
func (t *Tx) machine(idOrName string) (Machine, error) {
	var m Machine
	key := []byte(idOrName)
	if found, err := t.get(bucketMachines, key, &m); err != nil || found {
		return m, err
	}
	if id := t.getRaw(bucketHostnames, []byte(strings.ToLower(idOrName))); id != nil {
		if found, err := t.get(bucketMachines, id, &m); err != nil || found {
			return m, err
		}
	}
	return Machine{}, errorf(CodeNotFound, "machine %q not found", idOrName)
}

// Machine returns the machine with that id or hostname.
func (s *Store) Machine(idOrName string) (Machine, error) {
	var m Machine
	err := s.view(func(t *Tx) error {
		var err error
		m, err = t.machine(idOrName)
		return err
	})
	return m, err
}

// MachineByMAC returns the machine that has mac among its interfaces.
func (s *Store) MachineByMAC(mac string) (Machine, error) {
	n, err := NormalizeMAC(mac)
	if err != nil {
		return Machine{}, err
	}
	var m Machine
	err = s.view(func(t *Tx) error {
		id := t.getRaw(bucketMACs, []byte(n))
		if id == nil {
			return errorf(CodeNotFound, "no machine has MAC address %s", n)
		}
		m, err = t.machine(string(id))
		return err
	})
	return m, err
}

// Filter selects machines in ListMachines; empty fields match everything.
type Filter struct {
	State     State
	Owner     string
	AgentName string
}

// ListMachines returns the machines that match f, ordered by hostname.
func (s *Store) ListMachines(f Filter) ([]Machine, error) {
	var out []Machine
	err := s.view(func(t *Tx) error {
		// Walk the hostname index so that the answer is sorted for free.
		return t.tx.Bucket(bucketHostnames).ForEach(func(_, id []byte) error {
			var m Machine
			if _, err := t.get(bucketMachines, id, &m); err != nil {
				return err
			}
			if (f.State == "" || m.State == f.State) && (f.Owner == "" || m.Owner == f.Owner) &&
				(f.AgentName == "" || m.AgentName == f.AgentName) {
				out = append(out, m)
			}
			return nil
		})
	})
	return out, err
}

// CountByState returns how many machines are in each state.
func (s *Store) CountByState() (map[State]int, error) {
	counts := map[State]int{}
	err := s.view(func(t *Tx) error {
		return t.tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
			var m struct {
				State State `json:"state"`
			}
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("decode machine %s: %w", k, err)
			}
			counts[m.State]++
			return nil
		})
	})
	return counts, err
}

// holds reports whether a machine in state s belongs to an allocation.
// BROKEN keeps whatever it had, so that a human can see whose it was.
func holds(s State) bool {
	switch s {
	case StateAllocated, StateDeploying, StateDeployed, StateFailedDeployment:
		return true
	}
	return false
}

// CurrentImage is the image the machine deploys or runs: while a deploy
// of the allocation holding it is under way, done or failed (or it broke
// while held); "" before its holder deploys (an allocated machine, one
// whose deploy was aborted) and once it is released. The record keeps
// DeployImage after that, for a later deploy that names no image.
func (m Machine) CurrentImage() string {
	switch {
	case m.State == StateDeploying, m.State == StateDeployed, m.State == StateFailedDeployment,
		m.State == StateBroken && m.Owner != "":
		return m.DeployImage
	}
	return ""
}

// TransitionRequest asks for one lifecycle action on one machine.
type TransitionRequest struct {
	Machine string // id or hostname
	Action  Action
	Reason  string
	// Image is what a deploy installs; an imported image of that name for
	// the machine's arch must be a deploy image.
	Image string
	// Erase, on a release, boots the erase environment before the
	// machine is READY again (see StartRelease).
	Erase bool
	// Running says the machine already runs rackd's environment (it just
	// enlisted), so a commission needs no power driver to boot it.
	Running bool
	// ForceBMCSetup, on a commission, lets its BMC set-up replace a power
	// configuration an operator set (bmcsetup.go).
	ForceBMCSetup bool
	// deploy is the identity a deploy gives the OS (Deploy; nil: the
	// owner's keys only).
	deploy *deployInput
}

// Transition applies a lifecycle action in one transaction and records it.
// Allocation has its own operation (Allocate); everything else goes here.
// Who may do it: admins anything; the owner of an allocation may deploy and
// release; rackd itself (System) anything.
func (s *Store) Transition(ctx context.Context, actor Actor, req TransitionRequest) (Machine, error) {
	if req.Action == ActionAllocate {
		return Machine{}, errorf(CodeInvalid, "use Allocate to allocate a machine")
	}
	var (
		m     Machine
		kicks []string
	)
	err := s.update(ctx, func(t *Tx) error {
		var err error
		m, err = t.transition(actor, req)
		kicks = t.powerKicks
		return err
	})
	if err == nil {
		s.notifyPower(kicks)
	}
	return m, err
}

func (t *Tx) transition(actor Actor, req TransitionRequest) (Machine, error) {
	m, err := t.machine(req.Machine)
	if err != nil {
		return Machine{}, err
	}
	if err := MayAct(actor, m, req.Action); err != nil {
		return Machine{}, err
	}
	if _, err := Next(m.State, req.Action, m.Commissioned); err != nil {
		return Machine{}, withMachine(err, m)
	}
	if req.Action == ActionCommission && m.Power.Driver == "" && !req.Running {
		// It would wait in COMMISSIONING for a boot nobody starts.
		return Machine{}, errorf(CodeConflict, "machine %s has no power driver, so nothing would boot it: "+
			"set one with rackd machines set %s --power-driver ipmi --power-address HOST --power-user USER "+
			"(or --power-driver manual to power it by hand)", m.Hostname, m.Hostname)
	}
	if req.Action == ActionRelease && req.Erase && m.Power.Driver == "" {
		// The same for an erase: the release would wait for an erase
		// report that nothing boots, and end READY unerased.
		return Machine{}, errorf(CodeConflict, "machine %s has no power driver, so nothing would boot the erase environment: "+
			"release it without erase, or set a power driver first (--power-driver manual to power it by hand)", m.Hostname)
	}
	return t.transitionMachine(actor, m, req)
}

// transitionMachine is transition for a machine already read and an actor
// already allowed.
func (t *Tx) transitionMachine(actor Actor, m Machine, req TransitionRequest) (Machine, error) {
	to, err := Next(m.State, req.Action, m.Commissioned)
	if err != nil {
		return Machine{}, withMachine(err, m)
	}
	if req.Erase && req.Action != ActionRelease {
		return Machine{}, errorf(CodeInvalid, "erase is only meaningful for a release")
	}
	if req.ForceBMCSetup && req.Action != ActionCommission {
		return Machine{}, errorf(CodeInvalid, "force_bmc_setup is only meaningful for a commission")
	}
	if req.Action == ActionDeploy {
		// A retry from FAILED_DEPLOYMENT without an image deploys the
		// last one again: it must still be there.
		image := req.Image
		if image == "" {
			image = m.DeployImage
		}
		if err := t.checkDeployImage(m, image); err != nil {
			return Machine{}, err
		}
	}
	from, phase := m.State, phaseOf(m)
	m.State, m.StateSince = to, t.now
	if to == StateReleasing {
		m.Erase = req.Erase
	} else if to != from {
		m.Erase = false
	}
	if req.Action == ActionCommission {
		m.ForceBMCSetup = req.ForceBMCSetup
	} else if to != StateCommissioning {
		m.ForceBMCSetup = false
	}
	t.syncCredential(&m, from)
	if req.Action == ActionAbort {
		// Nothing of the stopped phase is answered any more, not even a
		// replay of a report it already made (the deploy environment's,
		// once the image is written).
		m.LastReport = nil
	}
	if req.Action == ActionCommissioningDone {
		m.Commissioned = true
	}
	if req.Action == ActionDeploy && req.Image != "" {
		m.DeployImage = req.Image
	}
	if req.Action == ActionDeploy || to != StateDeploying {
		m.DiskWritten = time.Time{}
	}
	var dep Deployment
	if req.Action == ActionDeploy {
		var err error
		if dep, err = t.startDeployment(m, req.deploy); err != nil {
			return Machine{}, err
		}
	} else if (!holds(to) && to != StateBroken) || (req.Action == ActionAbort && from == StateDeploying) {
		// The allocation ends, or the deployment is aborted: the
		// user-data and the OS credential go with it.
		if err := t.endDeployment(m.ID); err != nil {
			return Machine{}, err
		}
	}
	if !holds(to) && to != StateBroken && m.Owner != "" {
		// The allocation ends here; its token and the owner's data die
		// with it.
		m.Allocation = nil
		m.Owner, m.AgentName = "", ""
		m.OwnerData = nil
	}
	if err := t.putMachine(&m); err != nil {
		return Machine{}, err
	}
	if err := t.applyPowerPolicy(m, from, actor.Name, req.Reason); err != nil {
		return Machine{}, err
	}
	switch {
	case m.Erase && to == StateReleasing:
		if err := t.cycleIntoPXE(m, actor.Name, "erase before release", req.Reason); err != nil {
			return Machine{}, err
		}
	case from == StateFailedCommissioning && to == StateCommissioning, from == StateFailedDeployment && to == StateDeploying:
		// A failed machine is powered off once and then left alone, so a
		// human may have it on to debug: an "on" would leave it running
		// whatever it runs, a cycle boots the environment.
		if err := t.cycleIntoPXE(m, actor.Name, "retry from "+string(from), req.Reason); err != nil {
			return Machine{}, err
		}
	}
	reason := req.Reason
	if req.Erase {
		reason = strings.TrimSuffix(strings.TrimSpace("erase disks; "+reason), ";")
	}
	if req.Image != "" {
		reason = strings.TrimSpace("image " + req.Image + "; " + reason)
		reason = strings.TrimSuffix(reason, ";")
	}
	if req.Action == ActionDeploy {
		reason = strings.TrimPrefix(reason+"; "+describeDeployment(dep), "; ")
	}
	if req.Action == ActionAbort {
		reason = strings.TrimSuffix(abortedPhase(phase)+"; "+reason, "; ")
	}
	return m, t.addEvent(Event{Machine: m.ID, Actor: actor.Name, Action: string(req.Action),
		From: from, To: to, Reason: reason})
}

// abortedPhase is an abort's event: what stopped, and what that leaves
// undone.
func abortedPhase(phase string) string {
	switch phase {
	case PhaseCommission:
		return "commissioning aborted"
	case PhaseDeploy:
		return "deployment aborted: its user-data and OS credential are cancelled"
	case PhaseErase:
		return "erase aborted: the disks are not known to be erased"
	}
	return "release aborted before the machine was seen powered off"
}

// withMachine puts the machine's name into a transition refusal.
func withMachine(err error, m Machine) error {
	if e, ok := err.(*Error); ok {
		return &Error{Code: e.Code, Msg: fmt.Sprintf("machine %s: %s", m.Hostname, e.Msg)}
	}
	return err
}

// Expiry is one machine the watchdog moved out of a state that took too
// long.
type Expiry struct {
	// Machine is the machine as the expiry left it.
	Machine Machine
	// From is the state it timed out in: COMMISSIONING, DEPLOYING, or
	// RELEASING (an erase that never reported, or a release that never
	// saw its machine off).
	From State
	// Phase is the phase that timed out (PhaseCommission, PhaseDeploy,
	// PhaseErase); "" for a release without an erase.
	Phase string
	// Timeout is the bound it outlived.
	Timeout time.Duration
}

// Timeouts bound the states that wait for something outside the store (a
// report, a power-off). Zero disables that bound.
type Timeouts struct {
	// Commissioning bounds COMMISSIONING, and a release's erase.
	Commissioning time.Duration
	// Deploying bounds DEPLOYING.
	Deploying time.Duration
	// Releasing bounds a release without an erase: a machine that is not
	// seen off within it is BROKEN (release-failed).
	Releasing time.Duration
}

// Expire moves machines that have been COMMISSIONING or DEPLOYING for longer
// than their timeouts to FAILED_COMMISSIONING / FAILED_DEPLOYMENT, with the
// reason in the event, completes releases whose erase did not report within
// the commissioning timeout, and fails releases (BROKEN) that did not end
// within the releasing timeout.
//
// On a shared engine it moves expireMachineChunk machines a transaction, in
// as many as it takes: etcd bounds the operations of one, and a rack whose
// phases all timed out together (a switch down during a mass deployment)
// would otherwise be refused whole at every sweep. It returns the machines
// moved so far with an error.
func (s *Store) Expire(ctx context.Context, to Timeouts) ([]Expiry, error) {
	limit := 0 // none
	if s.ipam.shared {
		limit = expireMachineChunk
	}
	var all []Expiry
	for {
		var (
			expired []Expiry
			kicks   []string
		)
		err := s.update(ctx, func(t *Tx) error {
			expired = expired[:0]
			defer func() { kicks = t.powerKicks }()
			var todo []Machine
			err := t.tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
				if limit > 0 && len(todo) == limit {
					return nil
				}
				var m Machine
				if err := json.Unmarshal(v, &m); err != nil {
					return fmt.Errorf("decode machine %s: %w", k, err)
				}
				if _, _, ok := expiry(m, t.now, to); ok {
					todo = append(todo, m)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, m := range todo {
				req, timeout, _ := expiry(m, t.now, to)
				if req.Action == ActionReleaseFailed {
					// Say what the release waited for.
					ps, err := t.powerStatus(m)
					if err != nil {
						return err
					}
					open, err := t.openPower(m.ID)
					if err != nil {
						return err
					}
					req.Reason += releaseWaitDetail(ps, open)
				}
				done, err := t.transitionMachine(watchdogActor, m, req)
				if err != nil {
					return err
				}
				expired = append(expired, Expiry{Machine: done, From: m.State, Phase: phaseOf(m), Timeout: timeout})
			}
			return nil
		})
		if err != nil {
			return all, err
		}
		s.notifyPower(kicks)
		all = append(all, expired...)
		if limit == 0 || len(expired) < limit {
			return all, nil
		}
	}
}

// expireMachineChunk is how many machines one transaction of Expire moves
// on a shared engine: a phase's end writes about a dozen keys (the machine,
// its event, its power status and request, their comparisons), within
// etcd's 128 operations a transaction.
const expireMachineChunk = 4

// watchdogActor is the actor of the watchdog's transitions in events.
var watchdogActor = Actor{Name: "rackd/watchdog", Admin: true}

// expiry is the watchdog's rule: the transition that ends m's phase (or
// release) when it has lasted longer than its timeout at now, and that
// timeout; false when m is in none or still has time.
func expiry(m Machine, now time.Time, to Timeouts) (TransitionRequest, time.Duration, bool) {
	commissioning, deploying := to.Commissioning, to.Deploying
	age := now.Sub(m.StateSince)
	switch {
	case m.State == StateCommissioning && commissioning > 0 && age > commissioning:
		return TransitionRequest{Machine: m.ID, Action: ActionCommissioningFailed,
			Reason: fmt.Sprintf("timeout: commissioning did not finish within %s", commissioning)}, commissioning, true
	case m.State == StateDeploying && deploying > 0 && age > deploying && !m.DiskWritten.IsZero():
		return TransitionRequest{Machine: m.ID, Action: ActionDeploymentFailed, Reason: deployingExpiry(m, deploying)}, deploying, true
	case m.State == StateDeploying && deploying > 0 && age > deploying:
		return TransitionRequest{Machine: m.ID, Action: ActionDeploymentFailed,
			Reason: fmt.Sprintf("timeout: deployment did not finish within %s", deploying)}, deploying, true
	case m.State == StateReleasing && m.Erase && commissioning > 0 && age > commissioning:
		// The erase environment never reported: the release completes,
		// and the event says the disks were not erased.
		return TransitionRequest{Machine: m.ID, Action: ActionReleaseDone,
			Reason: fmt.Sprintf("timeout: erase did not finish within %s; released without erasing", commissioning)}, commissioning, true
	case m.State == StateReleasing && !m.Erase && to.Releasing > 0 && age > to.Releasing:
		return TransitionRequest{Machine: m.ID, Action: ActionReleaseFailed,
			Reason: fmt.Sprintf("timeout: the release did not see the machine powered off within %s", to.Releasing)}, to.Releasing, true
	}
	return TransitionRequest{}, 0, false
}

// releaseWaitDetail says, for a release that timed out, what it was
// waiting for.
func releaseWaitDetail(ps PowerStatus, open []PowerRequest) string {
	switch {
	case len(open) > 0:
		return fmt.Sprintf(" (power request %s %s still %s)", open[len(open)-1].ID, open[len(open)-1].Action, open[len(open)-1].State)
	case ps.LastRequest == "":
		return " (no power request ended)"
	}
	return fmt.Sprintf(" (last power request %s ended %s; power observed %s)", ps.LastRequest, ps.LastOutcome, ps.Observed)
}

// eventKey orders a machine's events by sequence under its id.
func eventKey(machine string, seq uint64) []byte {
	return append(append([]byte(machine), 0), u64(seq)...)
}

func (t *Tx) addEvent(e Event) error {
	seq, err := t.nextSeq(bucketEvents)
	if err != nil {
		return err
	}
	e.Seq, e.Time = seq, t.now
	if fn := t.consoleTail; fn != nil && e.To.Failed() {
		e.Console = strings.ToValidUTF8(string(fn(e.Machine)), "\uFFFD")
	}
	if fn := t.onEvent; fn != nil {
		t.afterCommit(func() { fn(e) })
	}
	return t.put(bucketEvents, eventKey(e.Machine, seq), e)
}

// RecentEvents returns the newest limit events of the whole rack, newest
// first. Only the keys are walked (an event's sequence is the end of its
// key); the limit chosen are decoded.
func (s *Store) RecentEvents(limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []Event
	err := s.view(func(t *Tx) error {
		type ref struct {
			seq uint64
			key []byte
		}
		// newest keeps the limit highest sequences seen, lowest first.
		newest := make([]ref, 0, limit)
		c := t.tx.Bucket(bucketEvents).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) < 9 {
				continue
			}
			seq := binary.BigEndian.Uint64(k[len(k)-8:])
			if len(newest) == limit && seq <= newest[0].seq {
				continue
			}
			i := sort.Search(len(newest), func(i int) bool { return newest[i].seq > seq })
			r := ref{seq, append([]byte(nil), k...)}
			if len(newest) < limit {
				newest = append(newest, ref{})
				copy(newest[i+1:], newest[i:])
				newest[i] = r
				continue
			}
			// Full: drop the lowest, insert before i.
			copy(newest[:i-1], newest[1:i])
			newest[i-1] = r
		}
		b := t.tx.Bucket(bucketEvents)
		for i := len(newest) - 1; i >= 0; i-- {
			var e Event
			if err := json.Unmarshal(b.Get(newest[i].key), &e); err != nil {
				return fmt.Errorf("decode event: %w", err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// Events returns the newest limit events of a machine, oldest first
// (limit <= 0: all of them). A deleted machine's events are found by its
// id.
func (s *Store) Events(idOrName string, limit int) ([]Event, error) {
	var out []Event
	err := s.view(func(t *Tx) error {
		id := idOrName
		m, err := t.machine(idOrName)
		if err == nil {
			id = m.ID
		} else if CodeOf(err) != CodeNotFound {
			return err
		}
		// A deleted machine's history stays under its id.
		prefix := append([]byte(id), 0)
		c := t.tx.Bucket(bucketEvents).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode event: %w", err)
			}
			out = append(out, e)
		}
		if len(out) == 0 {
			return err // not found, when it was not
		}
		return nil
	})
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, err
}
