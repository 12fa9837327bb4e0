package broker

import (
	"context"
	"sort"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
)

// AutoSplit configures the range coordinator that splits hot ranges and
// merges cold buddies, so users never choose a partition count. It is off
// unless SplitBytes or SplitRate is set.
type AutoSplit struct {
	// SplitBytes splits an active range once its own segments hold this
	// many bytes. 0 = off.
	SplitBytes int64
	// SplitRate splits an active range written faster than this many bytes
	// per second over one check interval. 0 = off.
	SplitRate int64
	// MergeRate merges two active buddies both written slower than this for
	// MergeAfter consecutive checks (and both below SplitBytes/2, so a merge
	// cannot be undone by the next check). 0 = never merge.
	MergeRate int64
	// MergeAfter is the number of consecutive cold checks before a merge.
	// Default 3.
	MergeAfter int
	// MaxRanges caps the active ranges of one topic. Default 64.
	MaxRanges int
	// Interval is how often the coordinator looks. Default 10 s.
	Interval time.Duration
}

func (a AutoSplit) enabled() bool { return a.SplitBytes > 0 || a.SplitRate > 0 }

func (a AutoSplit) withDefaults() AutoSplit {
	if a.MergeAfter == 0 {
		a.MergeAfter = 3
	}
	if a.MaxRanges == 0 {
		a.MaxRanges = 64
	}
	if a.Interval == 0 {
		a.Interval = 10 * time.Second
	}
	return a
}

// rangeStat is what the coordinator knows of one active range.
type rangeStat struct {
	topic      string
	rangeID    uint64
	start, end uint64
	bytes      int64 // bytes in the range's own segments
	rate       int64 // bytes per second over the last interval
	coldChecks int   // consecutive checks below MergeRate
}

type reshardAction struct {
	topic string
	split uint64    // range to split, or 0
	merge [2]uint64 // buddies to merge
}

// decideReshard is the coordinator's pure decision: which ranges to split
// and which buddies to merge, given per-range statistics. Splits win over
// merges; at most one action per range per check.
func decideReshard(cfg AutoSplit, stats []rangeStat) []reshardAction {
	byTopic := map[string][]rangeStat{}
	for _, s := range stats {
		byTopic[s.topic] = append(byTopic[s.topic], s)
	}
	topics := make([]string, 0, len(byTopic))
	for t := range byTopic {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	var out []reshardAction
	for _, t := range topics {
		out = append(out, decideTopic(cfg, t, byTopic[t])...)
	}
	return out
}

func decideTopic(cfg AutoSplit, topic string, rs []rangeStat) []reshardAction {
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	var out []reshardAction
	active := len(rs)
	used := map[uint64]bool{}
	for _, r := range rs {
		hot := (cfg.SplitBytes > 0 && r.bytes >= cfg.SplitBytes) || (cfg.SplitRate > 0 && r.rate >= cfg.SplitRate)
		if hot && r.end-r.start >= 2 && active < cfg.MaxRanges {
			out = append(out, reshardAction{topic: topic, split: r.rangeID})
			used[r.rangeID] = true
			active++
		}
	}
	if cfg.MergeRate <= 0 {
		return out
	}
	for i := 0; i+1 < len(rs); i++ {
		a, b := rs[i], rs[i+1]
		size := a.end - a.start
		if used[a.rangeID] || used[b.rangeID] || size != b.end-b.start || a.start^size != b.start {
			continue
		}
		if cold(cfg, a) && cold(cfg, b) {
			out = append(out, reshardAction{topic: topic, merge: [2]uint64{a.rangeID, b.rangeID}})
			used[a.rangeID], used[b.rangeID] = true, true
			i++
		}
	}
	return out
}

func cold(cfg AutoSplit, r rangeStat) bool {
	small := cfg.SplitBytes == 0 || r.bytes < cfg.SplitBytes/2
	return small && r.rate < cfg.MergeRate && r.coldChecks >= cfg.MergeAfter
}

// rangeMeter remembers what the coordinator saw of a range last time.
type rangeMeter struct {
	written    int64
	at         time.Time
	coldChecks int
}

// reshardTick gathers statistics, decides and acts. It runs on the
// maintenance goroutine.
func (b *Broker) reshardTick(ctx context.Context) {
	cfg := b.cfg.AutoSplit
	if !cfg.enabled() {
		return
	}
	for _, a := range decideReshard(cfg, b.rangeStats()) {
		var err error
		if a.split != 0 {
			_, err = b.SplitRange(ctx, a.topic, a.split)
		} else {
			_, err = b.MergeRanges(ctx, a.topic, a.merge[0], a.merge[1])
		}
		if err != nil {
			b.log.Warn("automatic reshard refused", "topic", a.topic, "split", a.split, "merge", a.merge, "err", err)
			continue
		}
		b.log.Info("automatic reshard", "topic", a.topic, "split", a.split, "merge", a.merge)
	}
}

// rangeStats measures every active range: own bytes from the metadata and
// the store, write rate from the heads' counters since the last tick.
func (b *Broker) rangeStats() []rangeStat {
	now := b.cfg.Clock.Now()
	var stats []rangeStat
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			for _, r := range st.ActiveRanges(t.ID) {
				if seg, ok := st.ActiveSegment(r.ID); b.cluster != nil && (!ok || !b.writesHere(seg)) {
					continue // another node's to measure and reshard
				}
				s := rangeStat{topic: t.Name, rangeID: r.ID, start: r.Start, end: r.End}
				for _, seg := range st.RangeSegments(r.ID) {
					s.bytes += seg.Bytes
				}
				stats = append(stats, s)
			}
		}
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.meters == nil {
		b.mu.meters = map[uint64]*rangeMeter{}
	}
	live := map[uint64]bool{}
	for i := range stats {
		s := &stats[i]
		live[s.rangeID] = true
		written := int64(0)
		if h := b.mu.heads[s.rangeID]; h != nil {
			written = h.written.Load()
			s.bytes += h.activeBytes.Load()
		}
		m := b.mu.meters[s.rangeID]
		if m == nil {
			m = &rangeMeter{written: written, at: now}
			b.mu.meters[s.rangeID] = m
		}
		if secs := now.Sub(m.at).Seconds(); secs > 0 {
			s.rate = int64(float64(written-m.written) / secs)
		}
		if b.cfg.AutoSplit.MergeRate > 0 && s.rate < b.cfg.AutoSplit.MergeRate {
			m.coldChecks++
		} else {
			m.coldChecks = 0
		}
		s.coldChecks = m.coldChecks
		m.written, m.at = written, now
	}
	for id := range b.mu.meters {
		if !live[id] {
			delete(b.mu.meters, id)
		}
	}
	return stats
}
