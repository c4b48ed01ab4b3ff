package tftp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"

	"github.com/pin/tftp/v3"
	"github.com/prometheus/client_golang/prometheus"

	"rackd/netboot/files"

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
	outcomeMalformed    = "malformed"     // a packet to the server port the library could not use
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
	bytes      prometheus.Counter
	inFlight   prometheus.Gauge
	queued     prometheus.Gauge
	duplicates prometheus.Counter
	queueWait  prometheus.Histogram
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
	}
	return m
}

// hook receives the end of every transfer from the library (tftp.Hook). It
// runs on the transfer's goroutine.
type hook struct{ s *Server }

// OnSuccess counts a transfer whose last block was acknowledged.
func (h hook) OnSuccess(st tftp.TransferStats) {
	h.s.m.transfers.WithLabelValues(outcomeOK).Inc()
	h.s.m.duration.Observe(st.Duration.Seconds())
	h.s.log.Debug("tftp: sent", "client", clientOf(st), "file", st.Filename,
		"duration", st.Duration, "blksize", st.Opts["blksize"], "tsize", st.Opts["tsize"],
		"datagrams", st.DatagramsSent)
}

// OnFailure counts a transfer that ended early, or a packet the library's
// server loop could not use (st is then empty).
func (h hook) OnFailure(st tftp.TransferStats, err error) {
	o := outcome(st, err)
	h.s.m.transfers.WithLabelValues(o).Inc()
	lvl := slog.LevelDebug
	if o == outcomeError {
		lvl = slog.LevelWarn
	}
	h.s.log.Log(context.Background(), lvl, "tftp: transfer failed", "client", clientOf(st), "file", st.Filename,
		"outcome", o, "err", err, "duration", st.Duration)
}

// outcome classifies a failure.
func outcome(st tftp.TransferStats, err error) string {
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.Is(err, files.ErrNotFound):
		return outcomeNotFound
	case errors.Is(err, files.ErrRefused):
		return outcomeRefused
	case errors.Is(err, errWriteRefused):
		return outcomeWriteRefused
	case errors.Is(err, errBusy):
		return outcomeBusy
	case errors.Is(err, errShutdown):
		return outcomeShutdown
	case errors.Is(err, errOpen), errors.Is(err, errRead):
		return outcomeError
	case errors.As(err, &ne) && ne.Timeout():
		return outcomeTimeout
	case errors.As(err, &oe):
		return outcomeError // a socket the library could not open or use
	case st.Filename == "" && st.Tid == 0:
		return outcomeMalformed
	}
	// What is left is the library's "sending block N: code=C, error: M":
	// the client ended the transfer, as firmware does on purpose after
	// reading tsize from the OACK of a probe request.
	return outcomeAborted
}

func clientOf(st tftp.TransferStats) string {
	if st.RemoteAddr == nil {
		return ""
	}
	return net.JoinHostPort(st.RemoteAddr.String(), strconv.Itoa(st.Tid))
}
