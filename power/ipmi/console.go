package ipmi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/transport"
	"github.com/bougou/go-ipmi/pkg/types"

	"rackd/power"
)

// ErrConsoleBusy: the BMC's Serial-over-LAN payload is active on another
// session (another rackd console, an operator's ipmitool). A BMC serves one
// SOL session per serial port; rackd does not take it away from whoever has
// it.
var ErrConsoleBusy = errors.New("the serial console is in use by another SOL session (detach it, or 'ipmitool sol deactivate')")

// solInstance is the SOL payload instance: the BMC's first (usually only)
// serial port.
const solInstance = 1

// solPoll is how often an idle console asks the BMC for new output.
const solPoll = 100 * time.Millisecond

// consoleRetries is how many more times a console's exchange with the BMC
// is tried before the console fails, and consoleKeepAlive how often the
// console sends the BMC a command of its own (Get Session Info). go-ipmi
// keeps a session alive with one every 30 s, from a goroutine that reads
// the same socket as the SOL stream, matching answers by reading and
// dropping what is not its own: when the two exchanges overlap (a busy
// console, a slow BMC) one may drop the other's answer. With a real VM
// behind ipmi_sim on a loaded machine the console died every 30-40 s (the
// BMC stopped answering the session: its inactivity timeout, with the 30 s
// keepalive lost); with a keepalive every 10 s and more attempts it lasted
// the whole phase.
const (
	consoleRetries   = 5
	consoleKeepAlive = 10 * time.Second
)

// Console attaches to t's serial console through IPMI Serial-over-LAN and
// relays it until ctx ends, in reaches EOF (a detach) or the BMC ends the
// session: the machine's output is written to out, the bytes read from in are
// typed on the console. A nil in makes the console read-only. An out that is
// a [power.ConsoleReadier] is told once SOL is active.
//
// A console has its own RMCP+ session, not the driver's shared one, so power
// commands to the same BMC keep running beside it. Whatever ends it, the SOL
// payload is deactivated and the session closed before Console returns, so
// the next client (rackd or ipmitool) can activate SOL at once. SOL needs
// IPMI 2.0.
func (d *Driver) Console(ctx context.Context, t power.Target, in io.Reader, out io.Writer) error {
	host, port, err := splitAddr(t.Address)
	if err != nil {
		return fmt.Errorf("%w: %v", power.ErrUnsupported, err)
	}
	// SOL is IPMI 2.0: the suite must encrypt whatever the driver's version.
	c, _, err := d.newClient(host, port, t, false)
	if err != nil {
		if errors.Is(err, power.ErrUnsupported) {
			return err
		}
		return fmt.Errorf("console: %w", err)
	}
	c.WithRetry(consoleRetries)
	setup, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	err = c.Connect(setup)
	cancel()
	if err != nil {
		c.Close(context.WithoutCancel(ctx)) //nolint:errcheck // the setup error is the one to report
		return fmt.Errorf("console: session setup: %w", redact(classify(err), t.Password))
	}
	defer d.closeConsoleSession(ctx, c)

	setup, cancel = context.WithTimeout(ctx, d.opts.Timeout)
	_, err = c.ActivatePayload(setup, &transport.ActivatePayloadRequest{
		PayloadType:          types.PayloadTypeSOL,
		PayloadInstance:      solInstance,
		EnableEncryption:     true,
		EnableAuthentication: true,
	})
	cancel()
	if err != nil {
		var rerr *types.ResponseError
		if errors.As(err, &rerr) && uint8(rerr.CompletionCode()) == 0x80 {
			// Activate Payload 80h: already active on another session.
			return ErrConsoleBusy
		}
		return fmt.Errorf("console: activate SOL: %w", redact(classify(err), t.Password))
	}
	if r, ok := out.(power.ConsoleReadier); ok {
		r.ConsoleReady()
	}
	defer func() {
		bye, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.Timeout)
		defer cancel()
		if _, err := c.DeactivatePayload(bye, &transport.DeactivatePayloadRequest{
			PayloadType: types.PayloadTypeSOL, PayloadInstance: solInstance,
		}); err != nil {
			d.log.Warn("ipmi console: deactivate SOL", "bmc", host, "err", oneLine(err))
		}
	}()

	alive, stopAlive := context.WithCancel(ctx)
	defer stopAlive()
	go func() {
		tick := time.NewTicker(consoleKeepAlive)
		defer tick.Stop()
		for {
			select {
			case <-alive.Done():
				return
			case <-tick.C:
				kctx, cancel := context.WithTimeout(alive, d.opts.Timeout)
				if _, err := c.GetCurrentSessionInfo(kctx); err != nil && alive.Err() == nil {
					d.log.Debug("ipmi console: keepalive", "bmc", host, "err", oneLine(err))
				}
				cancel()
			}
		}
	}()

	// go-ipmi reads its input in a goroutine that only ends when a read
	// returns: give it a pipe we close on the way out, fed from in.
	pr, pw := io.Pipe()
	defer pr.Close()
	if in != nil {
		go func() {
			_, err := io.Copy(pw, in)
			pw.CloseWithError(err) // nil: EOF, a detach
		}()
	}
	err = c.SOLStream(ctx, pr, out, &client.SOLStreamOptions{PollInterval: solPoll})
	switch {
	case err == nil, errors.Is(err, io.ErrClosedPipe):
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil
	}
	return fmt.Errorf("console: %w", redact(classify(err), t.Password))
}

// closeConsoleSession ends a console's RMCP+ session on the BMC, bounded by
// the driver's timeout, so it does not sit on one of the BMC's few session
// slots. go-ipmi's Close must not run twice (it panics): it runs once, here
// (or once on the setup error path).
func (d *Driver) closeConsoleSession(ctx context.Context, c *client.Client) {
	bye, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.opts.Timeout)
	defer cancel()
	if err := c.Close(bye); err != nil {
		d.log.Debug("ipmi console: close session", "err", oneLine(err))
	}
}

var _ power.Consoler = (*Driver)(nil)
