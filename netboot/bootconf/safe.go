package bootconf

import (
	"fmt"
	"net/url"
	"strings"
)

// The characters allowed in each kind of value, besides ASCII letters and
// digits. None of them is special in GRUB script, pxelinux, iPXE script or
// to the kernel's command-line parser: no space, quote, backslash, $, {, },
// ;, |, &, <, >, #, backtick or control character. ',' is kept out of
// paths because pxelinux separates initrds with it.
const (
	nameChars    = "._-"         // machine ID, hostname
	stateChars   = "_-"          // lifecycle state, arch
	imageChars   = "._:+@/-"     // image name
	argChars     = "._~:/,=+@%-" // kernel arguments
	segmentChars = "._~+-"       // one segment of a file path
	// messageChars adds what the message templates of Decide use.
	messageChars = argChars + " ()"
)

// Length limits. The command line's is the x86 and arm64 kernels'
// COMMAND_LINE_SIZE; longer lines are cut by the kernel, which could drop
// rackd's own arguments at the end.
const (
	maxName    = 253
	maxArg     = 512
	maxInitrds = 16
	maxCmdline = 2048
	maxMessage = 512
)

func allowed(c byte, extra string) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte(extra, c) >= 0
}

// checkValue refuses an empty, overlong or unsafe value. Secret values are
// not quoted in the error, which ends up in logs.
func checkValue(what, v string, limit int, extra string, secret bool) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	case len(v) > limit:
		return fmt.Errorf("%w: %s is %d bytes long, at most %d", ErrInvalid, what, len(v), limit)
	}
	for i := 0; i < len(v); i++ {
		if !allowed(v[i], extra) {
			if secret {
				return fmt.Errorf("%w: %s has a character outside [A-Za-z0-9%s]", ErrInvalid, what, extra)
			}
			return fmt.Errorf("%w: %s %q has the character %q, outside [A-Za-z0-9%s]", ErrInvalid, what, v, v[i], extra)
		}
	}
	return nil
}

// checkFile refuses a file path that is not a clean relative path inside
// the boot tree: it is put in URLs, GRUB device paths and pxelinux lines.
func checkFile(what, p string) error {
	if err := checkValue(what, p, MaxPathLen, segmentChars+"/", false); err != nil {
		return err
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %s %q is not a clean relative path", ErrInvalid, what, p)
		}
	}
	return nil
}

// base is a checked HTTP base URL in the spellings the configs use.
type base struct {
	// url is the base without trailing slash, "http://10.0.0.1:5240".
	url string
	// grub is GRUB's device and path prefix, "(http,10.0.0.1:5240)":
	// GRUB wants host[:port] without a scheme.
	grub string
	// grubHTTP is the device alone, without the base's path.
	grubHTTP string
	// grubTFTP is GRUB's TFTP device on the same host, "(tftp,10.0.0.1)",
	// for GRUB builds without the http module. rackd's TFTP server
	// serves the boot tree at its root, the tree HTTP serves under
	// /boot/, so the same relative path names the same file on both.
	grubTFTP string
}

// file returns the URL of a boot-tree file, which rackd serves under /boot/.
func (b base) file(p string) string { return b.url + "/boot/" + p }

// grubBoot is the boot tree's root as a GRUB path over HTTP.
func (b base) grubBoot() string { return b.grub + "/boot" }

// parseBase checks the HTTP base URL. Only plain http: GRUB 2.06 and most
// iPXE builds have no TLS, and the files are checksummed by the images
// store anyway.
func parseBase(s string) (base, error) {
	bad := func(why string) (base, error) {
		return base{}, fmt.Errorf("%w: HTTP base URL %q: %s", ErrInvalid, s, why)
	}
	if s == "" {
		return bad("not set")
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad(err.Error())
	}
	switch {
	case u.Scheme != "http":
		return bad("want an http:// URL")
	case u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "":
		return bad("want only scheme, host, port and path")
	case u.Host == "" || len(u.Host) > maxName:
		return bad("want a host")
	}
	// IPv6 literals keep their brackets: GRUB and iPXE parse
	// [addr]:port like a URL does.
	for i := 0; i < len(u.Host); i++ {
		if !allowed(u.Host[i], ".-:[]") {
			return bad("host has a character outside [A-Za-z0-9.-:[]]")
		}
	}
	path := strings.TrimSuffix(u.Path, "/")
	if path != "" {
		if u.RawPath != "" {
			return bad("percent-encoded path")
		}
		if err := checkFile("HTTP base path", strings.TrimPrefix(path, "/")); err != nil {
			return base{}, err
		}
	}
	// TFTP has no port in GRUB's device name (it always asks port 69)
	// and wants an IPv6 literal in brackets, as the http device does.
	host := u.Hostname()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return base{url: "http://" + u.Host + path, grub: "(http," + u.Host + ")" + path, grubHTTP: "(http," + u.Host + ")", grubTFTP: "(tftp," + host + ")"}, nil
}

// plan is a decision with every value checked, ready to be written in any
// loader's language.
type plan struct {
	d Decision
	// arch is the architecture rendered.
	arch string
	// title says what the config does, for comments and menu titles.
	title string
	// kernel, initrds and args are set when d.Boots().
	kernel  string
	initrds []string
	args    []string
}

// prepare checks every value of d that a config would carry and builds the
// texts the writers share, so that all three languages say the same.
func prepare(d Decision, b base) (plan, error) {
	p := plan{d: d, arch: d.Arch}
	if err := checkValue("arch", d.Arch, 32, stateChars, false); err != nil {
		return plan{}, err
	}
	m := d.Machine
	name := m.ID
	if d.Known {
		if err := checkValue("machine ID", m.ID, maxName, nameChars, false); err != nil {
			return plan{}, err
		}
		if m.Hostname != "" {
			if err := checkValue("hostname", m.Hostname, maxName, nameChars, false); err != nil {
				return plan{}, err
			}
			name = m.Hostname
		}
	}
	switch d.Mode {
	case ModeEnlist:
		p.title = fmt.Sprintf("enlist (unknown machine, %s)", d.Arch)
	case ModeCommission:
		p.title = fmt.Sprintf("commission %s (machine %s, %s)", name, m.ID, d.Arch)
	case ModeErase:
		p.title = fmt.Sprintf("erase the disks of %s (machine %s, %s)", name, m.ID, d.Arch)
	case ModeDeploy:
		img := "(none)"
		if m.Image != "" {
			if err := checkValue("image name", m.Image, 128, imageChars, false); err != nil {
				return plan{}, err
			}
			img = m.Image
		}
		p.title = fmt.Sprintf("deploy %s to %s (machine %s, %s)", img, name, m.ID, d.Arch)
	default:
		state := "no state"
		if m.State != "" {
			if err := checkValue("state", m.State, 64, stateChars, false); err != nil {
				return plan{}, err
			}
			state = m.State
		}
		p.title = fmt.Sprintf("boot %s (machine %s, %s) from local disk", name, m.ID, state)
	}
	if d.Missing != "" {
		// Decide built it from values checked above; checking the
		// whole text as well keeps a future template from slipping.
		if err := checkValue("message", d.Missing, maxMessage, messageChars, false); err != nil {
			return plan{}, err
		}
	}
	if !d.Boots() {
		return p, nil
	}
	if err := checkFile("kernel", d.Env.Kernel); err != nil {
		return plan{}, err
	}
	if len(d.Env.Initrds) > maxInitrds {
		return plan{}, fmt.Errorf("%w: %d initrds, at most %d", ErrInvalid, len(d.Env.Initrds), maxInitrds)
	}
	total := len(" initrd=")
	for _, f := range d.Env.Initrds {
		if err := checkFile("initrd", f); err != nil {
			return plan{}, err
		}
		total += len(f) + 1
	}
	if err := CheckArgs(d.Env.Args); err != nil {
		return plan{}, err
	}
	if im := d.Env.Disk; im != nil && d.Mode == ModeDeploy {
		if err := checkFile("disk image", im.Path); err != nil {
			return plan{}, err
		}
		if !isHex64(im.SHA256) {
			return plan{}, fmt.Errorf("%w: disk image sha256 %q: want 64 lower-case hex digits", ErrInvalid, im.SHA256)
		}
		if im.Size <= 0 {
			return plan{}, fmt.Errorf("%w: disk image size %d: want a positive size", ErrInvalid, im.Size)
		}
		if im.Chunks != "" && !isHex64(im.Chunks) {
			return plan{}, fmt.Errorf("%w: disk image chunk list sha256 %q: want 64 lower-case hex digits", ErrInvalid, im.Chunks)
		}
		switch im.Format {
		case "", FormatRaw:
		case FormatGzip, FormatXZ, FormatZstd:
			if im.RawSize <= 0 {
				return plan{}, fmt.Errorf("%w: %s disk image raw size %d: want a positive size", ErrInvalid, im.Format, im.RawSize)
			}
			if im.RawSHA256 != "" && !isHex64(im.RawSHA256) {
				return plan{}, fmt.Errorf("%w: disk image raw sha256 %q: want 64 lower-case hex digits", ErrInvalid, im.RawSHA256)
			}
		default:
			return plan{}, fmt.Errorf("%w: disk image format %q: want raw, gzip, xz or zstd", ErrInvalid, im.Format)
		}
	}
	p.kernel, p.initrds, p.args = d.Env.Kernel, d.Env.Initrds, d.Cmdline(b.url)
	// The longest spelling is pxelinux's, with every initrd path in it.
	if total += len(strings.Join(p.args, " ")); total > maxCmdline {
		return plan{}, fmt.Errorf("%w: kernel command line of %d bytes, at most %d", ErrInvalid, total, maxCmdline)
	}
	return p, nil
}

// isHex64 reports whether s is a SHA-256 in lower-case hex.
func isHex64(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// reservedArgs are the argument prefixes an environment's own arguments may
// not use: rackd.* are rackd's (the URL the environment calls back, the
// machine's identity, the image to deploy), which a later duplicate would override
// for a parser that keeps the last one; initrd= is set by the pxelinux and
// iPXE configs themselves.
var reservedArgs = []string{"rackd.", "initrd="}

// CheckArgs checks an environment's own kernel arguments (an image's
// cmdline, one word each) the way rendering does: each 1 to 512 bytes of
// [A-Za-z0-9._~:/,=+@%-], none starting with rackd. or initrd=. The agent
// uses it to refuse at import time what a config could not carry.
func CheckArgs(args []string) error {
	for _, a := range args {
		if err := checkValue("kernel argument", a, maxArg, argChars, false); err != nil {
			return err
		}
		for _, r := range reservedArgs {
			if strings.HasPrefix(a, r) {
				return fmt.Errorf("%w: kernel argument %q: %s* is reserved for rackd", ErrInvalid, a, r)
			}
		}
	}
	return nil
}
