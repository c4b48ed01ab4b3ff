package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"rackd/agent/client"
	"rackd/api"
)

// detachHelp is how a console is left; docs/CLI.md says the same.
const detachHelp = "~. at the start of a line detaches (~~ types one ~)"

func consoleVerb() *verb {
	return &verb{
		name:     "console",
		args:     []string{"MACHINE"},
		synopsis: "[--write]",
		summary:  "attach to a machine's serial console (admin or its owner)",
		help: `Shows the machine's serial console through its BMC (IPMI Serial-over-LAN),
read-only unless --write. With --write on a terminal, the terminal is put in
raw mode: every key goes to the machine, Ctrl-C included. ` + detachHelp + `;
without --write Ctrl-C detaches too (and the line "~." followed by Enter).
With --write, the end of standard input detaches.

One user at a time: a second attach is refused with the name of who holds
it. While the machine commissions, deploys or erases, rackd records its
console (rackd machines console-log) and rackd console shares that session.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			write := fs.Bool("write", false, "type on the console, not only watch it")
			return func(e *env, args []string) error { return runConsole(e, args[0], *write) }
		},
	}
}

// runConsole attaches, relays until a detach, the console's end or an
// interrupt, and restores the terminal.
func runConsole(e *env, machine string, write bool) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	conn, err := c.Console(e.ctx, machine, write)
	if err != nil {
		return err
	}
	defer conn.Close()
	nl, mode := "\n", "read-only"
	if write {
		mode = "read-write"
		if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			old, err := term.MakeRaw(int(f.Fd()))
			if err != nil {
				return fmt.Errorf("terminal raw mode: %w", err)
			}
			defer term.Restore(int(f.Fd()), old)
			nl = "\r\n" // raw mode: no newline translation
		}
	}
	fmt.Fprintf(e.stderr, "[rackd: attached to the console of %s, %s; %s]%s", machine, mode, detachHelp, nl)

	outDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(e.stdout, conn)
		outDone <- err
	}()
	detached := make(chan struct{})
	go func() {
		d := detacher{lineStart: true}
		buf := make([]byte, 1024)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				out, stop := d.feed(buf[:n])
				if write && len(out) > 0 {
					if _, werr := conn.Write(out); werr != nil {
						return
					}
				}
				if stop {
					close(detached)
					return
				}
			}
			if err != nil {
				// A read-only console outlives its input (rackd console
				// m > file &); a writer's input ending is a detach.
				if write {
					close(detached)
				}
				return
			}
		}
	}()
	select {
	case <-detached:
	case <-e.ctx.Done():
	case err := <-outDone:
		// rackd ended it, and said why on the console.
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("the console of %s broke off: %w", machine, err)
		}
		return fmt.Errorf("the console of %s was closed by rackd", machine)
	}
	conn.Close()
	<-outDone
	fmt.Fprintf(e.stderr, "%s[rackd: detached from the console of %s]%s", nl, machine, nl)
	return nil
}

// detacher finds the detach sequence in typed bytes: "~." at the start of a
// line (the first byte, or after a CR or LF), as ssh's escape. "~~" there
// types one "~"; a "~" followed by anything else types both.
type detacher struct {
	lineStart bool
	tilde     bool // a "~" at a line start is held
}

// feed returns what p types, and whether it detaches (what follows the
// sequence is dropped).
func (d *detacher) feed(p []byte) (out []byte, detach bool) {
	for _, c := range p {
		if d.tilde {
			d.tilde = false
			switch c {
			case '.':
				return out, true
			case '~':
				out = append(out, '~')
				d.lineStart = false
				continue
			default:
				out = append(out, '~')
			}
		} else if d.lineStart && c == '~' {
			d.tilde = true
			continue
		}
		out = append(out, c)
		d.lineStart = c == '\r' || c == '\n'
	}
	return out, false
}

func machinesConsoleLogVerb() *verb {
	return &verb{
		name:     "console-log",
		args:     []string{"ID"},
		synopsis: "[--boot N] [--list]",
		summary:  "print a machine's recorded console output (admin or its owner)",
		help: `rackd records a machine's serial console while it commissions, deploys or
erases: the last 5 boots, each kept to its newest 256 KiB (the [console]
section of the configuration). Prints the newest boot's output, or boot N's;
--list lists the kept boots. The end of it also goes with the machine's
FAILED_COMMISSIONING or FAILED_DEPLOYMENT event (rackd machines events).`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			boot := fs.Int("boot", 0, "print boot `N` (rackd machines console-log ID --list numbers them; default: the newest)")
			list := fs.Bool("list", false, "list the kept boots instead")
			return func(e *env, args []string) error {
				if *boot < 0 {
					return usagef("--boot %d: want a boot number", *boot)
				}
				if *list {
					return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.ConsoleBoot, error) {
						return c.ConsoleLog(ctx, args[0])
					}, printConsoleBoots)
				}
				c, err := e.client()
				if err != nil {
					return err
				}
				_, err = c.ConsoleBoot(e.ctx, args[0], *boot, e.stdout)
				return err
			}
		},
	}
}

func printConsoleBoots(w io.Writer, bs []api.ConsoleBoot) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "BOOT\tSTARTED\tPHASE\tBYTES\tDROPPED")
	for _, b := range bs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\n", b.Boot, when(b.Started), cell(b.Phase), b.Bytes, b.Dropped)
	}
	return tw.Flush()
}
