package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"rackd/agent/client"
	"rackd/api"
)

func tokensGroup() *group {
	g := &group{name: "tokens", summary: "Manage API tokens: several named ones per user, expiring or not, revocable."}
	g.verbs = []*verb{tokensCreateVerb(), tokensListVerb(), tokensRevokeVerb(), tokensRotateAdminVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func tokensCreateVerb() *verb {
	return &verb{
		name:     "create",
		synopsis: "--name NAME [--expires D] [--user U] [--maas]",
		summary:  "make an API token and print it",
		help: `The token is printed once and stored hashed: it cannot be shown again.
--expires is a lifetime (30d, 12h, 90m, 1d12h) or a time (2027-01-31,
2027-01-31T12:00:00Z); without it the token does not expire. An admin may
make a token for another user with --user. --maas prints it as a MAAS API
key (user:token-id:secret) for the tools written for MAAS (Juju, Terraform,
Ansible), which rackd serves at /MAAS/api/2.0/; revoking the token ends the
key too.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var req api.CreateToken
			fs.StringVar(&req.Name, "name", "", "the token's `NAME` (required), unique among the user's tokens")
			fs.StringVar(&req.Expires, "expires", "", "when it stops working: a lifetime `D` (30d, 12h) or a time")
			fs.StringVar(&req.User, "user", "", "whose token (admin); default: yours")
			maas := fs.Bool("maas", false, "print it as a MAAS API key")
			return func(e *env, _ []string) error {
				if req.Name == "" {
					return usagef("--name is required")
				}
				// Refused here with the same words the server would use.
				if _, err := api.ParseExpiry(req.Expires, time.Now()); err != nil {
					return usagef("%v", err)
				}
				c, err := e.client()
				if err != nil {
					return err
				}
				ctx, raw := e.capture()
				tk, err := c.CreateToken(ctx, req)
				if err != nil {
					return err
				}
				if e.json() {
					return printJSON(e.stdout, *raw)
				}
				expiry := "it does not expire"
				if tk.Expires != nil {
					expiry = "it expires " + when(*tk.Expires)
				}
				if *maas {
					fmt.Fprintf(e.stdout, "Created token %s (%s) for %s; %s.\n\nMAAS API key: %s\n", cell(tk.ID), cell(tk.Name), cell(tk.User), expiry, tk.MAASKey)
					fmt.Fprintf(e.stdout, "This key is shown once and cannot be retrieved later: store it now (MAAS's API is at http://<rack>:5240/MAAS).\nrackd tokens revoke %s ends it.\n", cell(tk.ID))
					return nil
				}
				fmt.Fprintf(e.stdout, "Created token %s (%s) for %s; %s.\n\nToken: %s\n", cell(tk.ID), cell(tk.Name), cell(tk.User), expiry, tk.Token)
				fmt.Fprintf(e.stdout, "This token is shown once and cannot be retrieved later: store it now (as RACKD_TOKEN).\nrackd tokens revoke %s ends it.\n", cell(tk.ID))
				return nil
			}
		},
	}
}

func tokensListVerb() *verb {
	return &verb{
		name:     "list",
		synopsis: "[--user U | --all]",
		summary:  "list your API tokens (admin: another user's, or every user's)",
		help:     "The token you call with is marked with *. Secrets are never shown.",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var user string
			var all bool
			fs.StringVar(&user, "user", "", "list `USER`'s tokens (admin)")
			fs.BoolVar(&all, "all", false, "list every user's tokens, by user (admin)")
			return func(e *env, _ []string) error {
				if all && user != "" {
					return usagef("--all and --user exclude each other")
				}
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.Token, error) {
					if all {
						return c.ListAllTokens(ctx)
					}
					return c.ListTokens(ctx, user)
				}, printTokens)
			}
		},
	}
}

func printTokens(w io.Writer, ts []api.Token) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tUSER\tCREATED\tEXPIRES\tLAST USED")
	for _, tk := range ts {
		id := cell(tk.ID)
		if tk.Current {
			id += " *"
		}
		expires := "never"
		if tk.Expires != nil {
			expires = when(*tk.Expires)
			if tk.Expired {
				expires += " (expired)"
			}
		}
		lastUsed := "never"
		if tk.LastUsed != nil {
			lastUsed = when(*tk.LastUsed)
		}
		fmt.Fprintln(tw, strings.Join([]string{id, cell(tk.Name), cell(tk.User), when(tk.Created), expires, lastUsed}, "\t"))
	}
	return tw.Flush()
}

func tokensRevokeVerb() *verb {
	return &verb{
		name:    "revoke",
		args:    []string{"ID"},
		summary: "revoke an API token: it stops working at once",
		help:    "ID is the token's id (rackd tokens list). Your own tokens; an admin may revoke anyone's.",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.Token, error) {
					return c.RevokeToken(ctx, args[0])
				}, func(w io.Writer, tk api.Token) error {
					_, err := fmt.Fprintf(w, "Revoked token %s (%s) of %s.\n", cell(tk.ID), cell(tk.Name), cell(tk.User))
					return err
				})
			}
		},
	}
}

func tokensRotateAdminVerb() *verb {
	return &verb{
		name:    "rotate-admin",
		summary: "write a new admin token file on the server; the old admin token stops working (admin)",
		help: `The server writes the new token to its admin token file (mode 0600) and
revokes the one the file held; the secret does not travel. Without the API,
rackd serve --rotate-admin-token does the same at start-up.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.AdminTokenRotation, error) {
					return c.RotateAdminToken(ctx)
				}, func(w io.Writer, r api.AdminTokenRotation) error {
					revoked := "no old token was found to revoke"
					if len(r.Revoked) > 0 {
						revoked = "revoked " + strings.Join(r.Revoked, ", ")
					}
					_, err := fmt.Fprintf(w, "Wrote a new admin token (%s) to %s on the server; %s.\n", cell(r.Token.ID), r.File, revoked)
					return err
				})
			}
		},
	}
}
