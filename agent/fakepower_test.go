package agent

import "rackd/power/powertest"

// The agent's tests run [power.fake]; the shipped binary has no fake driver.
func init() { FakePowerDriver = powertest.Driver }
