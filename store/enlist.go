package store

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Enlistment: a machine that booted the enlistment environment introduces
// itself. What it says is not trusted to change
// anything rackd already knows: a machine known by any MAC or by its system
// UUID is never modified, only reported.

// Inventory is the hardware a machine reported when it enlisted.
type Inventory struct {
	Disks      []Disk `json:"disks,omitempty"`
	Vendor     string `json:"vendor,omitempty"`
	Product    string `json:"product,omitempty"`
	Serial     string `json:"serial,omitempty"`
	BMCAddress string `json:"bmc_address,omitempty"`
}

// Disk is one block device of an inventory.
type Disk struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
}

// bucketUUIDs indexes machines by system UUID. It is created by the first
// machine that has one (putMachine), not by a migration: a database where no
// machine ever enlisted has no such bucket, and readers treat a missing
// bucket as an empty index.
var bucketUUIDs = []byte("system_uuids") // system UUID -> id

// Enlister is the actor of enlistments in events.
var Enlister = Actor{Name: "rackd/enlist", Admin: true}

// EnlistRequest is a machine introducing itself.
type EnlistRequest struct {
	// Hostname is optional; an empty or taken one is replaced by a name
	// made from the first MAC.
	Hostname   string
	Arch       string
	MACs       []string
	CPUCount   int
	MemoryMB   int
	SystemUUID string
	Inventory  Inventory
	// Commission sends the new machine straight to COMMISSIONING.
	Commission bool
}

// EnlistResult says what Enlist did.
type EnlistResult struct {
	// Machine is the new machine, or the known one when Created is false.
	Machine Machine
	Created bool
	// By says how a known machine was recognised: "mac <mac>" or "system
	// uuid <uuid>".
	By string
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// bogusUUIDs are UUIDs that firmware ships on many boards at once; they
// identify nothing.
var bogusUUIDs = map[string]bool{
	"03000200-0400-0500-0006-000700080009": true, // AMI's "To be filled by O.E.M."
}

// NormalizeSystemUUID returns the UUID in lower case, or "" when it cannot
// identify a machine: not a UUID, all one digit (all zeros, all Fs), or a
// known placeholder. Matching on a placeholder would make every such
// machine "known" as the first one.
func NormalizeSystemUUID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if !uuidRE.MatchString(s) || bogusUUIDs[s] {
		return ""
	}
	digits := strings.ReplaceAll(s, "-", "")
	if strings.Count(digits, digits[:1]) == len(digits) {
		return ""
	}
	return s
}

// Enlist creates a NEW machine (COMMISSIONING with req.Commission) from what
// it reported, in one transaction, or reports the machine that already has
// one of its MACs or its system UUID, untouched.
func (s *Store) Enlist(ctx context.Context, req EnlistRequest) (EnlistResult, error) {
	uuid := NormalizeSystemUUID(req.SystemUUID)
	nm := NewMachine{Hostname: "placeholder", Arch: req.Arch, MACs: slices.Clone(req.MACs),
		CPUCount: req.CPUCount, MemoryMB: req.MemoryMB, State: StateNew, systemUUID: uuid}
	if err := nm.normalize(); err != nil {
		return EnlistResult{}, err
	}
	inv := req.Inventory
	inv.Disks = slices.Clone(inv.Disks)
	nm.inventory = &inv
	wanted := strings.ToLower(strings.TrimSpace(req.Hostname))
	if wanted != "" {
		check := nm
		check.Hostname = wanted
		if err := check.normalize(); err != nil {
			return EnlistResult{}, err
		}
	}
	var res EnlistResult
	err := s.update(ctx, func(t *Tx) error {
		res = EnlistResult{}
		known, by, err := t.knownMachine(nm.MACs, uuid)
		if err != nil || known != "" {
			if err == nil {
				res.Machine, err = t.machine(known)
				res.By = by
			}
			return err
		}
		nm.Hostname = wanted
		if nm.Hostname == "" || t.getRaw(bucketHostnames, []byte(nm.Hostname)) != nil {
			nm.Hostname = t.freeHostname(nm.MACs[0])
		}
		m, err := t.createMachine(Enlister, nm)
		if err != nil {
			return err
		}
		if req.Commission {
			if m, err = t.transition(Enlister, TransitionRequest{Machine: m.ID, Action: ActionCommission,
				Reason: "enlisted with auto-commission", Running: true}); err != nil {
				return err
			}
		}
		res.Machine, res.Created = m, true
		return nil
	})
	return res, err
}

// knownMachine returns the id of the machine that has one of macs or the
// system uuid, and how it was recognised; "" when none.
func (t *Tx) knownMachine(macs []string, uuid string) (id, by string, err error) {
	for _, mac := range macs {
		if v := t.tx.Bucket(bucketMACs).Get([]byte(mac)); v != nil {
			return string(v), "mac " + mac, nil
		}
	}
	if uuid != "" {
		if b := t.tx.Bucket(bucketUUIDs); b != nil {
			if v := b.Get([]byte(uuid)); v != nil {
				return string(v), "system uuid " + uuid, nil
			}
		}
	}
	return "", "", nil
}

// freeHostname makes a hostname from a MAC: node-525400123456, with a
// random suffix in the unlikely case that it is taken.
func (t *Tx) freeHostname(mac string) string {
	name := "node-" + strings.ReplaceAll(mac, ":", "")
	for t.getRaw(bucketHostnames, []byte(name)) != nil {
		name = "node-" + strings.ReplaceAll(mac, ":", "") + "-" + newID()[2:6]
	}
	return name
}

// indexUUID moves a machine's entry in the system UUID index.
func (t *Tx) indexUUID(old, uuid, id string) error {
	if old != "" {
		if b := t.tx.Bucket(bucketUUIDs); b != nil {
			t.dirty = true
			if err := b.Delete([]byte(old)); err != nil {
				return err
			}
		}
	}
	if uuid == "" {
		return nil
	}
	b, err := t.tx.CreateBucketIfNotExists(bucketUUIDs)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketUUIDs, err)
	}
	t.dirty = true
	return b.Put([]byte(uuid), []byte(id))
}

// MACOwner is the little whoami needs to know about a machine: the boot
// decision's mode depends on the state alone.
type MACOwner struct {
	ID    string
	State State
	// Erase is set for a machine RELEASING with an erase, which boots the
	// erase environment.
	Erase bool
	// DiskWritten is set for a machine DEPLOYING whose image is written,
	// which boots its disk.
	DiskWritten bool
}

// MachineOfMACs returns the machine that owns the first of macs (canonical
// form, see NormalizeMAC) that belongs to any machine. It is the whoami
// lookup, answered for every machine that boots the enlistment environment
// and rate-limited only per source: one read transaction, one index lookup
// per MAC, and a scan of the record only as far as its state (the third
// member), not a decode of the whole machine.
func (s *Store) MachineOfMACs(macs []string) (MACOwner, bool, error) {
	var out MACOwner
	found := false
	err := s.view(func(t *Tx) error {
		idx := t.tx.Bucket(bucketMACs)
		for _, mac := range macs {
			id := idx.Get([]byte(mac))
			if id == nil {
				continue
			}
			data := t.tx.Bucket(bucketMachines).Get(id)
			if data == nil {
				return fmt.Errorf("MAC %s is indexed to machine %s, which does not exist", mac, id)
			}
			out.ID, found = string(id), true
			if st, ok := topLevelString(data, "state"); ok && State(st) != StateReleasing && State(st) != StateDeploying {
				out.State = State(st)
				return nil
			}
			// RELEASING and DEPLOYING (rare) need the erase flag or the
			// disk's state too: decoded.
			var m struct {
				State       State     `json:"state"`
				Erase       bool      `json:"erase"`
				DiskWritten time.Time `json:"disk_written"`
			}
			if err := json.Unmarshal(data, &m); err != nil {
				return fmt.Errorf("decode machine %s: %w", id, err)
			}
			out.State, out.Erase, out.DiskWritten = m.State, m.Erase, !m.DiskWritten.IsZero()
			return nil
		}
		return nil
	})
	return out, found, err
}

// topLevelString returns the value of the member key of the JSON object
// data when it is a plain string (printable ASCII, no escapes), scanning
// only as far as that member. ok is false when it cannot tell (key absent,
// another type, escapes, malformed input): the caller then decodes the
// record properly. It trusts data to be JSON that the store wrote.
func topLevelString(data []byte, key string) (string, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return "", false
	}
	i++
	for {
		i = skipSpace(data, i)
		k, next, plain := scanString(data, i)
		if next < 0 {
			return "", false
		}
		i = skipSpace(data, next)
		if i >= len(data) || data[i] != ':' {
			return "", false
		}
		i = skipSpace(data, i+1)
		if plain && k == key {
			v, end, plain := scanString(data, i)
			if end < 0 || !plain {
				return "", false
			}
			return v, true
		}
		if i = skipValue(data, i); i < 0 {
			return "", false
		}
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != ',' {
			return "", false // '}': not there
		}
		i++
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the JSON string at data[i]; next is the index after it
// (-1: not a string). plain reports printable ASCII without escapes, in
// which case s is its value.
func scanString(data []byte, i int) (s string, next int, plain bool) {
	if i >= len(data) || data[i] != '"' {
		return "", -1, false
	}
	plain = true
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			if plain {
				s = string(data[i+1 : j])
			}
			return s, j + 1, plain
		case c == '\\':
			plain = false
			j++ // the escaped character, even a quote
		case c < 0x20 || c >= 0x7f:
			plain = false
		}
	}
	return "", -1, false
}

// skipValue returns the index after the JSON value at data[i], or -1.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		_, next, _ := scanString(data, i)
		return next
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				_, next, _ := scanString(data, j)
				if next < 0 {
					return -1
				}
				j = next - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default: // number, true, false, null
		j := i
		for j < len(data) && data[j] != ',' && data[j] != '}' && data[j] != ']' && data[j] != ' ' &&
			data[j] != '\t' && data[j] != '\n' && data[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// checkUUIDs verifies the system UUID index against the machines (Check).
func (t *Tx) checkUUIDs(machines map[string]Machine, bad func(string, ...any)) {
	b := t.tx.Bucket(bucketUUIDs)
	for id, m := range machines {
		if m.SystemUUID == "" {
			continue
		}
		if b == nil || string(b.Get([]byte(m.SystemUUID))) != id {
			bad("machine %s: system uuid %s is not indexed to it", id, m.SystemUUID)
		}
	}
	if b == nil {
		return
	}
	b.ForEach(func(k, v []byte) error {
		if m, ok := machines[string(v)]; !ok || m.SystemUUID != string(k) {
			bad("%s index: %s -> %s does not match a machine", bucketUUIDs, k, v)
		}
		return nil
	})
}
