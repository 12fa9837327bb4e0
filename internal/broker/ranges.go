package broker

import (
	"context"
	"errors"
	"sort"

	"github.com/malachi-log/malachi/internal/metadata"
)

// SplitRange splits an active range of topic in two halves, online.
// rangeID 0 picks the active range holding the most bytes.
//
// Seal-first: under the range's write-head lock the active segment is
// fenced in the store and its seal recorded (by the node writing the
// range, in a cluster: cluster_roll.go), and only then does the metadata
// split the range. A produce that routed to the parent before the
// split either enqueued before the fence (and is in the parent) or finds
// the head retired and re-routes to a child: never lost, never in both.
func (b *Broker) SplitRange(ctx context.Context, topic string, rangeID uint64) ([]uint64, error) {
	topicID, rangeID, err := b.resolveRange(topic, rangeID)
	if err != nil {
		return nil, err
	}
	h := b.headFor(topicID, rangeID)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := b.readyLocked(h); err != nil && !b.writtenElsewhere(err) {
		return nil, err
	}
	if h.retired {
		return nil, metadata.ErrSealed
	}
	if err := b.checkRangeRoom(2); err != nil {
		return nil, err
	}
	if err := b.holdRanges(ctx, rangeID); err != nil {
		return nil, err
	}
	if err := b.rollForChangeLocked(ctx, h); err != nil {
		b.releaseRanges(rangeID)
		return nil, err
	}
	res, err := b.apply(ctx, metadata.Command{Kind: "split_range", Range: rangeID, Quota: b.rangeQuota()})
	if err != nil {
		b.releaseRanges(rangeID)
		return nil, err
	}
	b.retireLocked(h)
	b.watchFor(topicID).fire()
	return res.RangeIDs, nil
}

// MergeRanges merges two buddy ranges of topic into one, online, fencing
// and sealing both first.
func (b *Broker) MergeRanges(ctx context.Context, topic string, a, c uint64) (uint64, error) {
	topicID, err := b.topicID(topic)
	if err != nil {
		return 0, err
	}
	for _, id := range []uint64{a, c} {
		if err := b.rangeOf(topicID, id); err != nil {
			return 0, err
		}
	}
	if a == c {
		return 0, metadata.ErrNotBuddies
	}
	ids := []uint64{a, c}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	h1, h2 := b.headFor(topicID, ids[0]), b.headFor(topicID, ids[1])
	h1.mu.Lock()
	defer h1.mu.Unlock()
	h2.mu.Lock()
	defer h2.mu.Unlock()
	for _, h := range []*head{h1, h2} {
		if err := b.readyLocked(h); err != nil && !b.writtenElsewhere(err) {
			return 0, err
		}
	}
	if h1.retired || h2.retired {
		return 0, metadata.ErrSealed
	}
	if err := b.checkBuddies(a, c); err != nil {
		return 0, err
	}
	if err := b.checkRangeRoom(1); err != nil {
		return 0, err
	}
	if err := b.holdRanges(ctx, a, c); err != nil {
		return 0, err
	}
	for _, h := range []*head{h1, h2} {
		if err := b.rollForChangeLocked(ctx, h); err != nil {
			b.releaseRanges(a, c)
			return 0, err
		}
	}
	res, err := b.apply(ctx, metadata.Command{Kind: "merge_ranges", Range: a, RangeB: c, Quota: b.rangeQuota()})
	if err != nil {
		b.releaseRanges(a, c)
		return 0, err
	}
	b.retireLocked(h1)
	b.retireLocked(h2)
	b.watchFor(topicID).fire()
	return res.RangeIDs[0], nil
}

// checkBuddies refuses a merge the state machine would refuse before any
// segment is sealed for it, so a bad request changes nothing.
func (b *Broker) checkBuddies(a, c uint64) error {
	var err error
	_ = b.plane.ViewID(a, func(st *metadata.State) {
		ra, _ := st.Range(a)
		rc, _ := st.Range(c)
		if ra.Topic != rc.Topic {
			err = metadata.ErrDifferentTopic
			return
		}
		size := ra.End - ra.Start
		if size != rc.End-rc.Start || ra.Start^size != rc.Start {
			err = metadata.ErrNotBuddies
		}
	})
	return err
}

// retireLocked marks a head retired and forgets it.
//
// REQUIRES: h.mu held.
func (b *Broker) retireLocked(h *head) {
	h.retired = true
	b.mu.Lock()
	if b.mu.heads[h.rangeID] == h {
		delete(b.mu.heads, h.rangeID)
	}
	b.mu.Unlock()
}

func (b *Broker) rangeOf(topicID, rangeID uint64) error {
	var err error
	err = metadata.ErrNoSuchRange
	_ = b.plane.ViewID(rangeID, func(st *metadata.State) {
		err = nil
		r, ok := st.Range(rangeID)
		switch {
		case !ok:
			err = metadata.ErrNoSuchRange
		case r.Topic != topicID:
			err = metadata.ErrDifferentTopic
		case !r.Active:
			err = metadata.ErrSealed
		}
	})
	return err
}

// resolveRange checks rangeID belongs to topic, or picks the active range
// with the most bytes when rangeID is 0.
func (b *Broker) resolveRange(topic string, rangeID uint64) (uint64, uint64, error) {
	topicID, err := b.topicID(topic)
	if err != nil {
		return 0, 0, err
	}
	if rangeID != 0 {
		if err := b.rangeOf(topicID, rangeID); err != nil {
			if errors.Is(err, metadata.ErrDifferentTopic) {
				err = metadata.ErrNoSuchRange
			}
			return 0, 0, err
		}
		return topicID, rangeID, nil
	}
	d, err := b.DescribeTopic(topic)
	if err != nil {
		return 0, 0, err
	}
	var best, bestBytes uint64
	for _, r := range d.Ranges {
		if !r.Active {
			continue
		}
		var bytes uint64
		for _, s := range r.Segments {
			bytes += s.Bytes
		}
		if best == 0 || bytes > bestBytes {
			best, bestBytes = r.ID, bytes
		}
	}
	return topicID, best, nil
}
