package agent

import (
	"errors"

	"rackd/power/ipmi"
	"rackd/power/manual"
	"rackd/power/redfish"
)

// addDrivers registers the drivers for real machines under the names
// machines give in their power parameters: "ipmi" (IPMI over LAN, one
// session per BMC), "redfish" (Redfish over HTTPS, one session per BMC,
// certificates pinned) and "manual" (an operator presses the button).
func (a *Agent) addDrivers() error {
	d := ipmi.New(ipmi.Options{Logger: a.log})
	a.powerDrivers["ipmi"] = d
	rf := redfish.New(redfish.Options{Logger: a.log, GracefulOff: a.cfg.Power.RedfishOff == "graceful"})
	a.powerDrivers["redfish"] = rf
	a.powerDrivers["manual"] = manual.New(a.log, 0)
	a.powerClose = append(a.powerClose, d.Close, rf.Close)
	return nil
}

// consoleBusy recognises the drivers' "the BMC's console is held by another
// session" errors.
func consoleBusy(err error) bool { return errors.Is(err, ipmi.ErrConsoleBusy) }

// closePower ends what the drivers hold (BMC sessions, the fake's log) once
// the queue has stopped.
func (a *Agent) closePower() {
	for _, fn := range a.powerClose {
		if err := fn(); err != nil {
			a.log.Warn("power: close driver", "err", err)
		}
	}
	a.powerClose = nil
}
