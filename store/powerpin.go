package store

import (
	"context"
	"fmt"

	"rackd/power"
)

// PinPowerCertificate records the TLS certificate fingerprint a power
// driver trusted on first use for machine's BMC at address. It is refused
// when the machine's power address changed meanwhile (the certificate was
// another BMC's) or when another fingerprint is pinned already (an operator
// set one, or a first use raced with another): the driver then refuses the
// command. The same fingerprint again is no change.
func (s *Store) PinPowerCertificate(ctx context.Context, machine, address, fingerprint string) error {
	fp, err := power.NormalizeFingerprint(fingerprint)
	if err != nil {
		return errorf(CodeInvalid, "%v", err)
	}
	return s.update(ctx, func(t *Tx) error {
		m, err := t.machine(machine)
		if err != nil {
			return err
		}
		if m.Power.Address != address {
			return errorf(CodeConflict, "machine %s: its power address changed from %q to %q while the certificate was checked", m.Hostname, address, m.Power.Address)
		}
		switch {
		case m.Power.InsecureTLS:
			return nil
		case m.Power.TLSFingerprint == fp:
			return nil
		case m.Power.TLSFingerprint != "":
			return errorf(CodeConflict, "machine %s: BMC certificate sha256 %s is pinned already, not %s", m.Hostname, m.Power.TLSFingerprint, fp)
		}
		m.Power.TLSFingerprint = fp
		if err := t.putMachine(&m); err != nil {
			return err
		}
		return t.addEvent(Event{Machine: m.ID, Actor: "rackd/power", Action: "update",
			Reason: fmt.Sprintf("power TLS certificate sha256 %s trusted on first use (%s)", fp, address)})
	})
}
