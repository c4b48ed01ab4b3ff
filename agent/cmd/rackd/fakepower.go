//go:build rackd_fakepower

package main

import (
	"rackd/agent"
	"rackd/power/powertest"
)

// A rackd built with -tags rackd_fakepower (the one its tests run) can
// simulate BMCs under [power.fake]; the shipped binary does not link the test
// driver.
func init() { agent.FakePowerDriver = powertest.Driver }
