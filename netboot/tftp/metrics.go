package tftp

import (
	"github.com/prometheus/client_golang/prometheus"

	"rackd/internal/promreg"
)

const (
	namespace = "rackd"
	subsystem = "tftp"
)

// Outcomes of a transfer, the label of transfers_total. The set is closed,
// so the label cannot grow with what clients send.
const (
	outcomeOK           = "ok"            // every block acknowledged
	outcomeNotFound     = "not_found"     // no such file
	outcomeRefused      = "refused"       // traversal, symlink out, invalid name
	outcomeWriteRefused = "write_refused" // a WRQ
	outcomeBusy         = "busy"          // no slot within QueueTimeout, or queue full
	outcomeShutdown     = "shutdown"      // cut short by Serve's context
	outcomeTimeout      = "timeout"       // the client stopped acknowledging
	outcomeAborted      = "aborted"       // the client sent an ERROR (e.g. after a tsize probe)
	outcomeMalformed    = "malformed"     // a packet to the server port that is no request, or mode "mail"
	outcomeError        = "error"         // a local failure (open, read, socket)
)

var outcomes = []string{
	outcomeOK, outcomeNotFound, outcomeRefused, outcomeWriteRefused, outcomeBusy,
	outcomeShutdown, outcomeTimeout, outcomeAborted, outcomeMalformed, outcomeError,
}

// metrics are the server's series, registered on the registerer New is
// given (none when nil), never on a global one.
type metrics struct {
	transfers  *prometheus.CounterVec
	duration   prometheus.Histogram
	bytes      prometheus.Counter // file bytes sent
	inFlight   prometheus.Gauge
	queued     prometheus.Gauge
	duplicates prometheus.Counter
	queueWait  prometheus.Histogram
	// configAnswer: rendered configs, from the request's arrival to the
	// first packet of the answer (see the package doc).
	configAnswer prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "transfers_total",
			Help: "TFTP requests handled, by outcome.",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "transfer_duration_seconds",
			Help: "Time from a read request to the last block acknowledged, of successful transfers (queueing included).",
			// 1 ms (a config) to about 2 min (a large initrd over a slow link).
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "bytes_total",
			Help: "File bytes sent in DATA packets (retransmissions not counted).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "transfers_in_flight",
			Help: "Transfers sending data now.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "transfers_queued",
			Help: "Requests waiting for a transfer slot.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "retransmitted_requests_total",
			Help: "Read requests ignored because the same client address and port was already being served or queued.",
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "queue_wait_seconds",
			Help: "Time transfers waited for a slot (0 when one was free), of transfers that got one.",
			// 1 ms to about 1 min: DefaultQueueTimeout is 10s.
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 11),
		}),
		configAnswer: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "config_answer_seconds",
			Help: "Time from a read request for a rendered config arriving to the first packet of its answer (OACK or DATA) sent.",
			// 20 µs to about 1.3 s, 25 % apart: fine enough to read a
			// p99 of a few hundred microseconds from it.
			Buckets: prometheus.ExponentialBuckets(20e-6, 1.25, 50),
		}),
	}
	for _, o := range outcomes {
		m.transfers.WithLabelValues(o)
	}
	if reg != nil {
		m.transfers = promreg.Register(reg, m.transfers)
		m.duration = promreg.Register(reg, m.duration)
		m.bytes = promreg.Register(reg, m.bytes)
		m.inFlight = promreg.Register(reg, m.inFlight)
		m.queued = promreg.Register(reg, m.queued)
		m.duplicates = promreg.Register(reg, m.duplicates)
		m.queueWait = promreg.Register(reg, m.queueWait)
		m.configAnswer = promreg.Register(reg, m.configAnswer)
	}
	return m
}

// outcome counts one request's end.
func (m *metrics) outcome(o string) { m.transfers.WithLabelValues(o).Inc() }
