package agent

import (
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"rackd/store"
)

const namespace = "rackd"

// metrics are rackd's own series, on a registry of its own (no globals), so
// that several agents can live in one test process.
type metrics struct {
	reg *prometheus.Registry

	httpRequests    *prometheus.CounterVec
	httpDuration    *prometheus.HistogramVec
	httpInFlight    prometheus.Gauge
	commits         prometheus.Counter
	commitOps       prometheus.Histogram
	commitDuration  prometheus.Histogram
	allocations     *prometheus.CounterVec
	transitions     *prometheus.CounterVec
	watchdogExpired *prometheus.CounterVec
	watchdogSweeps  *prometheus.CounterVec
	probeConflicts  prometheus.Counter
	metadata        *prometheus.CounterVec
}

func newMetrics(s func() *store.Store) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer HTTP requests, by method and route pattern.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method", "route"}),
		httpInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "http", Name: "requests_in_flight",
			Help: "HTTP requests being answered now.",
		}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "store", Name: "commits_total",
			Help: "Store transactions committed (each is one fsync).",
		}),
		commitOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "store", Name: "commit_operations",
			Help:    "Operations carried by one group commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		commitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "store", Name: "commit_duration_seconds",
			Help:    "Time to run and fsync one group commit.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
		}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "allocation_requests_total",
			Help: "Allocation requests by outcome: created, unchanged, adopted, or the refusal's code.",
		}, []string{"outcome"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "machine_transitions_total",
			Help: "Lifecycle transitions made, by action.",
		}, []string{"action"}),
		watchdogExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "watchdog_expired_total",
			Help: "Machines failed by the watchdog for staying too long, by the state they were in.",
		}, []string{"state"}),
		watchdogSweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "watchdog_sweeps_total",
			Help: "Watchdog sweeps (phase timeouts, expired leases, unfinished releases; one per lifecycle.watchdog_interval), " +
				"by outcome: ok, or error when a step of it failed (the log says which).",
		}, []string{"outcome"}),
	}
	m.probeConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "ipam", Name: "probe_conflicts_total",
		Help: "Candidate sticky addresses that answered an ARP probe and were quarantined.",
	})
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "Always 1; labels say which rackd is running.",
	}, []string{"version", "goversion", "schema"})
	buildInfo.WithLabelValues(Version, runtime.Version(), strconv.Itoa(store.SchemaVersion)).Set(1)
	// Pre-create the series a dashboard expects, so that they exist at 0.
	for _, o := range []string{"created", "unchanged", "adopted", string(store.CodeAllocated), string(store.CodeNoAvailableMachine)} {
		m.allocations.WithLabelValues(o)
	}
	for _, s := range []store.State{store.StateCommissioning, store.StateDeploying} {
		m.watchdogExpired.WithLabelValues(string(s))
	}
	for _, o := range []string{"ok", "error"} {
		m.watchdogSweeps.WithLabelValues(o)
	}
	m.metadata = newMetadataMetrics()
	reg.MustRegister(m.httpRequests, m.httpDuration, m.httpInFlight, m.commits, m.commitOps,
		m.commitDuration, m.allocations, m.transitions, m.watchdogExpired, m.watchdogSweeps, m.probeConflicts, buildInfo,
		m.metadata,
		&machineCollector{store: s}, &ipamCollector{store: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: namespace}))
	return m
}

func (m *metrics) onCommit(ops int, d time.Duration) {
	m.commits.Inc()
	m.commitOps.Observe(float64(ops))
	m.commitDuration.Observe(d.Seconds())
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: false})
}

// machineCollector reads the machine count per state at scrape time, so the
// gauge can never disagree with the store.
type machineCollector struct{ store func() *store.Store }

var machinesDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "machines"),
	"Machines by lifecycle state.", []string{"state"}, nil)

func (c *machineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- machinesDesc }

func (c *machineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.store()
	if s == nil {
		return
	}
	counts, err := s.CountByState()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(machinesDesc, err)
		return
	}
	for _, st := range store.States {
		ch <- prometheus.MustNewConstMetric(machinesDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}

// ipamCollector reads leases and pool use at scrape time.
type ipamCollector struct{ store func() *store.Store }

var (
	leasesDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "ipam", "active_leases"),
		"Live dynamic DHCP leases.", nil, nil)
	poolSizeDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "ipam", "pool_addresses"),
		"Addresses in the dynamic ranges of a subnet.", []string{"subnet"}, nil)
	poolUsedDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "ipam", "pool_used_addresses"),
		"Addresses of a subnet's dynamic ranges in use (leased, quarantined or held).", []string{"subnet"}, nil)
)

func (c *ipamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leasesDesc
	ch <- poolSizeDesc
	ch <- poolUsedDesc
}

func (c *ipamCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.store()
	if s == nil {
		return
	}
	leases, err := s.Leases()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(leasesDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(len(leases)))
	usage, err := s.PoolUsage()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(poolSizeDesc, err)
		return
	}
	for p, u := range usage {
		ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(u[0]), p.String())
		ch <- prometheus.MustNewConstMetric(poolUsedDesc, prometheus.GaugeValue, float64(u[1]), p.String())
	}
}
