package store

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Claiming a phase credential. The boot configs carry no credential: TFTP
// and HTTP serve a MAC's config to anyone who names the MAC. The
// environment asks for its credential instead (POST
// /metadata/v1/credential), and the store hands it out once per phase, to
// the caller that holds the machine's DHCP binding:
//
//   - the machine must be in a phase (it has a credential), and the MAC must
//     be one of its interfaces;
//   - the request's source address must be the address rackd's DHCP bound
//     to that MAC: its live dynamic lease, or its sticky address (which
//     rackd's DHCP answers that MAC with, and nothing else), unless the
//     site lifts the rule (metadata.credential_binding = "none", for
//     environments that reach rackd through NAT);
//   - it must be the phase's first claim: the claim is recorded in the
//     machine's Credential (when, from where) in the same transaction, so
//     two racing claims cannot both win. The token itself is not stored: it
//     is derived again from the nonce (credentialToken).
//
// A refusal tells the caller nothing about why (the same text whatever
// failed) except for a second claim by the binding's holder, which is
// answered as a conflict. Refusals of a machine in its phase are events on
// the machine, naming the source addresses: a second claim means someone
// else has the credential, and a human should look.

// CredentialClaim is an environment's request for its phase credential.
type CredentialClaim struct {
	// Machine is the machine's id (rackd.machine= of the command line).
	Machine string
	// MAC is the interface the environment got its address on.
	MAC string
	// Source is the address the request came from.
	Source netip.Addr
	// AnySource lifts the binding rule: any source may claim (still once).
	AnySource bool
}

// ClaimedCredential is a granted claim.
type ClaimedCredential struct {
	Token string
	Phase string
	// BMCSetup asks a commissioning environment to set up the BMC:
	// rackd will store what it reports (BMCSetupAllowed).
	BMCSetup bool
	// Machine is the machine as the claim left it.
	Machine Machine
}

// claimRefused is the one answer to a refused claim: it names nothing, so a
// caller that has proved nothing learns nothing (not whether the machine
// exists, is in a phase, has that MAC or what its binding is).
var claimRefused = errorf(CodeForbidden, "credential refused: a phase credential is handed out only to the address "+
	"that holds the machine's current DHCP binding, while the machine is in a phase")

// ClaimCredential grants c's machine's phase credential, or refuses it
// (CodeForbidden, or CodeConflict for a second claim; see the rules above).
// A refusal of a machine in its phase is recorded as an event in the same
// transaction, which commits even though the claim is refused.
func (s *Store) ClaimCredential(ctx context.Context, c CredentialClaim) (ClaimedCredential, error) {
	mac, err := NormalizeMAC(c.MAC)
	if err != nil {
		return ClaimedCredential{}, claimRefused
	}
	c.MAC, c.Source = mac, c.Source.Unmap()
	if !c.Source.IsValid() {
		return ClaimedCredential{}, claimRefused
	}
	var (
		res  ClaimedCredential
		deny error
	)
	err = s.update(ctx, func(t *Tx) error {
		var err error
		res, deny, err = t.claimCredential(c)
		return err
	})
	if err != nil {
		return ClaimedCredential{}, err
	}
	if deny != nil {
		return ClaimedCredential{}, deny
	}
	return res, nil
}

// claimVerdict is what a claim is, before anything is written.
type claimVerdict int

const (
	claimGranted claimVerdict = iota
	// claimNoPhase: the machine is in no phase; refused, no event.
	claimNoPhase
	// claimWrongMAC: the MAC is not one of the machine's; refused.
	claimWrongMAC
	// claimUnbound: the source does not hold the MAC's DHCP binding.
	claimUnbound
	// claimAgain: the credential was claimed already.
	claimAgain
)

// claimRule is the rule of a claim, given the machine and the address
// records bound to the claimed MAC (live or not).
func claimRule(m Machine, recs []Address, c CredentialClaim, now time.Time) claimVerdict {
	phase := phaseOf(m)
	if phase == "" || m.Credential == nil || m.Credential.Phase != phase {
		return claimNoPhase
	}
	if !slices.Contains(m.MACs, c.MAC) {
		return claimWrongMAC
	}
	if !c.AnySource && !holdsBinding(recs, c.MAC, c.Source, now) {
		return claimUnbound
	}
	if !m.Credential.Claimed.IsZero() {
		return claimAgain
	}
	return claimGranted
}

// holdsBinding reports whether src is the address rackd's DHCP bound to
// mac: a live dynamic lease of mac at src, or mac's sticky address src.
func holdsBinding(recs []Address, mac string, src netip.Addr, now time.Time) bool {
	for _, a := range recs {
		if a.MAC != mac || a.IP != src {
			continue
		}
		switch a.Kind {
		case KindSticky:
			return true
		case KindDynamic:
			if a.live(now) {
				return true
			}
		}
	}
	return false
}

// claimCredential is ClaimCredential's transaction: the grant, or the
// refusal to answer with (deny; the transaction still commits its event).
func (t *Tx) claimCredential(c CredentialClaim) (res ClaimedCredential, deny, err error) {
	m, err := t.machine(c.Machine)
	if CodeOf(err) == CodeNotFound {
		return ClaimedCredential{}, claimRefused, nil
	}
	if err != nil {
		return ClaimedCredential{}, nil, err
	}
	recs, err := t.addressesOfMAC(c.MAC)
	if err != nil {
		return ClaimedCredential{}, nil, err
	}
	cred := m.Credential
	refuse := func(reason string, answer error) (ClaimedCredential, error, error) {
		return ClaimedCredential{}, answer, t.addEvent(Event{Machine: m.ID, Actor: ReportActor.Name,
			Action: "credential-refused", Reason: reason})
	}
	switch claimRule(m, recs, c, t.now) {
	case claimNoPhase:
		return ClaimedCredential{}, claimRefused, nil
	case claimWrongMAC:
		return refuse(fmt.Sprintf("%s credential claim from %s refused: %s is not an interface of this machine",
			cred.Phase, c.Source, c.MAC), claimRefused)
	case claimUnbound:
		return refuse(fmt.Sprintf("%s credential claim from %s refused: %s does not hold the DHCP binding of %s (%s)",
			cred.Phase, c.Source, c.Source, c.MAC, bindingOf(recs, c.MAC, t.now)), claimRefused)
	case claimAgain:
		return refuse(fmt.Sprintf("%s credential already claimed by %s at %s; refused %s",
			cred.Phase, cred.ClaimedBy, cred.Claimed.UTC().Format(time.RFC3339), c.Source),
			errorf(CodeConflict, "the %s credential of this machine was already claimed at %s: it is handed out once per phase",
				cred.Phase, cred.Claimed.UTC().Format(time.RFC3339)))
	}
	claimed := *cred
	claimed.Claimed, claimed.ClaimedBy = t.now, c.Source.String()
	m.Credential = &claimed
	if err := t.putMachine(&m); err != nil {
		return ClaimedCredential{}, nil, err
	}
	if err := t.addEvent(Event{Machine: m.ID, Actor: ReportActor.Name, Action: "credential-claimed",
		Reason: fmt.Sprintf("%s credential claimed by %s (%s)", claimed.Phase, c.Source, c.MAC)}); err != nil {
		return ClaimedCredential{}, nil, err
	}
	return ClaimedCredential{Token: credentialToken(t.credKey, m.ID, claimed.Phase, claimed.Nonce),
		Phase: claimed.Phase, BMCSetup: claimed.Phase == PhaseCommission && BMCSetupAllowed(m), Machine: m}, nil, nil
}

// bindingOf describes mac's current DHCP binding for an event.
func bindingOf(recs []Address, mac string, now time.Time) string {
	var out []string
	for _, a := range recs {
		if a.MAC == mac && (a.Kind == KindSticky || (a.Kind == KindDynamic && a.live(now))) {
			out = append(out, fmt.Sprintf("%s %s", a.Kind, a.IP))
		}
	}
	if len(out) == 0 {
		return "it has none"
	}
	return "it is bound to " + strings.Join(out, ", ")
}
