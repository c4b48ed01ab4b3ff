package dhcp

import (
	"errors"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	namespace = "rackd"
	subsystem = "dhcp"
)

// Label values. Message types are the requests a server receives; outcomes
// are the replies it sends ("none" for RELEASE and DECLINE, which want
// none); reasons are why a request got no reply.
const (
	typeInvalid = "invalid" // not parseable as DHCPv4
	typeOther   = "other"   // parseable, but no or an unexpected message type

	outcomeOffer   = "offer"
	outcomeAck     = "ack"
	outcomeNak     = "nak"
	outcomeNone    = "none"
	outcomeDropped = "dropped"
	outcomeError   = "error"

	reasonQueueFull   = "queue_full"
	reasonMalformed   = "malformed"
	reasonNoSubnet    = "no_subnet"
	reasonOtherServer = "other_server"
	reasonExhausted   = "exhausted"
	reasonNotLeader   = "not_leader"
)

// typeLabel is the label of the message types a server handles, and
// typeOther for the rest.
func typeLabel(mt dhcpv4.MessageType) string {
	switch mt {
	case dhcpv4.MessageTypeDiscover:
		return "discover"
	case dhcpv4.MessageTypeRequest:
		return "request"
	case dhcpv4.MessageTypeDecline:
		return "decline"
	case dhcpv4.MessageTypeRelease:
		return "release"
	case dhcpv4.MessageTypeInform:
		return "inform"
	}
	return typeOther
}

// metrics are the server's Prometheus series, registered on the registerer
// given to New. The zero *metrics (nil) records nothing.
type metrics struct {
	received  *prometheus.CounterVec
	replies   *prometheus.CounterVec
	drops     *prometheus.CounterVec
	conflicts prometheus.Counter
	latency   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer, queueLen, socketDrops func() float64) (*metrics, error) {
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "packets_received_total",
			Help: "DHCP packets taken from the queue, by message type (invalid: not DHCPv4).",
		}, []string{"type"}),
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "replies_total",
			Help: "DHCP requests handled, by request type and outcome (offer, ack, nak; none for release and decline; dropped; error).",
		}, []string{"type", "outcome"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "drops_total",
			Help: "DHCP requests that got no reply, by reason.",
		}, []string{"reason"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "probe_conflicts_total",
			Help: "Addresses an ARP probe found in use before they were offered.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "reply_duration_seconds",
			Help: "Time from receiving a request to sending its reply, by request type.",
			// From a memory-only answer (tens of µs) to a durable ACK
			// under a slow disk; clients retransmit after about 4 s.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"type"}),
	}
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "queue_length",
		Help: "DHCP packets waiting for a worker.",
	}, queueLen)
	kernelDrops := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "socket_drops_total",
		Help: "DHCP packets the kernel dropped before rackd read them (socket receive buffer full), over the sockets served.",
	}, socketDrops)
	// Every series that can occur exists from the start, so that rates
	// and absent() work before the first packet (and no dead ones).
	for _, t := range []string{"discover", "request", "decline", "release", "inform", typeOther, typeInvalid} {
		m.received.WithLabelValues(t)
	}
	for t, outcomes := range map[string][]string{
		"discover": {outcomeOffer, outcomeDropped, outcomeError},
		"request":  {outcomeAck, outcomeNak, outcomeDropped, outcomeError},
		"inform":   {outcomeAck, outcomeDropped, outcomeError},
		"release":  {outcomeNone, outcomeDropped, outcomeError},
		"decline":  {outcomeNone, outcomeDropped, outcomeError},
		typeOther:  {outcomeDropped},
	} {
		for _, o := range outcomes {
			m.replies.WithLabelValues(t, o)
		}
	}
	for _, r := range []string{reasonQueueFull, reasonMalformed, reasonNoSubnet, reasonOtherServer, reasonExhausted, reasonNotLeader} {
		m.drops.WithLabelValues(r)
	}
	for _, t := range []string{"discover", "request", "inform"} {
		m.latency.WithLabelValues(t)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.received, m.replies, m.drops, m.conflicts, m.latency, queue, kernelDrops} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

func (m *metrics) drop(reason string) {
	if m != nil {
		m.drops.WithLabelValues(reason).Inc()
	}
}

// dropReason tells whether err is a reason not to reply rather than a
// failure, and which.
func dropReason(err error) (string, bool) {
	switch {
	case errors.Is(err, ErrMalformed):
		return reasonMalformed, true
	case errors.Is(err, ErrNoSubnet):
		return reasonNoSubnet, true
	case errors.Is(err, ErrOtherServer):
		return reasonOtherServer, true
	case errors.Is(err, ErrExhausted):
		return reasonExhausted, true
	case errors.Is(err, ErrNotLeader):
		return reasonNotLeader, true
	}
	return "", false
}

// observe records one handled request.
func (m *metrics) observe(typ, outcome string, took time.Duration, replied bool) {
	if m == nil {
		return
	}
	m.replies.WithLabelValues(typ, outcome).Inc()
	if replied {
		m.latency.WithLabelValues(typ).Observe(took.Seconds())
	}
}

// replyOutcome is the outcome label of a reply.
func replyOutcome(reply *dhcpv4.DHCPv4) string {
	switch messageType(reply) {
	case dhcpv4.MessageTypeOffer:
		return outcomeOffer
	case dhcpv4.MessageTypeAck:
		return outcomeAck
	case dhcpv4.MessageTypeNak:
		return outcomeNak
	}
	return outcomeError
}
