// Package cli is rackd's command line: `rackd serve` runs the agent (through a
// ServeFunc that package agent provides), and every other verb is a thin
// client of the HTTP API built on package agent/client. docs/CLI.md describes
// the verbs for users.
//
// The package prints and never logs: stdout carries results (tables, or the
// API's JSON with --json), stderr carries errors and usage.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"rackd/agent/client"
)

// Version is the CLI's version, set at build time with
// -ldflags "-X rackd/agent/cli.Version=1.2.3".
var Version = "dev"

// ServeFunc runs the agent for `rackd serve`; args are the arguments after
// "serve", stdout and stderr Main's. An error wrapping flag.ErrHelp exits
// 0; an error with an ExitCode() int method exits with that code (2 for a
// usage error, say); any other error exits 1.
type ServeFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Exit codes of Main.
const (
	exitOK    = 0
	exitFail  = 1 // the API, the network or a local file said no
	exitUsage = 2 // the command line is wrong
)

// DefaultURL is where the client verbs find rackd when neither --url nor
// RACKD_URL says otherwise: the API's default listen address.
const DefaultURL = "http://127.0.0.1:5240"

// Main runs the rackd command line with args (without the program name) and
// returns the process exit code: 0 ok, 1 the API, the network or a local file
// refused, 2 usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, serve ServeFunc, opts ...Option) int {
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr}
	for _, o := range opts {
		o(e)
	}

	// Global flags may come before the verb too: rackd --json machines list.
	top := flag.NewFlagSet("rackd", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	e.g.register(top, false)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printTopUsage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "rackd: %v\n\n", err)
		printTopUsage(stderr)
		return exitUsage
	}
	args = top.Args()
	if len(args) == 0 {
		printTopUsage(stderr)
		return exitUsage
	}

	switch name := args[0]; name {
	case "help":
		return help(args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr, serve)
	default:
		if g := findGroup(name); g != nil {
			return runGroup(e, g, args[1:])
		}
		if v := findVerb(name); v != nil {
			return runVerb(e, v, args[1:])
		}
		fmt.Fprintf(stderr, "rackd: unknown command %q\n\n", name)
		printTopUsage(stderr)
		return exitUsage
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, serve ServeFunc) int {
	if serve == nil {
		fmt.Fprintln(stderr, "rackd: serve is not available in this build")
		return exitUsage
	}
	err := serve(ctx, args, stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "rackd: %v\n", err)
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return exitFail
}

func runGroup(e *env, g *group, args []string) int {
	if len(args) == 0 {
		printGroupUsage(e.stderr, g)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printGroupUsage(e.stdout, g)
		return exitOK
	}
	for _, v := range g.verbs {
		if n := v.matches(args); n > 0 {
			return runVerb(e, v, args[n:])
		}
	}
	fmt.Fprintf(e.stderr, "rackd %s: unknown command %q\n\n", g.name, args[0])
	printGroupUsage(e.stderr, g)
	return exitUsage
}

func runVerb(e *env, v *verb, args []string) int {
	fs := flag.NewFlagSet("rackd "+v.path(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := v.setup(fs)
	// A verb may define --token itself (allocate: the allocation's token);
	// the API token then comes from --api-token, RACKD_TOKEN or the file.
	e.g.register(fs, fs.Lookup("token") != nil)

	pos, err := parseArgs(fs, args)
	if err == nil {
		err = v.checkArgs(pos)
	}
	if err == nil {
		err = run(e, pos)
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		printVerbUsage(e.stdout, v)
		return exitOK
	case isUsage(err):
		fmt.Fprintf(e.stderr, "rackd %s: %v\n\n", v.path(), err)
		printVerbUsage(e.stderr, v)
		return exitUsage
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(e.stderr, "rackd: interrupted")
		return exitFail
	default:
		fmt.Fprintf(e.stderr, "rackd: %v\n", err)
		return exitFail
	}
}

// usageError is a mistake on the command line: exit 2 with the verb's usage.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u) || isFlagError(err)
}

// isFlagError reports whether err came from flag.FlagSet.Parse. The flag
// package has no error type of its own, so parseArgs marks them.
func isFlagError(err error) bool {
	var f *flagError
	return errors.As(err, &f)
}

type flagError struct{ err error }

func (f *flagError) Error() string { return f.err.Error() }
func (f *flagError) Unwrap() error { return f.err }

// globals are the flags every client verb takes.
type globals struct {
	url   string
	token string
	json  bool
}

// register adds the global flags to fs, bound to g so that values given
// before the verb stay unless repeated after it. withoutToken leaves out
// --token for a verb that gives it another meaning.
func (g *globals) register(fs *flag.FlagSet, withoutToken bool) {
	fs.StringVar(&g.url, "url", g.url, "rackd's API `URL` (env RACKD_URL, default "+DefaultURL+")")
	if !withoutToken {
		fs.StringVar(&g.token, "token", g.token, "API `token` (env RACKD_TOKEN, default: the local admin token file)")
	}
	fs.StringVar(&g.token, "api-token", g.token, "same as --token (for verbs where --token means something else)")
	fs.BoolVar(&g.json, "json", g.json, "print the API's JSON instead of a table")
}

func isGlobalFlag(name string) bool {
	switch name {
	case "url", "token", "api-token", "json":
		return true
	}
	return false
}

// env is what a verb runs with.
type env struct {
	ctx             context.Context
	stdout, stderr  io.Writer
	g               globals
	systemTokenFile string // "": SystemTokenFile
}

// Option changes how Main runs.
type Option func(*env)

// WithSystemTokenFile makes path the admin token file read last, in place
// of SystemTokenFile (a test's, so that the host's own does not count).
func WithSystemTokenFile(path string) Option {
	return func(e *env) { e.systemTokenFile = path }
}

// baseURL resolves --url, then RACKD_URL, then DefaultURL. A bare host:port is
// taken as http, since that is what rackd serves by default.
func (e *env) baseURL() (string, error) {
	raw, from := e.g.url, "--url"
	if raw == "" {
		raw, from = os.Getenv("RACKD_URL"), "RACKD_URL"
	}
	if raw == "" {
		return DefaultURL, nil
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", usagef("invalid %s %q: want http(s)://host:port", from, raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// client returns an API client authenticated with the resolved token.
func (e *env) client() (*client.Client, error) {
	base, err := e.baseURL()
	if err != nil {
		return nil, err
	}
	tok, err := e.resolveToken(e.g.token)
	if err != nil {
		return nil, err
	}
	return client.New(base, tok, client.WithUserAgent("rackd-cli/"+Version)), nil
}

// json reports whether --json was given.
func (e *env) json() bool { return e.g.json }
