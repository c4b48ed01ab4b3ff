// Command rackd-lab builds a virtual rack on one machine (make lab, make
// lab-down) and runs the simulated BMCs its machines sit behind; see
// package rackd/lab and docs/GETTING-STARTED.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"rackd/lab"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := lab.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
