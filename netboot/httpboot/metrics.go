package httpboot

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/internal/promreg"
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
		m.requests = promreg.Register(reg, m.requests)
		m.bytes = promreg.Register(reg, m.bytes)
	}
	return m
}
