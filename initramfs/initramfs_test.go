package initramfs

import (
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// list reads a data file of this package: one entry a line, # comments.
func list(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// TestToolsMatchCommands: tools.go (which makes go.mod pin the u-root
// commands) imports exactly the commands the build puts in the initramfs.
func TestToolsMatchCommands(t *testing.T) {
	cmds := list(t, "commands.txt")
	f, err := parser.ParseFile(token.NewFileSet(), "tools.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var imports []string
	for _, im := range f.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		imports = append(imports, p)
	}
	slices.Sort(cmds)
	slices.Sort(imports)
	if !slices.Equal(cmds, imports) {
		t.Fatalf("commands.txt lists %v\ntools.go imports %v", cmds, imports)
	}
	for _, want := range []string{"init", "gosh"} {
		if !slices.Contains(cmds, "github.com/u-root/u-root/cmds/core/"+want) {
			t.Errorf("commands.txt lacks %s, which the build names as init or shell", want)
		}
	}
}

// TestModules: each module list names the NICs and the disk QEMU gives the
// end-to-end tests' VMs (commissioning inventories the disk, deployment
// writes it; the appliance boots from it), and the appliance's list the file
// systems of its partitions, each once, in the spelling modules.dep uses.
func TestModules(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"modules.txt", []string{"virtio_net", "virtio_pci", "e1000", "virtio_blk"}},
		{"appliance-modules.txt", []string{"virtio_net", "virtio_pci", "e1000", "virtio_blk",
			"squashfs", "ext4", "crc32c_generic", "vfat", "nls_cp437"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			mods := list(t, tc.file)
			for _, want := range tc.want {
				if !slices.Contains(mods, want) {
					t.Errorf("%s lacks %s", tc.file, want)
				}
			}
			seen := map[string]bool{}
			for _, m := range mods {
				if seen[m] {
					t.Errorf("%s lists %s twice", tc.file, m)
				}
				seen[m] = true
				if strings.ContainsAny(m, " /.") {
					t.Errorf("%s: %q is not a module name", tc.file, m)
				}
			}
		})
	}
}
