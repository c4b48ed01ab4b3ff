package powertest

import (
	"time"

	"rackd/power"
)

// Driver is the fake as a program's [power.fake] section asks for it: every
// command takes latency; with a log path, the commands that took effect are
// appended to that file and replayed from it at start (OpenFake); with
// hangAfter above 0, commands hang once that many took effect (HangAfter).
// closeFn closes the log.
func Driver(latency time.Duration, log string, hangAfter int) (drv power.Driver, closeFn func() error, err error) {
	f := NewFake()
	if log != "" {
		if f, err = OpenFake(log); err != nil {
			return nil, nil, err
		}
	}
	f.SetLatency(latency)
	f.HangAfter(hangAfter)
	return f, f.Close, nil
}
