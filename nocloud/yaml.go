package nocloud

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The seed files are small, fixed-shape YAML documents, so they are written
// here by hand rather than through a reflecting encoder: the bytes (key
// order, indentation, quoting) are fixed by this file alone, which keeps the
// golden files and the filesystem image stable across library upgrades, and
// every string value goes through quote, so no input can change the shape
// of the document.

// yamlWriter accumulates one YAML document.
type yamlWriter struct{ b strings.Builder }

// line writes one line at the given depth (two spaces per level).
func (w *yamlWriter) line(depth int, format string, args ...any) {
	w.b.WriteString(strings.Repeat("  ", depth))
	fmt.Fprintf(&w.b, format, args...)
	w.b.WriteByte('\n')
}

// list writes key followed by its items as a block sequence of quoted
// strings, or as an empty flow sequence when there are none.
func (w *yamlWriter) list(depth int, key string, items []string) {
	if len(items) == 0 {
		w.line(depth, "%s: []", key)
		return
	}
	w.line(depth, "%s:", key)
	for _, it := range items {
		w.line(depth+1, "- %s", quote(it))
	}
}

func (w *yamlWriter) bytes() []byte { return []byte(w.b.String()) }

// quote returns s as a YAML double-quoted scalar. Everything outside
// printable ASCII is escaped, so the result is one line of ASCII whatever s
// holds, and a YAML parser reads back exactly s (invalid UTF-8 cannot be
// represented in YAML; Render refuses it before it gets here, and quote
// writes U+FFFD for it).
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
