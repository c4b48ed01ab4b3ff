// Package boot is the appliance init's logic that can be tested without
// being PID 1: the kernel command line, the init's own configuration, the
// partitions found by name, the data partition's first-boot defaults,
// rackd's supervision (backoff, log rotation) and its health check. The
// program that does it all on the appliance is appliance/cmd/rackd-init,
// whose documentation describes the boot step by step.
package boot

import (
	"fmt"
	"strings"
	"time"
)

// Cmdline is what the appliance's GRUB config puts on the kernel command
// line for the init.
type Cmdline struct {
	// Slot is the booted slot, "a" or "b" (rackd.slot=); empty when the
	// command line does not say.
	Slot string
	// Trial is a one-shot boot of a newly written slot (rackd.trial=1):
	// it must come up healthy to be marked good.
	Trial bool
	// FactoryReset asks for the data partition to be formatted again
	// (rackd.factory_reset=1).
	FactoryReset bool
	// HealthWindow overrides the health window of the config
	// (rackd.health_window=90s); 0 when absent.
	HealthWindow time.Duration
	// Modules are extra kernel modules to load (rackd.modules=a,b).
	Modules []string
}

// ParseCmdline reads the rackd.* parameters of a kernel command line
// (/proc/cmdline). Unknown parameters are the kernel's and other
// programs': ignored. A rackd.* parameter with a bad value is an error.
func ParseCmdline(s string) (Cmdline, error) {
	var c Cmdline
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "rackd.slot":
			if v != "a" && v != "b" {
				return Cmdline{}, fmt.Errorf("kernel command line: rackd.slot=%q, want a or b", v)
			}
			c.Slot = v
		case "rackd.trial", "rackd.factory_reset":
			b, err := flag01(k, v)
			if err != nil {
				return Cmdline{}, err
			}
			if k == "rackd.trial" {
				c.Trial = b
			} else {
				c.FactoryReset = b
			}
		case "rackd.health_window":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Cmdline{}, fmt.Errorf("kernel command line: rackd.health_window=%q, want a positive duration such as 90s", v)
			}
			c.HealthWindow = d
		case "rackd.modules":
			for m := range strings.SplitSeq(v, ",") {
				if m = strings.TrimSpace(m); m != "" {
					c.Modules = append(c.Modules, m)
				}
			}
		}
	}
	return c, nil
}

// flag01 is a boolean parameter: 1 or 0 (a bare "rackd.trial" is 1).
func flag01(k, v string) (bool, error) {
	switch v {
	case "1", "":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("kernel command line: %s=%q, want 1 or 0", k, v)
}
