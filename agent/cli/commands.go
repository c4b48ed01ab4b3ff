package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// verb is one command: `rackd allocate` or `rackd machines list`.
type verb struct {
	group    string // "machines", or "" for a top-level verb
	name     string
	args     []string // names of the required positional arguments
	synopsis string   // flags part of the usage line
	summary  string   // one line, for the command lists
	help     string   // a paragraph or two, for the verb's own usage
	// optArgs names positional arguments that may follow args. argsUsage,
	// if set, is how the positional arguments show in usage and command
	// lists instead of "ARGS [OPTARGS]", for a verb whose optional argument
	// is an alternative to a flag: (IP | --subnet CIDR).
	optArgs   []string
	argsUsage string
	// setup defines the verb's flags on fs and returns the function that
	// runs it with the positional arguments. The flags are read once run is
	// called, after parsing.
	setup func(fs *flag.FlagSet) func(e *env, args []string) error
}

func (v *verb) path() string {
	if v.group == "" {
		return v.name
	}
	return v.group + " " + v.name
}

// matches reports how many of args name v: a verb's name may be several
// words (users ssh-keys add). 0 means args do not start with v's name.
func (v *verb) matches(args []string) int {
	words := strings.Fields(v.name)
	if len(args) < len(words) || !slices.Equal(args[:len(words)], words) {
		return 0
	}
	return len(words)
}

// argsLine is the positional arguments as usage shows them.
func (v *verb) argsLine() string {
	if v.argsUsage != "" {
		return v.argsUsage
	}
	parts := slices.Clone(v.args)
	for _, a := range v.optArgs {
		parts = append(parts, "["+a+"]")
	}
	return strings.Join(parts, " ")
}

// listLine is the verb and its arguments, for the command lists.
func (v *verb) listLine(name string) string {
	if a := v.argsLine(); a != "" {
		return name + " " + a
	}
	return name
}

func (v *verb) usageLine() string {
	parts := []string{"rackd", v.path()}
	if a := v.argsLine(); a != "" {
		parts = append(parts, a)
	}
	if v.synopsis != "" {
		parts = append(parts, v.synopsis)
	}
	return strings.Join(parts, " ")
}

func (v *verb) checkArgs(pos []string) error {
	names := append(slices.Clone(v.args), v.optArgs...)
	switch {
	case len(pos) < len(v.args):
		return usagef("missing %s", strings.Join(v.args[len(pos):], " "))
	case len(pos) > len(names):
		return usagef("unexpected argument %q", pos[len(names)])
	}
	for i, a := range pos {
		if strings.TrimSpace(a) == "" {
			return usagef("empty %s", names[i])
		}
	}
	return nil
}

// group is a noun with sub-verbs: `rackd machines ...`.
type group struct {
	name    string
	summary string
	verbs   []*verb
}

// groups and verbs are built by functions rather than kept in package
// variables so that each Main gets fresh flag bindings.
func groups() []*group {
	return []*group{machinesGroup(), powerGroup(), subnetsGroup(), ipsGroup(), imagesGroup(), usersGroup(), tokensGroup(), keysGroup(), applianceGroup(), storeGroup(), clusterGroup()}
}

func topVerbs() []*verb {
	return []*verb{allocateVerb(), releaseVerb(), consoleVerb(), leasesVerb(), backupVerb(), versionVerb()}
}

func findGroup(name string) *group {
	for _, g := range groups() {
		if g.name == name {
			return g
		}
	}
	return nil
}

func findVerb(name string) *verb {
	for _, v := range topVerbs() {
		if v.name == name {
			return v
		}
	}
	return nil
}

// help prints the usage of a group or verb named by args, or the overview.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printTopUsage(stdout)
		return exitOK
	}
	if args[0] == "serve" && len(args) == 1 {
		fmt.Fprintln(stdout, "Usage: rackd serve [--config FILE] [--state-dir DIR] [--listen HOST:PORT]")
		fmt.Fprintln(stdout, "\nRun the agent. rackd serve -h lists every flag.")
		return exitOK
	}
	if g := findGroup(args[0]); g != nil {
		if len(args) == 1 {
			printGroupUsage(stdout, g)
			return exitOK
		}
		for _, v := range g.verbs {
			if n := v.matches(args[1:]); n > 0 && n == len(args)-1 {
				printVerbUsage(stdout, v)
				return exitOK
			}
		}
	} else if v := findVerb(args[0]); v != nil && len(args) == 1 {
		printVerbUsage(stdout, v)
		return exitOK
	}
	fmt.Fprintf(stderr, "rackd help: unknown command %q\n\n", strings.Join(args, " "))
	printTopUsage(stderr)
	return exitUsage
}

const globalHelp = `Global flags (every client command, before or after the command):
  --url URL        rackd's API (env RACKD_URL, default ` + DefaultURL + `)
  --token TOKEN    API token (env RACKD_TOKEN); without one, the admin token
                   file: $RACKD_STATE_DIR/admin.token, else ./var/admin.token
                   if it exists, else /var/lib/rackd/admin.token
  --api-token T    same as --token; for allocate, where --token is the
                   allocation's token
  --json           print the API's JSON instead of a table
`

const exitHelp = `Exit status: 0 done, 1 the API, the network or a local file refused,
2 usage error.
`

func printTopUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: rackd COMMAND [ARGS] [FLAGS]\n\n")
	fmt.Fprint(w, "rackd runs a bare-metal rack agent and manages it through its HTTP API.\n\n")
	fmt.Fprint(w, "Commands:\n")
	tw := newTable(w)
	fmt.Fprintf(tw, "  serve\trun the agent (rackd serve -h)\n")
	for _, g := range groups() {
		for _, v := range g.verbs {
			fmt.Fprintf(tw, "  %s\t%s\n", v.listLine(v.path()), v.summary)
		}
	}
	for _, v := range topVerbs() {
		fmt.Fprintf(tw, "  %s\t%s\n", v.listLine(v.name), v.summary)
	}
	fmt.Fprintf(tw, "  help [COMMAND]\tshow this, or the usage of COMMAND\n")
	tw.Flush()
	fmt.Fprint(w, "\n"+globalHelp+"\n"+exitHelp)
}

func printGroupUsage(w io.Writer, g *group) {
	fmt.Fprintf(w, "Usage: rackd %s COMMAND [ARGS] [FLAGS]\n\n%s\n\nCommands:\n", g.name, g.summary)
	tw := newTable(w)
	for _, v := range g.verbs {
		fmt.Fprintf(tw, "  %s\t%s\n", v.listLine(v.name), v.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nrackd %s COMMAND -h shows the flags of COMMAND.\n\n%s", g.name, globalHelp)
}

func printVerbUsage(w io.Writer, v *verb) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", v.usageLine(), v.summary)
	if v.help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(v.help))
	}
	// A fresh FlagSet holds only the verb's own flags, with their real
	// defaults rather than whatever this invocation parsed.
	fs := flag.NewFlagSet(v.path(), flag.ContinueOnError)
	v.setup(fs)
	var lines []string
	fs.VisitAll(func(f *flag.Flag) {
		if isGlobalFlag(f.Name) && f.Name != "token" {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name // -o, as tools spell it
		}
		if name != "" {
			line += " " + name
		}
		line += "\t" + usage
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		lines = append(lines, line)
	})
	if len(lines) > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		tw := newTable(w)
		for _, l := range lines {
			fmt.Fprintln(tw, l)
		}
		tw.Flush()
	}
	fmt.Fprint(w, "\n"+globalHelp)
}
