package httpboot

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	namespace = "rackd"
	subsystem = "httpboot"
)

// codes are the status codes the handler answers, each a series from the
// start.
var codes = []int{
	http.StatusOK, http.StatusPartialContent, http.StatusNotModified,
	http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound,
	http.StatusMethodNotAllowed, http.StatusPreconditionFailed,
	http.StatusRequestedRangeNotSatisfiable, http.StatusInternalServerError,
	http.StatusServiceUnavailable,
}

// metrics are the handler's series, registered on the registerer New is
// given (none when nil), never on a global one.
type metrics struct {
	requests *prometheus.CounterVec
	bytes    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "requests_total",
			Help: "HTTP boot requests answered, by status code.",
		}, []string{"code"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "bytes_total",
			Help: "Response body bytes sent.",
		}),
	}
	for _, c := range codes {
		m.requests.WithLabelValues(strconv.Itoa(c))
	}
	m.requests.WithLabelValues("other")
	if reg != nil {
		m.requests = register(reg, m.requests)
		m.bytes = register(reg, m.bytes)
	}
	return m
}

// register registers c, or returns the collector already registered under
// the same description, so that two handlers can share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
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
	panic(err) // a clash with another kind of metric: a programming error
}
