package metrics

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/metrics/hist"
)

const namespace = "malachi"

// collector turns a node's snapshots into series at scrape time.
type collector struct {
	src  source
	opts Options
	lag  *lagRefresher
	gate *gate // nil: /metrics is open

	mu     sync.Mutex // one refresh of the cached figures at a time; guards the fields below
	at     time.Time  // when the cached figures were read; zero = never
	cached costly
}

// costly are the figures reused for Options.CacheFor: walks of the
// metadata that only add counts, under short read locks.
type costly struct {
	topics    []broker.TopicSummary
	cluster   broker.ClusterStats
	clusterOK bool
}

func newCollector(src source, opts Options, g *gate) *collector {
	return &collector{src: src, opts: opts, lag: newLagRefresher(src, opts), gate: g}
}

// Describe sends every descriptor, so the registry checks names and
// labels once, at registration.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge(ch, descUp, 1)
	gauge(ch, descUptime, c.opts.Now().Sub(c.src.started()).Seconds())
	gauge(ch, descBuild, 1, broker.Version)
	c.collectTraffic(ch)
	c.collectBroker(ch)
	c.collectStore(ch)
	k := c.costly()
	c.collectTopics(ch, k.topics)
	c.collectLags(ch, c.lag.latest())
	c.collectCluster(ch, k)
}

// costly returns the cached figures, reading them again once they are
// older than CacheFor. Scrapes that arrive during a refresh wait for it
// instead of starting their own; it takes no network call nor read.
func (c *collector) costly() costly {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	if !c.at.IsZero() && now.Sub(c.at) < c.opts.CacheFor {
		return c.cached
	}
	k := costly{topics: c.src.topics()}
	k.cluster, k.clusterOK = c.src.cluster()
	c.at, c.cached = now, k
	return k
}

func (c *collector) collectTraffic(ch chan<- prometheus.Metric) {
	t, ok := c.src.traffic()
	if !ok {
		return
	}
	counter(ch, descRecordsProduced, t.Produce.Records)
	counter(ch, descBytesProduced, t.Produce.Bytes)
	counter(ch, descRecordsConsumed, t.Fetch.Records)
	counter(ch, descBytesConsumed, t.Fetch.Bytes)
	counter(ch, descProduceRequests, t.Produce.OK, "ok")
	counter(ch, descFetchRequests, t.Fetch.OK, "ok")
	quota := map[string]uint64{}
	for k, n := range t.Refused {
		op, reason := k[0], k[1]
		switch op {
		case "produce":
			counter(ch, descProduceRequests, n, reason)
		case "fetch":
			counter(ch, descFetchRequests, n, reason)
		default:
			counter(ch, descOtherRefused, n, reason)
		}
		if quotaReasons[reason] {
			quota[reason] += n
		}
	}
	for _, r := range slices.Sorted(maps.Keys(quotaReasons)) {
		counter(ch, descQuotaRefused, quota[r], r)
	}
	histogram(ch, descProduceLatency, t.Produce.Latency, 1e-9)
	histogram(ch, descFetchLatency, t.Fetch.Latency, 1e-9)
	counter(ch, descSkipsTold, t.SkipsTold)
	gauge(ch, descConnsOpen, float64(t.Open))
	counter(ch, descConnsAccepted, t.Accepted)
	for _, r := range []string{"global_limit_exceeded", "connection_limit_exceeded", "shutting_down"} {
		counter(ch, descConnsRefused, t.ConnRefused[r], r)
	}
	refused := c.gate.refusals()
	var failed uint64
	for r, n := range t.Logins {
		counter(ch, descAuthAttempts, n, r)
		if credentialReasons[r] {
			failed += n
		}
	}
	for r, n := range refused {
		if credentialReasons[r] {
			failed += n
		}
	}
	counter(ch, descFailedAuth, failed)
	counter(ch, descRateLimitBlocked, t.Logins["rate_limit_exceeded"]+quota["rate_limit_exceeded"]+refused["rate_limit_exceeded"])
	counter(ch, descLockedRefused, t.Logins["account_locked"]+refused["account_locked"])
	if c.gate != nil {
		for _, r := range slices.Sorted(maps.Keys(refused)) {
			counter(ch, descScrapeRefused, refused[r], r)
		}
	}
}

// credentialReasons are the login refusals that mean the credentials
// were wrong: what malachi_failed_auth_total counts. A refusal for a
// lockout, a rate limit, or the node's own state (metadata_unavailable,
// shutting_down, an internal error) says nothing of the credentials.
var credentialReasons = map[string]bool{
	"invalid_credentials": true, "invalid_session": true, "session_expired": true,
	"session_revoked": true, "no_peer_certificate": true,
}

// quotaReasons are the refusals that mean a quota or rate limit held.
var quotaReasons = map[string]bool{
	"quota_exceeded": true, "rate_limit_exceeded": true, "too_many_requests": true,
	"too_many_records": true, "too_many_members": true,
}

func (c *collector) collectBroker(ch chan<- prometheus.Metric) {
	k := c.src.counters()
	counter(ch, descTTLFiltered, k.TTLFiltered)
	counter(ch, descSegmentsExpired, k.SegmentsExpired)
	counter(ch, descLockouts, k.Lockouts)
	if r, ok := c.src.raft(); ok {
		counter(ch, descRaftLeaderChanges, r.LeaderChanges)
		counter(ch, descRaftProposals, r.Proposals)
		counter(ch, descRaftSnapshotsSent, r.SnapshotsSent)
		counter(ch, descRaftSnapshots, r.Snapshots)
		counter(ch, descRaftGroupFailures, r.GroupFailures)
	}
	if l, ok := c.src.replication(); ok {
		gauge(ch, descReplPrimaries, float64(l.Primaries))
		gauge(ch, descReplCopies, float64(l.Copies))
		gauge(ch, descReplUncommitted, float64(l.Uncommitted))
		gauge(ch, descReplCommitLagMax, float64(l.MaxUncommitted))
		gauge(ch, descReplFollowerLag, float64(l.FollowerMax))
		for _, o := range []string{"whole", "damaged", "short", "unreadable"} {
			counter(ch, descScrubs, k.Scrubs[o], o)
		}
	}
}

func (c *collector) collectStore(ch chan<- prometheus.Metric) {
	st, h := c.src.store()
	counter(ch, descCommitRounds, st.Rounds)
	counter(ch, descFsyncs, st.Syncs+st.JournalSyncs)
	counter(ch, descDurableBatches, st.Batches)
	counter(ch, descDurableBytes, st.Bytes)
	histogram(ch, descFsyncLatency, h.SyncLatency, 1e-9)
	histogram(ch, descRoundBatches, h.RoundBatches, 1)
	histogram(ch, descRoundBytes, h.RoundBytes, 1)
	rp := c.src.readPool()
	gauge(ch, descReadPoolMapped, float64(rp.Mapped))
	gauge(ch, descReadPoolFree, float64(rp.Held))
	disk := c.src.disk()
	for _, s := range []string{"ok", "full", "failing"} {
		gauge(ch, descDiskState, boolf(disk == s), s)
	}
}

// collectTopics reports the first MaxTopics topics by name and sums the
// rest under OtherTopic. A topic really named OtherTopic is summed there
// too, so its series cannot collide with the bucket's.
func (c *collector) collectTopics(ch chan<- prometheus.Metric, topics []broker.TopicSummary) {
	gauge(ch, descTopics, float64(len(topics)))
	var other broker.TopicSummary
	folded, shown := 0, 0
	for _, t := range topics {
		if shown >= c.opts.MaxTopics || t.Name == OtherTopic {
			other.Ranges += t.Ranges
			other.ActiveRanges += t.ActiveRanges
			other.Segments += t.Segments
			other.Bytes += t.Bytes
			other.Records += t.Records
			folded++
			continue
		}
		shown++
		topicSeries(ch, t, t.Name)
	}
	if folded > 0 {
		topicSeries(ch, other, OtherTopic)
	}
	gauge(ch, descTopicsFolded, float64(folded))
}

func topicSeries(ch chan<- prometheus.Metric, t broker.TopicSummary, label string) {
	gauge(ch, descTopicRanges, float64(t.Ranges), label)
	gauge(ch, descTopicRangesActive, float64(t.ActiveRanges), label)
	gauge(ch, descTopicSegments, float64(t.Segments), label)
	gauge(ch, descTopicBytes, float64(t.Bytes), label)
	gauge(ch, descTopicRecords, float64(t.Records), label)
}

// collectLags reports each group's lag as the last computation found
// it. The age is measured from now, so it keeps growing between
// computations; a group whose age could not be learned (no copy here,
// the byte budget spent) gets no lag_seconds series rather than a
// misleading 0, which is kept for a group that has caught up.
func (c *collector) collectLags(ch chan<- prometheus.Metric, last *lagResult) {
	if last == nil {
		return // the first computation has not ended yet
	}
	now := c.opts.Now()
	for _, l := range last.rep.Lags {
		gauge(ch, descLagRecords, float64(l.Records), l.Topic, l.Group)
		switch {
		case l.Records == 0:
			gauge(ch, descLagSeconds, 0, l.Topic, l.Group)
		case l.AgeKnown && l.OldestMs > 0:
			gauge(ch, descLagSeconds, max(now.Sub(time.UnixMilli(l.OldestMs)).Seconds(), 0), l.Topic, l.Group)
		}
	}
	gauge(ch, descGroupsFolded, boolf(last.rep.More))
	gauge(ch, descLagUpdated, float64(last.at.UnixNano())/1e9)
	gauge(ch, descLagDuration, last.took.Seconds())
	gauge(ch, descLagBytes, float64(last.rep.BytesRead))
	gauge(ch, descLagCut, boolf(last.rep.Cut))
}

func (c *collector) collectCluster(ch chan<- prometheus.Metric, k costly) {
	if !k.clusterOK {
		return
	}
	st := k.cluster
	for _, s := range []string{"alive", "suspect", "leaving", "left", "dead", "unknown"} {
		gauge(ch, descMembers, float64(st.Members[s]), s)
	}
	roles := map[string]int{}
	var led int
	var maxLag uint64
	for _, g := range st.Groups {
		roles[g.State]++
		lag := g.Commit - min(g.Applied, g.Commit)
		maxLag = max(maxLag, lag)
		if g.Leader == st.Node {
			led++
		}
		if c.opts.RaftGroupSeries {
			gauge(ch, descRaftApplyLag, float64(lag), g.Name)
			gauge(ch, descRaftLeader, boolf(g.Leader == st.Node), g.Name)
			gauge(ch, descRaftTerm, float64(g.Term), g.Name)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(roles)) {
		gauge(ch, descRaftGroups, float64(roles[r]), r)
	}
	gauge(ch, descRaftGroupsLed, float64(led))
	gauge(ch, descRaftApplyLagMax, float64(maxLag))
	gauge(ch, descUnderReplicated, float64(st.UnderReplicated))
	gauge(ch, descHealing, float64(st.Healing))
	gauge(ch, descDamaged, float64(st.Damaged))
	gauge(ch, descHealProblems, float64(st.Problems))
	gauge(ch, descScrubCopies, float64(st.ScrubCopies))
	gauge(ch, descScrubBehind, boolf(st.ScrubBehind))
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

// histogram converts a hist snapshot; scale turns its integer unit into
// the series' (1e-9: nanoseconds to seconds).
func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, s hist.Snapshot, scale float64) {
	cum := s.Cumulative()
	buckets := make(map[float64]uint64, len(cum))
	for i, b := range s.Bounds {
		buckets[float64(b)*scale] = cum[i]
	}
	ch <- prometheus.MustNewConstHistogram(d, s.Count, float64(s.Sum)*scale, buckets)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
