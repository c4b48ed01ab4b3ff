package store

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"rackd/power"
)

// Phase credentials: the commissioning, deployment and erase
// environments report back to rackd, and those reports change a machine's
// state, so unlike whoami and enlist they need a credential. One is issued
// when a machine enters a phase; it is valid for that machine and that
// phase only, for one report, and dies with the phase (any transition out
// of it, a success, a failure, a timeout, a release or mark-broken).
//
// The environment claims the token once, from the address of its DHCP
// binding (store/credclaim.go), so rackd must be able to produce it
// without keeping it: the token is an HMAC, under a key
// that lives outside the database (Options.CredentialKey, the agent keeps
// it in <state dir>/credential.key), of the machine's id, the phase and a
// random nonce drawn at issue. The record keeps the nonce and the token's
// SHA-256; a copy of the database (a backup) alone cannot forge a report.

// The phases a credential is issued for.
const (
	PhaseCommission = "commission"
	PhaseDeploy     = "deploy"
	PhaseErase      = "erase"
)

// Credential is a machine's current phase credential.
type Credential struct {
	Phase  string    `json:"phase"`
	Nonce  string    `json:"nonce"`
	Hash   string    `json:"hash"`
	Issued time.Time `json:"issued"`
	// Claimed is when the environment obtained the token
	// (ClaimCredential), zero until then; ClaimedBy is the source
	// address of that claim. A credential is handed out once.
	Claimed   time.Time `json:"claimed,omitzero"`
	ClaimedBy string    `json:"claimed_by,omitempty"`
}

// phaseOf is the phase a state's environment runs, "" for none. RELEASING
// runs the erase environment only when the release asked for an erase.
func phaseOf(m Machine) string {
	switch m.State {
	case StateCommissioning:
		return PhaseCommission
	case StateDeploying:
		return PhaseDeploy
	case StateReleasing:
		if m.Erase {
			return PhaseErase
		}
	}
	return ""
}

// PhaseOf is the phase m's environment runs ("commission", "deploy",
// "erase"), "" when it is in none.
func PhaseOf(m Machine) string { return phaseOf(m) }

// credentialToken derives the token of a credential.
func credentialToken(key []byte, id, phase, nonce string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "\x00" + phase + "\x00" + nonce))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// newCredentialKey makes a key for a store opened without one (tests, tools):
// tokens then do not survive a restart.
func newCredentialKey() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

// syncCredential issues a credential when m is in a phase without one (or
// with one of another phase) and drops it when m is in none. Called by every
// transition before the record is written.
func (t *Tx) syncCredential(m *Machine, from State) {
	phase := phaseOf(*m)
	if phase == "" {
		m.Credential = nil
		return
	}
	if m.Credential != nil && m.Credential.Phase == phase && from == m.State {
		return
	}
	b := make([]byte, 16)
	rand.Read(b)
	nonce := hex.EncodeToString(b)
	token := credentialToken(t.credKey, m.ID, phase, nonce)
	m.Credential = &Credential{Phase: phase, Nonce: nonce, Hash: HashToken(token), Issued: t.now}
	// A new phase: the last one's report is no longer answered as a replay.
	m.LastReport = nil
}

// PhaseToken returns the token of m's current phase credential, "" when it
// has none. Only the claim hands it to an environment (ClaimCredential);
// this is for tools and tests that hold the store.
func (s *Store) PhaseToken(m Machine) string {
	if m.Credential == nil {
		return ""
	}
	return credentialToken(s.credKey, m.ID, m.Credential.Phase, m.Credential.Nonce)
}

// ReportResult says what a phase report did.
type ReportResult struct {
	Machine Machine
	// From is the state the machine left.
	From State
	// Action is the transition made.
	Action Action
	// Since is when the machine entered the phase it left.
	Since time.Time
	// DiskWritten: a deploy report that wrote the image of a deployment
	// whose OS reports itself; the machine stays DEPLOYING (Action is "").
	DiskWritten bool
	// Rejected: a report refused (CodeUnauthorized) although the machine
	// is in that phase: its token was not the machine's credential. The
	// refusal is an event on the machine; nothing else changed.
	Rejected bool
}

// PhaseReport is an environment's report at the end of its phase.
type PhaseReport struct {
	Machine string // id
	Phase   string
	Token   string
	// Error, when not empty, is the environment's own account of a
	// failure: the machine fails the phase with it as the reason.
	Error string
	// Inventory is the commissioning environment's full inventory.
	Inventory *CommissionInventory
	// Detail is added to the event's reason on success ("wrote 2 GiB to
	// vda, sha256 ...").
	Detail string
	// Bytes is how much a deployment wrote; WriteTime how long the write
	// took, as the environment measured it (0: not said).
	Bytes     int64
	WriteTime time.Duration
	// BMC is the commissioning's BMC set-up, when it ran.
	BMC *BMCSetup
	// Source is the caller's address, for the event of a refusal.
	Source string
}

// CommissionInventory is what commissioning learns about a machine.
type CommissionInventory struct {
	Arch       string
	MACs       []string
	CPUCount   int
	MemoryMB   int
	SystemUUID string
	Inventory  Inventory
}

// ReportActor is the actor of phase reports in events.
var ReportActor = Actor{Name: "rackd/metadata", Admin: true}

// maxReason bounds the failure text an environment can put into an event.
const maxReason = 1024

// Report applies a phase report in one transaction: the credential must be
// the machine's current one for that phase, and it is consumed. A
// commissioning report stores the inventory and moves the machine to READY,
// a deployment report to DEPLOYED, an erase report completes the release;
// a report of failure moves it to FAILED_COMMISSIONING / FAILED_DEPLOYMENT
// (an erase that failed still completes the release, with the reason: the
// machine is off and free, and the event says what was not erased).
//
// A report that does not carry the machine's current credential for that
// phase is refused with CodeUnauthorized and changes no machine: the caller
// proved nothing, and anyone who knows a machine's id (every boot config
// prints it) could otherwise end its phase. When the machine is in that
// phase the refusal is recorded as an event on it (ReportResult.Rejected),
// and the phase goes on: an environment that truly cannot prove itself
// ends with the phase's timeout or the operator's next action.
func (s *Store) Report(ctx context.Context, r PhaseReport) (ReportResult, error) {
	r, err := prepareReport(r)
	if err != nil {
		return ReportResult{}, err
	}
	var (
		res   ReportResult
		kicks []string
		deny  error
	)
	err = s.update(ctx, func(t *Tx) error {
		t.powerKicks = nil
		defer func() { kicks = t.powerKicks }()
		var err error
		res, deny, err = t.report(r)
		return err
	})
	if err != nil {
		return ReportResult{}, err
	}
	s.notifyPower(kicks)
	return res, deny
}

// prepareReport bounds the texts an environment sends and normalises its
// inventory (MACs, arch, system UUID) before the transaction, on a copy:
// the caller's report is left as it was.
func prepareReport(r PhaseReport) (PhaseReport, error) {
	if len(r.Error) > maxReason {
		r.Error = r.Error[:maxReason]
	}
	if len(r.Detail) > maxReason {
		r.Detail = r.Detail[:maxReason]
	}
	if r.BMC != nil {
		b := *r.BMC
		if len(b.Error) > maxReason {
			b.Error = b.Error[:maxReason]
		}
		if len(b.Detail) > maxReason {
			b.Detail = b.Detail[:maxReason]
		}
		r.BMC = &b
	}
	if r.Inventory == nil {
		return r, nil
	}
	c := *r.Inventory
	c.MACs = slices.Clone(c.MACs)
	c.Inventory.Disks = slices.Clone(c.Inventory.Disks)
	nm := NewMachine{Hostname: "placeholder", Arch: c.Arch, MACs: c.MACs, CPUCount: c.CPUCount, MemoryMB: c.MemoryMB}
	if len(nm.MACs) > 0 || nm.Arch != "" {
		if err := nm.normalize(); err != nil {
			return PhaseReport{}, err
		}
		c.MACs, c.Arch = nm.MACs, nm.Arch
	}
	c.SystemUUID = NormalizeSystemUUID(c.SystemUUID)
	r.Inventory = &c
	return r, nil
}

// credentialVerdict is what a report's token proves.
type credentialVerdict int

const (
	// credentialValid: the machine's current credential for the phase.
	credentialValid credentialVerdict = iota
	// credentialReplayed: the credential of the report already applied
	// (its answer was lost); answered, nothing changes.
	credentialReplayed
	// credentialRefused: the machine is not in that phase (or has no
	// credential for it); nothing changes.
	credentialRefused
	// credentialWrong: the machine is in that phase and the token is not
	// its credential; refused and recorded, the phase goes on.
	credentialWrong
)

// reportCredential is the rule of a report's credential (see Report).
func reportCredential(m Machine, r PhaseReport) credentialVerdict {
	got := HashToken(r.Token)
	if lr := m.LastReport; lr != nil && r.Token != "" && lr.Phase == r.Phase &&
		subtle.ConstantTimeCompare([]byte(got), []byte(lr.Hash)) == 1 {
		return credentialReplayed
	}
	phase := phaseOf(m)
	if phase == "" || phase != r.Phase || m.Credential == nil || m.Credential.Phase != r.Phase {
		return credentialRefused
	}
	if r.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(m.Credential.Hash)) != 1 {
		return credentialWrong
	}
	return credentialValid
}

// report is Report's transaction: what the report did, the refusal to
// answer with (deny, the transaction still commits what it did: the event
// of a wrong credential), or an error that rolls it back.
func (t *Tx) report(r PhaseReport) (res ReportResult, deny, err error) {
	// One refusal for every case, naming nothing: the caller has proved
	// nothing yet.
	refused := errorf(CodeUnauthorized, "rejected credential: it is not the machine's current %s credential "+
		"(a credential is valid for one machine and one phase, is used once and dies with its phase)", r.Phase)
	m, err := t.machine(r.Machine)
	if CodeOf(err) == CodeNotFound {
		return ReportResult{}, refused, nil
	}
	if err != nil {
		return ReportResult{}, nil, err
	}
	switch reportCredential(m, r) {
	case credentialReplayed:
		return ReportResult{Machine: m}, nil, nil
	case credentialRefused:
		return ReportResult{}, refused, nil
	case credentialWrong:
		source := r.Source
		if source == "" {
			source = "an unknown address"
		}
		err := t.addEvent(Event{Machine: m.ID, Actor: ReportActor.Name, Action: "report-refused",
			Reason: fmt.Sprintf("%s report from %s refused: rejected credential (not this machine's current %s credential); "+
				"the machine stays %s", r.Phase, cut(oneLine(source), 64), r.Phase, m.State)})
		return ReportResult{Machine: m, Rejected: true}, refused, err
	}
	used := *m.Credential
	used.Nonce = ""
	m.LastReport = &used
	if r.Error != "" {
		res, err := t.failPhase(m, r.Phase+" failed: "+oneLine(r.Error))
		return res, nil, err
	}
	res, err = t.completePhase(m, r)
	return res, nil, err
}

// completePhase moves m, whose credential the report r proved, out of its
// phase as done: a commissioning stores the inventory (and fails when it
// contradicts the rack), a deployment is DEPLOYED, an erase completes the
// release.
func (t *Tx) completePhase(m Machine, r PhaseReport) (ReportResult, error) {
	res := ReportResult{From: m.State, Since: m.StateSince}
	reason := ""
	switch r.Phase {
	case PhaseCommission:
		res.Action = ActionCommissioningDone
		if r.Inventory != nil {
			before := m
			if err := t.applyInventory(&m, *r.Inventory); CodeOf(err) == CodeConflict {
				// What the machine reports contradicts the rack (a MAC or
				// UUID of another machine): the commissioning fails with
				// the reason rather than hanging until the watchdog.
				return t.failPhase(before, "commission failed: the inventory "+err.Error())
			} else if err != nil {
				return ReportResult{}, err
			}
		}
		if r.BMC != nil {
			if err := t.applyBMCSetup(&m, *r.BMC); err != nil {
				return ReportResult{}, err
			}
		}
		reason = "commissioning report received"
	case PhaseDeploy:
		// An OS that got its seed reports itself: the machine waits for
		// it. Without a seed (an environment that fetched none, a
		// deployment from before rackd kept them) the OS cannot, and
		// the image written is the end.
		d, found, err := t.deployment(m.ID)
		if err != nil {
			return ReportResult{}, err
		} else if found && !d.SeedServed.IsZero() {
			return t.diskWritten(m, d, r)
		}
		res.Action = ActionDeploymentDone
		reason = "image " + m.DeployImage + " written"
		if found {
			reason += " without a seed (the OS cannot report)"
		}
	case PhaseErase:
		res.Action = ActionReleaseDone
		reason = "disks erased"
	}
	if r.Detail != "" {
		reason += ": " + oneLine(r.Detail)
	}
	var err error
	res.Machine, err = t.transitionMachine(ReportActor, m, TransitionRequest{Machine: m.ID, Action: res.Action, Reason: reason})
	return res, err
}

// failPhase moves m out of its phase as failed.
func (t *Tx) failPhase(m Machine, reason string) (ReportResult, error) {
	res := ReportResult{From: m.State, Since: m.StateSince}
	switch m.State {
	case StateCommissioning:
		res.Action = ActionCommissioningFailed
	case StateDeploying:
		res.Action = ActionDeploymentFailed
	case StateReleasing:
		// The machine is released all the same; the event keeps the
		// reason the disks were not erased.
		res.Action = ActionReleaseDone
		reason = "erase failed, released anyway: " + reason
	}
	var err error
	res.Machine, err = t.transitionMachine(ReportActor, m, TransitionRequest{Machine: m.ID, Action: res.Action, Reason: reason})
	return res, err
}

// applyInventory stores what commissioning found. MACs are added, never
// removed (an interface that did not come up is still the machine's), and
// a MAC or system UUID that belongs to another machine is refused.
func (t *Tx) applyInventory(m *Machine, c CommissionInventory) error {
	for _, mac := range c.MACs {
		if id := t.getRaw(bucketMACs, []byte(mac)); id != nil && string(id) != m.ID {
			return errorf(CodeConflict, "MAC address %s already belongs to machine %s", mac, id)
		}
		if !slices.Contains(m.MACs, mac) && len(m.MACs) < 64 {
			m.MACs = append(m.MACs, mac)
		}
	}
	if c.SystemUUID != "" {
		if b := t.tx.Bucket(bucketUUIDs); b != nil {
			if id := b.Get([]byte(c.SystemUUID)); id != nil && string(id) != m.ID {
				return errorf(CodeConflict, "system UUID %s already belongs to machine %s", c.SystemUUID, id)
			}
		}
		m.SystemUUID = c.SystemUUID
	}
	if c.Arch != "" {
		m.Arch = c.Arch
	}
	if c.CPUCount > 0 {
		m.CPUCount = c.CPUCount
	}
	if c.MemoryMB > 0 {
		m.MemoryMB = c.MemoryMB
	}
	inv := c.Inventory
	m.Inventory = &inv
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// StartRelease is Release with an erase: the machine goes RELEASING with an
// erase credential, and its power policy boots the erase environment
// instead of just powering off (see Release for who may).
func (s *Store) StartRelease(ctx context.Context, actor Actor, idOrName, reason string, erase bool) (Machine, error) {
	if !erase {
		return s.Release(ctx, actor, idOrName, reason)
	}
	return s.Transition(ctx, actor, TransitionRequest{Machine: idOrName, Action: ActionRelease, Reason: reason, Erase: true})
}

// Abort stops the phase a machine is in (the rule: aborts in
// lifecycle.go): it leaves the phase's state, its credential dies (a report
// or seed fetch with it is refused from then on), an aborted deployment's
// record and OS credential go, and the policy of the state it lands in
// powers it off through the power queue. Who may: an admin; the owner of
// a DEPLOYING machine. A machine in no phase is refused with
// CodeInvalidTransition naming its state.
func (s *Store) Abort(ctx context.Context, actor Actor, idOrName, reason string) (Machine, error) {
	return s.Transition(ctx, actor, TransitionRequest{Machine: idOrName, Action: ActionAbort, Reason: reason})
}

// describeCredential is for errors and logs: never the token.
func (c *Credential) String() string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s credential issued %s", c.Phase, c.Issued.Format(time.RFC3339))
}

// cycleIntoPXE makes a machine that may be running something boot its
// phase's environment: desired power on, and a power cycle with next boot
// PXE (a plain "on" would leave a running machine running; a cycle of a
// machine that is off powers it on), queued after the request of the
// state's policy, which the queue folds into it. Used for a release with
// an erase (the machine may run its deployed system) and for retries from
// FAILED_* (a human may have left it on). Enforcement keeps it on until
// the phase ends.
func (t *Tx) cycleIntoPXE(m Machine, who, what, why string) error {
	ps, err := t.powerStatus(m)
	if err != nil {
		return err
	}
	ps.Desired, ps.Mode = power.StateOn, ModeEnforce
	if err := t.put(bucketPowerState, []byte(m.ID), ps); err != nil {
		return err
	}
	if m.Power.Driver == "" {
		return nil
	}
	if why == "" {
		why = what
	} else {
		why = what + ": " + why
	}
	if NextBootFor(m, PowerCycle) != power.BootPXE {
		return fmt.Errorf("store: cycle into PXE of machine %s, %s, which does not boot from the network", m.ID, m.State)
	}
	_, err = t.enqueuePower(m, PowerCycle, who, why)
	return err
}

// checkCredentials verifies that a machine has a credential exactly when
// it is in a phase, and for that phase (Check).
func checkCredentials(machines map[string]Machine, bad func(string, ...any)) {
	for id, m := range machines {
		phase := phaseOf(m)
		switch {
		case phase == "" && m.Credential != nil:
			bad("machine %s is %s but holds a %s credential", id, m.State, m.Credential.Phase)
		case phase != "" && m.Credential == nil:
			bad("machine %s is in its %s phase without a credential", id, phase)
		case phase != "" && m.Credential.Phase != phase:
			bad("machine %s is in its %s phase with a credential for %s", id, phase, m.Credential.Phase)
		case m.Erase && m.State != StateReleasing:
			bad("machine %s is %s with the erase flag of a release", id, m.State)
		case m.ForceBMCSetup && m.State != StateCommissioning:
			bad("machine %s is %s with the forced BMC set-up of a commissioning", id, m.State)
		case m.PowerSetBy != "" && (m.PowerSetBy != PowerSetByCommissioning || m.Power.Driver == ""):
			bad("machine %s has power set by %q with driver %q", id, m.PowerSetBy, m.Power.Driver)
		case m.Credential != nil && m.Credential.Claimed.IsZero() != (m.Credential.ClaimedBy == ""):
			bad("machine %s has a %s credential claimed at %v by %q: a claim has both", id, m.Credential.Phase,
				m.Credential.Claimed, m.Credential.ClaimedBy)
		}
	}
}
