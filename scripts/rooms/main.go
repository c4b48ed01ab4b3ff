// Command rooms measures the size of rackd's rooms, as the clean-ups of the
// tree track them: the lines of each package itself (not its
// sub-packages; tests apart), the largest file of each, the types with the
// most methods, and the production functions over -long lines (benchmarks,
// real-VM tests and scripts apart).
//
//	go run ./scripts/rooms [-long 100] [-top 10] [DIR]
package main

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rooms:", err)
		os.Exit(1)
	}
}

type file struct {
	path  string
	lines int
	test  bool
}

type fn struct {
	name  string
	lines int
}

func run(args []string, out io.Writer) error {
	fl := flag.NewFlagSet("rooms", flag.ContinueOnError)
	long := fl.Int("long", 100, "report production functions longer than this many lines")
	top := fl.Int("top", 10, "how many packages and types to list")
	if err := fl.Parse(args); err != nil {
		return err
	}
	root := "."
	if fl.NArg() > 0 {
		root = fl.Arg(0)
	}
	fset := token.NewFileSet()
	pkgs := map[string][]file{} // dir -> files
	methods := map[string]int{} // dir.Type -> methods
	var longFns []fn
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "vendor" || name == "build" || name == "var") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		test := strings.HasSuffix(path, "_test.go")
		pkgs[dir] = append(pkgs[dir], file{path, fset.Position(f.End()).Line, test})
		if test {
			return nil
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				recv := fd.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if idx, ok := recv.(*ast.IndexExpr); ok {
					recv = idx.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					methods[dir+"."+id.Name]++
					name = id.Name + "." + name
				}
			}
			if fd.Body == nil {
				continue
			}
			n := fset.Position(fd.Body.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > *long && !tooling(dir) {
				longFns = append(longFns, fn{dir + ": " + name, n})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	type room struct {
		dir          string
		lines, tests int
		largest      file
	}
	var rooms []room
	for dir, files := range pkgs {
		r := room{dir: dir}
		for _, f := range files {
			if f.test {
				r.tests += f.lines
				continue
			}
			r.lines += f.lines
			if f.lines > r.largest.lines {
				r.largest = f
			}
		}
		rooms = append(rooms, r)
	}
	slices.SortFunc(rooms, func(a, b room) int { return cmp.Compare(b.lines, a.lines) })
	fmt.Fprintf(out, "packages by production lines (the package itself; tests apart):\n")
	for _, r := range rooms[:min(*top, len(rooms))] {
		fmt.Fprintf(out, "  %-28s %6d lines in %-3d  tests %6d  largest %s (%d)\n", r.dir, r.lines, countProd(pkgs[r.dir]), r.tests, r.largest.path, r.largest.lines)
	}
	type typ struct {
		name string
		n    int
	}
	var types []typ
	for k, n := range methods {
		types = append(types, typ{k, n})
	}
	slices.SortFunc(types, func(a, b typ) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.name, b.name)) })
	fmt.Fprintf(out, "types by methods:\n")
	for _, t := range types[:min(*top, len(types))] {
		fmt.Fprintf(out, "  %-40s %d\n", t.name, t.n)
	}
	slices.SortFunc(longFns, func(a, b fn) int { return cmp.Compare(b.lines, a.lines) })
	fmt.Fprintf(out, "production functions over %d lines: %d\n", *long, len(longFns))
	for _, f := range longFns {
		fmt.Fprintf(out, "  %-60s %d\n", f.name, f.lines)
	}
	return nil
}

// tooling is a folder of benchmarks, real-VM tests or scripts: not the
// product, and left out of the long functions.
func tooling(dir string) bool {
	first, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(dir)), "/")
	return first == "bench" || first == "e2e" || first == "scripts"
}

func countProd(files []file) int {
	n := 0
	for _, f := range files {
		if !f.test {
			n++
		}
	}
	return n
}
