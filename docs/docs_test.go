// Package docs holds rackd's design documents; its tests keep them true
// with the tree they describe.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// root is the repository, seen from this folder.
const root = ".."

var (
	// pathRef is a backquoted repository path: `store/alloc.go`, `power/queue/`.
	pathRef = regexp.MustCompile("`((?:agent|appliance|cluster|store|netboot|power|images|nocloud|enlist|initramfs|internal|scripts|bench|e2e|docs)(?:/[A-Za-z0-9_.-]+)*/?)`")
	// declRef is a file followed by a name it declares: `store/store.go` `commitLoop`.
	declRef = regexp.MustCompile("`([a-z0-9_/]+\\.go)` `([A-Za-z_][A-Za-z0-9_]*)`")
)

// TestArchitecturePathsExist fails when docs/ARCHITECTURE.md names a file or
// folder that is not in the tree, or says a file declares a function, method,
// type or package-level variable or constant (a rule table) that it does
// not: a rule that moved must move in the document too.
func TestArchitecturePathsExist(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	paths := pathRef.FindAllSubmatch(doc, -1)
	if len(paths) < 10 {
		t.Fatalf("docs/ARCHITECTURE.md names %d paths; the pattern no longer matches how it names them", len(paths))
	}
	for _, m := range paths {
		p := strings.TrimSuffix(string(m[1]), "/")
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("docs/ARCHITECTURE.md names %s, which is not in the tree: %v", m[1], err)
		}
	}
	decls := declRef.FindAllSubmatch(doc, -1)
	if len(decls) < 3 {
		t.Fatalf("docs/ARCHITECTURE.md names %d declarations; the pattern no longer matches", len(decls))
	}
	for _, m := range decls {
		file, name := string(m[1]), string(m[2])
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Errorf("docs/ARCHITECTURE.md names %s: %v", file, err)
			continue
		}
		decl := regexp.MustCompile(`(?m)^(func (\([^)]*\) )?` + name + `\b|(type|var|const) ` + name + `\b)`)
		if !decl.Match(src) {
			t.Errorf("docs/ARCHITECTURE.md says %s declares %s; it does not", file, name)
		}
	}
}

// outsideRef is a pointer to a document that is not in the repository: the
// product's design card, the operator discussions behind it, issue numbers.
var outsideRef = regexp.MustCompile(`DESIGN\.md|\b[Ss]eeds? 0\d\d\b|\b[Ii]ssues? #?\d+\b|shared/`)

// TestNoOutsideReferences keeps the tree self-contained: comments, scripts
// and documents state a rule, or point into docs/, instead of pointing at
// documents a reader of the repository does not have.
func TestNoOutsideReferences(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "var", "dist", "build", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".toml", ".txt", ".yaml", ".yml":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		if filepath.Base(path) == "docs_test.go" && filepath.Base(filepath.Dir(path)) == "docs" {
			return nil // this file names the patterns
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(data), "\n") {
			if m := outsideRef.FindString(line); m != "" {
				t.Errorf("%s:%d refers to %q, a document outside the repository: state the rule or point into docs/", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d files: is the walk rooted at the repository?", checked)
	}
}

// TestConfigurationDocumented holds docs/CONFIGURATION.md's table of keys to
// agent/default.toml, the defaults rackd runs with: every key of the
// default configuration has a row whose default (the first backquoted word
// of its second column) is the file's value, and every row names a key of
// the file. A key added, renamed or given another default fails here until
// the document says so.
func TestConfigurationDocumented(t *testing.T) {
	var defaults map[string]any
	if _, err := toml.DecodeFile(filepath.Join(root, "agent", "default.toml"), &defaults); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	flattenTOML("", defaults, want)
	if len(want) < 50 {
		t.Fatalf("agent/default.toml has %d keys; is it still the default configuration?", len(want))
	}
	doc, err := os.ReadFile("CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+)` \\| ([^|]*) \\|")
	firstWord := regexp.MustCompile("`([^`]*)`")
	rows := row.FindAllSubmatch(doc, -1)
	seen := map[string]bool{}
	for _, m := range rows {
		key, cell := string(m[1]), string(m[2])
		if seen[key] {
			t.Errorf("docs/CONFIGURATION.md documents %s twice", key)
		}
		seen[key] = true
		value, ok := want[key]
		if !ok {
			t.Errorf("docs/CONFIGURATION.md documents %s, which agent/default.toml does not have", key)
			continue
		}
		w := firstWord.FindStringSubmatch(cell)
		if w == nil || w[1] != value {
			t.Errorf("docs/CONFIGURATION.md gives %s the default %q; agent/default.toml has `%s`", key, strings.TrimSpace(cell), value)
		}
	}
	for key, value := range want {
		if !seen[key] {
			t.Errorf("agent/default.toml has %s (default `%s`), which docs/CONFIGURATION.md does not document: add its row", key, value)
		}
	}
}

// flattenTOML writes the leaves of a decoded TOML table into out, by dotted
// key, each as the document writes a default: a string as it is (`""` when
// empty), numbers and booleans as TOML writes them, an array as TOML does.
func flattenTOML(prefix string, table map[string]any, out map[string]string) {
	for k, v := range table {
		key := prefix + k
		switch v := v.(type) {
		case map[string]any:
			flattenTOML(key+".", v, out)
		case string:
			if v == "" {
				v = `""`
			}
			out[key] = v
		case float64:
			out[key] = strconv.FormatFloat(v, 'f', -1, 64)
		case []any:
			var parts []string
			for _, e := range v {
				parts = append(parts, fmt.Sprintf("%q", e))
			}
			out[key] = "[" + strings.Join(parts, ", ") + "]"
		default:
			out[key] = fmt.Sprint(v)
		}
	}
}

// TestReadmeLayout holds the README's layout table to the tree: every path
// it names exists, every top-level folder is a row of its own, and every
// package folder one level below a top-level folder (agent/cli,
// store/kv, ...) is named in the table, so that a newcomer's map has
// every place code lives. The benchmarks' folders are docs/BENCHMARKS.md's
// (TestBenchmarksDocumented).
func TestReadmeLayout(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal(`README.md has no "## Layout" section`)
	}
	if next := strings.Index(table, "\n## "); next >= 0 {
		table = table[:next]
	}
	rowRE := regexp.MustCompile("(?m)^\\| ([^|]+) \\| (.*) \\|$")
	pathRE := regexp.MustCompile("`([a-z0-9][a-z0-9_.-]*(?:/[a-z0-9_.-]+)*/?)`")
	rows := map[string]bool{}  // top-level folders with a row
	named := map[string]bool{} // every path the table names
	for _, m := range rowRE.FindAllStringSubmatch(table, -1) {
		for _, p := range pathRE.FindAllStringSubmatch(m[1], -1) {
			rows[strings.TrimSuffix(p[1], "/")] = true
		}
		for _, p := range pathRE.FindAllStringSubmatch(m[1]+" "+m[2], -1) {
			named[strings.TrimSuffix(p[1], "/")] = true
		}
	}
	if len(rows) < 10 {
		t.Fatalf("README.md's layout table has %d folder rows; the pattern no longer matches it", len(rows))
	}
	for p := range named {
		if !strings.Contains(p, "/") && !rows[p] {
			continue // a word in backquotes (`http`), not a path
		}
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("README.md's layout table names %s, which is not in the tree", p)
		}
	}
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]bool{"bin": true, "var": true, "dist": true, "build": true}
	for _, d := range top {
		if !d.IsDir() || strings.HasPrefix(d.Name(), ".") || ignored[d.Name()] {
			continue
		}
		if !rows[d.Name()] {
			t.Errorf("top-level folder %s/ has no row in README.md's layout table", d.Name())
		}
		if d.Name() == "bench" {
			continue
		}
		subs, err := os.ReadDir(filepath.Join(root, d.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range subs {
			p := d.Name() + "/" + s.Name()
			if s.IsDir() && hasGoCode(filepath.Join(root, p)) && !namedUnder(named, p) {
				t.Errorf("package folder %s is not named in README.md's layout table (in its folder's row, as `%s`)", p, p)
			}
		}
	}
}

// namedUnder reports whether the table names p or a path below it
// (agent/cmd/rackd names agent/cmd).
func namedUnder(named map[string]bool, p string) bool {
	for n := range named {
		if n == p || strings.HasPrefix(n, p+"/") {
			return true
		}
	}
	return false
}

// hasGoCode reports whether dir or a folder below it (but testdata) holds a
// Go file that is not a test.
func hasGoCode(dir string) bool {
	found := false
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipAll
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			found = true
		}
		return nil
	})
	return found
}

// TestBenchmarksDocumented: every benchmark the Makefile runs (a bench-NAME
// target but bench-deps, which installs their peers) is in
// docs/BENCHMARKS.md as `make bench-NAME`, and every one documented there
// is a target.
func TestBenchmarksDocumented(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(bench-[a-z0-9-]+):`).FindAllStringSubmatch(string(mk), -1) {
		if m[1] != "bench-deps" {
			targets[m[1]] = true
		}
	}
	if len(targets) < 10 {
		t.Fatalf("the Makefile has %d bench- targets; the pattern no longer matches", len(targets))
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`make (bench-[a-z0-9-]+)`).FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	for tg := range targets {
		if !documented[tg] {
			t.Errorf("make %s is not in docs/BENCHMARKS.md", tg)
		}
	}
	for d := range documented {
		if !targets[d] && d != "bench-deps" {
			t.Errorf("docs/BENCHMARKS.md names make %s, which the Makefile does not have", d)
		}
	}
}

// TestReadmeShort keeps the README a newcomer's page: what rackd is, the
// two commands, the tour, the map of docs/ and of the tree. Anything longer
// belongs in a document of docs/, linked from the README's table.
func TestReadmeShort(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const most = 16 << 10
	if len(readme) > most {
		t.Errorf("README.md is %d bytes; a newcomer's page stays under %d: move detail into docs/", len(readme), most)
	}
}

// TestGettingStartedConfiguration holds docs/GETTING-STARTED.md's TOML
// (the real rack's configuration) and the keys its text names to
// agent/default.toml: each block decodes, and each key in it or named in
// backquotes as section.key is one rackd has. Its sh blocks are run by the
// e2e test TestE2EGettingStarted.
func TestGettingStartedConfiguration(t *testing.T) {
	var defaults map[string]any
	if _, err := toml.DecodeFile(filepath.Join(root, "agent", "default.toml"), &defaults); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	flattenTOML("", defaults, want)
	doc, err := os.ReadFile("GETTING-STARTED.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?ms)^```toml\n(.*?)^```\n").FindAllSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("docs/GETTING-STARTED.md has no toml block: the real rack's configuration went")
	}
	for _, b := range blocks {
		var cfg map[string]any
		if _, err := toml.Decode(string(b[1]), &cfg); err != nil {
			t.Errorf("docs/GETTING-STARTED.md's configuration does not decode: %v\n%s", err, b[1])
			continue
		}
		got := map[string]string{}
		flattenTOML("", cfg, got)
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("docs/GETTING-STARTED.md's configuration sets %s, which agent/default.toml does not have", k)
			}
		}
	}
	named := regexp.MustCompile("`((?:api|lifecycle|console|store|ipam|dhcp|tftp|dns|boot|enlist|metadata|power|cluster|appliance)\\.[a-z_]+)`").FindAllSubmatch(doc, -1)
	if len(named) < 3 {
		t.Fatalf("docs/GETTING-STARTED.md names %d configuration keys; the pattern no longer matches how it names them", len(named))
	}
	for _, m := range named {
		if _, ok := want[string(m[1])]; !ok {
			t.Errorf("docs/GETTING-STARTED.md names the key %s, which agent/default.toml does not have", m[1])
		}
	}
}

// mdLink is a Markdown link or image to a relative path: [text](path) or
// [text](path#anchor).
var mdLink = regexp.MustCompile(`\]\(([^)#:\s]+)(#[^)]*)?\)`)

// TestDocumentLinks fails when the README or a document in docs/ links to
// a file that is not in the tree: a document moved must take its links
// along.
func TestDocumentLinks(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	links := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			links++
			target := filepath.Join(filepath.Dir(f), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which is not in the tree", f, m[1])
			}
		}
	}
	if links < 20 {
		t.Fatalf("found %d links; the pattern no longer matches", links)
	}
}
