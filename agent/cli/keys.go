package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"rackd/agent/client"
	"rackd/api"
)

func keysGroup() *group {
	g := &group{name: "keys", summary: "Manage the key that seals the BMC passwords in the database."}
	g.verbs = []*verb{keysRotateVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func keysRotateVerb() *verb {
	return &verb{
		name:    "rotate",
		summary: "make a new secrets key, re-encrypt every BMC password under it, retire the old key (admin)",
		help: `The server writes a new key to its keyring file (<state dir>/secrets.key),
keeping the old one until every secret is re-encrypted under the new key, then
removes the old one. A rotation cut short (a crash) leaves every secret
readable; the next rotation, or the next start, finishes it. Backups taken
before the rotation need the keyring file as it was then.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.KeyRotation, error) {
					return c.RotateKeys(ctx)
				}, func(w io.Writer, r api.KeyRotation) error {
					retired := "no old key to retire"
					if len(r.Retired) > 0 {
						retired = "retired " + strings.Join(r.Retired, ", ")
					}
					if _, err := fmt.Fprintf(w, "New secrets key %s in %s on the server: %d secret(s) re-encrypted, %s.\n",
						r.Key, r.File, r.Resealed, retired); err != nil {
						return err
					}
					if len(r.Unreadable) > 0 {
						_, err := fmt.Fprintf(w, "Not re-encrypted (sealed under a lost key; set their BMC passwords again): %s\n",
							strings.Join(r.Unreadable, ", "))
						return err
					}
					return nil
				})
			}
		},
	}
}
