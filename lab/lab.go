// Package lab is the rackd-lab command: a virtual rack on this machine
// built from rackd's own parts (up, down, status), and the simulated BMCs
// its machines sit behind (redfish, ipmi), which an operator can also run
// on their own in front of any process that stands for a machine.
//
//	rackd-lab up [--dir var/lab] [--machines 2]   # make lab
//	rackd-lab down [--dir var/lab]                # make lab-down
//	rackd-lab status [--dir var/lab]
//	rackd-lab redfish --listen HOST:PORT [--user U] [--password P] [-- MACHINE ARGV...]
//	rackd-lab ipmi --listen HOST:PORT [--user U] [--password P] [-- MACHINE ARGV...]
//
// The BMCs power MACHINE: it runs while the power is on (a QEMU VM in the
// lab), is started by power-on and ended by power-off (SIGTERM to its
// process group, SIGKILL after 3 s). Both run until SIGTERM or SIGINT and
// stop their machine as they exit.
package lab

import (
	"context"
	"fmt"
	"io"
)

const usage = `usage:
  rackd-lab up [--dir DIR] [--machines N]     build the virtual rack (make lab)
  rackd-lab down [--dir DIR]                  remove what up made (make lab-down)
  rackd-lab status [--dir DIR]                what runs, and how to reach it
  rackd-lab redfish --listen HOST:PORT [--user U] [--password P] [--power-on] [-- MACHINE...]
  rackd-lab ipmi --listen HOST:PORT [--user U] [--password P] [--power-on] [-- MACHINE...]
The BMC password may come from RACKD_BMC_PASSWORD instead of --password.
`

// Run runs one rackd-lab command and returns its exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "redfish":
		err = runRedfish(ctx, args[1:], stdout, stderr)
	case "ipmi":
		err = runIPMI(ctx, args[1:], stdout, stderr)
	case "up":
		err = runUp(ctx, args[1:], stdout, stderr)
	case "down":
		err = runDown(ctx, args[1:], stdout, stderr)
	case "status":
		err = runStatus(ctx, args[1:], stdout, stderr)
	case "ra":
		err = runRA(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "rackd-lab: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if ue, ok := err.(usageError); ok {
			fmt.Fprintf(stderr, "rackd-lab %s: %s\n%s", args[0], string(ue), usage)
			return 2
		}
		fmt.Fprintf(stderr, "rackd-lab %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// usageError is a command line that cannot be run (exit status 2).
type usageError string

func (e usageError) Error() string { return string(e) }
