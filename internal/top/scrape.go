// Package top turns scrapes of the nodes' /metrics into the figures
// `malachi top` shows: rates from the difference of two scrapes (counter
// resets handled), latency quantiles from the difference of histogram
// buckets, the cluster's topics and consumer groups, and their rendering
// as text or JSON. It does no I/O of its own and reads no clock: the
// caller scrapes, dates each scrape and hands the texts in.
package top

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxScrapeBytes bounds one scrape's text: a node's page is tens of KB
// (about 30 KB with 50 topics); one past this is refused rather than
// parsed.
const MaxScrapeBytes = 16 << 20

// Limits of what one scrape holds: past them, topics and groups are
// counted in Scrape.Dropped and left out.
const (
	MaxScrapeTopics = 10000
	MaxScrapeGroups = 10000
)

// Series the view reads, as internal/metrics names them.
const (
	seriesRecordsProduced = "malachi_records_produced_total"
	seriesBytesProduced   = "malachi_bytes_produced_total"
	seriesRecordsConsumed = "malachi_records_consumed_total"
	seriesBytesConsumed   = "malachi_bytes_consumed_total"
	seriesProduceLatency  = "malachi_produce_latency_seconds"
	seriesFsyncLatency    = "malachi_storage_fsync_latency_seconds"
	seriesConnections     = "malachi_connections_open"
	seriesGroupsLed       = "malachi_raft_groups_led"
	seriesUnderReplicated = "malachi_under_replicated_segments"
	seriesHealing         = "malachi_healing_segments"
	seriesDamaged         = "malachi_damaged_copies"
	seriesDiskState       = "malachi_storage_disk_state"
	seriesTopicRanges     = "malachi_topic_ranges"
	seriesTopicBytes      = "malachi_topic_bytes"
	seriesTopicRecords    = "malachi_topic_records"
	seriesLagRecords      = "malachi_consumer_group_lag_records"
	seriesLagSeconds      = "malachi_consumer_group_lag_seconds"
	seriesUptime          = "malachi_uptime_seconds"
)

// Scrape is what one node's /metrics said at At, reduced to the figures
// the view needs. A failed scrape has Err set and no figures. A series
// the node did not export is absent from Values (a node older than the
// series, or a single node without raft), which the view shows as
// unknown rather than 0.
type Scrape struct {
	At  time.Time
	Err string
	// Values holds the plain series by name (counters and gauges without
	// labels).
	Values map[string]float64
	// Histograms holds the latency histograms by name.
	Histograms map[string]Histogram
	// Disk is the label of malachi_storage_disk_state that is 1.
	Disk   string
	Topics map[string]TopicFigures
	// Lags is keyed by topic, then group.
	Lags    map[GroupKey]Lag
	Dropped int
}

// TopicFigures are one topic's gauges.
type TopicFigures struct {
	Ranges  float64
	Bytes   float64
	Records float64
}

// GroupKey names a consumer group of a topic.
type GroupKey struct{ Topic, Group string }

// Lag is a group's lag; Seconds is NaN when the node could not date it.
type Lag struct {
	Records float64
	Seconds float64
}

// Histogram is a cumulative histogram: Buckets by ascending upper bound,
// the +Inf bucket's count being Count.
type Histogram struct {
	Buckets []Bucket
	Count   float64
	Sum     float64
}

// Bucket is the count of observations at most Le.
type Bucket struct {
	Le    float64
	Count float64
}

// Failed is the scrape of a node that did not answer.
func Failed(at time.Time, err error) Scrape {
	return Scrape{At: at, Err: err.Error()}
}

// ErrTooLarge refuses a page past MaxScrapeBytes.
var ErrTooLarge = fmt.Errorf("metrics page larger than %d bytes", MaxScrapeBytes)

// Parse reads one page of the Prometheus text format (at most
// MaxScrapeBytes) taken at at.
func Parse(r io.Reader, at time.Time) (Scrape, error) {
	lr := &io.LimitedReader{R: r, N: MaxScrapeBytes + 1}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(lr)
	if lr.N <= 0 {
		return Scrape{}, ErrTooLarge
	}
	if err != nil {
		return Scrape{}, fmt.Errorf("metrics page: %w", err)
	}
	return reduce(fams, at), nil
}

func reduce(fams map[string]*dto.MetricFamily, at time.Time) Scrape {
	s := Scrape{At: at, Values: map[string]float64{}, Histograms: map[string]Histogram{},
		Topics: map[string]TopicFigures{}, Lags: map[GroupKey]Lag{}}
	for _, name := range []string{seriesRecordsProduced, seriesBytesProduced, seriesRecordsConsumed, seriesBytesConsumed,
		seriesConnections, seriesGroupsLed, seriesUnderReplicated, seriesHealing, seriesDamaged, seriesUptime} {
		if v, ok := plain(fams[name]); ok {
			s.Values[name] = v
		}
	}
	for _, name := range []string{seriesProduceLatency, seriesFsyncLatency} {
		if h, ok := histogram(fams[name]); ok {
			s.Histograms[name] = h
		}
	}
	for _, m := range metricsOf(fams[seriesDiskState]) {
		if value(m) == 1 {
			s.Disk = label(m, "state")
		}
	}
	s.topics(fams)
	s.lags(fams)
	return s
}

func (s *Scrape) topics(fams map[string]*dto.MetricFamily) {
	for _, f := range []struct {
		name string
		set  func(*TopicFigures, float64)
	}{
		{seriesTopicRanges, func(t *TopicFigures, v float64) { t.Ranges = v }},
		{seriesTopicBytes, func(t *TopicFigures, v float64) { t.Bytes = v }},
		{seriesTopicRecords, func(t *TopicFigures, v float64) { t.Records = v }},
	} {
		for _, m := range metricsOf(fams[f.name]) {
			name := label(m, "topic")
			t, ok := s.Topics[name]
			if !ok && len(s.Topics) >= MaxScrapeTopics {
				s.Dropped++
				continue
			}
			f.set(&t, value(m))
			s.Topics[name] = t
		}
	}
}

func (s *Scrape) lags(fams map[string]*dto.MetricFamily) {
	for _, m := range metricsOf(fams[seriesLagRecords]) {
		if len(s.Lags) >= MaxScrapeGroups {
			s.Dropped++
			continue
		}
		s.Lags[GroupKey{label(m, "topic"), label(m, "group")}] = Lag{Records: value(m), Seconds: math.NaN()}
	}
	for _, m := range metricsOf(fams[seriesLagSeconds]) {
		k := GroupKey{label(m, "topic"), label(m, "group")}
		if l, ok := s.Lags[k]; ok {
			l.Seconds = value(m)
			s.Lags[k] = l
		}
	}
}

func metricsOf(f *dto.MetricFamily) []*dto.Metric {
	if f == nil {
		return nil
	}
	return f.GetMetric()
}

// plain is the value of a series without labels (or the sum of its
// labelled series).
func plain(f *dto.MetricFamily) (float64, bool) {
	ms := metricsOf(f)
	if len(ms) == 0 {
		return 0, false
	}
	var sum float64
	for _, m := range ms {
		sum += value(m)
	}
	return sum, true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func histogram(f *dto.MetricFamily) (Histogram, bool) {
	ms := metricsOf(f)
	if len(ms) != 1 || ms[0].GetHistogram() == nil {
		return Histogram{}, false
	}
	h := ms[0].GetHistogram()
	out := Histogram{Count: float64(h.GetSampleCount()), Sum: h.GetSampleSum()}
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), +1) {
			continue // the +Inf bucket is Count
		}
		out.Buckets = append(out.Buckets, Bucket{Le: b.GetUpperBound(), Count: float64(b.GetCumulativeCount())})
	}
	sort.Slice(out.Buckets, func(i, j int) bool { return out.Buckets[i].Le < out.Buckets[j].Le })
	return out, true
}
