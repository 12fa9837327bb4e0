// Package metrics exposes a node's figures to Prometheus: GET /metrics on
// the HTTP port, in the Prometheus text format or OpenMetrics by content
// negotiation.
//
// The packages below it (storage, broker, server, raft, replication) keep
// plain atomic counters, fixed-bucket histograms (internal/metrics/hist)
// and snapshot methods, and never import the Prometheus client: this
// package reads them when a scrape comes, through one custom collector,
// so a node nobody scrapes pays only the counters. The figures that cost
// a walk of the metadata (per-topic sizes, the cluster's replication
// state) are computed at most once per CacheFor, however many scrapers
// ask; consumer-group lag, which reads the log, is computed by one
// goroutine every LagEvery within a time and byte budget, and a scrape
// shows its last result.
//
// Each Metrics has its own registry, never the global default, so
// several nodes run in one process (the tests do) without colliding.
//
// Label cardinality is bounded: topics by MaxTopics (the first, by name,
// get their own series; the rest are summed under topic="_other"),
// consumer groups by MaxGroups, raft groups (only with RaftGroupSeries)
// by the node's vnodes, reasons by the wire's fixed set. docs/operations.md lists every series.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/server"
)

// Defaults of Options.
const (
	DefaultMaxTopics = 1000
	DefaultMaxGroups = 1000
	DefaultCacheFor  = 5 * time.Second
	// DefaultLagEvery is how often consumer-group lag is computed.
	DefaultLagEvery = 15 * time.Second
	// DefaultLagTime bounds one computation of the lag.
	DefaultLagTime = 5 * time.Second
	// DefaultLagBytes bounds what one computation reads to date the
	// groups' oldest unread records.
	DefaultLagBytes = 16 << 20
	// DefaultAuthCacheFor is how long a verified scrape credential is
	// trusted before it is checked again.
	DefaultAuthCacheFor = 30 * time.Second
	// OtherTopic is the topic label of the topics past MaxTopics.
	OtherTopic = "_other"
)

// Options bound what a scrape costs and shows. Zero values take the
// defaults.
type Options struct {
	// MaxTopics is how many topics (the first by name) get series of
	// their own; the rest are summed under topic="_other".
	MaxTopics int
	// MaxGroups is how many consumer groups (by topic, then group name)
	// get lag series; the rest are left out and counted.
	MaxGroups int
	// CacheFor is how long the per-topic and cluster figures are reused
	// between scrapes.
	CacheFor time.Duration
	// LagEvery is the period of the consumer-group lag computation, which
	// runs on a goroutine of its own from the first scrape on; scrapes
	// show its last result and never wait for it.
	LagEvery time.Duration
	// LagTime and LagBytes bound one lag computation: its duration, and
	// the bytes it reads from this node's segment copies (see
	// broker.GroupLags).
	LagTime  time.Duration
	LagBytes int
	// RaftGroupSeries adds series per hosted raft group (apply lag,
	// leader, term) to the node's aggregates: one set per vnode.
	RaftGroupSeries bool
	// Access, when set, checks the credentials of every scrape (see
	// Handler); nil serves /metrics to anyone who reaches the port.
	Access Access
	// AuthCacheFor is how long a verified credential is trusted.
	AuthCacheFor time.Duration
	// Clock drives the lag computation's period (default the real one);
	// Now, when set, is the time series are dated by (default
	// Clock.Now). Tests step them.
	Clock clock.Clock
	Now   func() time.Time
}

func (o Options) withDefaults() Options {
	if o.MaxTopics <= 0 {
		o.MaxTopics = DefaultMaxTopics
	}
	if o.MaxGroups <= 0 {
		o.MaxGroups = DefaultMaxGroups
	}
	if o.CacheFor <= 0 {
		o.CacheFor = DefaultCacheFor
	}
	if o.LagEvery <= 0 {
		o.LagEvery = DefaultLagEvery
	}
	if o.LagTime <= 0 {
		o.LagTime = DefaultLagTime
	}
	o.LagTime = min(o.LagTime, o.LagEvery)
	if o.LagBytes <= 0 {
		o.LagBytes = DefaultLagBytes
	}
	if o.AuthCacheFor <= 0 {
		o.AuthCacheFor = DefaultAuthCacheFor
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.Now == nil {
		o.Now = o.Clock.Now
	}
	return o
}

// Metrics is one node's registry.
type Metrics struct {
	reg  *prometheus.Registry
	col  *collector
	gate *gate // nil: open
}

// New registers the node's collector, and the Go runtime and process
// collectors, on a registry of its own. srv may be nil (a node without a
// client port reports no traffic).
func New(b *broker.Broker, srv *server.Server, opts Options) *Metrics {
	opts = opts.withDefaults()
	m := &Metrics{reg: prometheus.NewRegistry()}
	if opts.Access != nil {
		m.gate = newGate(opts.Access, opts.AuthCacheFor, opts.Now)
	}
	m.col = newCollector(nodeSource{b: b, srv: srv}, opts, m.gate)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.col,
	)
	return m
}

// Close stops the lag computation and waits for it to end.
func (m *Metrics) Close() { m.col.lag.close() }

// Registry is the node's registry, for tests and for adding collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry: the Prometheus text format, or
// OpenMetrics to a scraper that asks for it. A scrape that fails midway
// answers 500 with what went wrong rather than a partial page. With
// Options.Access, a scrape must carry credentials (see gate).
func (m *Metrics) Handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		EnableOpenMetrics:   true,
		ErrorHandling:       promhttp.HTTPErrorOnError,
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	})
	if m.gate == nil {
		return h
	}
	return m.gate.wrap(h)
}
