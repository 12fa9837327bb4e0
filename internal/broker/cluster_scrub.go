package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// Scrubbing. Every node re-verifies its sealed copies (those the metadata
// lists it for) against their seals, one at a time, each about once per
// ScrubInterval, reading at most ScrubRate bytes/s (heal.Scrubber picks
// the next one, heal.Verify judges it). A copy found damaged or short by
// the scrubber, by a read that met a bad CRC, or found missing from a
// node the metadata lists for it:
//
//   - is marked in the store (storage.Store.MarkDamaged), so it comes
//     back damaged after a restart, and is never served again:
//     copyComplete answers false for it, so a local read goes to another
//     replica and another node's read of it is refused with a retriable
//     reason;
//   - is recorded in the metadata (mark_copy_damaged), so every node's
//     planner counts it out and reports it, with no limit but the
//     replica list, and forgets it with the segment or once the list
//     drops it; a healthy peer is chosen as the source and a node with
//     no copy as the target;
//   - is deleted only once the list without it is recorded (the planner
//     drops it after the new copy is recorded; collectUnlisted deletes
//     it). With no healthy peer it is kept, reported, and still never
//     served.

// scrubIdle is the longest the scrub loop sleeps before it looks at the
// copies again (new seals, copies collected).
const scrubIdle = time.Second

// maxDamageRecordsPerPass bounds the mark_copy_damaged commands one heal
// pass proposes; the rest wait for the next pass.
const maxDamageRecordsPerPass = 16

func (b *Broker) scrubLoop(ctx context.Context) {
	defer b.cluster.heal.wg.Done()
	hc := b.cluster.cfg.Heal
	s, err := heal.NewScrubber(heal.ScrubConfig{IntervalMs: hc.ScrubInterval.Milliseconds(), RateBytes: hc.ScrubRate})
	if err != nil {
		b.log.Error("scrub: not started", "err", err)
		return
	}
	t := time.NewTimer(scrubIdle)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(b.scrubStep(ctx, s))
	}
}

// scrubStep verifies the copy due now, if any, and answers how long to
// wait before the next step.
func (b *Broker) scrubStep(ctx context.Context, s *heal.Scrubber) time.Duration {
	now := b.nowMs()
	copies, seals, behind, unsealed := b.localSealedCopies()
	b.noteBehind(now, behind)
	b.sealAgain(now, unsealed)
	if err := s.Track(now, copies); err != nil {
		b.log.Error("scrub: too many copies to track", "err", err)
		return scrubIdle
	}
	b.setScrubStatus(s.Status())
	b.forgetVerified(seals)
	id, waitMs, ok := s.Next(now)
	if !ok {
		if waitMs <= 0 {
			return scrubIdle
		}
		return min(time.Duration(waitMs)*time.Millisecond, scrubIdle)
	}
	h := &b.cluster.heal
	h.mu.Lock()
	h.scrubbing, h.scrubVoid = id, false
	h.mu.Unlock()
	v := heal.Verify(seals[id], b.storeReader(ctx, storage.SegmentID(id), h.scrubRead), 0)
	h.mu.Lock()
	void := h.scrubVoid
	h.scrubbing, h.scrubVoid = 0, false
	h.mu.Unlock()
	s.Done(b.nowMs(), id, v)
	b.stats.scrubbed(v.Outcome)
	b.noteVerdict(id, v, void)
	if seal := seals[id]; !void && v.Whole() && seal.ContentHash == 0 {
		// A failover seal whose content no holder recorded (each
		// tries once, after sealing its copy, and all may have missed
		// the control plane): a whole copy records it now.
		if seg, ok := b.segmentByID(id); ok {
			b.recordSealContent(ctx, seg)
		}
	}
	if !void && (v.Outcome == heal.Damaged || v.Outcome == heal.Short) {
		// A copy deleted while it was read (void) is judged no more: its
		// verdict would mark whatever copy of the id came next.
		b.markDamaged(id, v, markInStore)
	}
	return time.Millisecond
}

// localSealedCopies are the sealed copies this node holds and the
// metadata lists it for, with their seals; behind are the copies it is
// listed for whose segment is sealed but which stopped below the seal
// unsealed (they missed the end of the segment; see sealCopy), and
// unsealed those that reach the seal but were not sealed (sealCopy
// failed or timed out).
func (b *Broker) localSealedCopies() (copies []heal.LocalCopy, seals map[uint64]heal.Seal, behind, unsealed []uint64) {
	self := clusterNodeName(b.cluster.cfg.NodeID)
	seals = map[uint64]heal.Seal{}
	for _, info := range b.store.List() {
		id := uint64(info.ID)
		seg, ok := b.segmentByID(id)
		switch {
		case !ok || seg.Active || !replicated(seg) || !slices.Contains(seg.Replicas, self):
			// A single copy is not scrubbed: with no peer to repair it
			// from, a damage mark would only hide its good prefix; its
			// reads verify every batch (S1).
		case info.Sealed:
			copies = append(copies, heal.LocalCopy{Segment: id, Bytes: seg.Bytes})
			seals[id] = sealOf(seg)
		case info.DurableEnd < seg.End:
			behind = append(behind, id)
		default:
			unsealed = append(unsealed, id)
		}
	}
	return copies, seals, behind, unsealed
}

// sealAgain seals the copies that have stayed whole but unsealed for the
// grace: a seal that timed out is tried once when the metadata sealed the
// segment, and such a copy would otherwise be neither scrubbed nor
// counted behind until the node restarts. The grace leaves a seal just
// applied by the metadata time to land.
// Only a seal that timed out or found the disk full is tried again (see
// heal.resealable); a copy found damaged or being healed is left to the
// heal. Each try may wait up to a metadata timeout, so a step makes a
// few, and a copy tried waits the grace again before its next.
func (b *Broker) sealAgain(now int64, unsealed []uint64) {
	h := &b.cluster.heal
	h.mu.Lock()
	retry := unsealed[:0:0]
	for _, id := range unsealed {
		if _, ok := h.resealable[id]; ok {
			retry = append(retry, id)
		}
	}
	for id := range h.resealable {
		if !slices.Contains(unsealed, id) {
			delete(h.resealable, id) // sealed, deleted or no longer listed
		}
	}
	h.mu.Unlock()
	tried := 0
	for _, id := range b.pastGrace(h.unsealed, now, retry) {
		seg, ok := b.segmentByID(id)
		if tried == sealAgainPerStep || !ok || seg.Active || b.copyDamaged(seg) || b.healBusy(id, now) {
			continue
		}
		b.sealCopy(seg)
		tried++
		h.mu.Lock()
		if _, ok := h.unsealed[id]; ok {
			h.unsealed[id] = b.nowMs()
		}
		h.mu.Unlock()
	}
}

// noteResealable records whether the scrub may try the seal of this
// node's copy of id again after err (see heal.resealable).
func (b *Broker) noteResealable(id uint64, err error) {
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resealable == nil {
		return // the heal is not running
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, storage.ErrNoSpace) {
		h.resealable[id] = struct{}{}
	} else {
		delete(h.resealable, id)
	}
}

// sealAgainPerStep bounds the seals one scrub step tries again.
const sealAgainPerStep = 8

// noteBehind marks damaged (short) the copies that have stayed behind
// their seal for two metadata timeouts: long enough for batches still in
// flight at the seal to land, after which nothing will fill them but a
// heal. The others' first sight is kept.
func (b *Broker) noteBehind(now int64, behind []uint64) {
	h := &b.cluster.heal
	for _, id := range b.pastGrace(h.behind, now, behind) {
		seg, ok := b.segmentByID(id)
		if ok && !b.copyDamaged(seg) {
			b.markDamaged(id, heal.Verdict{Outcome: heal.Short, At: b.localDurableEnd(id),
				Reason: fmt.Sprintf("the copy stopped below its seal at %d, unsealed", seg.End)}, markInStore)
		}
	}
}

// pastGrace keeps in since the first sight of each id in seen (and
// forgets the others), and answers those seen for two metadata timeouts.
func (b *Broker) pastGrace(since map[uint64]int64, now int64, seen []uint64) []uint64 {
	grace := 2 * b.cluster.cfg.MetadataTimeout.Milliseconds()
	h := &b.cluster.heal
	var out []uint64
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range since {
		if !slices.Contains(seen, id) {
			delete(since, id)
		}
	}
	for _, id := range seen {
		first, ok := since[id]
		if !ok {
			since[id] = now
		} else if now-first >= grace {
			out = append(out, id)
		}
	}
	return out
}

// noteMissing marks damaged (missing) the sealed copies the metadata
// lists this node for that its store does not hold (a file lost to a
// replaced disk or a restored backup): otherwise the listed copy would
// count as healthy for ever. A copy counts as missing once its segment
// has been sealed for the grace, so that a node back with a lost copy
// reports it on its first pass, while a seal that just landed has time
// to reach every replica. It also takes up the damage the store reports
// (found at open, or marked before a restart) for copies the metadata
// does not show damaged yet.
func (b *Broker) noteMissing(now int64) {
	self := clusterNodeName(b.cluster.cfg.NodeID)
	listed := map[uint64]int64{} // id: sealed at
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			for _, rid := range t.Ranges {
				for _, seg := range st.RangeSegments(rid) {
					if !seg.Active && replicated(seg) && slices.Contains(seg.Replicas, self) && !slices.Contains(seg.Damaged, self) {
						listed[seg.ID] = seg.SealedAt
					}
				}
			}
		}
	})
	h := &b.cluster.heal
	var missing []uint64
	for id, sealedAt := range listed {
		if b.hasFile(id) || b.healBusy(id, now) {
			continue
		}
		missing = append(missing, id)
		h.mu.Lock()
		if _, seen := h.missing[id]; !seen {
			h.missing[id] = min(sealedAt, now) // a clock ahead of this one's counts from now
		}
		h.mu.Unlock()
	}
	for _, id := range b.pastGrace(h.missing, now, missing) {
		b.markDamaged(id, heal.Verdict{Outcome: heal.Short, Reason: "the copy is missing from the node listed for it"}, markMissing)
	}
	for _, info := range b.store.List() {
		if _, ok := listed[uint64(info.ID)]; ok && info.Damage != nil {
			b.markDamaged(uint64(info.ID), heal.Verdict{Outcome: heal.Damaged, At: info.EndPastDamage, Reason: info.Damage.Error()}, markHeld)
		}
	}
}

// localDurableEnd is where this node's copy of id is fsynced to, 0
// when it cannot say.
func (b *Broker) localDurableEnd(id uint64) uint64 {
	_, d, err := b.store.Ends(storage.SegmentID(id))
	if err != nil {
		return 0
	}
	return d
}

// copyDamaged reports whether this node's copy of seg was found damaged
// or missing: recorded in the metadata, or found here and not recorded
// yet.
func (b *Broker) copyDamaged(seg metadata.Segment) bool {
	if b.cluster == nil {
		return false
	}
	if slices.Contains(seg.Damaged, clusterNodeName(b.cluster.cfg.NodeID)) {
		return true
	}
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	_, bad := h.damaged[seg.ID]
	return bad
}

// markHow says what markDamaged does to the store.
type markHow uint8

const (
	markInStore markHow = iota // mark the copy damaged in the store
	markHeld                   // the store already reports it damaged
	markMissing                // the store holds no copy
)

// markDamaged notes this node's copy of id damaged: durably in the store
// first (it outlives a restart), then in memory, from where the heal
// pass records it in the metadata (recordDamaged). A verdict on a copy
// that is no longer the listed, sealed one (deleted, dropped from the
// list, or a new copy being filled) is stale and dropped.
func (b *Broker) markDamaged(id uint64, v heal.Verdict, how markHow) {
	seg, ok := b.segmentByID(id)
	if !ok || seg.Active || !slices.Contains(seg.Replicas, clusterNodeName(b.cluster.cfg.NodeID)) || b.healBusy(id, b.nowMs()) {
		return
	}
	h := &b.cluster.heal
	h.mu.Lock()
	_, known := h.damaged[id]
	h.mu.Unlock()
	if known {
		return
	}
	if how == markInStore {
		err := b.store.MarkDamaged(storage.SegmentID(id), v.String())
		switch {
		case errors.Is(err, storage.ErrNotFound):
			return // deleted meanwhile: nothing is left to mark
		case err != nil:
			// Still kept out of service here, and recorded in the
			// metadata, which is durable on its own.
			b.log.Warn("scrub: could not mark a damaged copy in the store", "segment", id, "err", err)
		}
	}
	h.mu.Lock()
	h.damaged[id] = v
	h.mu.Unlock()
	b.log.Error("scrub: a sealed copy is damaged or missing; it is no longer served and will be replaced from a healthy replica",
		"segment", id, "verdict", v.String())
}

// recordDamaged records this node's damaged copies in the metadata
// (mark_copy_damaged) until it shows them, and forgets those whose
// segment is gone or no longer lists this node.
func (b *Broker) recordDamaged(ctx context.Context) {
	self := clusterNodeName(b.cluster.cfg.NodeID)
	h := &b.cluster.heal
	h.mu.Lock()
	ids := slices.Sorted(maps.Keys(h.damaged))
	h.mu.Unlock()
	n := 0
	for _, id := range ids {
		seg, ok := b.segmentByID(id)
		switch {
		case !ok || !slices.Contains(seg.Replicas, self):
			if !ok || !b.hasFile(id) {
				b.forgetDamaged(id)
			}
			continue
		case slices.Contains(seg.Damaged, self) || n >= maxDamageRecordsPerPass || ctx.Err() != nil:
			continue
		}
		n++
		actx, cancel := context.WithTimeout(ctx, b.cluster.cfg.MetadataTimeout)
		_, err := b.apply(actx, metadata.Command{Kind: metadata.KindMarkCopyDamaged, Segment: id, Node: self})
		cancel()
		if err != nil {
			b.log.Warn("scrub: recording a damaged copy in the metadata failed; the next pass retries", "segment", id, "err", err)
		}
	}
}

func (b *Broker) forgetDamaged(id uint64) {
	h := &b.cluster.heal
	h.mu.Lock()
	delete(h.damaged, id)
	h.mu.Unlock()
}

// deleteCopy deletes this node's copy of id for the heal: a scrub of it
// under way is voided, and its damage forgotten with it.
func (b *Broker) deleteCopy(id uint64) error {
	h := &b.cluster.heal
	h.mu.Lock()
	if h.scrubbing == id {
		h.scrubVoid = true
	}
	h.mu.Unlock()
	err := b.store.Delete(storage.SegmentID(id))
	if err == nil || errors.Is(err, storage.ErrNotFound) {
		b.forgetDamaged(id)
	}
	return err
}

func (b *Broker) setScrubStatus(st heal.ScrubStatus) {
	h := &b.cluster.heal
	h.mu.Lock()
	h.scrub = st
	h.mu.Unlock()
}

// localDamaged are the ids of this node's copies found damaged here.
func (h *healState) localDamaged() map[uint64]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uint64]bool, len(h.damaged))
	for id := range h.damaged {
		out[id] = true
	}
	return out
}

// damagedOf is seg's holders whose copy is damaged: those the metadata
// records, and this node when it found its own and has not recorded it.
func (b *Broker) damagedOf(seg metadata.Segment, local map[uint64]bool) []uint64 {
	var out []uint64
	for _, name := range seg.Damaged {
		out = append(out, nodeOfName(name))
	}
	self := b.cluster.cfg.NodeID
	if local[seg.ID] && !slices.Contains(out, self) && slices.Contains(seg.Replicas, clusterNodeName(self)) {
		out = append(out, self)
	}
	return out
}

// HealStatus is this node's view of repair, for cluster status.
type HealStatus struct {
	// Healing lists the copies this node is filling as a heal target.
	Healing []HealingSegment `json:"healing,omitempty"`
	// Damaged lists the copies nodes report damaged (never served).
	Damaged []DamagedSegment `json:"damaged,omitempty"`
	// Problems lists the segments this node's last plan could not heal,
	// with the reason (waiting, no healthy source, lost, no target...).
	Problems []HealProblem `json:"problems,omitempty"`
	// ScrubCopies and ScrubBehind: the sealed copies this node scrubs,
	// and whether ScrubRate is too low to verify them all each interval.
	ScrubCopies int  `json:"scrub_copies"`
	ScrubBehind bool `json:"scrub_behind,omitempty"`
	// HealingTotal, DamagedTotal and ProblemsTotal count each list
	// before it is cut to maxHealListed: the real numbers.
	HealingTotal  int `json:"healing_total"`
	DamagedTotal  int `json:"damaged_total"`
	ProblemsTotal int `json:"problems_total"`
}

// HealingSegment is a copy being filled: Target from Source.
type HealingSegment struct {
	Segment uint64 `json:"segment"`
	Source  uint64 `json:"source"`
	Target  uint64 `json:"target"`
}

// DamagedSegment is a damaged copy of Segment on Node.
type DamagedSegment struct {
	Segment uint64 `json:"segment"`
	Node    uint64 `json:"node"`
}

// HealProblem is a segment a plan could not heal, and why.
type HealProblem struct {
	Segment uint64 `json:"segment"`
	Problem string `json:"problem"`
	Detail  string `json:"detail,omitempty"`
}

// maxHealListed bounds each list of HealStatus.
const maxHealListed = 100

// healStatus reports repair as this node sees it.
func (b *Broker) healStatus() HealStatus {
	c := b.cluster
	var st HealStatus
	st.Damaged, st.DamagedTotal = b.damagedCopies()
	h := &c.heal
	h.mu.Lock()
	for id, a := range h.filling {
		st.Healing = append(st.Healing, HealingSegment{Segment: id, Source: a.Source, Target: c.cfg.NodeID})
	}
	for _, r := range h.reports {
		st.Problems = append(st.Problems, HealProblem{Segment: r.Segment, Problem: r.Problem.String(), Detail: r.Detail})
	}
	for _, id := range h.keptLost { // cluster_lost.go
		st.Problems = append(st.Problems, HealProblem{Segment: id, Problem: "lost_copy_quarantined",
			Detail: "recorded lost, yet a copy was found here: moved into the store's quarantine, not deleted"})
	}
	st.ScrubCopies, st.ScrubBehind = h.scrub.Copies, h.scrub.Behind
	st.ProblemsTotal = max(h.reportsTotal+len(h.keptLost), len(st.Problems))
	h.mu.Unlock()
	slices.SortFunc(st.Healing, func(x, y HealingSegment) int { return cmp.Compare(x.Segment, y.Segment) })
	st.HealingTotal = len(st.Healing)
	st.Healing = st.Healing[:min(len(st.Healing), maxHealListed)]
	st.Problems = st.Problems[:min(len(st.Problems), maxHealListed)]
	return st
}

// damagedCopies lists the damaged copies of sealed segments, the first
// maxHealListed by segment and node: those the metadata records, and
// this node's own not recorded yet; total counts them all.
func (b *Broker) damagedCopies() (_ []DamagedSegment, total int) {
	local := b.cluster.heal.localDamaged()
	var out []DamagedSegment
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			for _, rid := range t.Ranges {
				for _, seg := range st.RangeSegments(rid) {
					if seg.Active {
						continue
					}
					for _, n := range b.damagedOf(seg, local) {
						out = append(out, DamagedSegment{Segment: seg.ID, Node: n})
					}
				}
			}
		}
	})
	slices.SortFunc(out, func(x, y DamagedSegment) int {
		return cmp.Or(cmp.Compare(x.Segment, y.Segment), cmp.Compare(x.Node, y.Node))
	})
	return out[:min(len(out), maxHealListed)], len(out)
}

// noteVerdict records whether the scrub just found copy id whole, for
// describe's copy states: a whole verdict marks it verified, any other
// (or a copy deleted while it was read) unmarks it.
func (b *Broker) noteVerdict(id uint64, v heal.Verdict, void bool) {
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	if void || !v.Whole() {
		delete(h.verified, id)
		return
	}
	if h.verified == nil {
		h.verified = map[uint64]int64{}
	}
	h.verified[id] = b.nowMs()
}

// forgetVerified drops the marks of copies no longer scrubbed here
// (deleted, dropped from the list, or found damaged by a read).
func (b *Broker) forgetVerified(scrubbed map[uint64]heal.Seal) {
	h := &b.cluster.heal
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.verified {
		_, listed := scrubbed[id]
		_, bad := h.damaged[id]
		if !listed || bad {
			delete(h.verified, id)
		}
	}
}

// localVerified are this node's copies whose last scrub found them whole.
func (h *healState) localVerified() map[uint64]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uint64]bool, len(h.verified))
	for id := range h.verified {
		if _, bad := h.damaged[id]; !bad {
			out[id] = true
		}
	}
	return out
}
