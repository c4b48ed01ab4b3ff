package dns

import (
	miekg "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"rackd/internal/promreg"
)

const (
	namespace = "rackd"
	subsystem = "dns"
)

// metrics are the server's series. They are registered on the registerer
// New is given (none when nil), never on a global one.
type metrics struct {
	queries   *prometheus.CounterVec
	duration  prometheus.Histogram
	dropped   prometheus.Counter
	malformed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "queries_total",
			Help: "DNS messages answered, by query type and response code.",
		}, []string{"qtype", "rcode"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "query_duration_seconds",
			Help:    "Time from a parsed DNS query to its reply being written.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 12),
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "dropped_total",
			Help: "UDP queries dropped unanswered because too many were in flight.",
		}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "malformed_total",
			Help: "Messages that could not be parsed (answered FORMERR when the header was readable, else dropped).",
		}),
	}
	// The series a dashboard expects exist at 0 from the start.
	for _, t := range []string{"A", "AAAA", "PTR"} {
		for _, rc := range []int{miekg.RcodeSuccess, miekg.RcodeNameError} {
			m.queries.WithLabelValues(t, miekg.RcodeToString[rc])
		}
	}
	if reg != nil {
		m.queries = promreg.Register(reg, m.queries)
		m.duration = promreg.Register(reg, m.duration)
		m.dropped = promreg.Register(reg, m.dropped)
		m.malformed = promreg.Register(reg, m.malformed)
	}
	return m
}

// qtypeLabel is the qtype label of a request: "none" when it has no single
// question, "other" for the types rackd never serves. The label is bounded on
// purpose: a query may carry any of 65536 types, and each must not become a
// series of its own.
func qtypeLabel(req *miekg.Msg) string {
	if len(req.Question) != 1 {
		return "none"
	}
	switch t := req.Question[0].Qtype; t {
	case miekg.TypeA, miekg.TypeAAAA, miekg.TypePTR, miekg.TypeANY,
		miekg.TypeSOA, miekg.TypeNS, miekg.TypeAXFR, miekg.TypeIXFR:
		return miekg.TypeToString[t]
	}
	return "other"
}

// rcodeLabel names an rcode, extended ones (BADVERS) included.
func rcodeLabel(rcode int) string {
	if s, ok := miekg.RcodeToString[rcode]; ok {
		return s
	}
	return "other"
}
