package boot

import (
	"bufio"
	"io"
	"path"
	"strings"
)

// ModuleAliases are, per kernel module, the device patterns of its
// modules.alias lines ("alias pci:v00001AF4d*sv*... virtio_pci"): the
// modaliases of the devices it drives. Aliases that name no device
// ("fs-ext4", "crypto-crc32c") are not kept.
type ModuleAliases map[string][]string

// ParseModuleAliases reads a modules.alias file (depmod's format). Module
// names are normalised as the kernel does: '-' and '_' are the same.
func ParseModuleAliases(r io.Reader) (ModuleAliases, error) {
	out := ModuleAliases{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "alias" {
			continue
		}
		pattern, mod := f[1], moduleName(f[2])
		if !strings.Contains(pattern, ":") {
			continue
		}
		out[mod] = append(out[mod], pattern)
	}
	return out, sc.Err()
}

func moduleName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// ModulesFor picks, from candidates in their order, the modules worth
// loading now, as udev's coldplug would: a module without device aliases
// (a file system, a character set, a checksum) always; a driver only when a
// present device's modalias matches one of its patterns. A driver for
// hardware this machine lacks costs a module load (a signature check, the
// driver's init) on every boot for nothing. Devices appear as their bus
// drivers load (virtio_pci makes the virtio devices virtio_blk drives), so
// the caller asks again with the new modaliases until nothing is added;
// skip holds what was already loaded or tried.
func ModulesFor(candidates []string, aliases ModuleAliases, modaliases []string, skip map[string]bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range candidates {
		m := moduleName(c)
		if skip[m] || seen[m] {
			continue
		}
		patterns, isDriver := aliases[m]
		if isDriver && !matchesAny(patterns, modaliases) {
			continue
		}
		seen[m] = true
		out = append(out, c)
	}
	return out
}

func matchesAny(patterns, modaliases []string) bool {
	for _, p := range patterns {
		for _, a := range modaliases {
			// Modaliases hold no '/', so path.Match's '*' spans the
			// whole string, as fnmatch does for the kernel's patterns.
			if ok, err := path.Match(p, a); err == nil && ok {
				return true
			}
		}
	}
	return false
}
