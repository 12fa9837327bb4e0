package broker

import (
	"sync"
	"sync/atomic"
)

// openParallel bounds the segment opens one produce request runs at once.
// An open is a metadata command and a store create, each waiting for an
// fsync; both are group-committed, so opens that wait together share
// their fsyncs. One at a time, the first request into a topic of 1,024
// ranges waited for 2,048 fsyncs in a row. 64 at a time rather than 16
// made a third fewer metadata and journal commits of such a first
// request, and a produce of 2,000,000 records over 1,024 new ranges cost
// the node 7% less CPU (docs/perf.md); 128 and 256 gained nothing more.
const openParallel = 64

// openWorkersMax bounds the goroutines openHeads runs on the whole node.
// Each request's openHeads waits for its own, so a connection runs at most
// openParallel; without a node-wide bound, 10,000 connections each
// producing into a new topic would run 640,000. A request that finds the
// bound reached opens nothing ahead: each append opens its own head, as
// without openHeads, on the request's goroutine.
const openWorkersMax = 256

// openWorkers counts the goroutines openHeads runs now, node-wide.
type openWorkers struct{ n atomic.Int64 }

// take reserves up to want workers within openWorkersMax and returns how
// many it reserved; give them back with put.
func (w *openWorkers) take(want int) int {
	for {
		cur := w.n.Load()
		n := min(int64(want), openWorkersMax-cur)
		if n <= 0 {
			return 0
		}
		if w.n.CompareAndSwap(cur, cur+n) {
			return int(n)
		}
	}
}

func (w *openWorkers) put(n int) { w.n.Add(-int64(n)) }

// openHeads makes writable, ahead of a request's appends, the heads of
// the ranges it writes (rangeIDs of topic topicID) that have no active
// segment yet, several at a time. It only moves work earlier: the open
// each append would do first happens here instead, and an open that
// fails here is left to that append, which tries again and reports the
// error. A head that forwards to another node is not touched, nor an
// unready one it tried before. Ranges roll on their own (by size, or all
// together by age), so every range's head is looked at, not only those of
// the first request into a topic.
func (b *Broker) openHeads(topicID uint64, rangeIDs []uint64) {
	if len(rangeIDs) < 2 {
		return // a single open gains nothing from another goroutine
	}
	var cold []*head
	// A v2 request may carry several batches for one range: its head is
	// opened once.
	seen := make(map[uint64]struct{}, len(rangeIDs))
	for _, id := range rangeIDs {
		if _, ok := seen[id]; ok {
			continue
		}
		seen[id] = struct{}{}
		h := b.headFor(topicID, id)
		h.mu.Lock()
		if !h.fwd.busy && !h.retired && (h.ready && h.segment == 0 || !h.ready && !h.prepared) {
			h.prepared = true
			cold = append(cold, h)
		}
		h.mu.Unlock()
	}
	workers := 0
	if len(cold) >= 2 { // one open gains nothing from another goroutine
		workers = b.opens.take(min(openParallel, len(cold)))
	}
	if workers < 2 {
		b.opens.put(workers)
		// Left to the appends: a head prepared here that no worker
		// opens is opened by its first append (writableLocked).
		for _, h := range cold {
			h.mu.Lock()
			h.prepared = false
			h.mu.Unlock()
		}
		return
	}
	defer b.opens.put(workers)
	work := make(chan *head)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for h := range work {
				h.mu.Lock()
				if !h.fwd.busy {
					_ = b.writableLocked(h)
				}
				h.mu.Unlock()
			}
		})
	}
	for _, h := range cold {
		work <- h
	}
	close(work)
	wg.Wait()
}

// directRanges returns the ranges of the batches in checked that go to
// their range as they are.
func directRanges(checked []checkedBatch) []uint64 {
	out := make([]uint64, 0, len(checked))
	for _, c := range checked {
		if c.direct {
			out = append(out, c.Range)
		}
	}
	return out
}

// groupRanges returns the ranges of groups.
func groupRanges(groups []rangeGroup) []uint64 {
	out := make([]uint64, len(groups))
	for i, g := range groups {
		out[i] = g.rangeID
	}
	return out
}
