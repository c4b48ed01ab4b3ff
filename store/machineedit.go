package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Changing and deleting machines. A machine that enlisted itself knows
// nothing about its BMC's credentials, and a machine taken out of the rack
// must be able to leave for good: both need more than the lifecycle.

// MachinePatch is a change to a machine's record: a nil field is left as it
// is, a set one replaces the value (a zero value clears it). It is a JSON
// merge patch once decoded.
type MachinePatch struct {
	Hostname *string
	Arch     *string
	CPUCount *int
	MemoryMB *int
	Tags     *[]string
	Zone     *string
	// ClearPower removes all power parameters before Power is applied.
	ClearPower bool
	Power      PowerPatch
	Reason     string
}

// PowerPatch changes power parameters field by field.
type PowerPatch struct {
	Driver      *string
	Address     *string
	Username    *string
	Password    *string
	CipherSuite *int
	// TLSFingerprint set to "" trusts the next certificate the BMC shows
	// (after a deliberate certificate change). A new address clears the
	// pinned fingerprint unless the patch sets one.
	TLSFingerprint *string
	InsecureTLS    *bool
	BootMode       *string
}

func (p PowerPatch) empty() bool {
	return p.Driver == nil && p.Address == nil && p.Username == nil && p.Password == nil && p.CipherSuite == nil &&
		p.TLSFingerprint == nil && p.InsecureTLS == nil && p.BootMode == nil
}

// DefaultPowerDriver is the driver a machine gets when only credentials are
// given and its inventory names its BMC: the enlistment environment reads
// the BMC's address over IPMI, so IPMI is what that BMC speaks.
const DefaultPowerDriver = "ipmi"

// UpdateMachine applies a patch to a machine in one transaction, under the
// rules of CreateMachine (names, indexes, power parameters), and records an
// "update" event that says what changed (never a secret). Admins only.
//
// A machine whose inventory reported a BMC address gets that address when
// the patch leaves the address empty, and the IPMI driver when the patch
// sets only credentials: an enlisted machine becomes power-managed with
// its username and password alone.
func (s *Store) UpdateMachine(ctx context.Context, actor Actor, idOrName string, p MachinePatch) (Machine, error) {
	if !actor.Admin {
		return Machine{}, errorf(CodeForbidden, "only an admin may change machines")
	}
	if len(p.Reason) > 1024 {
		return Machine{}, errorf(CodeInvalid, "reason is too long (at most 1024 bytes)")
	}
	var m Machine
	err := s.update(ctx, func(t *Tx) error {
		var err error
		m, err = t.updateMachine(actor, idOrName, p)
		return err
	})
	return m, err
}

func (t *Tx) updateMachine(actor Actor, idOrName string, p MachinePatch) (Machine, error) {
	old, err := t.machine(idOrName)
	if err != nil {
		return Machine{}, err
	}
	nm := NewMachine{Hostname: old.Hostname, Arch: old.Arch, MACs: slices.Clone(old.MACs),
		CPUCount: old.CPUCount, MemoryMB: old.MemoryMB, Tags: slices.Clone(old.Tags), Zone: old.Zone,
		Power: old.Power}
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	set(&nm.Hostname, p.Hostname)
	set(&nm.Arch, p.Arch)
	set(&nm.Zone, p.Zone)
	if p.CPUCount != nil {
		nm.CPUCount = *p.CPUCount
	}
	if p.MemoryMB != nil {
		nm.MemoryMB = *p.MemoryMB
	}
	if p.Tags != nil {
		nm.Tags = slices.Clone(*p.Tags)
	}
	if p.ClearPower {
		nm.Power = PowerParams{}
	}
	set(&nm.Power.Driver, p.Power.Driver)
	set(&nm.Power.Address, p.Power.Address)
	set(&nm.Power.Username, p.Power.Username)
	set(&nm.Power.Password, p.Power.Password)
	if p.Power.CipherSuite != nil {
		nm.Power.CipherSuite = *p.Power.CipherSuite
	}
	if p.Power.Address != nil && strings.TrimSpace(*p.Power.Address) != old.Power.Address && p.Power.TLSFingerprint == nil {
		// Another BMC: the old one's certificate says nothing about it.
		nm.Power.TLSFingerprint = ""
	}
	set(&nm.Power.TLSFingerprint, p.Power.TLSFingerprint)
	set(&nm.Power.BootMode, p.Power.BootMode)
	if p.Power.InsecureTLS != nil {
		nm.Power.InsecureTLS = *p.Power.InsecureTLS
	}
	var notes []string
	if bmc := bmcAddress(old); bmc != "" && !p.Power.empty() {
		credsOnly := p.Power.Driver == nil && p.Power.Address == nil
		if nm.Power.Driver == "" && credsOnly && (nm.Power.Username != "" || nm.Power.Password != "") {
			nm.Power.Driver = DefaultPowerDriver
			notes = append(notes, "power driver "+DefaultPowerDriver+" (the inventory names a BMC)")
		}
		if nm.Power.Driver != "" && nm.Power.Driver != "manual" && strings.TrimSpace(nm.Power.Address) == "" {
			nm.Power.Address = bmc
			notes = append(notes, "power address "+bmc+" from the inventory")
		}
	}
	if err := nm.normalizeFields(); err != nil {
		return Machine{}, withMachine(err, old)
	}
	if nm.Hostname != old.Hostname {
		if id := t.getRaw(bucketHostnames, []byte(nm.Hostname)); id != nil && string(id) != old.ID {
			return Machine{}, errorf(CodeConflict, "hostname %q is already used by machine %s", nm.Hostname, id)
		}
	}
	m := old
	m.Hostname, m.Arch, m.CPUCount, m.MemoryMB = nm.Hostname, nm.Arch, nm.CPUCount, nm.MemoryMB
	m.Tags, m.Zone, m.Power = nm.Tags, nm.Zone, nm.Power
	// The old record's secrets are sealed (m.Power holds only what the
	// patch gave in clear): cleared power drops them, a new password
	// replaces its envelope, the same password again keeps it.
	m.Secrets = maps.Clone(old.Secrets)
	if p.ClearPower {
		for _, f := range secretFields {
			if !(f.name == secretPowerPassword && p.Power.Password != nil) {
				clearSecret(&m, f.name)
			}
		}
	}
	if pw := p.Power.Password; pw != nil {
		was := old
		if *pw != "" && openSecrets(t.keys.current(), &was) == nil && was.Power.Password == *pw {
			m.Power.Password = "" // unchanged: keep the envelope
		} else {
			delete(m.Secrets, secretPowerPassword)
		}
	}
	if m.Power.Driver == "" && hasSecret(m, secretPowerPassword) {
		return Machine{}, withMachine(errorf(CodeInvalid, "power address, credentials and cipher suite need a power driver (ipmi, manual)"), old)
	}
	if p.ClearPower || !p.Power.empty() {
		// The operator's from now on: a BMC set-up no longer replaces it.
		m.PowerSetBy = ""
	}
	changes := describeChanges(old, m)
	if len(changes) == 0 {
		return old, nil // nothing to write, nothing to record
	}
	if err := t.putMachine(&m); err != nil {
		return Machine{}, err
	}
	reason := strings.Join(append(changes, notes...), "; ")
	if p.Reason != "" {
		reason += ": " + p.Reason
	}
	return m, t.addEvent(Event{Machine: m.ID, Actor: actor.Name, Action: "update", Reason: reason})
}

// bmcAddress is the BMC address a machine's inventory reported, if any.
func bmcAddress(m Machine) string {
	if m.Inventory == nil {
		return ""
	}
	return strings.TrimSpace(m.Inventory.BMCAddress)
}

// describeChanges names what differs between two versions of a machine, for
// its history. Credentials are named, never shown.
func describeChanges(old, m Machine) []string {
	var out []string
	str := func(field, a, b string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s %q -> %q", field, a, b))
		}
	}
	str("hostname", old.Hostname, m.Hostname)
	str("arch", old.Arch, m.Arch)
	if old.CPUCount != m.CPUCount {
		out = append(out, fmt.Sprintf("cpu_count %d -> %d", old.CPUCount, m.CPUCount))
	}
	if old.MemoryMB != m.MemoryMB {
		out = append(out, fmt.Sprintf("memory_mb %d -> %d", old.MemoryMB, m.MemoryMB))
	}
	if !slices.Equal(old.Tags, m.Tags) {
		out = append(out, fmt.Sprintf("tags [%s] -> [%s]", strings.Join(old.Tags, " "), strings.Join(m.Tags, " ")))
	}
	str("zone", old.Zone, m.Zone)
	str("power driver", old.Power.Driver, m.Power.Driver)
	str("power address", old.Power.Address, m.Power.Address)
	if old.Power.Username != m.Power.Username {
		out = append(out, "power username changed")
	}
	// m's password is in clear only when it was just set (a new one).
	if m.Power.Password != "" || hasSecret(old, secretPowerPassword) != hasSecret(m, secretPowerPassword) {
		out = append(out, "power password changed")
	}
	if old.Power.CipherSuite != m.Power.CipherSuite {
		out = append(out, fmt.Sprintf("cipher suite %d -> %d", old.Power.CipherSuite, m.Power.CipherSuite))
	}
	str("power TLS fingerprint", old.Power.TLSFingerprint, m.Power.TLSFingerprint)
	if old.Power.InsecureTLS != m.Power.InsecureTLS {
		out = append(out, fmt.Sprintf("power insecure TLS %v -> %v", old.Power.InsecureTLS, m.Power.InsecureTLS))
	}
	str("power boot mode", old.Power.BootMode, m.Power.BootMode)
	return out
}

// DeleteRequest asks for a machine to be deleted.
type DeleteRequest struct {
	Machine string // id or hostname
	// Force deletes a machine that is held or in a phase.
	Force  bool
	Reason string
}

// busy says why a machine should not be deleted without force: someone
// holds it, or rackd is in the middle of something with it.
func busy(m Machine) string {
	switch {
	case m.Allocation != nil:
		return fmt.Sprintf("it is %s and allocated to %s", m.State, m.Owner)
	case holds(m.State):
		return "it is " + string(m.State)
	case m.State == StateCommissioning || m.State == StateReleasing:
		return "it is " + string(m.State)
	}
	return ""
}

// DeleteMachine removes a machine in one transaction: its record and
// indexes (hostname, MACs, system UUID), its sticky addresses and the leases
// of its interfaces, its power status and power requests (on a shared
// engine, all but a few of its finished requests go first, in
// transactions of their own: trimPowerForDelete). Its events stay,
// under its id, ending with a "delete" event: the history of a machine
// outlives it. A machine that is allocated, deployed or in a phase is
// refused with CodeConflict unless req.Force. Admins only.
func (s *Store) DeleteMachine(ctx context.Context, actor Actor, req DeleteRequest) (Machine, error) {
	if !actor.Admin {
		return Machine{}, errorf(CodeForbidden, "only an admin may delete machines")
	}
	if len(req.Reason) > 1024 {
		return Machine{}, errorf(CodeInvalid, "reason is too long (at most 1024 bytes)")
	}
	if err := s.trimPowerForDelete(ctx, req); err != nil {
		return Machine{}, err
	}
	var m Machine
	err := s.update(ctx, func(t *Tx) error {
		var err error
		m, err = t.deleteMachine(actor, req)
		return err
	})
	return m, err
}

func (t *Tx) deleteMachine(actor Actor, req DeleteRequest) (Machine, error) {
	m, err := t.machine(req.Machine)
	if err != nil {
		return Machine{}, err
	}
	why := busy(m)
	if why != "" && !req.Force {
		return Machine{}, errorf(CodeConflict, "machine %s is not deleted: %s (release it first, or force)", m.Hostname, why)
	}
	for _, b := range [][]byte{bucketHostnames, bucketFree} {
		if got := t.getRaw(b, []byte(m.Hostname)); string(got) == m.ID {
			if err := t.del(b, []byte(m.Hostname)); err != nil {
				return Machine{}, err
			}
		}
	}
	for _, mac := range m.MACs {
		if string(t.getRaw(bucketMACs, []byte(mac))) == m.ID {
			if err := t.del(bucketMACs, []byte(mac)); err != nil {
				return Machine{}, err
			}
		}
		recs, err := t.addressesOfMAC(mac)
		if err != nil {
			return Machine{}, err
		}
		for _, a := range recs {
			// Its own addresses and its leases go; a quarantine or a
			// reservation is about the address, not about this machine.
			if (a.Kind == KindSticky && a.MachineID == m.ID) || a.Kind == KindDynamic {
				if err := t.deleteAddress(a); err != nil {
					return Machine{}, err
				}
			}
		}
	}
	if m.SystemUUID != "" {
		if err := t.indexUUID(m.SystemUUID, "", m.ID); err != nil {
			return Machine{}, err
		}
	}
	if err := t.deletePower(m.ID); err != nil {
		return Machine{}, err
	}
	if err := t.endDeployment(m.ID); err != nil {
		return Machine{}, err
	}
	if err := t.del(bucketMachines, []byte(m.ID)); err != nil {
		return Machine{}, err
	}
	reason := "deleted " + m.Hostname + " (" + strings.Join(m.MACs, " ") + ")"
	if why != "" {
		reason += ", forced: " + why
	}
	if req.Reason != "" {
		reason += ": " + req.Reason
	}
	return m, t.addEvent(Event{Machine: m.ID, Actor: actor.Name, Action: "delete", From: m.State, Reason: reason})
}
