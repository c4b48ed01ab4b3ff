// Package promreg registers Prometheus collectors so that several servers
// (one per listen address, say) can share one registry.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c, or returns the collector already registered under
// the same description, so that two servers on one registry add up into the
// same series.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	// A name clash with a different kind of metric is a programming error,
	// as it is for MustRegister.
	panic(err)
}
