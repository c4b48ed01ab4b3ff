package agent

import (
	"os"
	"regexp"
	"testing"
)

// TestAPIDocumented keeps docs/API.md true: every route served has a
// "### METHOD /path" section and every such section is a route served.
func TestAPIDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### ([A-Z]+ /\S*)$`).FindAllSubmatch(doc, -1) {
		documented[string(m[1])] = true
	}
	served := map[string]bool{}
	for _, rt := range routes() {
		served[rt.pattern] = true
		if !documented[rt.pattern] {
			t.Errorf("route %q is served but not documented in docs/API.md", rt.pattern)
		}
	}
	for d := range documented {
		if !served[d] {
			t.Errorf("docs/API.md documents %q, which rackd does not serve", d)
		}
	}
}
