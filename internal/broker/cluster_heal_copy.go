package broker

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/peer"
	"github.com/malachi-log/malachi/internal/storage"
)

// The copy call (dataplane.KindCopy) runs on a channel of its own, so a
// heal's bulk reads neither queue behind nor hold up the data path's
// produces and reads. NB: the number belongs with the others in
// internal/peer; it is the first free one.
const channelHeal = peer.Channel(5)

// registerHeal installs the copy call's handler (before the transport
// starts). Until the store is open (the replica host exists) it refuses.
func (c *clusterNode) registerHeal(b *Broker) error {
	if err := c.tr.HandleCall(channelHeal, b.serveCopy); err != nil {
		return fmt.Errorf("broker: heal copies: %w", err)
	}
	return nil
}

// serveCopy answers another node's copy call from this node's sealed,
// undamaged copy, paced by the heal bucket (HealConfig.Rate). It runs
// on the transport's bounded handler pool.
func (b *Broker) serveCopy(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	if b.replicas() == nil || b.closed.Load() {
		return nil, fmt.Errorf("node-%d is starting or stopping", b.cluster.cfg.NodeID)
	}
	m, err := dataplane.DecodeCopy(req)
	if err != nil {
		return nil, err
	}
	seg, ok := b.segmentByID(m.Segment)
	switch {
	case !ok:
		return nil, fmt.Errorf("segment %d is not in the metadata here", m.Segment)
	case seg.Active:
		return nil, fmt.Errorf("segment %d is active: only sealed segments are copied", m.Segment)
	case b.copyDamaged(seg):
		return nil, fmt.Errorf("node-%d's copy of segment %d is damaged", b.cluster.cfg.NodeID, m.Segment)
	}
	id := storage.SegmentID(m.Segment)
	end, _, err := b.store.Ends(id)
	if err != nil {
		return nil, fmt.Errorf("segment %d: %w", m.Segment, err)
	}
	if end < seg.End {
		return nil, fmt.Errorf("node-%d's copy of segment %d ends at %d, below its seal %d", b.cluster.cfg.NodeID, m.Segment, end, seg.End)
	}
	// One call takes at most a chunk of this node's pace, so a peer
	// asking for more cannot put the bucket deep in debt per call.
	maxBytes := int(min(m.MaxBytes, uint64(healChunkFor(b.cluster.cfg.Heal.Rate))))
	batches, next, err := b.store.Read(id, m.From, max(maxBytes, 1), seg.End)
	if storage.IsCorrupt(err) {
		b.markDamaged(m.Segment, heal.Verdict{Outcome: heal.Damaged, At: m.From, Reason: err.Error()}, markInStore)
	}
	if err != nil {
		return nil, fmt.Errorf("read segment %d from %d for node %d: %w", m.Segment, m.From, from, err)
	}
	if len(batches) > 0 {
		if err := b.cluster.heal.serve.wait(ctx, b.nowMs, len(batches)); err != nil {
			return nil, err
		}
	}
	return (&dataplane.CopyAnswer{Next: next, End: seg.End, Sealed: true, Batches: batches}).Encode(), nil
}

// copyFrom fills this node's new copy of seal's segment from source's,
// chunk by chunk, each batch appended at exactly its offset.
func (b *Broker) copyFrom(ctx context.Context, source uint64, seal heal.Seal) error {
	id := storage.SegmentID(seal.Segment)
	next := seal.Base
	for next < seal.End {
		req := (&dataplane.Copy{Segment: seal.Segment, From: next, MaxBytes: uint64(healChunkFor(b.cluster.cfg.Heal.Rate))}).Encode()
		cctx, cancel := context.WithTimeout(ctx, healCallTimeout)
		raw, err := b.cluster.tr.Call(cctx, source, channelHeal, req)
		cancel()
		if err != nil {
			return fmt.Errorf("copy call to node %d: %w", source, err)
		}
		ans, err := dataplane.DecodeCopyAnswer(raw)
		if err != nil {
			return fmt.Errorf("copy answer from node %d: %w", source, err)
		}
		if len(ans.Batches) == 0 {
			return nil // a compacted copy may end below its seal; Verify judges
		}
		if ans.Next <= next {
			return fmt.Errorf("node %d answered batches that end at %d, not past %d", source, ans.Next, next)
		}
		if err := b.appendCopy(ctx, id, ans.Batches); err != nil {
			return err
		}
		next = ans.Next
	}
	return nil
}

// appendCopy appends one answer's batches to copy id, each checked
// again, and waits until all are durable.
func (b *Broker) appendCopy(ctx context.Context, id storage.SegmentID, page []byte) error {
	var parts [][]byte
	for len(page) > 0 {
		h, err := batch.ParseHeader(page)
		if err == nil && h.Length <= len(page) {
			err = batch.Verify(page[:h.Length])
		} else if err == nil {
			err = fmt.Errorf("%w: a batch of %d bytes in %d", batch.ErrShortBatch, h.Length, len(page))
		}
		if err != nil {
			return fmt.Errorf("a copied batch of segment %d: %w", id, err)
		}
		parts = append(parts, page[:h.Length])
		page = page[h.Length:]
	}
	done := make(chan error, len(parts))
	for _, p := range parts {
		if err := b.store.AppendAtAsync(ctx, id, p, func(err error) { done <- err }); err != nil {
			return fmt.Errorf("append to the copy of segment %d: %w", id, err)
		}
	}
	for range parts {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("append to the copy of segment %d: %w", id, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// storeReader reads copy id as heal.Verify wants it, taking each page
// from p first when p is set.
func (b *Broker) storeReader(ctx context.Context, id storage.SegmentID, p *pacer) heal.Reader {
	return func(from uint64, maxBytes int) ([]byte, error) {
		page, _, err := b.store.Read(id, from, maxBytes, math.MaxUint64)
		if err == nil && p != nil && len(page) > 0 {
			err = p.wait(ctx, b.nowMs, len(page))
		}
		return page, err
	}
}

// healChunkFor is the bytes one copy call carries at rate bytes/s: a
// quarter second's worth, at most healChunk. A call's first batch goes
// whole, however small the chunk.
func healChunkFor(rate int64) int64 {
	return min(max(rate/4, 1), healChunk)
}

// pacer shares a heal.Bucket between goroutines.
type pacer struct {
	mu sync.Mutex
	b  *heal.Bucket
}

// newPacer makes a pacer of rate bytes/s, with a burst of a quarter
// second (at least a byte). A batch larger than the burst still goes
// through, once, into debt (heal.Bucket), so a low rate stays near its
// second's worth at once instead of a whole chunk's.
func newPacer(rate, now int64) (*pacer, error) {
	bk, err := heal.NewBucket(rate, min(max(rate/4, 1), heal.MaxTakeBytes), now)
	if err != nil {
		return nil, err
	}
	return &pacer{b: bk}, nil
}

// wait takes n bytes, waiting for the credit, or fails when ctx ends.
func (p *pacer) wait(ctx context.Context, now func() int64, n int) error {
	for {
		p.mu.Lock()
		waitMs, err := p.b.Take(now(), int64(n))
		p.mu.Unlock()
		if err != nil || waitMs == 0 {
			return err
		}
		if !sleepCtx(ctx, time.Duration(waitMs)*time.Millisecond) {
			return ctx.Err()
		}
	}
}
