package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"rackd/agent/client"
	"rackd/api"
)

// callAndPrint is the shape of most verbs: one API call, then either the
// server's JSON exactly as sent (--json) or a table.
func callAndPrint[T any](e *env, call func(context.Context, *client.Client) (T, error), table func(io.Writer, T) error) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	ctx, raw := e.capture()
	v, err := call(ctx, c)
	if err != nil {
		return err
	}
	if e.json() {
		return printJSON(e.stdout, *raw)
	}
	return table(e.stdout, v)
}

// recentEvents is how many events `machines show` prints; `machines events`
// prints them all.
const recentEvents = 10

// capture returns a context under which the next API answer is kept verbatim
// for --json.
func (e *env) capture() (context.Context, *json.RawMessage) {
	raw := new(json.RawMessage)
	return client.CaptureRaw(e.ctx, raw), raw
}

func machinesGroup() *group {
	g := &group{name: "machines", summary: "Enlist machines, look at them and move them through their lifecycle."}
	g.verbs = []*verb{
		machinesListVerb(), machinesShowVerb(), machinesEventsVerb(), machinesConsoleLogVerb(), machinesAddVerb(),
		machinesSetVerb(), machinesRmVerb(),
	}
	for _, a := range client.MachineActions {
		g.verbs = append(g.verbs, machineActionVerb(a))
	}
	g.verbs = append(g.verbs, machinesAbortVerb())
	g.verbs = append(g.verbs, machinesSetIPVerb(), machinesUnsetIPVerb())
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func machinesListVerb() *verb {
	return &verb{
		name:     "list",
		synopsis: "[--state S] [--owner U] [--agent-name A]",
		summary:  "list machines",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var f client.MachineFilter
			fs.StringVar(&f.State, "state", "", "only machines in `STATE` (NEW, READY, DEPLOYED, ...)")
			fs.StringVar(&f.Owner, "owner", "", "only machines allocated to `USER`")
			fs.StringVar(&f.AgentName, "agent-name", "", "only machines allocated under `NAME`")
			return func(e *env, _ []string) error {
				f.State = strings.ToUpper(f.State)
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.Machine, error) {
					return c.ListMachines(ctx, f)
				}, func(w io.Writer, ms []api.Machine) error { return printMachines(w, ms) })
			}
		},
	}
}

func machinesShowVerb() *verb {
	return &verb{
		name:    "show",
		args:    []string{"ID"},
		summary: "show a machine and its recent events",
		help: `ID is the machine's id or hostname. With --json only the machine is
printed; rackd machines events ID --json prints its history.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				c, err := e.client()
				if err != nil {
					return err
				}
				ctx, raw := e.capture()
				m, err := c.GetMachine(ctx, args[0])
				if err != nil {
					return err
				}
				if e.json() {
					return printJSON(e.stdout, *raw)
				}
				// Ask for the events by id: the hostname could have been
				// reused by another machine in between.
				evs, evErr := c.MachineEvents(e.ctx, m.ID)
				if err := printMachine(e.stdout, m); err != nil {
					return err
				}
				if evErr != nil {
					return fmt.Errorf("listing the events of %s: %w", m.Hostname, evErr)
				}
				if len(evs) > recentEvents {
					fmt.Fprintf(e.stdout, "\nLast %d of %d events (rackd machines events %s for all):\n", recentEvents, len(evs), m.Hostname)
					evs = evs[len(evs)-recentEvents:]
				} else {
					fmt.Fprint(e.stdout, "\nEvents:\n")
				}
				return printEvents(e.stdout, evs)
			}
		},
	}
}

func machinesEventsVerb() *verb {
	return &verb{
		name:    "events",
		args:    []string{"ID"},
		summary: "list a machine's history, oldest first",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.Event, error) {
					return c.MachineEvents(ctx, args[0])
				}, func(w io.Writer, evs []api.Event) error { return printEvents(w, evs) })
			}
		},
	}
}

// addStates are the states a machine may be created in: NEW goes through
// commissioning, READY skips it (hardware already known), DEPLOYED adopts a
// running machine.
var addStates = []string{"NEW", "READY", "DEPLOYED"}

func machinesAddVerb() *verb {
	return &verb{
		name:     "add",
		synopsis: "--hostname H --mac M [--mac M ...] [--arch A] [flags]",
		summary:  "enlist a machine by hand (admin)",
		help: `The BMC password may be given in the environment variable
RACKD_POWER_PASSWORD instead of --power-password, so that it does not show
in the process list or the shell history.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.CreateMachine
			var macs, tags stringList
			var p api.PowerParams
			fs.StringVar(&req.Hostname, "hostname", "", "the machine's `HOSTNAME` (required)")
			fs.StringVar(&req.Arch, "arch", "amd64", "`ARCH`: amd64, arm64, ...")
			fs.Var(&macs, "mac", "`MAC` address of an interface (required, repeatable)")
			fs.IntVar(&req.CPUCount, "cpu", 0, "`N` CPU threads")
			fs.IntVar(&req.MemoryMB, "memory-mb", 0, "memory in `MiB`")
			fs.Var(&tags, "tag", "`TAG` for allocation constraints (repeatable)")
			fs.StringVar(&req.Zone, "zone", "", "`ZONE` for allocation constraints")
			fs.StringVar(&req.State, "state", "", "initial `STATE`: NEW (default), READY (skip commissioning) or DEPLOYED (adopt a running machine)")
			fs.StringVar(&p.Driver, "power-driver", "", "power `DRIVER`: ipmi, redfish or manual")
			fs.StringVar(&p.Address, "power-address", "", "BMC `HOST:PORT` (redfish: https://HOST[:PORT][/redfish/v1/Systems/ID])")
			fs.StringVar(&p.Username, "power-user", "", "BMC `USER`")
			fs.StringVar(&p.Password, "power-password", "", "BMC `PASSWORD` (better: env RACKD_POWER_PASSWORD)")
			fs.IntVar(&p.CipherSuite, "power-cipher", 0, "IPMI 2.0 cipher suite `N` (0: the driver's default, 3; 17 where the BMC offers it)")
			fs.StringVar(&p.TLSFingerprint, "power-tls-fingerprint", "", "redfish: the BMC certificate's SHA-256 `HEX` to enforce (default: trust the first one seen, then enforce it)")
			fs.BoolVar(&p.InsecureTLS, "power-insecure-tls", false, "redfish: check no BMC certificate at all (explicit opt-out)")
			fs.StringVar(&p.BootMode, "power-boot-mode", "", "redfish: `MODE` of the one-time network boot, uefi or legacy (default: the BMC's)")
			return func(e *env, _ []string) error {
				switch {
				case req.Hostname == "":
					return usagef("--hostname is required")
				case len(macs) == 0:
					return usagef("at least one --mac is required")
				case req.CPUCount < 0:
					return usagef("--cpu must not be negative")
				case req.MemoryMB < 0:
					return usagef("--memory-mb must not be negative")
				}
				req.MACs, req.Tags = macs, tags
				if req.State != "" {
					req.State = strings.ToUpper(req.State)
					if !slices.Contains(addStates, req.State) {
						return usagef("--state must be one of %s", strings.Join(addStates, ", "))
					}
				}
				if p.Driver == "" {
					if p.Address != "" || p.Username != "" || p.Password != "" || p.CipherSuite != 0 || p.TLSFingerprint != "" || p.InsecureTLS || p.BootMode != "" {
						return usagef("--power-address, --power-user, --power-password and the other --power-* flags need --power-driver")
					}
				} else {
					if p.Password == "" {
						p.Password = os.Getenv("RACKD_POWER_PASSWORD")
					}
					req.Power = &p
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Machine, error) {
					return c.CreateMachine(ctx, req)
				}, func(w io.Writer, m api.Machine) error { return printMachines(w, []api.Machine{m}) })
			}
		},
	}
}

var actionSummaries = map[string]string{
	"commission":  "commission a machine: boot it to inventory its hardware",
	"deploy":      "deploy an allocated machine",
	"release":     "release a machine back to READY (power off)",
	"mark-broken": "mark a machine broken, for a human to debug",
	"mark-fixed":  "mark a broken machine fixed",
	"retire":      "retire an idle machine for good",
}

func machineActionVerb(action string) *verb {
	v := &verb{
		name:     action,
		args:     []string{"ID"},
		synopsis: "[--reason R]",
		summary:  actionSummaries[action],
		help:     "ID is the machine's id or hostname. The reason is kept in the machine's events.",
	}
	switch action {
	case "deploy":
		v.synopsis = "[--image I] [--user-data FILE] [--ssh-key FILE ...] [--reason R]"
		v.help += `

The deployed OS's cloud-init gets the machine's hostname, its sticky
addresses, the owner's SSH keys as they are now, the keys of each
--ssh-key FILE (authorized_keys lines, one a line; blank lines and # comments
skipped), and the user-data of --user-data FILE (at most 1 MiB; - reads
standard input). The machine is DEPLOYED once that OS reports that
cloud-init finished; rackd machines show says how far it is.`
	case "release":
		v.synopsis = "[--erase] [--reason R]"
	case "commission":
		v.synopsis = "[--force-bmc-setup] [--reason R]"
		v.help += `

The commissioning environment sets up the machine's BMC in-band (a "rackd"
administrator user with a fresh random password) and rackd makes it the
machine's power configuration (driver ipmi), unless an operator set one:
that is never replaced, and the machine's events say so. --force-bmc-setup
replaces it for this commissioning.`
	}
	v.setup = func(fs *flag.FlagSet) func(*env, []string) error {
		var req api.ActionRequest
		fs.StringVar(&req.Reason, "reason", "", "why, for the machine's events")
		var (
			userData string
			keyFiles stringList
		)
		if action == "deploy" {
			fs.StringVar(&req.Image, "image", "", "`IMAGE` to deploy (default: the server's)")
			fs.StringVar(&userData, "user-data", "", "cloud-init user-data from `FILE` (- for standard input)")
			fs.Var(&keyFiles, "ssh-key", "SSH public keys from `FILE` besides the owner's (repeatable)")
		}
		if action == "release" {
			fs.BoolVar(&req.Erase, "erase", false, "erase the disks' first and last MiB before READY")
		}
		if action == "commission" {
			fs.BoolVar(&req.ForceBMCSetup, "force-bmc-setup", false, "let the BMC set-up replace the power configuration an operator set")
		}
		return func(e *env, args []string) error {
			if action == "deploy" {
				if err := deployIdentity(&req, userData, keyFiles); err != nil {
					return err
				}
			}
			return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Machine, error) {
				return c.MachineAction(ctx, args[0], action, req)
			}, func(w io.Writer, m api.Machine) error {
				if err := printMachines(w, []api.Machine{m}); err != nil {
					return err
				}
				// What the operator must do now (a machine powered by
				// hand): on stderr, so that it is seen and not parsed.
				if m.Notice != "" {
					fmt.Fprintf(e.stderr, "rackd: %s\n", cell(m.Notice))
				}
				return nil
			})
		}
	}
	return v
}

func machinesAbortVerb() *verb {
	return &verb{
		name:     "abort",
		args:     []string{"ID"},
		synopsis: "[--reason R]",
		summary:  "stop a machine's commissioning, deployment or release, and power it off",
		help: `ID is the machine's id or hostname. The machine is powered off through the
power queue and its phase's credential dies. A commissioning goes back to
READY (NEW if the machine was never commissioned), a deployment to ALLOCATED
(still the owner's), a release, erasing or not, to BROKEN (an admin marks
it fixed). The owner may abort a deployment; the rest is an admin's. Any
other state is refused, naming it. The reason is kept in the machine's
events.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			reason := fs.String("reason", "", "why, for the machine's events")
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Machine, error) {
					return c.Abort(ctx, args[0], *reason)
				}, func(w io.Writer, m api.Machine) error {
					if err := printMachines(w, []api.Machine{m}); err != nil {
						return err
					}
					if m.Notice != "" {
						fmt.Fprintf(e.stderr, "rackd: %s\n", cell(m.Notice))
					}
					return nil
				})
			}
		},
	}
}

func machinesSetVerb() *verb {
	return &verb{
		name:     "set",
		args:     []string{"ID"},
		synopsis: "[--power-driver D] [--power-address HOST[:PORT]] [--power-user U] [--power-password P] [--power-cipher N] [--no-power] [--hostname H] [--arch A] [--cpu N] [--memory-mb M] [--tag T ... | --no-tags] [--zone Z] [--reason R]",
		summary:  "change a machine: power settings, hostname, arch, tags, zone (admin)",
		help: `Only the flags given change; everything else stays as it is (the BMC
password, too, when only the address changes). --tag replaces the tag list;
--no-tags empties it; --no-power removes the power settings.

A machine that enlisted itself and reported its BMC's address needs only
--power-user and --power-password: the driver is then ipmi and the address
the reported one. The password may be given in the environment variable
RACKD_POWER_PASSWORD instead of --power-password (read when another
--power-* flag is given), so that it does not show in the process list or
the shell history. The password and user are never shown back.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var (
				hostname, arch, zone, reason    string
				driver, address, user, password string
				fingerprint, bootMode           string
				cpu, memory, cipher             int
				tags                            stringList
				noTags, noPower, insecure       bool
			)
			fs.StringVar(&driver, "power-driver", "", "power `DRIVER`: ipmi, redfish, or manual (an operator presses the button)")
			fs.StringVar(&address, "power-address", "", "BMC `HOST[:PORT]` (ipmi: port 623 when left out; redfish: https://HOST[:PORT][/redfish/v1/Systems/ID])")
			fs.StringVar(&fingerprint, "power-tls-fingerprint", "", "redfish: the BMC certificate's SHA-256 `HEX` to enforce (\"\" trusts the next one seen: after a deliberate certificate change)")
			fs.BoolVar(&insecure, "power-insecure-tls", false, "redfish: check no BMC certificate at all (explicit opt-out; =false to check again)")
			fs.StringVar(&bootMode, "power-boot-mode", "", "redfish: `MODE` of the one-time network boot, uefi or legacy (\"\": the BMC's)")
			fs.StringVar(&user, "power-user", "", "BMC `USER`")
			fs.StringVar(&password, "power-password", "", "BMC `PASSWORD` (better: env RACKD_POWER_PASSWORD)")
			fs.IntVar(&cipher, "power-cipher", 0, "IPMI 2.0 cipher suite `N` (0: the driver's default, 3; 17 where the BMC offers it)")
			fs.BoolVar(&noPower, "no-power", false, "remove the power settings")
			fs.StringVar(&hostname, "hostname", "", "new `HOSTNAME`")
			fs.StringVar(&arch, "arch", "", "`ARCH`: amd64, arm64, ...")
			fs.IntVar(&cpu, "cpu", 0, "`N` CPU threads")
			fs.IntVar(&memory, "memory-mb", 0, "memory in `MiB`")
			fs.Var(&tags, "tag", "`TAG` for allocation constraints (repeatable; replaces the list)")
			fs.BoolVar(&noTags, "no-tags", false, "remove all tags")
			fs.StringVar(&zone, "zone", "", "`ZONE` for allocation constraints (\"\" clears it)")
			fs.StringVar(&reason, "reason", "", "why, for the machine's events")
			return func(e *env, args []string) error {
				given := map[string]bool{}
				fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
				var req api.MachinePatch
				switch {
				case given["tag"] && noTags:
					return usagef("--tag and --no-tags contradict each other")
				case noPower && (given["power-driver"] || given["power-address"] || given["power-user"] || given["power-password"] || given["power-cipher"] ||
					given["power-tls-fingerprint"] || given["power-insecure-tls"] || given["power-boot-mode"]):
					return usagef("--no-power and --power-* flags contradict each other")
				case cpu < 0 || memory < 0:
					return usagef("--cpu and --memory-mb must not be negative")
				}
				if given["hostname"] {
					req.Hostname = api.Some(hostname)
				}
				if given["arch"] {
					req.Arch = api.Some(arch)
				}
				if given["cpu"] {
					req.CPUCount = api.Some(cpu)
				}
				if given["memory-mb"] {
					req.MemoryMB = api.Some(memory)
				}
				if given["zone"] {
					req.Zone = api.Some(zone)
				}
				if given["tag"] {
					req.Tags = api.Some([]string(tags))
				} else if noTags {
					req.Tags = api.Some([]string{})
				}
				var p api.PowerPatch
				anyPower := false
				for _, f := range []struct {
					flag  string
					dst   *api.Field[string]
					value string
				}{{"power-driver", &p.Driver, driver}, {"power-address", &p.Address, address},
					{"power-user", &p.Username, user}, {"power-password", &p.Password, password},
					{"power-tls-fingerprint", &p.TLSFingerprint, fingerprint}, {"power-boot-mode", &p.BootMode, bootMode}} {
					if given[f.flag] {
						*f.dst, anyPower = api.Some(f.value), true
					}
				}
				if given["power-cipher"] {
					p.CipherSuite, anyPower = api.Some(cipher), true
				}
				if given["power-insecure-tls"] {
					p.InsecureTLS, anyPower = api.Some(insecure), true
				}
				if env := os.Getenv("RACKD_POWER_PASSWORD"); anyPower && !given["power-password"] && env != "" {
					p.Password = api.Some(env)
				}
				switch {
				case noPower:
					req.Power = api.Field[*api.PowerPatch]{Set: true}
				case anyPower:
					req.Power = api.Some(&p)
				}
				req.Reason = reason
				if !req.Hostname.Set && !req.Arch.Set && !req.CPUCount.Set && !req.MemoryMB.Set &&
					!req.Tags.Set && !req.Zone.Set && !req.Power.Set {
					return usagef("nothing to change: give at least one flag")
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Machine, error) {
					return c.UpdateMachine(ctx, args[0], req)
				}, func(w io.Writer, m api.Machine) error { return printMachine(w, m) })
			}
		},
	}
}

func machinesRmVerb() *verb {
	return &verb{
		name:     "rm",
		args:     []string{"ID"},
		synopsis: "[--force] [--reason R]",
		summary:  "delete a machine for good, freeing its MACs and addresses (admin)",
		help: `The machine's hostname, MACs, sticky addresses and leases are free at
once, so the same machine can be added again. Its events stay:
rackd machines events <its id> still lists them. A machine that is
allocated, deployed or being commissioned or released is refused unless
--force (which does not touch its power).`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.DeleteMachine
			fs.BoolVar(&req.Force, "force", false, "delete even an allocated, deployed or busy machine")
			fs.StringVar(&req.Reason, "reason", "", "why, for the machine's events")
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Machine, error) {
					return c.DeleteMachine(ctx, args[0], req)
				}, func(w io.Writer, m api.Machine) error {
					_, err := fmt.Fprintf(w, "Deleted %s (%s); its events: rackd machines events %s\n", cell(m.Hostname), cell(m.ID), cell(m.ID))
					return err
				})
			}
		},
	}
}
