//go:build linux

package main

import (
	"os"
	"path/filepath"
	"sync"

	"rackd/appliance/boot"
)

// watchPowerKey watches every ROOT/dev/input/event* device (the ACPI
// power button's is one, with the button and evdev modules loaded) and
// closes the channel at the first power key press. Without input devices
// it never closes.
func (s *initState) watchPowerKey() <-chan struct{} {
	pressed := make(chan struct{})
	devs, _ := filepath.Glob(s.path("dev/input/event*"))
	var once sync.Once
	for _, dev := range devs {
		go func() {
			// A device that cannot be opened or read is not the
			// power button's.
			f, err := os.Open(dev)
			if err != nil {
				return
			}
			defer f.Close()
			if boot.WaitPowerKey(f) == nil {
				once.Do(func() { close(pressed) })
			}
		}()
	}
	return pressed
}
