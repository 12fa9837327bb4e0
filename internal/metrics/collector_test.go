package metrics

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/clock"
	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/metrics/hist"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/server"
	"github.com/malachi-log/malachi/internal/storage"
)

// fakeSource answers the collector with fixed figures and counts the
// costly calls.
type fakeSource struct {
	mu        sync.Mutex
	topicList []broker.TopicSummary
	lags      []broker.GroupLag
	lagCalls  int
	lagBudget broker.LagBudget
	// lagGate, when set, holds each lag computation until it is sent a
	// value or the computation's context ends.
	lagGate    chan struct{}
	lagStarted chan struct{} // told of each computation, when set
	clusterSt  *broker.ClusterStats
	trafficSt  *server.Traffic
	syncHist   *hist.Histogram
	start      time.Time
	diskState  string
	raftSt     *control.RaftStats
	replLag    *replica.Lag
	brokerCnts broker.Counters
}

func (f *fakeSource) started() time.Time { return f.start }
func (f *fakeSource) traffic() (server.Traffic, bool) {
	if f.trafficSt == nil {
		return server.Traffic{}, false
	}
	return *f.trafficSt, true
}
func (f *fakeSource) counters() broker.Counters { return f.brokerCnts }
func (f *fakeSource) store() (storage.Stats, storage.Histograms) {
	h := storage.Histograms{
		SyncLatency:  hist.New(hist.LatencyBounds).Snapshot(),
		RoundBatches: hist.New(hist.CountBounds).Snapshot(),
		RoundBytes:   hist.New(hist.ByteBounds).Snapshot(),
	}
	if f.syncHist != nil {
		h.SyncLatency = f.syncHist.Snapshot()
	}
	return storage.Stats{Rounds: 3, Syncs: 2, JournalSyncs: 1}, h
}
func (f *fakeSource) disk() string { return f.diskState }
func (f *fakeSource) readPool() storage.ReadPoolStats {
	return storage.ReadPoolStats{Held: 3 << 20, Mapped: 8 << 20, InUse: 5 << 20}
}
func (f *fakeSource) topics() []broker.TopicSummary { return f.topicList }
func (f *fakeSource) groupLags(ctx context.Context, bg broker.LagBudget) broker.LagReport {
	f.mu.Lock()
	f.lagCalls++
	f.lagBudget = bg
	lags, gate, started := f.lags, f.lagGate, f.lagStarted
	f.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return broker.LagReport{Cut: true}
		}
	}
	if len(lags) > bg.MaxGroups {
		return broker.LagReport{Lags: lags[:bg.MaxGroups], More: true}
	}
	return broker.LagReport{Lags: lags}
}

func (f *fakeSource) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lagCalls
}

func (f *fakeSource) cluster() (broker.ClusterStats, bool) {
	if f.clusterSt == nil {
		return broker.ClusterStats{}, false
	}
	return *f.clusterSt, true
}
func (f *fakeSource) raft() (control.RaftStats, bool) {
	if f.raftSt == nil {
		return control.RaftStats{}, false
	}
	return *f.raftSt, true
}
func (f *fakeSource) replication() (replica.Lag, bool) {
	if f.replLag == nil {
		return replica.Lag{}, false
	}
	return *f.replLag, true
}

func newTestRegistry(t *testing.T, src source, opts Options) *prometheus.Registry {
	reg, _ := newTestCollector(t, src, opts)
	return reg
}

// newTestCollector registers a collector whose lag goroutine stops when
// the test ends.
func newTestCollector(t *testing.T, src source, opts Options) (*prometheus.Registry, *collector) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := newCollector(src, opts.withDefaults(), nil)
	t.Cleanup(c.lag.close)
	reg.MustRegister(c)
	return reg, c
}

// advance moves clk by d once the lag goroutine has armed its timer.
func advance(t *testing.T, clk *clock.Manual, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for clk.Timers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lag goroutine never armed its timer")
		}
		<-tick.C
	}
	clk.Advance(d)
}

// lagSeries gathers reg once the lag computation has ended n times in
// all, so the lag series are there.
func lagSeries(t *testing.T, reg *prometheus.Registry, c *collector, n int) map[string]float64 {
	t.Helper()
	series(t, reg) // starts the computation
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if c.lag.runs.Load() >= int64(n) {
			return series(t, reg)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lag computation did not end %d times", n)
		}
		<-tick.C
	}
}

// series gathers reg and returns name{labels} -> value (a histogram's
// sample count).
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[key(mf.GetName(), m)] = value(m)
		}
	}
	return out
}

func key(name string, m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	if len(parts) == 0 {
		return name
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func TestTopicSeriesAreCappedAndTheRestSummedUnderOther(t *testing.T) {
	src := &fakeSource{start: time.Now(), diskState: "ok", topicList: []broker.TopicSummary{
		{Name: "_other", Ranges: 1, ActiveRanges: 1, Segments: 1, Records: 1, Bytes: 10},
		{Name: "alpha", Ranges: 2, ActiveRanges: 2, Segments: 3, Records: 100, Bytes: 1000},
		{Name: "beta", Ranges: 1, ActiveRanges: 1, Segments: 1, Records: 5, Bytes: 50},
		{Name: "delta", Ranges: 4, ActiveRanges: 2, Segments: 6, Records: 7, Bytes: 70},
		{Name: "gamma", Ranges: 1, ActiveRanges: 1, Segments: 2, Records: 9, Bytes: 90},
	}}
	reg := newTestRegistry(t, src, Options{MaxTopics: 2})
	got := series(t, reg)
	want := map[string]float64{
		"malachi_topics":                            5,
		"malachi_metrics_topics_folded":             3, // _other (the name is reserved), delta, gamma
		"malachi_topic_records{topic=alpha}":        100,
		"malachi_topic_records{topic=beta}":         5,
		"malachi_topic_records{topic=_other}":       1 + 7 + 9,
		"malachi_topic_bytes{topic=_other}":         10 + 70 + 90,
		"malachi_topic_ranges{topic=_other}":        1 + 4 + 1,
		"malachi_topic_ranges_active{topic=_other}": 1 + 2 + 1,
		"malachi_topic_segments{topic=_other}":      1 + 6 + 2,
		"malachi_topic_segments{topic=alpha}":       3,
		"malachi_topic_ranges_active{topic=alpha}":  2,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, absent := range []string{"malachi_topic_records{topic=gamma}", "malachi_topic_records{topic=delta}"} {
		if _, ok := got[absent]; ok {
			t.Errorf("%s is exported past the cap", absent)
		}
	}
}

func TestUnderTheCapNoTopicIsFolded(t *testing.T) {
	src := &fakeSource{start: time.Now(), diskState: "ok", topicList: []broker.TopicSummary{{Name: "a"}, {Name: "b"}}}
	got := series(t, newTestRegistry(t, src, Options{MaxTopics: 2}))
	if got["malachi_metrics_topics_folded"] != 0 {
		t.Errorf("folded = %v, want 0", got["malachi_metrics_topics_folded"])
	}
	if _, ok := got["malachi_topic_records{topic=_other}"]; ok {
		t.Error("an _other series exists with nothing folded")
	}
}

func TestGroupLagIsComputedPeriodicallyAndAgesWithTheClock(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	src := &fakeSource{start: clk.Now(), diskState: "ok", lags: []broker.GroupLag{
		{Topic: "orders", Group: "billing", Records: 12, OldestMs: 1_000_000 - 4_000, AgeKnown: true, Exact: true},
		{Topic: "orders", Group: "done", Records: 0, AgeKnown: true, Exact: true},
	}}
	reg, c := newTestCollector(t, src, Options{LagEvery: 15 * time.Second, Clock: clk})
	got := lagSeries(t, reg, c, 1)
	if v := got["malachi_consumer_group_lag_records{group=billing,topic=orders}"]; v != 12 {
		t.Errorf("lag records = %v, want 12", v)
	}
	if v := got["malachi_consumer_group_lag_seconds{group=billing,topic=orders}"]; v != 4 {
		t.Errorf("lag seconds = %v, want 4", v)
	}
	if v := got["malachi_consumer_group_lag_seconds{group=done,topic=orders}"]; v != 0 {
		t.Errorf("a caught-up group's lag seconds = %v, want 0", v)
	}
	if v := got["malachi_consumer_group_lag_updated_timestamp_seconds"]; v != 1000 {
		t.Errorf("lag updated at %v, want 1000", v)
	}
	if src.lagBudget.Bytes != DefaultLagBytes || src.lagBudget.Time != DefaultLagTime {
		t.Errorf("lag budget %+v, want the defaults", src.lagBudget)
	}
	advance(t, clk, 2*time.Second)
	got = series(t, reg)
	if n := src.calls(); n != 1 {
		t.Errorf("lag computed %d times within its period, want 1", n)
	}
	if v := got["malachi_consumer_group_lag_seconds{group=billing,topic=orders}"]; v != 6 {
		t.Errorf("lag seconds after 2s = %v, want 6 (the age grows between computations)", v)
	}
	advance(t, clk, 13*time.Second)
	got = lagSeries(t, reg, c, 2)
	if v := got["malachi_consumer_group_lag_updated_timestamp_seconds"]; v != 1015 {
		t.Errorf("lag updated at %v after the period, want 1015", v)
	}
}

func TestScrapeDoesNotWaitForTheLagComputation(t *testing.T) {
	clk := clock.NewManual(time.UnixMilli(1_000_000))
	src := &fakeSource{start: clk.Now(), diskState: "ok", lagGate: make(chan struct{}), lagStarted: make(chan struct{}, 1),
		lags: []broker.GroupLag{{Topic: "t", Group: "g", Records: 3, OldestMs: 999_000, AgeKnown: true}}}
	reg, c := newTestCollector(t, src, Options{Clock: clk})
	got := series(t, reg) // starts the computation, which blocks
	<-src.lagStarted
	// While it runs, scrapes answer at once, without lag series.
	got = series(t, reg)
	if _, ok := got["malachi_consumer_group_lag_records{group=g,topic=t}"]; ok {
		t.Error("a lag series exists before any computation ended")
	}
	if _, ok := got["malachi_consumer_group_lag_updated_timestamp_seconds"]; ok {
		t.Error("the lag is dated before any computation ended")
	}
	src.lagGate <- struct{}{}
	got = lagSeries(t, reg, c, 1)
	if got["malachi_consumer_group_lag_records{group=g,topic=t}"] != 3 {
		t.Errorf("lag records = %v, want 3", got["malachi_consumer_group_lag_records{group=g,topic=t}"])
	}
	// The next computation blocks too; the scrape shows the last one.
	advance(t, clk, DefaultLagEvery)
	<-src.lagStarted
	got = series(t, reg)
	if got["malachi_consumer_group_lag_records{group=g,topic=t}"] != 3 {
		t.Error("a scrape during a computation lost the last figures")
	}
	// Close cancels the computation under way and waits for it.
	c.lag.close()
}

func TestUnknownLagAgeHasNoSeries(t *testing.T) {
	src := &fakeSource{start: time.Now(), diskState: "ok", lags: []broker.GroupLag{
		{Topic: "t", Group: "far", Records: 9, AgeKnown: false},
		{Topic: "t", Group: "zero-stamp", Records: 9, AgeKnown: true, OldestMs: 0},
	}}
	reg, c := newTestCollector(t, src, Options{})
	got := lagSeries(t, reg, c, 1)
	if got["malachi_consumer_group_lag_records{group=far,topic=t}"] != 9 {
		t.Error("the record lag is missing")
	}
	for _, g := range []string{"far", "zero-stamp"} {
		if v, ok := got["malachi_consumer_group_lag_seconds{group="+g+",topic=t}"]; ok {
			t.Errorf("group %s lags with an unknown age, yet its lag_seconds is %v", g, v)
		}
	}
}

func TestGroupCapIsReported(t *testing.T) {
	src := &fakeSource{start: time.Now(), diskState: "ok", lags: []broker.GroupLag{
		{Topic: "t", Group: "a"}, {Topic: "t", Group: "b"}, {Topic: "t", Group: "c"},
	}}
	reg, c := newTestCollector(t, src, Options{MaxGroups: 2})
	got := lagSeries(t, reg, c, 1)
	if got["malachi_metrics_groups_truncated"] != 1 {
		t.Errorf("truncated = %v, want 1", got["malachi_metrics_groups_truncated"])
	}
	if _, ok := got["malachi_consumer_group_lag_records{group=c,topic=t}"]; ok {
		t.Error("a group past the cap has a series")
	}
}

func TestSingleNodeHasNoClusterSeries(t *testing.T) {
	src := &fakeSource{start: time.Now(), diskState: "full"}
	got := series(t, newTestRegistry(t, src, Options{}))
	for k := range got {
		for _, p := range []string{"malachi_cluster_", "malachi_raft_", "malachi_replication_", "malachi_under_replicated", "malachi_produce_"} {
			if strings.HasPrefix(k, p) {
				t.Errorf("%s exported by a node without that part", k)
			}
		}
	}
	if got["malachi_storage_disk_state{state=full}"] != 1 || got["malachi_storage_disk_state{state=ok}"] != 0 {
		t.Errorf("disk state series wrong: full=%v ok=%v", got["malachi_storage_disk_state{state=full}"], got["malachi_storage_disk_state{state=ok}"])
	}
}

func TestClusterSeriesFromTheSnapshots(t *testing.T) {
	src := &fakeSource{start: time.Now(), diskState: "ok",
		clusterSt: &broker.ClusterStats{
			Node:    2,
			Members: map[string]int{"alive": 2, "dead": 1},
			Groups: []broker.ClusterGroup{
				{Name: "root", State: "StateLeader", Leader: 2, Commit: 10, Applied: 7},
				{Name: "vnode-1", State: "StateFollower", Leader: 1, Commit: 5, Applied: 5},
				{Name: "vnode-2", State: "StateLeader", Leader: 2, Commit: 5, Applied: 4},
			},
			UnderReplicated: 5,
			Healing:         1,
		},
		raftSt:     &control.RaftStats{LeaderChanges: 4, Proposals: 17, SnapshotsSent: 1},
		replLag:    &replica.Lag{Primaries: 2, Uncommitted: 30, MaxUncommitted: 20, FollowerMax: 25},
		brokerCnts: broker.Counters{Scrubs: map[string]uint64{"whole": 5, "damaged": 1}},
	}
	got := series(t, newTestRegistry(t, src, Options{}))
	for k := range got {
		for _, p := range []string{"malachi_raft_leader{", "malachi_raft_term{", "malachi_raft_apply_lag_entries{"} {
			if strings.HasPrefix(k, p) {
				t.Errorf("%s: a per-group series without the option", k)
			}
		}
	}
	perGroup := series(t, newTestRegistry(t, src, Options{RaftGroupSeries: true}))
	for k, v := range map[string]float64{
		"malachi_raft_apply_lag_entries{group=root}": 3,
		"malachi_raft_leader{group=root}":            1,
		"malachi_raft_leader{group=vnode-1}":         0,
	} {
		if perGroup[k] != v {
			t.Errorf("with per-group series, %s = %v, want %v", k, perGroup[k], v)
		}
	}
	want := map[string]float64{
		"malachi_cluster_members{state=alive}":                  2,
		"malachi_cluster_members{state=dead}":                   1,
		"malachi_cluster_members{state=suspect}":                0,
		"malachi_raft_apply_lag_entries_max":                    3,
		"malachi_raft_groups_led":                               2,
		"malachi_raft_groups{role=StateLeader}":                 2,
		"malachi_raft_leader_changes_total":                     4,
		"malachi_raft_proposals_total":                          17,
		"malachi_raft_snapshots_sent_total":                     1,
		"malachi_under_replicated_segments":                     5,
		"malachi_healing_segments":                              1,
		"malachi_replication_uncommitted_records":               30,
		"malachi_replication_commit_watermark_lag_records":      20,
		"malachi_replication_follower_lag_records":              25,
		"malachi_scrub_verifications_total{outcome=whole}":      5,
		"malachi_scrub_verifications_total{outcome=damaged}":    1,
		"malachi_scrub_verifications_total{outcome=unreadable}": 0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestTrafficSeriesAndHistogramsConvert(t *testing.T) {
	lat := hist.New(hist.LatencyBounds)
	lat.Observe(int64(3 * time.Millisecond))
	lat.Observe(int64(40 * time.Millisecond))
	src := &fakeSource{start: time.Now(), diskState: "ok", syncHist: lat, trafficSt: &server.Traffic{
		Produce: server.OpStats{OK: 4, Records: 40, Bytes: 400, Latency: lat.Snapshot()},
		Fetch:   server.OpStats{OK: 2, Records: 30, Latency: hist.New(hist.LatencyBounds).Snapshot()},
		Refused: map[[2]string]uint64{
			{"produce", "quota_exceeded"}: 2, {"fetch", "no_such_topic"}: 1, {"", "rate_limit_exceeded"}: 3,
		},
		Logins: map[string]uint64{"ok": 5, "invalid_credentials": 2, "invalid_session": 1, "account_locked": 1, "rate_limit_exceeded": 1,
			"metadata_unavailable": 4, "internal_error": 2, "shutting_down": 3},
		ConnRefused: map[string]uint64{"connection_limit_exceeded": 6},
		Open:        3,
	}}
	reg := newTestRegistry(t, src, Options{})
	got := series(t, reg)
	want := map[string]float64{
		"malachi_records_produced_total":                                           40,
		"malachi_records_consumed_total":                                           30,
		"malachi_produce_requests_total{result=ok}":                                4,
		"malachi_produce_requests_total{result=quota_exceeded}":                    2,
		"malachi_fetch_requests_total{result=no_such_topic}":                       1,
		"malachi_requests_refused_total{reason=rate_limit_exceeded}":               3,
		"malachi_quota_refusals_total{reason=quota_exceeded}":                      2,
		"malachi_quota_refusals_total{reason=rate_limit_exceeded}":                 3,
		"malachi_rate_limit_blocked_total":                                         1 + 3,
		"malachi_failed_auth_total":                                                2 + 1, // not the node's own refusals
		"malachi_account_locked_refusals_total":                                    1,
		"malachi_connection_limit_blocked_total{reason=connection_limit_exceeded}": 6,
		"malachi_connections_open":                                                 3,
		"malachi_produce_latency_seconds":                                          2,
		"malachi_storage_fsync_latency_seconds":                                    2,
		"malachi_storage_read_pool_mapped_bytes":                                   8 << 20,
		"malachi_storage_read_pool_free_bytes":                                     3 << 20,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// The histogram's buckets are in seconds: 3 ms falls at or below the
	// 5 ms bound, 40 ms above it.
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "malachi_produce_latency_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 0.005 && b.GetCumulativeCount() != 1 {
				t.Errorf("bucket le=0.005 holds %d, want 1", b.GetCumulativeCount())
			}
			if b.GetUpperBound() == 0.05 && b.GetCumulativeCount() != 2 {
				t.Errorf("bucket le=0.05 holds %d, want 2", b.GetCumulativeCount())
			}
		}
		if s := h.GetSampleSum(); s < 0.0429 || s > 0.0431 {
			t.Errorf("sum %v s, want 0.043", s)
		}
	}
}

func TestSeriesFollowTheNamingConventions(t *testing.T) {
	src := &fakeSource{start: time.Now(), diskState: "ok", trafficSt: &server.Traffic{},
		clusterSt: &broker.ClusterStats{Node: 1}, raftSt: &control.RaftStats{}, replLag: &replica.Lag{},
		topicList: []broker.TopicSummary{{Name: "t"}}, lags: []broker.GroupLag{{Topic: "t", Group: "g"}}}
	reg, c := newTestCollector(t, src, Options{RaftGroupSeries: true})
	lagSeries(t, reg, c, 1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
