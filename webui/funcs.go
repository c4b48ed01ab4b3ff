package webui

import (
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"

	"rackd/api"
)

var funcs = template.FuncMap{
	"join":      strings.Join,
	"lower":     strings.ToLower,
	"transient": isTransient,
	"when":      when,
	"at":        at,
	"dur":       dur,
	"bytes":     humanBytes,
	// mem and count show an unknown (0: never reported) as "-".
	"mem": func(mb int) string {
		if mb <= 0 {
			return unknown
		}
		return humanBytes(int64(mb) << 20)
	},
	"count": func(n int) string {
		if n <= 0 {
			return unknown
		}
		return strconv.Itoa(n)
	},
	"pct": func(used, size uint64) string {
		if size == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.0f%%", 100*float64(used)/float64(size))
	},
	"stateClass": func(s string) string { return "st-" + strings.ToLower(strings.ReplaceAll(s, "_", "-")) },
	"add":        func(a, b int) int { return a + b },
	"uint64":     func(n int64) uint64 { return uint64(max(n, 0)) },
	"strs":       func(s ...string) []string { return s },
	// anchor makes an element id of a subnet's CIDR.
	"anchor": func(s string) string { return strings.NewReplacer("/", "-", ".", "-", ":", "-").Replace(s) },
	// high is where a pool's meter turns to warning: 90% used.
	"high": func(size uint64) string { return fmt.Sprintf("%.1f", float64(size)*0.9) },
	// hasAction says whether the actions offered include name.
	"hasAction": func(as []actionView, name string) bool {
		return slices.ContainsFunc(as, func(a actionView) bool { return a.Action == name })
	},
	// fingerprint shows a SHA-256 in hex as its bytes, colon-separated
	// (as browsers and openssl show a certificate's).
	"fingerprint": func(hex string) string {
		if len(hex)%2 != 0 {
			return hex
		}
		var b strings.Builder
		for i := 0; i < len(hex); i += 2 {
			if i > 0 {
				b.WriteByte(':')
			}
			b.WriteString(strings.ToUpper(hex[i : i+2]))
		}
		return b.String()
	},
	"args": func(m api.Machine, csrf string, a actionView, d machineData) actionArgs {
		return actionArgs{M: m, CSRF: csrf, A: a, Images: d.Images, ID: "act-" + a.Action}
	},
}

// actionArgs is what the "action" template (one lifecycle action's form)
// gets.
type actionArgs struct {
	M      api.Machine
	CSRF   string
	A      actionView
	Images []api.Image
	ID     string
}

// unknown is what a page shows for a number nothing has reported.
const unknown = "-"

// at is when's text in a <time> element (which the style keeps on one
// line), with the machine-readable time; nothing for none. The text is
// made of digits and separators only.
func at(v any) template.HTML {
	s := when(v)
	if s == "" {
		return ""
	}
	iso := strings.Replace(strings.TrimSuffix(s, "Z"), " ", "T", 1) + "Z"
	return template.HTML(`<time datetime="` + iso + `">` + s + `</time>`)
}

// when is a time as the pages show it (UTC, to the second); "" for none.
func when(v any) string {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x == nil {
			return ""
		}
		t = *x
	}
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func dur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	// 64 GiB, not 64.0 GiB.
	v := strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/float64(div)), ".0")
	return fmt.Sprintf("%s %ciB", v, "KMGTPE"[exp])
}
