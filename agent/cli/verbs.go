package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"

	"rackd/agent/client"
	"rackd/api"
)

func allocateVerb() *verb {
	return &verb{
		name:     "allocate",
		synopsis: "[--name ID] [--agent-name A] [--token T] [--arch A] [--min-cpu N] [--min-memory-mb N] [--tag T ...] [--zone Z]",
		summary:  "allocate a machine, or confirm or adopt one by name",
		help: `Without --name, allocates a READY machine that meets the constraints.
With --name, allocates that machine; if it is already allocated to you under
the same --agent-name nothing changes; with --token (the allocation's token)
you adopt it under the new --agent-name and get a new token.

The allocation token is printed once: keep it. Here --token is the
allocation's token; give the API token with --api-token or RACKD_TOKEN.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.AllocateRequest
			var cons api.Constraints
			var tags stringList
			fs.StringVar(&req.Name, "name", "", "`ID` or hostname of the machine to allocate")
			fs.StringVar(&req.AgentName, "agent-name", "", "free-form `NAME` of the allocating agent (e.g. a UUID)")
			fs.StringVar(&req.Token, "token", "", "the allocation's `TOKEN`, to adopt it")
			fs.StringVar(&cons.Arch, "arch", "", "constraint: architecture `ARCH`")
			fs.IntVar(&cons.MinCPU, "min-cpu", 0, "constraint: at least `N` CPU threads")
			fs.IntVar(&cons.MinMemoryMB, "min-memory-mb", 0, "constraint: at least `N` MiB of memory")
			fs.Var(&tags, "tag", "constraint: has `TAG` (repeatable)")
			fs.StringVar(&cons.Zone, "zone", "", "constraint: in `ZONE`")
			return func(e *env, _ []string) error {
				if cons.MinCPU < 0 || cons.MinMemoryMB < 0 {
					return usagef("--min-cpu and --min-memory-mb must not be negative")
				}
				if req.Token != "" && req.Name == "" {
					return usagef("--token adopts an allocation by name: give --name too")
				}
				cons.Tags = tags
				if cons.Arch != "" || cons.MinCPU > 0 || cons.MinMemoryMB > 0 || len(cons.Tags) > 0 || cons.Zone != "" {
					req.Constraints = &cons
				}
				c, err := e.client()
				if err != nil {
					return err
				}
				ctx, raw := e.capture()
				a, status, err := c.Allocate(ctx, req)
				if err != nil {
					return err
				}
				if e.json() {
					return printJSON(e.stdout, *raw)
				}
				return printAllocation(e, a, status)
			}
		},
	}
}

func printAllocation(e *env, a api.Allocation, status int) error {
	m := a.Machine
	agent := ""
	if m.AgentName != "" {
		agent = fmt.Sprintf(" as agent %q", m.AgentName)
	}
	switch {
	case status == http.StatusCreated:
		fmt.Fprintf(e.stdout, "Allocated %s%s.\n\n", cell(m.Hostname), agent)
	case a.Token != "":
		fmt.Fprintf(e.stdout, "Adopted %s%s; the old allocation token no longer works.\n\n", cell(m.Hostname), agent)
	default:
		fmt.Fprintf(e.stdout, "%s is already allocated to you%s; nothing changed.\n\n", cell(m.Hostname), agent)
	}
	if err := printMachines(e.stdout, []api.Machine{m}); err != nil {
		return err
	}
	if a.Token != "" {
		fmt.Fprintf(e.stdout, "\nAllocation token: %s\n", a.Token)
		fmt.Fprintf(e.stdout, "This token is shown once: keep it. Whoever holds it can adopt the allocation\n(rackd allocate --name %s --agent-name NEW --token TOKEN).\n", cell(m.Hostname))
	}
	return nil
}

func releaseVerb() *verb {
	return &verb{
		name:     "release",
		args:     []string{"ID"},
		synopsis: "[--erase] [--reason R]",
		summary:  "release an allocated machine (it powers off and returns to READY)",
		help: `ID is the machine's id or hostname. Same as DELETE /api/v1/allocations/ID.
With --erase the machine first boots the erase environment, which zeroes the
first and last MiB of its disks.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.ActionRequest
			fs.BoolVar(&req.Erase, "erase", false, "erase the disks' first and last MiB before READY")
			fs.StringVar(&req.Reason, "reason", "", "why, for the machine's events")
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Machine, error) {
					if req.Erase || req.Reason != "" {
						return c.MachineAction(ctx, args[0], "release", req)
					}
					return c.Release(ctx, args[0])
				}, func(w io.Writer, m api.Machine) error { return printMachines(w, []api.Machine{m}) })
			}
		},
	}
}

func usersGroup() *group {
	g := &group{name: "users", summary: "Manage API users and their SSH keys (tokens: rackd tokens)."}
	g.verbs = append([]*verb{usersAddVerb(), usersListVerb(), usersRmVerb()}, sshKeyVerbs()...)
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func usersAddVerb() *verb {
	return &verb{
		name:     "add",
		args:     []string{"NAME"},
		synopsis: "[--admin]",
		summary:  "create a user and print its token (admin)",
		help:     "The token is printed once and stored hashed: it cannot be shown again.",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.CreateUser
			fs.BoolVar(&req.Admin, "admin", false, "make the user an admin")
			return func(e *env, args []string) error {
				req.Name = args[0]
				c, err := e.client()
				if err != nil {
					return err
				}
				ctx, raw := e.capture()
				u, err := c.CreateUser(ctx, req)
				if err != nil {
					return err
				}
				if e.json() {
					return printJSON(e.stdout, *raw)
				}
				kind := "user"
				if u.Admin {
					kind = "admin user"
				}
				fmt.Fprintf(e.stdout, "Created %s %s.\n\nToken: %s\n", kind, cell(u.Name), u.Token)
				fmt.Fprintln(e.stdout, "This token is shown once and cannot be retrieved later: hand it over now (as RACKD_TOKEN).")
				return nil
			}
		},
	}
}

func usersListVerb() *verb {
	return &verb{
		name:    "list",
		summary: "list users",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.User, error) {
					return c.ListUsers(ctx)
				}, func(w io.Writer, us []api.User) error { return printUsers(w, us) })
			}
		},
	}
}

func usersRmVerb() *verb {
	return &verb{
		name:    "rm",
		args:    []string{"NAME"},
		summary: "remove a user with their tokens and SSH keys (admin)",
		help: `The user's tokens stop working at once, and what they hold open (rackd
console, the web UI) ends with a message saying why. Refused for a user
who holds machines (release them first), for the last admin, and for the
user admin, whose token is the admin token file's.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.User, error) {
					return c.RemoveUser(ctx, args[0])
				}, func(w io.Writer, u api.User) error {
					_, err := fmt.Fprintf(w, "Removed user %s, with their tokens and SSH keys.\n", cell(u.Name))
					return err
				})
			}
		},
	}
}

func backupVerb() *verb {
	return &verb{
		name:    "backup",
		args:    []string{"FILE"},
		summary: "copy the server's database to FILE (admin)",
		help: `The copy is written to FILE.tmp in the same directory, synced to disk and
then renamed to FILE, so FILE is either the previous file or a complete copy,
never half of one. On any error FILE.tmp is removed. The copy holds hashed
tokens and BMC user names: it is created with mode 0600. Its BMC passwords
are sealed under the server's <state dir>/secrets.key, which is not in the
copy: keep a copy of that file too, apart from the backups; a restore needs
it (docs/CLI.md, "backup").`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				c, err := e.client()
				if err != nil {
					return err
				}
				file := args[0]
				n, err := writeBackup(e.ctx, c, file)
				if err != nil {
					return err
				}
				if e.json() {
					abs, _ := filepath.Abs(file)
					return marshalJSON(e.stdout, struct {
						File  string `json:"file"`
						Bytes int64  `json:"bytes"`
					}{abs, n})
				}
				fmt.Fprintf(e.stdout, "Wrote %d bytes to %s.\n", n, file)
				return nil
			}
		},
	}
}

func versionVerb() *verb {
	return &verb{
		name:    "version",
		summary: "print the versions of this CLI and, if reachable, of the server",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				base, err := e.baseURL()
				if err != nil {
					return err
				}
				server, raw, serverErr := serverVersion(e, base)
				if e.json() {
					out := struct {
						Client struct {
							Version string `json:"version"`
						} `json:"client"`
						URL    string           `json:"url"`
						Server *json.RawMessage `json:"server"`
						Error  string           `json:"server_error,omitempty"`
					}{URL: base}
					out.Client.Version = Version
					if serverErr == nil {
						out.Server = &raw
					} else {
						out.Error = serverErr.Error()
					}
					return marshalJSON(e.stdout, out)
				}
				fmt.Fprintf(e.stdout, "client: %s\n", Version)
				if serverErr != nil {
					// Not a failure of this verb: the client's version
					// is what was asked for first.
					fmt.Fprintf(e.stderr, "rackd: server version unknown: %v\n", serverErr)
					return nil
				}
				fmt.Fprintf(e.stdout, "server: %s at %s\n", server, base)
				return nil
			}
		},
	}
}

// serverVersion asks the server for its version and schema; without a usable
// token it falls back to /healthz, which tells the version only. It returns a
// line for humans and the API's JSON.
func serverVersion(e *env, base string) (string, json.RawMessage, error) {
	tok, tokErr := e.resolveToken(e.g.token)
	c := client.New(base, tok, client.WithUserAgent("rackd-cli/"+Version))
	why := "no API token"
	if tokErr == nil {
		ctx, raw := e.capture()
		v, err := c.Version(ctx)
		if err == nil {
			return fmt.Sprintf("%s (schema %d)", cell(v.Version), v.Schema), *raw, nil
		}
		var ae *client.APIError
		if !errors.As(err, &ae) {
			return "", nil, err
		}
		why = ae.Error()
	}
	ctx, raw := e.capture()
	h, err := c.Health(ctx)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s (schema unknown: %s)", cell(h.Version), why), *raw, nil
}
