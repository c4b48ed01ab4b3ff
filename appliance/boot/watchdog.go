package boot

import "time"

// Watchdog is when the init pets the hardware watchdog (/dev/watchdog):
// through the boot's health window, while rackd comes up, and afterwards
// only while rackd answered /healthz within Grace. A kernel or init that
// hangs, or a rackd wedged for longer than Grace plus the watchdog's own
// timeout, gets the machine reset by the hardware; on a trial boot that
// is the fallback to the good slot that GRUB's boot counting makes.
type Watchdog struct {
	Boot   time.Time
	Window time.Duration
	Grace  time.Duration
}

// Pet reports whether to pet the watchdog now, rackd having last been
// healthy at lastHealthy (zero: never).
func (w Watchdog) Pet(now, lastHealthy time.Time) bool {
	if now.Before(w.Boot.Add(w.Window)) {
		return true
	}
	return !lastHealthy.IsZero() && now.Sub(lastHealthy) <= w.Grace
}
