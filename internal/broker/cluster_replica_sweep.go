package broker

import (
	"slices"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
)

// Failover without a producer. A dead primary's active segment used to be
// sealed only when a produce or a split reached its range; until then an
// idle range kept a head nobody could write, and its readers waited on a
// watermark that would never move. So the cluster loop sweeps for active
// replicated segments whose primary membership declares dead or left (on
// each such event, and on its periodic tick, which catches an event this
// node missed or a failover that could not finish), and one node per
// segment fails it over and opens the range's successor.
//
// That node is the lowest-numbered follower of the segment still live in
// this node's view. A follower, because it keeps a copy: its own fence is
// a local call, and it has the range's data to serve afterwards. The
// lowest, because every node computes the same choice from the same
// membership, with no coordination; views that disagree for a moment
// only mean two nodes try, which is safe: fences are latches, the seal is
// first-wins in the control plane (a second one adopts it, W4), and the
// successor's open is refused to whichever comes second.

// maxSweepFailovers bounds the failovers the sweep runs at once; ranges
// past it wait for the next sweep.
const maxSweepFailovers = 4

// failoverRuns are the ranges the sweep is failing over, so a range is
// not started twice, and every range's failover state on this node
// (cluster_replica_failover.go).
type failoverRuns struct {
	mu     sync.Mutex
	ranges map[uint64]bool
	// gates are the ranges failing over or waiting to be tried again,
	// at most maxFailoverGates.
	gates map[uint64]*failoverGate
	// releases counts the background releases of failed attempts'
	// holds, at most maxHoldReleases.
	releases int
	// closed: waitFailovers began, nothing more starts.
	closed bool
	// wg counts the running failovers and hold releases. They run on the
	// broker's life (b.life), which ends after the loops stop, so Close
	// waits for them after ending it (waitFailovers), not with the loops.
	wg sync.WaitGroup
}

// take marks rangeID as being failed over, unless it is already or the
// bound is reached.
func (f *failoverRuns) take(rangeID uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ranges == nil {
		f.ranges = map[uint64]bool{}
	}
	if f.ranges[rangeID] || len(f.ranges) >= maxSweepFailovers {
		return false
	}
	f.ranges[rangeID] = true
	return true
}

func (f *failoverRuns) running(rangeID uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ranges[rangeID]
}

func (f *failoverRuns) done(rangeID uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ranges, rangeID)
}

// waitFailovers waits for the failovers the sweep started: after the
// cluster loop stopped (no new one starts) and the broker's life ended
// (the running ones give up), before the stores close under them.
func (b *Broker) waitFailovers() {
	if b.cluster == nil {
		return
	}
	f := &b.cluster.failovers
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.wg.Wait()
}

// deadPrimary is an active replicated segment whose primary is lost.
type deadPrimary struct {
	topicID, rangeID, primary uint64
}

// sweepDeadPrimaries starts the failovers this node owes: active
// replicated segments whose primary is dead and whose lowest live
// follower is this node. It runs on the cluster loop and does not block:
// each failover runs on its own goroutine, at most maxSweepFailovers.
func (b *Broker) sweepDeadPrimaries() {
	if b.replicas() == nil || b.data == nil {
		return
	}
	for _, d := range b.deadPrimaries() {
		b.startSweepRun(d.rangeID, func() bool { return b.failoverIdle(d) })
	}
}

// startSweepRun runs fn for rangeID on a goroutine of its own, counted in
// the failover runs, unless the range is being run already or the runs'
// bound is reached (the next sweep finds it again).
//
// A run that moved its range on (fn reports true) asks the cluster loop
// for another sweep: a node that leads hundreds of ranges a lost node
// followed would otherwise roll maxSweepFailovers of them per membership
// event or 5-second tick, and a range of two replicas commits nothing
// until its turn. Each such sweep follows a range done, so they end with
// the work; a run that did nothing (the metadata unreachable, the range
// moved on by a produce) waits for the next event or tick instead of
// being picked again at once.
func (b *Broker) startSweepRun(rangeID uint64, fn func() bool) {
	runs := &b.cluster.failovers
	if !runs.take(rangeID) {
		return
	}
	runs.wg.Add(1)
	go func() {
		defer runs.wg.Done()
		progressed := fn()
		runs.done(rangeID)
		if progressed {
			b.askSweep()
		}
	}()
}

// askSweep asks the cluster loop to sweep again; a request already
// pending covers this one.
func (b *Broker) askSweep() {
	select {
	case b.cluster.sweep <- struct{}{}:
	default:
	}
}

// sweepPicks gathers what a sweep owes, at most maxSweepFailovers: ranges
// never tried first, then ranges whose last attempt failed and whose
// wait is over. A range still waiting is left out.
type sweepPicks[T any] struct {
	fresh, again []T
}

// full reports whether the picks hold as many untried ranges as a sweep
// takes.
func (p *sweepPicks[T]) full() bool { return len(p.fresh) >= maxSweepFailovers }

func (p *sweepPicks[T]) add(runs *failoverRuns, rangeID uint64, now time.Time, d T) {
	switch waits, failed := runs.state(rangeID, now); {
	case waits:
	case !failed:
		p.fresh = append(p.fresh, d)
	case len(p.again) < maxSweepFailovers:
		p.again = append(p.again, d)
	}
}

func (p *sweepPicks[T]) list() []T {
	return append(p.fresh, p.again[:min(len(p.again), maxSweepFailovers-len(p.fresh))]...)
}

// deadPrimaries lists the failovers this node owes and is not running
// yet, at most maxSweepFailovers of them; the next sweep finds the rest.
// Ranges never tried come first: a range whose last attempt failed (two
// of its replicas gone) would fail again as likely as not, and must not
// take the places of ranges that can fail over. A range failing over, or
// waiting after a failed attempt, is not listed.
func (b *Broker) deadPrimaries() []deadPrimary {
	gone := b.departedNodes()
	now := b.cfg.Clock.Now()
	runs := &b.cluster.failovers
	var picks sweepPicks[deadPrimary]
	eachActiveReplicated(b, &picks, func(topicID, rangeID uint64, seg metadata.Segment) {
		p := primaryOf(seg)
		if !(b.nodeDead(p) || gone(p)) || !b.runsFailover(seg, gone) {
			return
		}
		picks.add(runs, rangeID, now, deadPrimary{topicID: topicID, rangeID: rangeID, primary: p})
	})
	return picks.list()
}

// eachActiveReplicated calls fn with each range's active replicated
// segment that no sweep run holds, until picks is full.
func eachActiveReplicated[T any](b *Broker, picks *sweepPicks[T], fn func(topicID, rangeID uint64, seg metadata.Segment)) {
	runs := &b.cluster.failovers
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			for _, r := range st.ActiveRanges(t.ID) {
				if picks.full() {
					return
				}
				if seg, ok := st.ActiveSegment(r.ID); ok && replicated(seg) && !runs.running(r.ID) {
					fn(t.ID, r.ID, seg)
				}
			}
		}
	})
}

// departedNodes reports the nodes the registry no longer lists (removed
// from the cluster). An unreadable registry reports none: not knowing is
// not a reason to fail anything over.
func (b *Broker) departedNodes() func(uint64) bool {
	reg, err := b.cluster.ctl.Registry()
	if err != nil {
		return func(uint64) bool { return false }
	}
	ids := reg.NodeIDs()
	self := b.cluster.cfg.NodeID
	return func(node uint64) bool { return node != self && node != 0 && !slices.Contains(ids, node) }
}

// runsFailover reports whether this node is the one to fail seg over:
// its lowest-numbered follower that is live in this node's view.
func (b *Broker) runsFailover(seg metadata.Segment, gone func(uint64) bool) bool {
	var lowest uint64
	for _, id := range replicaIDs(seg)[1:] {
		if b.nodeDead(id) || gone(id) {
			continue
		}
		if lowest == 0 || id < lowest {
			lowest = id
		}
	}
	return lowest != 0 && lowest == b.cluster.cfg.NodeID
}

// failoverIdle fails over d's range and opens its successor here, so the
// range has a live primary before anyone produces to it. It reports
// whether the range's segment was sealed.
func (b *Broker) failoverIdle(d deadPrimary) bool {
	h := b.headFor(d.topicID, d.rangeID)
	if ok, _ := b.failoverFrom(h, d.primary); !ok {
		return false // failoverFrom logged an attempt that failed; the next sweep tries again
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := b.readyLocked(h); err != nil || h.retired || h.segment != 0 {
		return true
	}
	if v := b.viewRange(h.rangeID); v.retired || v.hasActive {
		h.ready = false // another node opened the successor first: load it next time
		return true
	}
	if err := b.openSegmentLocked(h); err != nil {
		b.log.Warn("opening a range's successor after a failover did not finish; the next produce opens it",
			"range", d.rangeID, "err", err)
		return true
	}
	b.log.Info("failed over a range whose primary is lost", "range", d.rangeID, "lost", d.primary, "segment", h.segment)
	return true
}

// readyStalled retries, off the cluster loop, the heads a failed
// reconcile left unready: a primary restarted before its followers could
// answer (a whole cluster restarting) has nothing to retry it until a
// produce arrives or the age roll runs, and until then its range's reads
// wait. It shares the failover runs' bound and per-range exclusion, so a
// range is never readied and failed over at once.
func (b *Broker) readyStalled() {
	if b.replicas() == nil || b.data == nil {
		return
	}
	b.mu.Lock()
	heads := make([]*head, 0, len(b.mu.heads))
	for _, h := range b.mu.heads {
		heads = append(heads, h)
	}
	b.mu.Unlock()
	for _, h := range heads {
		h.mu.Lock()
		stalled := !h.ready && !h.retired
		h.mu.Unlock()
		if !stalled || !b.cluster.failovers.take(h.rangeID) {
			continue
		}
		b.cluster.failovers.wg.Add(1)
		go func() {
			defer b.cluster.failovers.wg.Done()
			defer b.cluster.failovers.done(h.rangeID)
			h.mu.Lock()
			defer h.mu.Unlock()
			if err := b.readyLocked(h); err != nil {
				b.log.Debug("a stalled range is not ready yet; the next sweep tries again", "range", h.rangeID, "err", err)
			}
		}()
	}
}
