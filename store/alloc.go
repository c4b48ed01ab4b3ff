package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"rackd/power"
)

// Constraints select a machine for allocate-by-constraints. Empty fields
// match everything.
type Constraints struct {
	Arch        string
	MinCPU      int
	MinMemoryMB int
	Tags        []string
	Zone        string
	// NotTags: the machine carries none of these tags.
	NotTags []string
	// NotZones: the machine is in none of these zones ("default" is the
	// zone of a machine without one, as Zones says).
	NotZones []string
	// Disks: the machine has one disk of at least each of these sizes
	// (bytes), a different disk for each (MatchDisks).
	Disks []int64
}

// DefaultZone is the zone of a machine that has none, for a constraint
// that names it.
const DefaultZone = "default"

func (c Constraints) match(m Machine) bool {
	if c.Arch != "" && c.Arch != m.Arch {
		return false
	}
	if m.CPUCount < c.MinCPU || m.MemoryMB < c.MinMemoryMB {
		return false
	}
	zone := m.Zone
	if zone == "" {
		zone = DefaultZone
	}
	if c.Zone != "" && c.Zone != zone {
		return false
	}
	if slices.Contains(c.NotZones, zone) {
		return false
	}
	for _, tag := range c.Tags {
		if !slices.Contains(m.Tags, tag) {
			return false
		}
	}
	for _, tag := range c.NotTags {
		if slices.Contains(m.Tags, tag) {
			return false
		}
	}
	if len(c.Disks) > 0 {
		var disks []Disk
		if m.Inventory != nil {
			disks = m.Inventory.Disks
		}
		if _, ok := MatchDisks(c.Disks, disks); !ok {
			return false
		}
	}
	return true
}

// MatchDisks gives each wanted size (bytes) a different disk at least that
// large: for each want, the index of its disk in disks. It matches the
// largest wants to the largest disks, which finds a match whenever one
// exists.
func MatchDisks(want []int64, disks []Disk) ([]int, bool) {
	if len(want) > len(disks) {
		return nil, false
	}
	wi := make([]int, len(want))
	for i := range wi {
		wi[i] = i
	}
	sort.SliceStable(wi, func(a, b int) bool { return want[wi[a]] > want[wi[b]] })
	di := make([]int, len(disks))
	for i := range di {
		di[i] = i
	}
	sort.SliceStable(di, func(a, b int) bool { return disks[di[a]].SizeBytes > disks[di[b]].SizeBytes })
	out := make([]int, len(want))
	for k, w := range wi {
		if disks[di[k]].SizeBytes < want[w] {
			return nil, false
		}
		out[w] = di[k]
	}
	return out, true
}

// AllocateRequest asks for a machine, by name or by constraints.
type AllocateRequest struct {
	// Name (id or hostname) asks for one machine; empty means "any machine
	// that matches Constraints".
	Name        string
	AgentName   string
	Token       string
	Constraints Constraints
}

// AllocateResult is a granted allocation. Token is set when a new token was
// minted (a new allocation or an adoption) and is shown only this once;
// Created tells a new allocation from a repeat or an adoption.
type AllocateResult struct {
	Machine Machine
	Token   string
	Created bool
	Adopted bool
}

// NewToken returns a fresh random secret (256 bits, URL-safe).
func NewToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// HashToken is how tokens are stored: they are random and long, so a plain
// SHA-256 is enough (there is nothing to brute-force).
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Allocate grants a machine to actor in one transaction. Tools that plan
// (an installer) and tools that deploy (an orchestrator) hand machines to
// each other by name, so:
//   - by constraints: the first READY machine (by hostname) that matches; a
//     held machine is never returned, not even to the agent that holds it;
//   - by name, with the allocation's token: the caller adopts it under the new
//     agent name and a new token replaces the old one;
//   - by name, held by the same owner with the same non-empty agent name: a
//     no-op that returns the allocation unchanged;
//   - by name, held otherwise: CodeAllocated.
func (s *Store) Allocate(ctx context.Context, actor Actor, req AllocateRequest) (AllocateResult, error) {
	if len(req.AgentName) > 256 {
		return AllocateResult{}, errorf(CodeInvalid, "agent_name is too long (at most 256 bytes)")
	}
	var (
		res   AllocateResult
		kicks []string
	)
	for attempt := 0; ; attempt++ {
		// On a shared engine the search by constraints starts from the
		// machine a read found first (see firstMatch).
		var from *firstMatch
		if req.Name == "" && s.ipam.shared {
			var err error
			if from, err = s.findFirstMatch(req.Constraints); err != nil {
				return AllocateResult{}, err
			}
		}
		err := s.updateLazy(ctx, patience{group: groupAllocate}, func(t *Tx) error {
			var err error
			res, err = t.allocate(actor, req, from)
			kicks = t.powerKicks
			return err
		})
		if errors.Is(err, errLookAgain) && attempt < 8 {
			continue
		}
		if err == nil {
			s.notifyPower(kicks)
		}
		return res, err
	}
}

// firstMatch is where an allocation by constraints on a shared engine
// looks: from hostname on, through at most allocScan READY machines. On an
// engine that compares every key a transaction read (etcd, 128
// comparisons and writes a transaction), reading every READY machine
// passed over in the transaction would refuse an allocation whose match
// comes after 120 others; a read finds the first match (at its snapshot)
// without comparisons, and the transaction reads from there. A machine
// before it that came to match meanwhile is not taken: the allocation
// stands in the order before that change.
type firstMatch struct {
	hostname string
	// none: no READY machine matched at the read's snapshot.
	none bool
}

// allocScan bounds the READY machines one allocation by constraints reads
// in its transaction on a shared engine, from its firstMatch on; past it,
// the allocation looks again (errLookAgain).
const allocScan = 32

// errLookAgain sends an allocation back to look for its first match again:
// the machines it found were taken by allocations before it.
var errLookAgain = errors.New("store: the READY machines found were taken meanwhile: look again")

// findFirstMatch reads, without a transaction's comparisons, the first
// READY machine by hostname that matches c.
func (s *Store) findFirstMatch(c Constraints) (*firstMatch, error) {
	out := &firstMatch{none: true}
	err := s.view(func(t *Tx) error {
		*out = firstMatch{none: true}
		cur := t.tx.Bucket(bucketFree).Cursor()
		for host, id := cur.First(); host != nil; host, id = cur.Next() {
			var cand Machine
			if _, err := t.get(bucketMachines, id, &cand); err != nil {
				return err
			}
			if isFree(cand) && c.match(cand) {
				*out = firstMatch{hostname: string(host)}
				return nil
			}
		}
		return nil
	})
	return out, err
}

func (t *Tx) allocate(actor Actor, req AllocateRequest, start *firstMatch) (AllocateResult, error) {
	var m Machine
	if req.Name != "" {
		var err error
		if m, err = t.machine(req.Name); err != nil {
			return AllocateResult{}, err
		}
		if m.Owner != "" {
			return t.reuse(actor, req, m)
		}
		if m.State != StateReady {
			return AllocateResult{}, errorf(CodeNoAvailableMachine, "machine %s is %s, not READY: it cannot be allocated", m.Hostname, m.State)
		}
		if !req.Constraints.match(m) {
			return AllocateResult{}, errorf(CodeNoAvailableMachine, "machine %s does not match the constraints", m.Hostname)
		}
	} else {
		found := false
		if start == nil || !start.none {
			c := t.tx.Bucket(bucketFree).Cursor()
			_, id := c.First()
			scan := -1 // no bound
			if start != nil {
				_, id = c.Seek([]byte(start.hostname))
				scan = allocScan
			}
			for ; id != nil && !found; _, id = c.Next() {
				if scan == 0 {
					return AllocateResult{}, errLookAgain
				}
				scan--
				var cand Machine
				if _, err := t.get(bucketMachines, id, &cand); err != nil {
					return AllocateResult{}, err
				}
				if isFree(cand) && req.Constraints.match(cand) {
					m, found = cand, true
				}
			}
		}
		if !found {
			return AllocateResult{}, errorf(CodeNoAvailableMachine, "no READY machine matches %s", describe(req.Constraints))
		}
	}
	token := NewToken()
	from := m.State
	m.State, m.StateSince = StateAllocated, t.now
	m.Owner, m.AgentName = actor.Name, req.AgentName
	m.Allocation = &Allocation{Owner: actor.Name, AgentName: req.AgentName,
		TokenHash: HashToken(token), Created: t.now}
	if err := t.putMachine(&m); err != nil {
		return AllocateResult{}, err
	}
	if err := t.applyPowerPolicy(m, from, actor.Name, "allocated"); err != nil {
		return AllocateResult{}, err
	}
	err := t.addEvent(Event{Machine: m.ID, Actor: actor.Name, Action: string(ActionAllocate),
		From: from, To: m.State, Reason: "agent_name " + quoteOrNone(req.AgentName)})
	return AllocateResult{Machine: m, Token: token, Created: true}, err
}

// reuse handles allocate-by-name of a machine that is already held.
func (t *Tx) reuse(actor Actor, req AllocateRequest, m Machine) (AllocateResult, error) {
	if m.Allocation == nil {
		return AllocateResult{}, fmt.Errorf("store: machine %s has owner %q but no allocation record", m.ID, m.Owner)
	}
	a := *m.Allocation
	live := holds(m.State)
	if req.Token != "" {
		ok := a.TokenHash != "" && subtle.ConstantTimeCompare([]byte(a.TokenHash), []byte(HashToken(req.Token))) == 1
		if !ok || !live {
			return AllocateResult{}, errorf(CodeAllocated, "machine %s is allocated and the token given is not its allocation token", m.Hostname)
		}
		token := NewToken()
		prevOwner, prevAgent := a.Owner, a.AgentName
		a.Owner, a.AgentName, a.TokenHash = actor.Name, req.AgentName, HashToken(token)
		m.Owner, m.AgentName, m.Allocation = a.Owner, a.AgentName, &a
		if err := t.putMachine(&m); err != nil {
			return AllocateResult{}, err
		}
		if err := t.adoptDeployment(m.ID, a.Owner); err != nil {
			return AllocateResult{}, err
		}
		err := t.addEvent(Event{Machine: m.ID, Actor: actor.Name, Action: "adopt",
			Reason: fmt.Sprintf("from owner %s agent_name %s to owner %s agent_name %s",
				prevOwner, quoteOrNone(prevAgent), actor.Name, quoteOrNone(req.AgentName))})
		return AllocateResult{Machine: m, Token: token, Adopted: true}, err
	}
	if live && req.AgentName != "" && a.Owner == actor.Name && a.AgentName == req.AgentName {
		return AllocateResult{Machine: m}, nil
	}
	return AllocateResult{}, errorf(CodeAllocated, "machine %s is already allocated (%s) to %s as agent %s: only that agent, or whoever shows its allocation token, may claim it",
		m.Hostname, m.State, a.Owner, quoteOrNone(a.AgentName))
}

func quoteOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return fmt.Sprintf("%q", s)
}

func describe(c Constraints) string {
	if c.Arch == "" && c.MinCPU == 0 && c.MinMemoryMB == 0 && len(c.Tags) == 0 && c.Zone == "" &&
		len(c.NotTags) == 0 && len(c.NotZones) == 0 && len(c.Disks) == 0 {
		return "(no constraints)"
	}
	v := map[string]any{"arch": c.Arch, "min_cpu": c.MinCPU,
		"min_memory_mb": c.MinMemoryMB, "tags": c.Tags, "zone": c.Zone}
	if len(c.NotTags) > 0 {
		v["not_tags"] = c.NotTags
	}
	if len(c.NotZones) > 0 {
		v["not_zones"] = c.NotZones
	}
	if len(c.Disks) > 0 {
		v["disks_bytes"] = c.Disks
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Release ends actor's allocation of a machine: it moves to RELEASING, the
// allocation and its token are gone at once, and CompleteRelease (after the
// power-off) brings it to READY.
func (s *Store) Release(ctx context.Context, actor Actor, idOrName, reason string) (Machine, error) {
	return s.Transition(ctx, actor, TransitionRequest{Machine: idOrName, Action: ActionRelease, Reason: reason})
}

// CompleteRelease finishes a release: RELEASING -> READY.
func (s *Store) CompleteRelease(ctx context.Context, id string) (Machine, error) {
	return s.Transition(ctx, System, TransitionRequest{Machine: id, Action: ActionReleaseDone, Reason: "machine released"})
}

// ReleaseWait says why a release cannot complete yet ("" when it did).
type ReleaseWait string

// The reasons a release waits.
const (
	// WaitErase: the erase environment's report (or the watchdog)
	// completes the release.
	WaitErase ReleaseWait = "erase"
	// WaitPowerQueue: a power request for the machine is pending or
	// running; the queue sends the machine again when it is done.
	WaitPowerQueue ReleaseWait = "power-queue"
	// WaitPowerOff: the last power request did not end in done, or the
	// machine was last seen on, and nothing was open: FinishRelease queued
	// a power-off (ReleaseResult.Queued), which the queue sends the
	// machine again for.
	WaitPowerOff ReleaseWait = "power-off"
)

// ReleaseResult says what FinishRelease did.
type ReleaseResult struct {
	// Machine is the machine as it is now: READY when the release
	// completed, RELEASING when it waits.
	Machine Machine
	// Wait is why the release waits; "" when it completed.
	Wait ReleaseWait
	// Power is the machine's power status as the decision saw it.
	Power PowerStatus
	// Queued is the power-off FinishRelease queued for a release that
	// waited for one nobody had queued (WaitPowerOff); "" otherwise.
	Queued string
}

// FinishRelease completes a release (RELEASING -> READY) once nothing
// stands in its way, deciding and completing in one transaction so that no
// power request can slip in between the look and the move: a release with
// an erase waits for the erase's report; a machine with a power driver that
// rackd drives (drives reports which) waits until it has no open power
// request and its last one ended done with the machine not seen on. A
// machine without such a driver has nothing to wait for.
//
// Every wait has what ends it: the erase's report or the erase timeout
// (Expire); the open request, which the queue finishes within its bounds
// (done: the next call completes; failed: FinishPower fails the release);
// and when nothing is open yet the machine is not known off (a release
// from before the RELEASING policy queued its own off, a machine seen on
// since), this call queues the power-off itself. The release timeout
// (Expire) bounds the whole. A machine with the manual driver is READY
// once the queue has handed its power-off to the operator: rackd cannot
// see a human press the button, and its event says the power must be
// turned off by hand.
//
// A machine that is not RELEASING is refused with CodeInvalidTransition
// (the release was completed already, or the machine moved on), one that
// does not exist with CodeNotFound.
func (s *Store) FinishRelease(ctx context.Context, id string, drives func(driver string) bool) (ReleaseResult, error) {
	var (
		res   ReleaseResult
		kicks []string
	)
	err := s.update(ctx, func(t *Tx) error {
		res = ReleaseResult{}
		t.powerKicks = nil
		defer func() { kicks = t.powerKicks }()
		m, err := t.machine(id)
		if err != nil {
			return err
		}
		res.Machine = m
		if m.State == StateReleasing {
			if res.Wait, res.Power, err = t.releaseWait(m, drives); err != nil {
				return err
			}
			if res.Wait == WaitPowerOff {
				r, err := t.enqueuePower(m, PowerOff, System.Name, "release: the machine is not known to be off and no power-off was queued")
				res.Queued = r.ID
				return err
			}
			if res.Wait != "" {
				return nil
			}
		}
		reason := "machine released"
		if m.Power.Driver == "manual" {
			reason = "machine released; its power driver is manual: the operator was asked to power it off by hand (rackd cannot check)"
		}
		res.Machine, err = t.transitionMachine(System, m, TransitionRequest{Machine: m.ID, Action: ActionReleaseDone, Reason: reason})
		return err
	})
	if err != nil {
		return ReleaseResult{}, err
	}
	s.notifyPower(kicks)
	return res, nil
}

// releaseWait is the rule of FinishRelease for a RELEASING machine: why it
// must wait, "" when it may be READY now.
func (t *Tx) releaseWait(m Machine, drives func(driver string) bool) (ReleaseWait, PowerStatus, error) {
	if m.Erase {
		return WaitErase, PowerStatus{}, nil
	}
	if m.Power.Driver == "" || drives == nil || !drives(m.Power.Driver) {
		return "", PowerStatus{}, nil
	}
	open, err := t.openPower(m.ID)
	if err != nil {
		return "", PowerStatus{}, err
	}
	ps, err := t.powerStatus(m)
	if err != nil {
		return "", PowerStatus{}, err
	}
	switch {
	case len(open) > 0:
		return WaitPowerQueue, ps, nil
	case ps.LastOutcome != PowerDone || ps.Observed == power.StateOn:
		return WaitPowerOff, ps, nil
	}
	return "", ps, nil
}
