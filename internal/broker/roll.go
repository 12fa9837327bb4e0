package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
)

// headFor returns the range's write head, creating it on first use from
// the metadata: the next offset continues from the range's last segment.
func (b *Broker) headFor(topicID, rangeID uint64) *head {
	b.mu.Lock()
	h, ok := b.mu.heads[rangeID]
	if !ok {
		h = &head{rangeID: rangeID, topicID: topicID}
		b.mu.heads[rangeID] = h
	}
	b.mu.Unlock()
	if !ok {
		h.mu.Lock()
		b.seedHeadLocked(h)
		h.mu.Unlock()
	}
	return h
}

// seedHeadLocked loads a new head's position from metadata and the store.
//
// REQUIRES: h.mu held.
func (b *Broker) seedHeadLocked(h *head) {
	var (
		active  metadata.Segment
		hasHead bool
		last    metadata.Segment
		hasLast bool
		retired bool
	)
	b.meta.View(func(st *metadata.State) {
		r, ok := st.Range(h.rangeID)
		if !ok || !r.Active {
			retired = true
			return
		}
		active, hasHead = st.ActiveSegment(h.rangeID)
		segs := st.RangeSegments(h.rangeID)
		if len(segs) > 0 {
			last, hasLast = segs[len(segs)-1], true
		}
	})
	if retired {
		h.retired = true
		return
	}
	if hasHead {
		info, err := b.store.Info(storage.SegmentID(active.ID))
		if err == nil {
			h.segment = active.ID
			h.next = info.End
			h.bytes = info.Bytes
			h.activeBytes.Store(info.Bytes)
			h.openedAt = msTime(active.OpenedAt)
			return
		}
		b.log.Error("active segment missing from the store", "segment", active.ID, "err", err)
		return
	}
	if hasLast {
		h.next = last.End
	}
}

// openSegmentLocked registers a new active segment in the metadata (first,
// durably) and then creates its file. A crash between the two leaves a
// metadata segment without a file, which recover creates empty.
//
// REQUIRES: h.mu held.
func (b *Broker) openSegmentLocked(ctx context.Context, h *head) error {
	res, err := b.apply(ctx, metadata.Command{
		Kind:     "open_segment",
		Range:    h.rangeID,
		Base:     h.next,
		Replicas: []string{b.cfg.NodeID},
	})
	if errors.Is(err, metadata.ErrSealed) || errors.Is(err, metadata.ErrNoSuchRange) {
		h.retired = true
		return errRetired
	}
	if err != nil {
		return fmt.Errorf("broker: open segment: %w", err)
	}
	if err := b.store.Create(storage.SegmentID(res.SegmentID), h.next); err != nil {
		return fmt.Errorf("broker: create segment: %w", err)
	}
	h.segment = res.SegmentID
	h.bytes = 0
	h.openedAt = b.cfg.Clock.Now()
	return nil
}

// rollLocked fences the active segment in the store (later appends are
// refused), waits for what was enqueued to be durable, and records the
// seal with the numbers the fence answered. The next produce opens the
// successor at the sealed end.
//
// REQUIRES: h.mu held.
func (b *Broker) rollLocked(ctx context.Context, h *head) error {
	if h.segment == 0 {
		return nil
	}
	footer, err := b.store.Seal(ctx, storage.SegmentID(h.segment))
	if err != nil {
		return fmt.Errorf("broker: fence segment %d: %w", h.segment, err)
	}
	_, err = b.apply(ctx, metadata.Command{
		Kind:        "seal_segment",
		Segment:     h.segment,
		End:         footer.End,
		Records:     footer.Records,
		Bytes:       footer.Bytes,
		MaxExpiry:   footer.MaxExpiry,
		ContentHash: footer.ContentHash,
	})
	if err != nil && !errors.Is(err, metadata.ErrAlreadySealed) {
		return fmt.Errorf("broker: seal segment %d: %w", h.segment, err)
	}
	h.segment = 0
	h.next = footer.End
	h.bytes = 0
	h.activeBytes.Store(0)
	return nil
}

// rollAged rolls every active segment older than SegmentMaxAge, so a quiet
// range's data becomes sealed (and eligible for retention) in bounded time.
func (b *Broker) rollAged(ctx context.Context) {
	now := b.cfg.Clock.Now()
	b.mu.Lock()
	heads := make([]*head, 0, len(b.mu.heads))
	for _, h := range b.mu.heads {
		heads = append(heads, h)
	}
	b.mu.Unlock()
	for _, h := range heads {
		h.mu.Lock()
		if h.segment != 0 && !h.retired && now.Sub(h.openedAt) >= b.cfg.SegmentMaxAge {
			if err := b.rollLocked(ctx, h); err != nil {
				b.log.Warn("age roll failed", "range", h.rangeID, "err", err)
			}
		}
		h.mu.Unlock()
	}
}

// recover reconciles metadata and store after a start: every active range
// with an active segment gets its head seeded from the store's durable end;
// an active segment the store lacks (crash between registering and
// creating it) is created empty at its base. Store segments the metadata
// does not know are reported and kept: data is never deleted because the
// metadata looks inconsistent.
func (b *Broker) recover(ctx context.Context) error {
	type want struct {
		topic, rng uint64
		seg        metadata.Segment
	}
	var (
		wants []want
		known = map[uint64]bool{}
	)
	b.meta.View(func(st *metadata.State) {
		for _, t := range st.Topics() {
			for _, rid := range t.Ranges {
				for _, s := range st.RangeSegments(rid) {
					known[s.ID] = true
					if s.Active {
						wants = append(wants, want{t.ID, rid, s})
					}
				}
			}
		}
	})
	for _, w := range wants {
		_, err := b.store.Info(storage.SegmentID(w.seg.ID))
		if errors.Is(err, storage.ErrNotFound) {
			if err := b.store.Create(storage.SegmentID(w.seg.ID), w.seg.Base); err != nil {
				return fmt.Errorf("broker: recreate segment %d: %w", w.seg.ID, err)
			}
			b.log.Info("recreated an empty active segment registered before a crash", "segment", w.seg.ID)
		} else if err != nil {
			return fmt.Errorf("broker: segment %d: %w", w.seg.ID, err)
		}
		b.headFor(w.topic, w.rng)
	}
	var orphans []uint64
	for _, info := range b.store.List() {
		if !known[uint64(info.ID)] {
			orphans = append(orphans, uint64(info.ID))
		}
	}
	sort.Slice(orphans, func(i, j int) bool { return orphans[i] < orphans[j] })
	if len(orphans) > 0 {
		b.log.Warn("segments on disk that no topic references were kept, not deleted", "segments", orphans)
	}
	_ = ctx
	return nil
}
