// Command rackd is the bare-metal rack agent (`rackd serve`) and its command
// line client (every other verb); see docs/CLI.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"rackd/agent"
	"rackd/agent/cli"
)

func main() {
	// Interrupt and SIGTERM cancel the context: serve shuts down cleanly, a
	// client verb stops its request (a backup removes its temporary file).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, agent.ServeCommand(os.Getenv, serveOptions()...))
	stop()
	os.Exit(code)
}
