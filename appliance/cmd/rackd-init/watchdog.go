//go:build linux

package main

import (
	"context"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"rackd/appliance/boot"
)

// Watchdog settings: the hardware resets the machine when not petted for
// watchdogTimeout; the init pets it every watchdogPet while boot.Watchdog
// says so.
const (
	watchdogTimeout = 60 * time.Second
	watchdogPet     = 10 * time.Second
	watchdogGrace   = 2 * time.Minute
)

// startWatchdog arms ROOT/dev/watchdog when there is one (QEMU's i6300esb,
// a server's iTCO_wdt) and pets it as boot.Watchdog says, checking rackd's
// health itself. The returned disarm stops petting and, for a stop that
// is not a reboot, disarms the hardware (the magic close).
func (s *initState) startWatchdog(ctx context.Context, start time.Time, window time.Duration, port int) (disarm func()) {
	f, err := os.OpenFile(s.path("dev/watchdog"), os.O_WRONLY, 0)
	if err != nil {
		return func() {}
	}
	secs := int(watchdogTimeout / time.Second)
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.WDIOC_SETTIMEOUT, secs); err != nil {
		s.say("watchdog: set its timeout to %ds: %v (its own timeout applies)", secs, err)
	}
	s.say("watchdog armed: the machine resets if rackd is not healthy for %s after the health window", watchdogGrace+watchdogTimeout)
	policy := boot.Watchdog{Boot: start, Window: window, Grace: watchdogGrace}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	client := &http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(done)
		var lastHealthy time.Time
		for {
			if boot.Check(ctx, client, boot.HealthURL(port)) == nil {
				lastHealthy = time.Now()
			}
			if policy.Pet(time.Now(), lastHealthy) {
				f.Write([]byte{0})
			}
			if sleep(ctx, watchdogPet) != nil {
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			f.Write([]byte("V"))
			f.Close()
		})
	}
}
