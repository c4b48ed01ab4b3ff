package boot

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// NIC is a physical network interface.
type NIC struct {
	Name string
	// Bus is the device's path under /sys/devices (its PCI path), which
	// orders NICs as the hardware does whatever the kernel named them.
	Bus string
}

// NICs lists the physical Ethernet interfaces in sysDir (/sys), in PCI
// path order: interfaces with a device link, of type 1 (Ethernet), and a
// MAC of their own (not a random one).
func NICs(sysDir string) ([]NIC, error) {
	dir := filepath.Join(sysDir, "class", "net")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []NIC
	for _, e := range ents {
		d := filepath.Join(dir, e.Name())
		dev, err := filepath.EvalSymlinks(filepath.Join(d, "device"))
		if err != nil || e.Name() == "lo" {
			continue
		}
		if t, _ := os.ReadFile(filepath.Join(d, "type")); strings.TrimSpace(string(t)) != "1" {
			continue
		}
		out = append(out, NIC{Name: e.Name(), Bus: dev})
	}
	slices.SortFunc(out, func(a, b NIC) int { return cmp.Or(strings.Compare(a.Bus, b.Bus), strings.Compare(a.Name, b.Name)) })
	return out, nil
}

// Names is the NICs' names, in order.
func Names(nics []NIC) []string {
	out := make([]string, len(nics))
	for i, n := range nics {
		out[i] = n.Name
	}
	return out
}
