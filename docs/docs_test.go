// Package docs holds rackd's design documents; its tests keep them true
// with the tree they describe.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
// folder that is not in the tree, or says a file declares a function, method
// or type that it does not: a rule that moved must move in the document too.
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
		decl := regexp.MustCompile(`(?m)^(func (\([^)]*\) )?` + name + `\b|type ` + name + `\b)`)
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
