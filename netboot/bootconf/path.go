package bootconf

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// Errors of ParsePath and Render. Match them with errors.Is.
var (
	// ErrNotConfig means the path is well formed but names no rendered
	// config: the TFTP or HTTP layer then looks for it in the file tree
	// (bootloaders, kernels, and the names firmware tries that rackd does
	// not render, such as pxelinux's UUID and hex-IP spellings).
	ErrNotConfig = errors.New("bootconf: not a rendered config")
	// ErrBadPath means the path must be refused outright: empty, longer
	// than MaxPathLen, absolute, with a NUL, control character,
	// backslash, invalid UTF-8, or a "..", "." or empty segment, or an
	// iPXE query without exactly one valid MAC.
	ErrBadPath = errors.New("bootconf: bad path")
	// ErrInvalid means a value that would go into a config (machine,
	// environment or base URL) is empty where it is needed, too long, or
	// has a character that cannot be written safely in every boot
	// loader's language; the config is refused rather than escaped.
	ErrInvalid = errors.New("bootconf: value cannot be put in a boot config")
)

// MaxPathLen is the longest path ParsePath accepts, in bytes. Real requests
// are under 64 bytes; 255 is the common file-name limit, and TFTP (RFC 1350)
// sets no limit of its own, so the bound has to be ours.
const MaxPathLen = 255

// DefaultArch is the architecture of machines whose arch is not known:
// BIOS pxelinux clients and machines stored without one.
const DefaultArch = "amd64"

// isArch reports whether a has a default config
// (grub/grub.cfg-default-<arch>). A loader that cannot say which it is gets
// DefaultArch.
func isArch(a string) bool { return a == "amd64" || a == "arm64" }

// Kind is the kind of config a request asks for.
type Kind uint8

// The kinds of config.
const (
	// GrubMAC is grub/grub.cfg-<mac> or grub/grub.cfg-01-<mac-with-dashes>.
	GrubMAC Kind = iota + 1
	// GrubDefault is grub/grub.cfg-default-<arch>.
	GrubDefault
	// GrubPreload is grub/grub.cfg, the pre-loader.
	GrubPreload
	// PXELinuxMAC is pxelinux.cfg/01-<mac-with-dashes>.
	PXELinuxMAC
	// PXELinuxDefault is pxelinux.cfg/default.
	PXELinuxDefault
	// IPXEMAC is ipxe/<mac>.ipxe or ipxe?mac=<mac>.
	IPXEMAC
)

// String returns a short stable name, for logs and metric labels.
func (k Kind) String() string {
	switch k {
	case GrubMAC:
		return "grub"
	case GrubDefault:
		return "grub-default"
	case GrubPreload:
		return "grub-preload"
	case PXELinuxMAC:
		return "pxelinux"
	case PXELinuxDefault:
		return "pxelinux-default"
	case IPXEMAC:
		return "ipxe"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Request is a parsed config request. Requests are comparable; two paths
// asking for the same config parse to equal Requests.
type Request struct {
	// Kind is the kind of config.
	Kind Kind
	// MAC is the client's MAC in lower-case colon form, for the per-MAC
	// kinds.
	MAC string
	// Arch is the architecture of GrubDefault.
	Arch string
}

// Path returns the canonical path of the request, which ParsePath parses
// back to the same Request: GRUB's own "grub.cfg-01-" spelling, no
// "boot/" prefix, lower-case MACs, and the ipxe/<mac>.ipxe form.
func (r Request) Path() string {
	switch r.Kind {
	case GrubMAC:
		return "grub/grub.cfg-01-" + dashes(r.MAC)
	case GrubDefault:
		return "grub/grub.cfg-default-" + r.Arch
	case GrubPreload:
		return "grub/grub.cfg"
	case PXELinuxMAC:
		return "pxelinux.cfg/01-" + dashes(r.MAC)
	case PXELinuxDefault:
		return "pxelinux.cfg/default"
	case IPXEMAC:
		return "ipxe/" + r.MAC + ".ipxe"
	}
	return ""
}

func dashes(mac string) string { return strings.ReplaceAll(mac, ":", "-") }

// ParsePath recognises a rendered config from its path relative to the boot
// tree. It returns ErrNotConfig (wrapped) for any other well-formed path,
// and ErrBadPath for paths that must be refused whatever they name.
//
// Accepted: grub/grub.cfg-<aa:bb:cc:dd:ee:ff>, grub/grub.cfg-01-<aa-bb-…>,
// grub/grub.cfg-default-<amd64|arm64>, grub/grub.cfg, each also under
// boot/grub/ (the directory grub-mknetdir installs GRUB in, whose prefix
// GRUB then asks under); pxelinux.cfg/01-<aa-bb-…>, pxelinux.cfg/default;
// ipxe/<mac>.ipxe and ipxe?mac=<mac>. MAC hex digits may be in either case.
func ParsePath(p string) (Request, error) {
	if err := checkPath(p); err != nil {
		return Request{}, err
	}
	if q, ok := strings.CutPrefix(p, "ipxe?"); ok {
		v, err := url.ParseQuery(q)
		if err != nil {
			return Request{}, fmt.Errorf("%w %q: query: %v", ErrBadPath, p, err)
		}
		return ParseIPXEQuery(v)
	}
	// Built only when needed: ParsePath sits on every TFTP and HTTP
	// request, and most of them are files, not configs.
	notConfig := func() error { return fmt.Errorf("%w: %q", ErrNotConfig, p) }
	if rest, ok := cutAny(p, "grub/", "boot/grub/"); ok {
		name, ok := strings.CutPrefix(rest, "grub.cfg")
		switch {
		case !ok:
			return Request{}, notConfig()
		case name == "":
			return Request{Kind: GrubPreload}, nil
		}
		if arch, ok := strings.CutPrefix(name, "-default-"); ok {
			if !isArch(arch) {
				return Request{}, notConfig()
			}
			return Request{Kind: GrubDefault, Arch: arch}, nil
		}
		if m, ok := strings.CutPrefix(name, "-01-"); ok {
			if mac, ok := parseMAC(m, '-'); ok {
				return Request{Kind: GrubMAC, MAC: mac}, nil
			}
		}
		// $net_default_mac's spelling, which the pre-loader asks for.
		if m, ok := strings.CutPrefix(name, "-"); ok {
			if mac, ok := parseMAC(m, ':'); ok {
				return Request{Kind: GrubMAC, MAC: mac}, nil
			}
		}
		// Hex-IP names and the like: GRUB tries them after the MAC
		// name, and the file tree answers "not found".
		return Request{}, notConfig()
	}
	if name, ok := strings.CutPrefix(p, "pxelinux.cfg/"); ok {
		if name == "default" {
			return Request{Kind: PXELinuxDefault}, nil
		}
		// "01" is the ARP hardware type of Ethernet, which pxelinux puts
		// before the MAC; it tries the UUID and hex-IP names around it.
		if m, ok := strings.CutPrefix(name, "01-"); ok {
			if mac, ok := parseMAC(m, '-'); ok {
				return Request{Kind: PXELinuxMAC, MAC: mac}, nil
			}
		}
		return Request{}, notConfig()
	}
	if name, ok := strings.CutPrefix(p, "ipxe/"); ok {
		if m, ok := strings.CutSuffix(name, ".ipxe"); ok {
			// ${mac} is colon separated, ${mac:hexhyp} dash separated.
			if mac, ok := parseMAC(m, ':'); ok {
				return Request{Kind: IPXEMAC, MAC: mac}, nil
			}
			if mac, ok := parseMAC(m, '-'); ok {
				return Request{Kind: IPXEMAC, MAC: mac}, nil
			}
		}
		return Request{}, notConfig()
	}
	return Request{}, notConfig()
}

// ParseIPXEQuery parses the query of an HTTP /boot/ipxe request, the URL
// netboot.ChooseBoot gives iPXE clients: exactly one mac= parameter with a
// colon- or dash-separated MAC. Other parameters are ignored. Anything else
// is ErrBadPath: the request was meant for the renderer, so there is no file
// to fall back to.
func ParseIPXEQuery(q url.Values) (Request, error) {
	macs := q["mac"]
	if len(macs) != 1 {
		return Request{}, fmt.Errorf("%w: ipxe wants exactly one mac= parameter, got %d", ErrBadPath, len(macs))
	}
	m := macs[0]
	mac, ok := parseMAC(m, ':')
	if !ok {
		mac, ok = parseMAC(m, '-')
	}
	if !ok {
		return Request{}, fmt.Errorf("%w: ipxe: mac=%q is not a MAC like aa:bb:cc:dd:ee:ff", ErrBadPath, m)
	}
	return Request{Kind: IPXEMAC, MAC: mac}, nil
}

// checkPath refuses the paths no layer should act on, before anything looks
// at what they name.
func checkPath(p string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrBadPath, p, why) }
	switch {
	case p == "":
		return bad("empty")
	case len(p) > MaxPathLen:
		return fmt.Errorf("%w: %d bytes long, at most %d", ErrBadPath, len(p), MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return bad("contains NUL")
	case p[0] == '/':
		return bad("absolute")
	case !utf8.ValidString(p):
		return bad("not UTF-8")
	}
	for i := 0; i < len(p); i++ {
		// Backslash is a separator to some TFTP servers and clients
		// (Windows-built firmware): refusing it keeps "..\" out.
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return bad("contains a control character or backslash")
		}
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "..":
			return bad(`contains ".."`)
		case ".", "":
			return bad(`has an empty or "." segment`)
		}
	}
	return nil
}

func cutAny(s string, prefixes ...string) (string, bool) {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest, true
		}
	}
	return "", false
}

// parseMAC accepts six octets of two hex digits separated by sep, in either
// case, and returns the lower-case colon form. It is stricter than
// net.ParseMAC on purpose: one spelling per path keeps the mapping from
// paths to requests simple and the fuzzed round trip exact.
func parseMAC(s string, sep byte) (string, bool) {
	const n = len("aa:bb:cc:dd:ee:ff")
	if len(s) != n {
		return "", false
	}
	var b [n]byte
	for i := 0; i < n; i++ {
		c := s[i]
		if i%3 == 2 {
			if c != sep {
				return "", false
			}
			b[i] = ':'
			continue
		}
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", false
		}
		b[i] = c
	}
	return string(b[:]), true
}
