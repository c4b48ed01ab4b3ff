package powertest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"rackd/power"
)

var fakeAddr atomic.Int64

func TestFakeConformance(t *testing.T) {
	Conformance(t, func(t *testing.T) Subject {
		f := NewFake()
		f.SetLatency(time.Millisecond)
		tg := power.Target{Driver: "fake", Address: fmt.Sprintf("10.0.0.%d", fakeAddr.Add(1)), Username: "u"}
		return Subject{
			Driver: f,
			Target: tg,
			Hang: func(t *testing.T) func() {
				f.Hang(tg.Address)
				return func() { f.Release(tg.Address) }
			},
		}
	})
}
