package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// headFor returns the range's write head, creating it on first use. A new
// head is not ready: whoever locks it first reconciles it (readyLocked), so
// no caller ever sees a head that has not been loaded.
func (b *Broker) headFor(topicID, rangeID uint64) *head {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.mu.heads[rangeID]
	if !ok {
		h = &head{rangeID: rangeID, topicID: topicID}
		b.mu.heads[rangeID] = h
	}
	return h
}

// readyLocked makes sure h reflects the metadata and the store, finishing
// whatever a failed or interrupted open or roll left half done.
//
// REQUIRES: h.mu held.
func (b *Broker) readyLocked(h *head) error {
	if h.ready || h.retired {
		return nil
	}
	return b.reconcileLocked(h)
}

// openSegmentLocked registers a new active segment in the metadata (first,
// durably) and then creates its file. It runs on the broker's lifetime, not
// a client's: a cancelled client must not leave the range half open. If
// anything fails, the head is marked unready and the next user finishes
// the open from what the metadata and the store say.
//
// REQUIRES: h.mu held, h ready with no active segment.
func (b *Broker) openSegmentLocked(h *head) error {
	replicas, err := b.placeSegment(h)
	if err != nil {
		return err
	}
	res, err := b.apply(b.life, metadata.Command{
		Kind:     "open_segment",
		Range:    h.rangeID,
		Base:     h.next,
		Replicas: replicas,
		MinID:    b.segFloor.floorFor(h.rangeID),
	})
	if errors.Is(err, metadata.ErrSealed) || errors.Is(err, metadata.ErrNoSuchRange) {
		b.retireLocked(h)
		return errRetired
	}
	if errors.Is(err, metadata.ErrRangeHeld) {
		// Another node is splitting or merging the range (cluster_roll.go):
		// nothing was opened, and the producer tries again shortly.
		return fmt.Errorf("%w: range %d is being split or merged", ErrRetry, h.rangeID)
	}
	if err != nil {
		h.ready = false
		return fmt.Errorf("broker: open segment: %w", err)
	}
	if err := b.createSegment(res.SegmentID, h.next, h.rangeID); err != nil {
		h.ready = false
		return err
	}
	h.repl = len(replicas) > 1
	if h.repl {
		if err := b.openReplicas(res.SegmentID, h.next, replicas); err != nil {
			// Recorded and created, but not led here: a later use fails
			// the segment over (reconcileLocked).
			h.ready = false
			return fmt.Errorf("broker: open segment %d: %w", res.SegmentID, err)
		}
	}
	h.segment = res.SegmentID
	h.bytes = 0
	h.activeBytes.Store(0)
	h.openedAt = b.cfg.Clock.Now()
	h.rollBytes = b.headRollBytes(h.topicID)
	return nil
}

// createSegment creates a segment's file, tagged with its range so a
// restart can tell it apart from a file of another range with the same id.
func (b *Broker) createSegment(id, base, rangeID uint64) error {
	if err := b.store.CreateFor(storage.SegmentID(id), base, ownerTag(rangeID)); err != nil {
		return fmt.Errorf("broker: create segment %d: %w", id, err)
	}
	b.segFloor.raise(id)
	return nil
}

// rollLocked fences the active segment in the store (later appends are
// refused), waits for what was enqueued to be durable, and records the
// seal with the numbers the fence answered. The next produce opens the
// successor at the sealed end. Like an open it runs on the broker's
// lifetime; a failure part-way leaves the head unready, and reconciling it
// completes the seal from the store's footer.
//
// REQUIRES: h.mu held.
func (b *Broker) rollLocked(h *head) error {
	if err := b.readyLocked(h); err != nil {
		return err
	}
	if h.segment == 0 || h.retired {
		return nil
	}
	if h.repl {
		return b.rollReplicatedLocked(h)
	}
	footer, err := b.store.Seal(b.life, storage.SegmentID(h.segment))
	if err != nil {
		h.ready = false
		return fmt.Errorf("broker: fence segment %d: %w", h.segment, err)
	}
	if err := b.sealInMetadata(h.segment, footer); err != nil {
		h.ready = false
		return err
	}
	h.sealedAt(footer.End)
	return nil
}

// sealInMetadata records a store seal. A segment the metadata already
// sealed (a retried roll) is fine only if it was sealed at the same end.
func (b *Broker) sealInMetadata(id uint64, footer storage.Footer) error {
	res, err := b.apply(b.life, metadata.Command{
		Kind:        "seal_segment",
		Segment:     id,
		End:         footer.End,
		Records:     footer.Records,
		Bytes:       footer.Bytes,
		MaxExpiry:   footer.MaxExpiry,
		ContentHash: footer.ContentHash,
		Generation:  footer.Generation,
	})
	if errors.Is(err, metadata.ErrAlreadySealed) && res.Sealed != nil && res.Sealed.End == footer.End {
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: seal segment %d: %w", id, err)
	}
	return nil
}

// sealedAt leaves h with no active segment, the next open at end.
func (h *head) sealedAt(end uint64) {
	h.segment = 0
	h.repl = false
	h.next = end
	h.bytes = 0
	h.activeBytes.Store(0)
}

// rollAged rolls every active segment older than its topic's
// segment_max_age_ms, or holding more than its segment_max_bytes, so a
// quiet range's data becomes sealed (and eligible for retention) in
// bounded time. A head left unready by an earlier failure is reconciled
// here too, so a range nobody produces to does not stay half rolled. A
// quiet range whose active segment this node writes but has no head for
// (after a restart) gets one when the segment is due.
func (b *Broker) rollAged() {
	now := b.cfg.Clock.Now()
	bounds := map[uint64]rollBounds{}
	boundsOf := func(topic uint64) rollBounds {
		rb, ok := bounds[topic]
		if !ok {
			rb = b.rollBoundsOf(topic)
			bounds[topic] = rb
		}
		return rb
	}
	b.headsDueByAge(now, boundsOf)
	b.rollHeads("age roll failed", func(h *head) bool {
		return boundsOf(h.topicID).due(now.Sub(h.openedAt), h.bytes)
	})
}

// rollHeads rolls the active segment of every head this node writes for
// which due (called under the head lock) says so. A roll that fails
// leaves its head unready, logged with failed; the next pass or produce
// finishes it.
func (b *Broker) rollHeads(failed string, due func(h *head) bool) {
	b.mu.Lock()
	heads := make([]*head, 0, len(b.mu.heads))
	for _, h := range b.mu.heads {
		heads = append(heads, h)
	}
	b.mu.Unlock()
	for _, h := range heads {
		h.mu.Lock()
		err := b.readyLocked(h)
		if err == nil && h.segment != 0 && !h.retired && due(h) {
			err = b.rollLocked(h)
		}
		if err != nil && !errors.Is(err, ErrNotOwner) {
			b.log.Warn(failed, "range", h.rangeID, "err", err)
		}
		h.mu.Unlock()
	}
}

// rollBounds are a topic's effective roll thresholds.
type rollBounds struct {
	age     time.Duration
	ageOn   bool
	bytes   int64
	bytesOn bool
}

// due reports whether an active segment of this age and size rolls.
func (r rollBounds) due(age time.Duration, bytes int64) bool {
	return r.ageOn && age >= r.age || r.bytesOn && bytes >= r.bytes
}

// rollBoundsOf reads a topic's effective segment_max_age_ms and
// segment_max_bytes.
func (b *Broker) rollBoundsOf(topic uint64) rollBounds {
	eff := b.effectivePolicy(topic)
	var rb rollBounds
	var ms int64
	ms, rb.ageOn = eff.SegmentMaxAgeMs()
	rb.age = time.Duration(ms) * time.Millisecond
	rb.bytes, rb.bytesOn = eff.SegmentMaxBytes()
	return rb
}

// headRollBytes is a head's rollBytes for a new active segment of topic.
func (b *Broker) headRollBytes(topic uint64) int64 {
	if n := b.segmentMaxBytesFor(topic); n > 0 {
		return n
	}
	return -1
}

// segmentMaxBytesFor is the size at which a topic's active segment rolls:
// its effective segment_max_bytes, or 0 when the policy turns the size
// roll off.
func (b *Broker) segmentMaxBytesFor(topic uint64) int64 {
	rb := b.rollBoundsOf(topic)
	if !rb.bytesOn {
		return 0
	}
	return rb.bytes
}

// headsDueByAge makes a head for each active segment this node writes
// that is past its topic's age but has no head here: a range nobody
// produced to since the node started.
func (b *Broker) headsDueByAge(now time.Time, boundsOf func(uint64) rollBounds) {
	type due struct {
		topic, rng uint64
		openedAt   int64
	}
	var found []due
	_ = b.plane.ViewEach(func(_ uint64, st *metadata.State) {
		for _, t := range st.Topics() {
			for _, r := range st.ActiveRanges(t.ID) {
				if seg, ok := st.ActiveSegment(r.ID); ok && b.writesHere(seg) {
					found = append(found, due{t.ID, r.ID, seg.OpenedAt})
				}
			}
		}
	})
	for _, d := range found {
		b.mu.Lock()
		_, has := b.mu.heads[d.rng]
		b.mu.Unlock()
		if !has && boundsOf(d.topic).due(now.Sub(msTime(d.openedAt)), 0) {
			b.headFor(d.topic, d.rng)
		}
	}
}
