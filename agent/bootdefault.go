package agent

import (
	"context"
	"sync"

	"rackd/netboot/bootconf"
)

// defaultFirst implements boot.default_first: the first n per-MAC config
// requests of each MAC are answered as if the MAC were unknown, so that a
// known machine boots the default (enlistment) environment, as it does in
// the field when its firmware gives up on a slow per-MAC answer and falls
// back to the default config. It exists so that tests and drills
// can reproduce that case on demand; production leaves it at 0.
type defaultFirst struct {
	n    int
	mu   sync.Mutex
	seen map[string]int
}

// maxDefaultFirstMACs bounds the MACs remembered: a client inventing MACs
// cannot grow the map without limit. Past it, every MAC gets its real
// config, which is the safe side.
const maxDefaultFirstMACs = 4096

func newDefaultFirst(n int) *defaultFirst {
	if n <= 0 {
		return nil
	}
	return &defaultFirst{n: n, seen: map[string]int{}}
}

// take reports whether this request of mac must get the default config,
// and counts it.
func (d *defaultFirst) take(mac string) bool {
	if d == nil || mac == "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.seen[mac]
	if !ok && len(d.seen) >= maxDefaultFirstMACs {
		return false
	}
	if c >= d.n {
		return false
	}
	d.seen[mac] = c + 1
	return true
}

// unknownMachines is a bootconf.Source that knows no machine: a per-MAC
// config rendered from it is the default one.
type unknownMachines struct{ bootconf.Source }

func (unknownMachines) Machine(context.Context, string) (bootconf.MachineInfo, bool, error) {
	return bootconf.MachineInfo{}, false, nil
}
