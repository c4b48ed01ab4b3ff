package queue

import (
	"github.com/prometheus/client_golang/prometheus"

	"rackd/internal/promreg"
	"rackd/store"
)

// Metrics are the queue's series (rackd_power_*).
type Metrics struct {
	reg         prometheus.Registerer
	inFlight    prometheus.Gauge
	requests    *prometheus.CounterVec
	cmdDuration *prometheus.HistogramVec
	commands    prometheus.Counter
	bmcErrors   *prometheus.CounterVec
	drift       *prometheus.CounterVec
	queueWait   prometheus.Histogram
}

// NewMetrics registers the queue's metrics on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "rackd", Subsystem: "power", Name: "commands_in_flight",
			Help: "BMC commands on the wire now.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "rackd", Subsystem: "power", Name: "requests_total",
			Help: "Power requests ended, by action and outcome (done, failed, superseded).",
		}, []string{"action", "outcome"}),
		cmdDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "rackd", Subsystem: "power", Name: "command_duration_seconds",
			Help:    "Time of one BMC command, by driver and action (on, off, cycle, status, set_boot).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"driver", "action"}),
		commands: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "rackd", Subsystem: "power", Name: "commands_total",
			Help: "BMC commands sent.",
		}),
		bmcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "rackd", Subsystem: "power", Name: "bmc_errors_total",
			Help: "Failed BMC commands by kind (timeout, auth, unreachable, bmc, unsupported, other, circuit_open).",
		}, []string{"kind"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "rackd", Subsystem: "power", Name: "drift_total",
			Help: "Machines seen away from their desired power (detected), and corrections queued under enforce (corrected).",
		}, []string{"event"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "rackd", Subsystem: "power", Name: "queue_wait_seconds",
			Help:    "Time from a request's acceptance to its start.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}),
	}
	for _, kind := range []string{"timeout", "auth", "unreachable", "bmc", "unsupported", "other", "circuit_open"} {
		m.bmcErrors.WithLabelValues(kind)
	}
	for _, e := range []string{"detected", "corrected"} {
		m.drift.WithLabelValues(e)
	}
	// Every action and outcome exists from the start, so that a rate of
	// requests ended is 0, not empty, before the first one ends.
	for _, a := range []store.PowerAction{store.PowerOn, store.PowerOff, store.PowerCycle, store.PowerQuery} {
		for _, o := range []store.PowerRequestState{store.PowerDone, store.PowerFailed, store.PowerSuperseded} {
			m.requests.WithLabelValues(string(a), string(o))
		}
	}
	if reg != nil {
		m.inFlight = promreg.Register(reg, m.inFlight)
		m.requests = promreg.Register(reg, m.requests)
		m.cmdDuration = promreg.Register(reg, m.cmdDuration)
		m.commands = promreg.Register(reg, m.commands)
		m.bmcErrors = promreg.Register(reg, m.bmcErrors)
		m.drift = promreg.Register(reg, m.drift)
		m.queueWait = promreg.Register(reg, m.queueWait)
	}
	return m
}

// watch adds the series read from the queue at scrape time.
func (m *Metrics) watch(q *Queue) {
	if m.reg == nil {
		return
	}
	promreg.Register(m.reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "rackd", Subsystem: "power", Name: "queue_depth",
		Help: "Power requests pending or running.",
	}, func() float64 {
		n, _ := q.st.OpenPowerCount()
		return float64(n)
	}))
	promreg.Register(m.reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "rackd", Subsystem: "power", Name: "circuit_breakers_open",
		Help: "BMCs whose circuit breaker is open (commands refused without reaching them).",
	}, func() float64 { o, _ := q.breakers(); return float64(o) }))
	promreg.Register(m.reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "rackd", Subsystem: "power", Name: "circuit_breakers_half_open",
		Help: "BMCs whose circuit breaker lets one probe command through.",
	}, func() float64 { _, h := q.breakers(); return float64(h) }))
	// The bound is a series so that alerts compare command times with the
	// timeout this rackd runs with, not with a number copied into them.
	timeout := q.cfg.CommandTimeout.Seconds()
	promreg.Register(m.reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "rackd", Subsystem: "power", Name: "command_timeout_seconds",
		Help: "The bound of one BMC command (power.command_timeout); a command still unanswered then fails as a timeout.",
	}, func() float64 { return timeout }))
	promreg.Register(m.reg, &failingBMCs{q: q})
}

// failingBMCsDesc names the BMCs that fail now, so that an alert can say
// which one to look at; a BMC whose last command worked has no series, so
// the set stays as small as the set of broken BMCs.
var failingBMCsDesc = prometheus.NewDesc("rackd_power_bmc_consecutive_failures",
	"Failed commands in a row of each BMC whose last command failed, by BMC address (a success removes the series; "+
		"at power.breaker_threshold its circuit breaker opens).",
	[]string{"bmc"}, nil)

// failingBMCs collects rackd_power_bmc_consecutive_failures at scrape time.
type failingBMCs struct{ q *Queue }

func (c *failingBMCs) Describe(ch chan<- *prometheus.Desc) { ch <- failingBMCsDesc }

func (c *failingBMCs) Collect(ch chan<- prometheus.Metric) {
	for addr, n := range c.q.failingBMCs() {
		ch <- prometheus.MustNewConstMetric(failingBMCsDesc, prometheus.GaugeValue, float64(n), addr)
	}
}
