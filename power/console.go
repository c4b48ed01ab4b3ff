package power

import (
	"context"
	"io"
)

// Consoler is a driver that can relay a machine's serial console (IPMI's
// Serial-over-LAN). Console relays until ctx ends, in reaches EOF or the BMC
// ends it: the machine's output goes to out, what is read from in is typed
// (nil in: read-only). When it returns, the BMC's console is free again.
type Consoler interface {
	Console(ctx context.Context, t Target, in io.Reader, out io.Writer) error
}

// ConsoleReadier is implemented by a Console's out that wants to know when
// the console is attached (the BMC accepted the session), before any
// output: the caller can then tell "attached" from "refused" without
// waiting for the machine to print something.
type ConsoleReadier interface {
	ConsoleReady()
}
