package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"

	"rackd/store"
)

// ServeCommand returns `rackd serve [--config FILE] [--state-dir DIR]
// [--listen HOST:PORT] [--log-level L] [--log-format F]`, which runs rackd
// until ctx is done: it reads the environment through getenv (the
// process's is main's to hand over), writes its log and its usage to
// stderr and --print-default-config to stdout, and builds the agent with
// opts. Flags override the environment, which overrides the file, which
// overrides the defaults.
func ServeCommand(getenv func(string) string, opts ...Option) func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return serve(ctx, args, stdout, stderr, getenv, opts...)
	}
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, opts ...Option) error {
	fs := flag.NewFlagSet("rackd serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", getenv("RACKD_CONFIG"), "configuration `FILE` (TOML; --print-default-config shows every setting)")
	stateDir := fs.String("state-dir", "", "directory for the database and the admin token (default /var/lib/rackd)")
	listen := fs.String("listen", "", "HOST:PORT of the HTTP API (default 127.0.0.1:5240)")
	storeURL := fs.String("store", "", "the database: etcd://HOST:PORT[,HOST:PORT...] (etcds:// for TLS) for an etcd cluster; default the file in the state directory")
	logLevel := fs.String("log-level", "", "debug, info, warn or error")
	logFormat := fs.String("log-format", "", "text or json")
	printDefault := fs.Bool("print-default-config", false, "print the documented default configuration and exit")
	rotate := fs.Bool("rotate-admin-token", false, "write a new admin token file at start-up; the old admin token stops working")
	acceptLost := fs.Bool("accept-lost-secrets", false, "start even if secrets.key cannot open the BMC passwords in the database (they must be set again)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err} // the flag package has printed it with the usage
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("rackd serve takes no arguments, got %q", fs.Args())}
	}
	if *printDefault {
		_, err := io.WriteString(stdout, DefaultConfigTOML)
		return err
	}
	cfg, err := LoadConfig(*configPath, getenv)
	if err != nil {
		return err
	}
	// The overlay of rackd cluster init/join sits in the state directory
	// --state-dir chose; every flag wins over it.
	if *stateDir != "" {
		cfg.StateDir = *stateDir
	}
	if _, err := ApplyClusterOverlay(&cfg); err != nil {
		return err
	}
	for flagValue, field := range map[*string]*string{stateDir: &cfg.StateDir, listen: &cfg.Listen,
		logLevel: &cfg.LogLevel, logFormat: &cfg.LogFormat, storeURL: &cfg.Store.URL} {
		if *flagValue != "" {
			*field = *flagValue
		}
	}
	if *acceptLost {
		cfg.Store.AcceptLostSecrets = true
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	// rackd's heap is small (the database lives in the page cache, not
	// the Go heap) and its hot paths allocate per packet: collecting at 4x
	// the live heap instead of 2x costs a few MB and saves about a sixth of
	// the CPU of a DHCP exchange (bench-dhcp). GOGC, when set, wins.
	if getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// Each DHCP socket's reader waits in a blocking read (outside Go's
	// poller: one system call per batch of packets), and holds one of Go's
	// processors while it waits. With only as many processors as CPUs,
	// a lease commit's fsync leaves none idle, and the runtime keeps
	// taking processors away from the threads in system calls and handing
	// them on. One more processor per socket keeps a CPU's worth for the
	// rest. bench-dhcp, 2 CPUs under load 8-11, 6 interleaved pairs: CPU
	// per DORA at 8,000/s 112-150 µs against 121-176 (lower in 5 of 6), at
	// 2,000/s 158-238 against 154-228 (lower in 4 of 6); fewer context
	// switches per DORA in 9 of 12 runs. GOMAXPROCS, when set, wins.
	if getenv("GOMAXPROCS") == "" {
		if addrs, _, err := cfg.dhcpAddrs(); err == nil {
			if n := len(cfg.DHCP.Interfaces) + len(addrs); n > 0 {
				runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + n)
			}
		}
	}
	log := newLogger(cfg, stderr)
	// The API's port first: a port taken (the commonest failed start)
	// fails before anything is written.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("cannot listen on %s: the address is already in use (another rackd? choose another with --listen): %w", cfg.Listen, err)
		}
		return fmt.Errorf("cannot listen on %s: %w", cfg.Listen, err)
	}
	// A start that fails leaves no state it created: the state
	// directory's entries it made (all of it, when it made the directory)
	// are removed again, so the next start is a first start again, with
	// its admin user and token, not half of one. On an etcd store the
	// database is the cluster's, not the directory's: what the start
	// wrote there (an admin user, whose token file names it) stays.
	undo := &stateUndo{}
	if cfg.Store.URL == "" {
		if undo, err = noteStateDir(cfg.StateDir); err != nil {
			ln.Close()
			return err
		}
	}
	failed := func(a *Agent, err error) error {
		if a != nil {
			err = errors.Join(err, a.Close())
		}
		ln.Close()
		if uerr := undo.remove(); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return err
	}
	a, err := New(cfg, log, opts...)
	if err != nil {
		return failed(nil, err)
	}
	if *rotate {
		if _, _, err := a.RotateAdminToken(ctx, store.System); err != nil {
			return failed(a, fmt.Errorf("rotate the admin token: %w", err))
		}
	}
	// RACKD_CPUPROFILE=FILE profiles the whole run (a debugging aid for
	// performance work; the profile is written at shutdown).
	if path := getenv("RACKD_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return failed(a, fmt.Errorf("cpu profile: %w", err))
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return failed(a, fmt.Errorf("cpu profile: %w", err))
		}
		defer pprof.StopCPUProfile()
	}
	err = a.Serve(ctx, ln)
	if err != nil && !a.serving.Load() {
		// Serve closed the agent; what it wrote goes too.
		if uerr := undo.remove(); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}
	return err
}

// stateUndo is what a start may remove again when it fails: the entries of
// the state directory that were not there before it (or the directory
// itself, and any parents, when they were not).
type stateUndo struct {
	// root, when set, is the topmost directory of the state directory's
	// path that did not exist: removed whole.
	root string
	// dir and had: the state directory and the names it held.
	dir string
	had map[string]bool
}

// noteStateDir records what dir holds now, for stateUndo.remove.
func noteStateDir(dir string) (*stateUndo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	u := &stateUndo{dir: abs, had: map[string]bool{}}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		u.root = abs
		for p := filepath.Dir(abs); p != filepath.Dir(p); p = filepath.Dir(p) {
			if _, err := os.Stat(p); err == nil {
				break
			}
			u.root = p
		}
		return u, nil
	case err != nil:
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	for _, e := range entries {
		u.had[e.Name()] = true
	}
	return u, nil
}

// remove deletes what the start created in the state directory.
func (u *stateUndo) remove() error {
	if u.dir == "" {
		return nil // nothing noted
	}
	if u.root != "" {
		if err := os.RemoveAll(u.root); err != nil {
			return fmt.Errorf("remove %s, made by this failed start: %w", u.root, err)
		}
		return nil
	}
	entries, err := os.ReadDir(u.dir)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", u.dir, err)
	}
	var errs []error
	for _, e := range entries {
		if u.had[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(u.dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("remove %s, made by this failed start: %w", e.Name(), err))
		}
	}
	return errors.Join(errs...)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel)) // validated already
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// usageError is a command-line mistake: the CLI exits 2 for it.
type usageError struct{ error }

func (usageError) ExitCode() int { return 2 }
