package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"rackd/agent/client"
	"rackd/api"
)

// stdin is where `users ssh-keys add NAME -` reads keys from; tests replace it.
var stdin io.Reader = os.Stdin

// maxKeysInput bounds what `ssh-keys add` reads: a hundred RSA keys of 16384
// bits are under 300 KiB.
const maxKeysInput = 1 << 20

func sshKeyVerbs() []*verb {
	return []*verb{sshKeysAddVerb(), sshKeysListVerb(), sshKeysRmVerb()}
}

func sshKeysAddVerb() *verb {
	return &verb{
		name:    "ssh-keys add",
		args:    []string{"NAME"},
		optArgs: []string{"FILE|-"},
		summary: "add SSH public keys to a user, from FILE or standard input",
		help: `Reads public keys in authorized_keys form (as in ~/.ssh/id_ed25519.pub or
~/.ssh/authorized_keys), one a line, from FILE, or from standard input when
FILE is - or missing. Blank lines and lines starting with # are skipped. Each
key is added on its own: a refused line is reported with its number and the
others are still added; the exit status is 1 if any line was refused. A user
adds their own keys; an admin anyone's.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				in, from := stdin, "standard input"
				if len(args) > 1 && args[1] != "-" {
					f, err := os.Open(args[1])
					if err != nil {
						return err
					}
					defer f.Close()
					in, from = f, args[1]
				}
				lines, err := readKeyLines(in, from)
				if err != nil {
					return err
				}
				c, err := e.client()
				if err != nil {
					return err
				}
				return addSSHKeys(e, c, args[0], from, lines)
			}
		},
	}
}

// keyLine is one key of the input and the line it was on.
type keyLine struct {
	n    int
	text string
}

func readKeyLines(in io.Reader, from string) ([]keyLine, error) {
	data, err := io.ReadAll(io.LimitReader(in, maxKeysInput+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", from, err)
	}
	if len(data) > maxKeysInput {
		return nil, fmt.Errorf("%s: more than %d bytes: that is not a list of public keys", from, maxKeysInput)
	}
	var out []keyLine
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, maxKeysInput)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, keyLine{n, line})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", from, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no keys (only blank lines and # comments)", from)
	}
	return out, nil
}

func addSSHKeys(e *env, c *client.Client, user, from string, lines []keyLine) error {
	var added []api.SSHKey
	refused := 0
	for _, l := range lines {
		k, err := c.AddSSHKey(e.ctx, user, l.text)
		if err != nil {
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) {
				return err // the server is unreachable: the other lines would fail alike
			}
			refused++
			fmt.Fprintf(e.stderr, "rackd: %s line %d: %v\n", from, l.n, err)
			continue
		}
		added = append(added, k)
	}
	if e.json() {
		if added == nil {
			added = []api.SSHKey{}
		}
		if err := marshalJSON(e.stdout, added); err != nil {
			return err
		}
	} else {
		for _, k := range added {
			fmt.Fprintf(e.stdout, "Added %s key %s %s to %s.\n", k.Type, k.ID, k.Fingerprint, cell(k.User))
		}
	}
	if refused > 0 {
		return fmt.Errorf("%d of %d keys not added", refused, len(lines))
	}
	return nil
}

func sshKeysListVerb() *verb {
	return &verb{
		name:    "ssh-keys list",
		args:    []string{"NAME"},
		summary: "list a user's SSH public keys",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) ([]api.SSHKey, error) {
					return c.SSHKeys(ctx, args[0])
				}, printSSHKeys)
			}
		},
	}
}

func sshKeysRmVerb() *verb {
	return &verb{
		name:    "ssh-keys rm",
		args:    []string{"NAME", "ID"},
		summary: "remove one of a user's SSH public keys",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.SSHKey, error) {
					return c.DeleteSSHKey(ctx, args[0], args[1])
				}, func(w io.Writer, k api.SSHKey) error {
					_, err := fmt.Fprintf(w, "Removed %s key %s %s from %s.\n", k.Type, k.ID, k.Fingerprint, cell(k.User))
					return err
				})
			}
		},
	}
}

func printSSHKeys(w io.Writer, keys []api.SSHKey) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tTYPE\tBITS\tFINGERPRINT\tCOMMENT\tCREATED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(k.ID), cell(k.Type), strconv.Itoa(k.Bits), cell(k.Fingerprint), cell(k.Comment), when(k.Created))
	}
	return tw.Flush()
}
