//go:build !rackd_fakepower

package main

import "rackd/agent"

// serveOptions of the shipped binary: none. It has no fake power driver
// (fakepower.go has, built with -tags rackd_fakepower for the tests).
func serveOptions() []agent.Option { return nil }
