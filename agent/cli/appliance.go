package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"rackd/agent/client"
	"rackd/api"
	"rackd/appliance"
	"rackd/internal/atomicfile"
)

// This file holds the appliance verbs: the ones that talk to a running
// appliance (update, status, reset) and the build-side ones that make its
// signing key and its update bundles (keygen, bundle).

func applianceGroup() *group {
	g := &group{name: "appliance", summary: "Update the rackd appliance, see its slots, reset it; make signing keys and update bundles."}
	g.verbs = []*verb{applianceUpdateVerb(), applianceStatusVerb(), applianceResetVerb(), applianceKeygenVerb(), applianceBundleVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func applianceUpdateVerb() *verb {
	return &verb{
		name:     "update",
		args:     []string{"FILE|URL"},
		synopsis: "[--allow-downgrade] [--no-reboot]",
		summary:  "install a signed update bundle into the appliance's other slot and reboot into it (admin)",
		help: `FILE is a bundle (make appliance-image writes one beside the image), streamed
to the appliance with its progress on stderr. URL (http:// or https://) has
the appliance fetch the bundle itself.

The appliance checks the bundle's signature against the public key of the
slot it runs, and refuses a bundle that is unsigned, signed with another key,
truncated, for another architecture or older than the running version
(unless --allow-downgrade) before it writes anything. It writes the payload
to the slot it does not run, checking its sha256 as it goes, arms a one-shot
trial boot of that slot and reboots. The new slot becomes the good one only
once rackd is healthy on it within the appliance's health window; otherwise
the next boot returns to the current slot by itself. 'rackd appliance status'
shows which happened.

--no-reboot arms the update without rebooting: the next boot tries it.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			downgrade := fs.Bool("allow-downgrade", false, "install a bundle older than the running version")
			noReboot := fs.Bool("no-reboot", false, "arm the update, do not reboot")
			return func(e *env, args []string) error {
				c, err := e.client()
				if err != nil {
					return err
				}
				o := client.ApplianceUpdateOptions{AllowDowngrade: *downgrade, NoReboot: *noReboot}
				ctx, raw := e.capture()
				var st api.ApplianceStatus
				if src := args[0]; strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
					fmt.Fprintf(e.stderr, "The appliance fetches %s and writes it to its other slot...\n", src)
					st, err = c.ApplianceUpdateURL(ctx, src, o)
				} else if strings.Contains(src, "://") {
					return usagef("%q: want a bundle file or an http:// or https:// URL", src)
				} else {
					st, err = uploadBundle(ctx, e, c, src, o)
				}
				if err != nil {
					return err
				}
				if e.json() {
					return printJSON(e.stdout, *raw)
				}
				u := st.LastUpdate
				if u == nil {
					return errors.New("the appliance answered without an update record")
				}
				fmt.Fprintf(e.stdout, "Update to %s (build %d) written to slot %s and armed.\n", u.Version, u.Build, u.Slot)
				if st.Rebooting {
					fmt.Fprintf(e.stdout, "The appliance is rebooting into slot %s; once it is back, 'rackd appliance status' shows whether it was marked good (else it returned to slot %s by itself).\n", u.Slot, st.Booted)
				} else {
					fmt.Fprintf(e.stdout, "Not rebooting (--no-reboot): the next boot tries slot %s.\n", u.Slot)
				}
				return nil
			}
		},
	}
}

// uploadBundle streams a bundle file with its progress on stderr.
func uploadBundle(ctx context.Context, e *env, c *client.Client, file string, o client.ApplianceUpdateOptions) (api.ApplianceStatus, error) {
	f, err := os.Open(file)
	if err != nil {
		return api.ApplianceStatus{}, fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return api.ApplianceStatus{}, fmt.Errorf("bundle: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return api.ApplianceStatus{}, fmt.Errorf("bundle: %s is not a file", file)
	}
	p := &uploadProgress{w: e.stderr, tty: isTerminal(e.stderr), total: fi.Size(), name: filepath.Base(file), now: time.Now}
	p.start = p.now()
	st, err := c.ApplianceUpdate(ctx, &progressReader{r: f, p: p}, fi.Size(), o)
	p.finish(err == nil)
	return st, err
}

// progressReader counts what is read through it.
type progressReader struct {
	r io.Reader
	p *uploadProgress
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.p.add(int64(n))
	return n, err
}

// uploadProgress shows an upload: a line redrawn in place on a terminal,
// a line every plainEvery otherwise. The server checks the bundle's
// signature first and writes the slot as the bytes arrive, so the upload's
// end is close to the write's.
type uploadProgress struct {
	w           io.Writer
	tty         bool
	name        string
	total, done int64
	start, last time.Time
	now         func() time.Time
}

func (p *uploadProgress) add(n int64) {
	p.done += n
	now := p.now()
	if p.tty {
		if now.Sub(p.last) >= 100*time.Millisecond || p.done == p.total {
			fmt.Fprintf(p.w, "\r%s\x1b[K", p.line(now))
			p.last = now
		}
		return
	}
	if p.last.IsZero() || now.Sub(p.last) >= plainEvery {
		fmt.Fprintln(p.w, p.line(now))
		p.last = now
	}
}

func (p *uploadProgress) line(now time.Time) string {
	frac := 1.0
	if p.total > 0 {
		frac = min(1, float64(p.done)/float64(p.total))
	}
	rate := 0.0
	if d := now.Sub(p.start).Seconds(); d > 0 {
		rate = float64(p.done) / d
	}
	return fmt.Sprintf("upload %s: %3.0f%% %s of %s, %s/s", p.name, frac*100, bytesIEC(p.done), bytesIEC(p.total), bytesIEC(int64(rate)))
}

func (p *uploadProgress) finish(ok bool) {
	line := p.line(p.now())
	if ok {
		line += ", done"
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K\n", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

func applianceStatusVerb() *verb {
	return &verb{
		name:    "status",
		summary: "show the appliance's slots, the booted one and the last update (admin)",
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.ApplianceStatus, error) {
					return c.ApplianceStatus(ctx)
				}, printApplianceStatus)
			}
		},
	}
}

func printApplianceStatus(w io.Writer, st api.ApplianceStatus) error {
	trial := ""
	if st.Trial {
		trial = " (trial boot, not yet marked good)"
	}
	fmt.Fprintf(w, "running: %s (build %d) from slot %s%s\n", st.Version, st.Build, st.Booted, trial)
	tw := newTable(w)
	fmt.Fprintf(tw, "SLOT\tVERSION\tBUILD\tSTATE\tDEVICE\tNOTES\n")
	for _, s := range []string{"a", "b"} {
		sl := st.Slots[s]
		var notes []string
		if s == st.Booted {
			notes = append(notes, "booted")
		}
		if s == st.GoodSlot {
			notes = append(notes, "fallback")
		}
		version, build, note := sl.Version, "-", "-"
		if version == "" {
			version = "-"
		}
		if len(notes) > 0 {
			note = strings.Join(notes, ", ")
		}
		if sl.Build != 0 {
			build = fmt.Sprint(sl.Build)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s, version, build, sl.State, sl.Device, note)
	}
	tw.Flush()
	next := "slot " + st.NextBoot
	if st.NextBootTrial {
		next += " (trial of an update)"
	}
	if st.ResetRequested {
		next += ", with a factory reset (erases the data partition)"
	}
	fmt.Fprintf(w, "next boot: %s\n", next)
	if u := st.LastUpdate; u != nil {
		fmt.Fprintf(w, "last update: %s (build %d) to slot %s: %s, started %s", u.Version, u.Build, u.Slot, u.Result, u.Started.Format(time.RFC3339))
		if u.Finished != nil {
			fmt.Fprintf(w, ", finished %s", u.Finished.Format(time.RFC3339))
		}
		fmt.Fprintln(w)
		if u.Reason != "" {
			fmt.Fprintf(w, "  reason: %s\n", u.Reason)
		}
	}
	return nil
}

func applianceResetVerb() *verb {
	return &verb{
		name:     "reset",
		synopsis: "--yes [--no-reboot]",
		summary:  "factory-reset the appliance: erase its data partition at the next boot (admin)",
		help: `The appliance reboots, and its boot erases the data partition: machines,
leases, users, tokens, imported images and the configuration go, the
slots (the installed versions) stay. The first boot after it is a first
boot: a new admin token is printed on the console. --yes is required.
The boot menu's "factory reset" entry does the same at the console.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			yes := fs.Bool("yes", false, "really erase the appliance's data")
			noReboot := fs.Bool("no-reboot", false, "request the reset for the next boot, do not reboot now")
			return func(e *env, _ []string) error {
				if !*yes {
					return usagef("a factory reset erases the appliance's data partition (machines, leases, users, tokens): give --yes to mean it")
				}
				c, err := e.client()
				if err != nil {
					return err
				}
				ctx, raw := e.capture()
				st, err := c.ApplianceReset(ctx, *noReboot)
				if err != nil {
					return err
				}
				if e.json() {
					return printJSON(e.stdout, *raw)
				}
				if st.Rebooting {
					fmt.Fprintln(e.stdout, "Factory reset requested: the appliance is rebooting and erases its data partition; its console prints the new admin token.")
				} else {
					fmt.Fprintln(e.stdout, "Factory reset requested for the next boot (--no-reboot).")
				}
				return nil
			}
		},
	}
}

func applianceKeygenVerb() *verb {
	return &verb{
		name:    "keygen",
		args:    []string{"DIR"},
		summary: "make an ed25519 key pair for signing appliance update bundles (local)",
		help: `Writes DIR/signing.key (the private key, PKCS#8 PEM, mode 0600) and
DIR/signing.pub (the public key, PKIX PEM): the formats OpenSSL reads and
writes, so 'openssl genpkey -algorithm ed25519' makes an equivalent key. An
existing key is never replaced: appliances built with its public key take
updates signed by it only. The image build puts signing.pub into every slot
(APPLIANCE_KEY names another private key; its .pub must lie beside it).
Keep signing.key off the appliance and out of version control.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				if _, err := appliance.Keygen(args[0]); err != nil {
					return fmt.Errorf("keygen: %w", err)
				}
				fmt.Fprintf(e.stdout, "Wrote %s and %s.\n", filepath.Join(args[0], appliance.PrivateKeyFile), filepath.Join(args[0], appliance.PublicKeyFile))
				return nil
			}
		},
	}
}

func applianceBundleVerb() *verb {
	return &verb{
		name:     "bundle",
		synopsis: "--key KEY --payload FILE --version V --build N [--arch A] -o OUT",
		summary:  "sign a slot image into an appliance update bundle (local)",
		help: `Reads the slot image FILE twice (once for its size and sha256, once to
copy it), signs the manifest with KEY (a PKCS#8 PEM ed25519 private key,
as 'rackd appliance keygen' or OpenSSL writes) and writes OUT atomically.
--build orders versions (an integer, larger is newer: the image build uses
the commit time); --version is for people.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			key := fs.String("key", "", "the signing `KEY` file (PKCS#8 PEM ed25519)")
			payload := fs.String("payload", "", "the slot image `FILE`")
			version := fs.String("version", "", "the version `V` shown to people")
			build := fs.Int64("build", 0, "the build number `N` that orders versions")
			arch := fs.String("arch", "amd64", "the `ARCH` the image runs on")
			out := fs.String("o", "", "the bundle `FILE` to write")
			return func(e *env, _ []string) error {
				switch {
				case *key == "" || *payload == "" || *version == "" || *out == "":
					return usagef("--key, --payload, --version and -o are required")
				case *build <= 0:
					return usagef("--build must be a positive integer (the image build uses the commit time)")
				}
				n, err := writeBundleFile(*key, *payload, *out, appliance.Manifest{Version: *version, Build: *build, Arch: *arch})
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "Wrote %s: %s (build %d, %s), payload %d bytes.\n", *out, *version, *build, *arch, n)
				return nil
			}
		},
	}
}

// writeBundleFile signs payload into out, written atomically.
func writeBundleFile(keyFile, payload, out string, m appliance.Manifest) (int64, error) {
	key, err := appliance.LoadPrivateKey(keyFile)
	if err != nil {
		return 0, fmt.Errorf("bundle: %w", err)
	}
	pf, err := os.Open(payload)
	if err != nil {
		return 0, fmt.Errorf("bundle: %w", err)
	}
	defer pf.Close()
	if m.PayloadSize, m.PayloadSHA256, err = appliance.DigestPayload(pf); err != nil {
		return 0, fmt.Errorf("bundle: %w", err)
	}
	if _, err := pf.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("bundle: %w", err)
	}
	f, err := atomicfile.Create(out, atomicfile.Options{Perm: 0o644})
	if err != nil {
		return 0, fmt.Errorf("bundle: %w", err)
	}
	defer f.Abort()
	if err := appliance.WriteBundle(f, key, m, pf); err != nil {
		return 0, fmt.Errorf("bundle: %w (did %s change while it was read?)", err, payload)
	}
	if err := f.Commit(); err != nil {
		return 0, fmt.Errorf("bundle: %w", err)
	}
	return m.PayloadSize, nil
}
