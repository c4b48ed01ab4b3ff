//go:build rackd_fakepower

package main

import (
	"rackd/agent"
	"rackd/power/powertest"
)

// serveOptions of a rackd built with -tags rackd_fakepower (the one its
// tests run): it can simulate BMCs under [power.fake]. The shipped binary
// does not link the test driver (nofakepower.go).
func serveOptions() []agent.Option {
	return []agent.Option{agent.WithFakePowerDriver(powertest.Driver)}
}
