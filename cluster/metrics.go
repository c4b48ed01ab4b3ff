package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

const namespace, subsystem = "rackd", "cluster"

// metrics are a node's series. Leader keys are bounded: one per managed
// subnet and one per power shard.
type metrics struct {
	leader      *prometheus.GaugeVec
	changes     *prometheus.CounterVec
	fenced      *prometheus.CounterVec
	sessions    prometheus.Counter
	latency     prometheus.Histogram
	probeErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "leader",
			Help: "1 while this agent leads the election (kind dhcp: key is a subnet; kind power: key is a BMC shard), else 0.",
		}, []string{"kind", "key"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "leadership_changes_total",
			Help: "Leaderships this agent won or lost, by kind.",
		}, []string{"kind"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "fenced_writes_total",
			Help: "Writes refused by etcd because the leadership they relied on was lost meanwhile, by kind.",
		}, []string{"kind"}),
		sessions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "sessions_lost_total",
			Help: "etcd sessions this agent lost (its lease expired) and made again.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "etcd_request_duration_seconds",
			Help:    "Time of a linearizable etcd read (the agent reads its own registration every half session TTL).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		probeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "etcd_request_errors_total",
			Help: "Those periodic etcd reads that failed.",
		}),
	}
	for _, k := range []Kind{KindDHCP, KindPower} {
		m.changes.WithLabelValues(string(k))
		m.fenced.WithLabelValues(string(k))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.leader, m.changes, m.fenced, m.sessions, m.latency, m.probeErrors} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
