package store

import (
	"fmt"
	"strings"
)

// BMC set-up at commissioning: the commissioning environment creates a
// rackd user on the machine's BMC in-band and reports its address and
// credentials; rackd makes them the machine's power parameters, in the
// report's transaction, so the next power action goes out-of-band with
// nobody typing BMC settings. A power configuration an operator set is
// never replaced, unless the operator asked for it for this commissioning
// (TransitionRequest.ForceBMCSetup, `rackd machines commission
// --force-bmc-setup`).

// PowerSetByCommissioning marks power parameters the BMC set-up wrote
// (Machine.PowerSetBy); any change through the API clears the mark: the
// operator owns them from then on.
const PowerSetByCommissioning = "commissioning"

// BMCSetup is what the commissioning environment's BMC set-up reports: the
// user it made, or why it could not.
type BMCSetup struct {
	Driver   string
	Address  string
	Username string
	Password string
	// Detail is the environment's account (user slot, channel, address
	// source), for the event; never a secret.
	Detail string
	// Error, when set, is why the BMC was not set up.
	Error string
}

// BMCSetupAllowed reports whether a commissioning's BMC set-up may write
// m's power parameters: m has none, or only what an earlier set-up wrote,
// or the operator forced it for this commissioning. The credential claim
// tells the environment, so that it leaves alone the BMCs whose
// credentials rackd would not store.
func BMCSetupAllowed(m Machine) bool {
	_, ok := bmcSetupRefusal(m)
	return ok
}

// bmcSetupRefusal says why a set-up may not write m's power parameters.
func bmcSetupRefusal(m Machine) (string, bool) {
	switch {
	case m.ForceBMCSetup, m.Power.Driver == "", m.PowerSetBy == PowerSetByCommissioning:
		return "", true
	}
	return fmt.Sprintf("an operator set the power configuration (driver %s)", m.Power.Driver), false
}

// applyBMCSetup stores what the set-up made as m's power parameters, or
// records why not; the caller writes m. Nothing here fails the
// commissioning: the inventory is what it is for, the BMC a bonus.
func (t *Tx) applyBMCSetup(m *Machine, b BMCSetup) error {
	event := func(reason string) error {
		return t.addEvent(Event{Machine: m.ID, Actor: ReportActor.Name, Action: "bmc-setup", Reason: reason})
	}
	if b.Error != "" {
		return event("BMC set-up failed, power configuration unchanged: " + oneLine(b.Error))
	}
	if why, ok := bmcSetupRefusal(*m); !ok {
		return event(fmt.Sprintf("BMC set-up made user %s on BMC %s, not stored: %s; "+
			"rackd machines commission %s --force-bmc-setup replaces it", b.Username, b.Address, why, m.Hostname))
	}
	p := PowerParams{Driver: b.Driver, Address: b.Address, Username: b.Username, Password: b.Password}
	if err := p.validate(); err != nil || p.Driver == "" || p.Address == "" || p.Username == "" || p.Password == "" {
		if err == nil {
			err = fmt.Errorf("driver, address, username and password are all needed")
		}
		return event("BMC set-up reported unusable power parameters, power configuration unchanged: " + err.Error())
	}
	before := *m
	forced := m.ForceBMCSetup && m.Power.Driver != "" && m.PowerSetBy != PowerSetByCommissioning
	m.Power, m.PowerSetBy = p, PowerSetByCommissioning
	changes := describeChanges(before, *m)
	reason := "power configured by the BMC set-up"
	if len(changes) > 0 {
		reason += ": " + strings.Join(changes, "; ")
	}
	if forced {
		reason += " (forced: replaces the operator's configuration)"
	}
	if b.Detail != "" {
		reason += "; " + oneLine(b.Detail)
	}
	return event(reason)
}
