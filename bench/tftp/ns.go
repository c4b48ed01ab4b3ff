package main

import (
	"rackd/bench/internal/benchns"
)

// startProc starts name in namespace ns, inside cgroup cg when not nil.
func startProc(ns string, cg *cgroup, env []string, name string, args ...string) (*benchns.Proc, error) {
	fd := -1
	if cg != nil {
		fd = cg.fd()
	}
	return benchns.StartProc(ns, fd, env, name, args...)
}
