// Package prometheus holds rackd's Prometheus rules (rackd-alerts.yml) and
// their promtool unit tests; its Go tests run promtool on them, and check
// that every series they and the Grafana dashboard (docs/grafana/rackd.json)
// query is one a real rackd exports.
package prometheus

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// selector is a series selector of a query: the metric name and the label
// names its matchers use.
type selector struct {
	name   string
	labels []string
}

// keywords are the PromQL words that are not metric names when they are not
// followed by a parenthesis.
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "atan2": true,
	// Aggregations, which may come before their by/without clause and
	// then are not followed by "(".
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
}

// grouping words take a list of label names in parentheses.
var grouping = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// labelValues is Grafana's template query label_values(SELECTOR, LABEL).
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// selectors lists the series selectors of a PromQL expression (or of a
// Grafana label_values query). It is a small lexer, not a parser: it knows
// strings, comments, ranges, label matchers, numbers and durations,
// Grafana's $variables, functions (a word before "(") and the label lists of
// by/without/on/ignoring/group_left/group_right, and takes every other word
// for a metric name. That is enough to find every metric a query names; a
// query it cannot read is an error.
func selectors(expr string) ([]selector, error) {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		sels, err := selectors(m[1])
		if err != nil {
			return nil, err
		}
		if len(sels) != 1 {
			return nil, fmt.Errorf("label_values(%s, ...): want one selector", m[1])
		}
		sels[0].labels = append(sels[0].labels, m[2])
		return sels, nil
	}
	var out []selector
	s := expr
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unclosed [ at %d in %q", i, expr)
			}
			i += j + 1
		case c == '{':
			names, j, err := matchers(s, i)
			if err != nil {
				return nil, fmt.Errorf("%w in %q", err, expr)
			}
			if len(out) == 0 || out[len(out)-1].labels != nil || !endsWithName(s[:i]) {
				return nil, fmt.Errorf("label matchers without a metric name at %d in %q: name the metric", i, expr)
			}
			out[len(out)-1].labels = names
			i = j
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				j := strings.IndexByte(s[i:], '}')
				if j < 0 {
					return nil, fmt.Errorf("unclosed ${ in %q", expr)
				}
				i += j + 1
				continue
			}
			for i < len(s) && isWordByte(s[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			// A number or a duration (offset 5m, 1e3, 0x1f).
			for i < len(s) && (isWordByte(s[i]) || s[i] == '.') {
				i++
			}
		case isWordStart(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
				k++
			}
			switch {
			case grouping[word] && k < len(s) && s[k] == '(':
				end := strings.IndexByte(s[k:], ')')
				if end < 0 {
					return nil, fmt.Errorf("unclosed %s( in %q", word, expr)
				}
				j = k + end + 1
			case k < len(s) && s[k] == '(':
				// A function or an aggregation.
			case keywords[strings.ToLower(word)]:
			default:
				out = append(out, selector{name: word})
			}
			i = j
		default:
			i++
		}
	}
	return out, nil
}

// endsWithName tells whether s ends in a word, so that the { that follows
// it is that word's matchers.
func endsWithName(s string) bool {
	s = strings.TrimRight(s, " \t\n")
	return s != "" && isWordByte(s[len(s)-1])
}

func isWordStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isWordByte(c byte) bool { return isWordStart(c) || c >= '0' && c <= '9' }

// skipString returns the index after the string literal that starts at i.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at %d", i)
}

// matchers reads the label matchers {a="x", b=~"y"} starting at i and
// returns their label names and the index after the closing brace.
func matchers(s string, i int) ([]string, int, error) {
	names := []string{}
	j := i + 1
	for j < len(s) {
		for j < len(s) && (s[j] == ' ' || s[j] == ',' || s[j] == '\n' || s[j] == '\t') {
			j++
		}
		if j < len(s) && s[j] == '}' {
			return names, j + 1, nil
		}
		k := j
		for k < len(s) && isWordByte(s[k]) {
			k++
		}
		if k == j {
			return nil, 0, fmt.Errorf("bad label matcher at %d", j)
		}
		names = append(names, s[j:k])
		for k < len(s) && strings.IndexByte("=~! \t", s[k]) >= 0 {
			k++
		}
		if k >= len(s) || (s[k] != '"' && s[k] != '\'' && s[k] != '`') {
			return nil, 0, fmt.Errorf("label matcher %s without a quoted value", names[len(names)-1])
		}
		end, err := skipString(s, k)
		if err != nil {
			return nil, 0, err
		}
		j = end
	}
	return nil, 0, fmt.Errorf("unclosed { at %d", i)
}

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want string // name{labels} ... in order
		err  bool
	}{
		{expr: `up{job="rackd"} == 0`, want: `up{job}`},
		{expr: `sum without (action) (rate(rackd_power_requests_total[5m]))`, want: `rackd_power_requests_total`},
		{expr: `histogram_quantile(0.99, sum by (le, driver) (rate(x_bucket{instance=~"$instance"}[$__rate_interval])))`, want: `x_bucket{instance}`},
		{expr: `a > ignoring (driver) group_left () (0.5 * b)`, want: `a b`},
		{expr: "a{x=\"}\", y!~'q'} / on(instance) group_left b offset 5m", want: `a{x,y} b`},
		{expr: `rackd:ipam_pool_utilisation:ratio > 0.9 and bool 1e3`, want: `rackd:ipam_pool_utilisation:ratio`},
		{expr: "# a comment names no_metric\nc unless d", want: `c d`},
		{expr: `topk(8, e) or ${DS} or f`, want: `e f`},
		{expr: `label_values(rackd_build_info, instance)`, want: `rackd_build_info{instance}`},
		{expr: `{__name__="x"}`, err: true},
		{expr: `a{b="x"`, err: true},
		{expr: `a{b}`, err: true},
		{expr: `a[5m`, err: true},
	} {
		sels, err := selectors(tc.expr)
		if tc.err {
			if err == nil {
				t.Errorf("selectors(%q) = %v, want an error", tc.expr, sels)
			}
			continue
		}
		if err != nil {
			t.Errorf("selectors(%q): %v", tc.expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			if s.labels != nil {
				got = append(got, s.name+"{"+strings.Join(s.labels, ",")+"}")
			} else {
				got = append(got, s.name)
			}
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("selectors(%q) = %s, want %s", tc.expr, g, tc.want)
		}
	}
}
