// Package hist is a fixed-bucket histogram of integer observations kept
// in atomic counters: what the node's packages record latencies and sizes
// into without importing the Prometheus client. internal/metrics reads
// snapshots at scrape time and exposes them as Prometheus histograms, so
// a node nobody scrapes pays one binary search and three atomic adds per
// observation, and nothing else. It imports no package of the module.
package hist

import (
	"slices"
	"sync/atomic"
	"time"
)

// Histogram counts observations per bucket. Its zero value is unusable:
// make one with New. Safe for concurrent use.
type Histogram struct {
	bounds []int64         // upper bounds, inclusive, ascending
	counts []atomic.Uint64 // len(bounds)+1: the last is above every bound
	sum    atomic.Int64
}

// New returns a histogram with the given inclusive upper bounds, which
// must be ascending; New sorts and deduplicates a copy.
func New(bounds []int64) *Histogram {
	b := slices.Clone(bounds)
	slices.Sort(b)
	b = slices.Compact(b)
	return &Histogram{bounds: b, counts: make([]atomic.Uint64, len(b)+1)}
}

// Observe records v.
func (h *Histogram) Observe(v int64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// Since records the time elapsed since start, in nanoseconds.
func (h *Histogram) Since(start time.Time) { h.Observe(int64(time.Since(start))) }

// Snapshot is a histogram's state at one moment.
type Snapshot struct {
	Bounds []int64  // upper bounds, shared with the histogram: do not change
	Counts []uint64 // per bucket, not cumulative; one more than Bounds
	Count  uint64
	Sum    int64
}

// Snapshot reads the counters. Observations racing it may be counted in
// Count and not yet in Sum (or the reverse): each is exact on its own.
func (h *Histogram) Snapshot() Snapshot {
	s := Snapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.counts)), Sum: h.sum.Load()}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	return s
}

// Cumulative returns, per bound, the observations at or below it.
func (s Snapshot) Cumulative() []uint64 {
	out := make([]uint64, len(s.Bounds))
	var n uint64
	for i := range s.Bounds {
		n += s.Counts[i]
		out[i] = n
	}
	return out
}

// LatencyBounds are the buckets of a latency in nanoseconds: 50 µs to
// 30 s (the longest long poll), about three per decade, which covers an
// fsync on a fast NVMe disk as well as a produce held up by a slow quorum.
var LatencyBounds = []int64{
	int64(50 * time.Microsecond), int64(100 * time.Microsecond), int64(250 * time.Microsecond),
	int64(500 * time.Microsecond), int64(time.Millisecond), int64(2500 * time.Microsecond),
	int64(5 * time.Millisecond), int64(10 * time.Millisecond), int64(25 * time.Millisecond),
	int64(50 * time.Millisecond), int64(100 * time.Millisecond), int64(250 * time.Millisecond),
	int64(500 * time.Millisecond), int64(time.Second), int64(2500 * time.Millisecond),
	int64(5 * time.Second), int64(10 * time.Second), int64(30 * time.Second),
}

// CountBounds are the buckets of a count (batches in a commit round):
// powers of two up to 4096.
var CountBounds = []int64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

// ByteBounds are the buckets of a size in bytes (a commit round): powers
// of four from 1 KiB to 64 MiB.
var ByteBounds = []int64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}
