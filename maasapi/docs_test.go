package maasapi

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"rackd/store"
)

// TestMAASAPIDocumented keeps docs/MAAS-API.md true: every route served
// has a row "| `METHOD path?op=OP` | ... |" in its table of served
// operations, and every row is a route served.
func TestMAASAPIDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/MAAS-API.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `((?:GET|POST|PUT|DELETE) [^`]+)` \\|").FindAllSubmatch(doc, -1) {
		documented[string(m[1])] = true
	}
	served := map[string]bool{}
	for _, rt := range routes() {
		name := rt.Method + " " + rt.Path
		if rt.Op != "" {
			name += "?op=" + rt.Op
		}
		served[name] = true
		if !documented[name] {
			t.Errorf("%s is served but not in docs/MAAS-API.md's table of served operations", name)
		}
	}
	for d := range documented {
		if !served[d] {
			t.Errorf("docs/MAAS-API.md lists %s, which rackd does not serve", d)
		}
	}
	if len(served) < 20 {
		t.Fatalf("only %d routes: the table is not being read", len(served))
	}
}

// TestMAASStatusesDocumented holds docs/MAAS-API.md's table of states to
// the one in code (statuses).
func TestMAASStatusesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/MAAS-API.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^\| ([A-Z_]+)( \(erasing its disks\))? \| (\d+) \| ([A-Za-z ]+) \| ([a-z_]+) \|$`).FindAllStringSubmatch(string(doc), -1)
	if len(rows) != len(statuses) {
		t.Fatalf("docs/MAAS-API.md has %d state rows, the code %d", len(rows), len(statuses))
	}
	for _, r := range rows {
		st, ok := statuses[statusKey{store.State(r[1]), r[2] != ""}]
		code, _ := strconv.Atoi(r[3])
		if !ok || st.code != code || st.name != strings.TrimSpace(r[4]) || st.filter != r[5] {
			t.Errorf("docs/MAAS-API.md: %q, the code: %+v", r[0], st)
		}
	}
}
