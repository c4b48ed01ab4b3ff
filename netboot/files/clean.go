package files

import (
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest name accepted, in bytes: NAME_MAX on Linux, and
// far more than any boot file needs. Longer names are refused before they
// reach the file system or a log line.
const MaxNameLen = 255

// Clean checks a name as a client sent it and returns the relative,
// slash-separated path to look up, or an *Error (ErrRefused or ErrInvalid).
//
// It strips exactly one leading "/": TFTP has no notion of a current
// directory, and PXE ROMs, pxelinux and grub variously send "/name" and
// "name" for the same file. A second leading "/" is an absolute name and is
// refused, as are ".." elements. Backslashes are refused rather than
// translated: some Windows-minded firmware sends "boot\x64\file", but on
// Linux a backslash is an ordinary name byte, and mapping it to "/" would
// create a second spelling of every path for the checks to get right.
// Control characters (NUL included, which cannot be in a Linux file name
// anyway) and invalid UTF-8 are refused so that no name can forge a log
// line or mean different things to different layers.
//
// Clean is idempotent: a name it returns is returned unchanged.
func Clean(name string) (string, error) {
	if len(name) > MaxNameLen {
		return "", invalid(truncate(name), "longer than 255 bytes")
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == 0:
			return "", invalid(name, "NUL byte")
		case c < 0x20 || c == 0x7f:
			return "", invalid(name, "control character")
		case c == '\\':
			return "", invalid(name, "backslash")
		}
	}
	if !utf8.ValidString(name) {
		return "", invalid(name, "invalid UTF-8")
	}
	p := strings.TrimPrefix(name, "/")
	if p == "" {
		return "", invalid(name, "empty name")
	}
	if p[0] == '/' {
		return "", refused(name, "absolute path", nil)
	}
	// Every element must be a plain name (fs.ValidPath's rule), and ".."
	// is told apart because it is an attack, not a typo.
	clean := true
	for elem := range strings.SplitSeq(p, "/") {
		switch elem {
		case "..":
			return "", refused(name, "parent directory element", nil)
		case "", ".":
			clean = false
		}
	}
	if !clean {
		return "", invalid(name, "empty or \".\" path element")
	}
	return p, nil
}

// truncate shortens an overlong name for messages, so that a refused
// 64 KiB name does not become a 64 KiB log line.
func truncate(name string) string {
	const keep = 64
	if len(name) <= keep {
		return name
	}
	return name[:keep] + "..."
}
