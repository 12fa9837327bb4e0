package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/malachi-log/malachi/internal/dataplane"
	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/storage"
	"github.com/malachi-log/malachi/internal/storage/segment"
)

// Reads of segments wherever they are. The read plan, cursors and lineage
// are worked out on the node serving the reader; only the storage read
// is local or a call to a node holding a copy, which answers the batches
// as stored, never past its durable end nor, for an active replicated
// segment, past the commit watermark it knows (R1). A copy serves reads
// only while it knows its watermark (active) or holds everything to the
// seal (sealed); otherwise another replica is asked, the primary first.
// The reader checks every batch's checksum before using it (S1), as the
// store does for its own reads.

// segExtent is what a reader needs of a segment's extent.
type segExtent struct {
	durableEnd   uint64
	records      uint64
	maxTimestamp int64
}

// readSegment reads seg's batches from from: at most maxBytes (the first
// batch whole), none at or past upTo. It returns the batches and the
// offset after the last one.
func (b *Broker) readSegment(ctx context.Context, seg metadata.Segment, from uint64, maxBytes int, upTo uint64) ([]byte, uint64, error) {
	buf, _, next, err := b.readSegmentInto(ctx, seg, from, maxBytes, upTo, false)
	return buf, next, err
}

// readSegmentPooled is readSegment into a pooled buffer when this node's
// copy serves the read: rb, when not nil, holds the batches, and the
// caller releases it once nothing refers to them. Batches from another
// node come in memory of their own.
func (b *Broker) readSegmentPooled(ctx context.Context, seg metadata.Segment, from uint64, maxBytes int, upTo uint64) ([]byte, *storage.ReadBuf, uint64, error) {
	return b.readSegmentInto(ctx, seg, from, maxBytes, upTo, true)
}

func (b *Broker) readSegmentInto(ctx context.Context, seg metadata.Segment, from uint64, maxBytes int, upTo uint64, pooled bool) ([]byte, *storage.ReadBuf, uint64, error) {
	if b.holds(seg) && b.copyComplete(seg) {
		bound, _ := b.readBound(seg, upTo)
		var (
			buf  []byte
			rb   *storage.ReadBuf
			next uint64
			err  error
		)
		if pooled {
			buf, rb, next, err = b.store.ReadPooled(storage.SegmentID(seg.ID), from, maxBytes, bound)
		} else {
			buf, next, err = b.store.Read(storage.SegmentID(seg.ID), from, maxBytes, bound)
		}
		switch {
		case b.readFoundDamage(seg, from, err):
			// Another replica answers this read (S1).
		case err != nil || len(buf) > 0 || !b.followsActive(seg):
			return buf, rb, next, err
		}
		rb.Release() // nothing of it is returned
		// A follower's copy read to the watermark it learned, which lags
		// its primary's: the primary says whether more is committed, so
		// a reader is never told it caught up early (R3).
	}
	d := b.data
	nodes := b.readNodes(seg)
	if d == nil || len(nodes) == 0 {
		if replicated(seg) && b.holds(seg) {
			// This node's copy was refused above (damaged, behind, or its
			// watermark unknown) and no other copy is there to ask: an
			// empty page would skip the segment (R3, T1).
			return nil, nil, from, ErrMetadataUnavailable
		}
		return nil, nil, from, b.local(seg)
	}
	if err := d.reserveRead(); err != nil {
		return nil, nil, from, err
	}
	defer d.readDone()
	var err, primaryErr error
	for _, node := range nodes {
		var buf []byte
		var next uint64
		buf, next, err = b.readRemote(ctx, node, seg, from, maxBytes, upTo)
		if err == nil || !b.tryAnotherCopy(seg, err) {
			return buf, nil, next, b.deletedMeanwhile(seg, err)
		}
		if node == primaryOf(seg) {
			primaryErr = err
		}
	}
	return nil, nil, from, b.deletedMeanwhile(seg, activeUnanswered(seg, err, primaryErr))
}

// deletedMeanwhile turns err, a read of sealed seg that no copy served,
// into storage.ErrNotFound when the metadata here says the segment was
// deleted since the reader's plan was made: retention, or every copy
// recorded lost (cluster_lost.go). The walk then takes the range's plan
// afresh and moves past the hole, counting it as skipped; a segment
// still listed keeps its error, never an empty page.
func (b *Broker) deletedMeanwhile(seg metadata.Segment, err error) error {
	if err == nil || seg.Active || !b.wasDeleted(seg.ID) {
		return err
	}
	return fmt.Errorf("%w: segment %d was deleted while read: %v", storage.ErrNotFound, seg.ID, err)
}

// activeUnanswered is the answer to a read of seg that no copy served,
// err the last copy's failure. When the copies that could say how far
// an active segment is committed are unreachable, starting or stopping
// (a restart of the cluster, or of the node holding its tail), the
// range's end is unknown: metadata_unavailable, the answer a reader
// waits on (R3). Only the primary's missing file means nothing is
// durable yet; a follower may not have made its copy, and a reader told
// "not found" would take the segment for empty. Other failures (too
// many requests, a damaged batch) keep their own reason.
func activeUnanswered(seg metadata.Segment, err, primaryErr error) error {
	switch {
	case !seg.Active:
		return err
	case errors.Is(err, storage.ErrNotFound) && errors.Is(primaryErr, storage.ErrNotFound):
		return err
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, ErrUnreachable), errors.Is(err, ErrShuttingDown):
		return fmt.Errorf("%w: segment %d: no copy that knows its commit watermark answered: %v", ErrMetadataUnavailable, seg.ID, err)
	}
	return err
}

// readNodes lists the nodes to read seg from, other than this one: its
// primary, then for a replicated segment the other replicas in order,
// those gossip declared dead last.
func (b *Broker) readNodes(seg metadata.Segment) []uint64 {
	var live, dead []uint64
	for _, id := range replicaIDs(seg) {
		switch {
		case id == 0 || b.cluster != nil && id == b.cluster.cfg.NodeID:
		case b.nodeDead(id):
			dead = append(dead, id)
		default:
			live = append(live, id)
		}
		if !replicated(seg) {
			break
		}
	}
	return append(live, dead...)
}

// tryAnotherCopy reports whether a failed read of a replicated segment
// may be served by another of its copies: any failure but the reader's
// own context ending.
func (b *Broker) tryAnotherCopy(seg metadata.Segment, err error) bool {
	return replicated(seg) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// readRemote is one read of seg from node.
func (b *Broker) readRemote(ctx context.Context, node uint64, seg metadata.Segment, from uint64, maxBytes int, upTo uint64) ([]byte, uint64, error) {
	d := b.data
	req := dataplane.Read{Segment: seg.ID, From: from, MaxBytes: uint64(max(min(maxBytes, d.lim.ReadBytes), 1)), UpTo: upTo}
	resp, err := d.call(untraced(ctx), node, req.Encode())
	if err != nil {
		return nil, from, err
	}
	ans, err := dataplane.DecodeReadAnswer(resp)
	if err != nil {
		return nil, from, segRefusal(node, seg.ID, err)
	}
	if err := verifyBatches(ans.Batches, from, upTo); err != nil {
		return nil, from, fmt.Errorf("broker: segment %d as node-%d sent it: %w", seg.ID, node, err)
	}
	return ans.Batches, ans.Next, nil
}

// verifyBatches checks what another node sent: whole batches, each with
// a good checksum, none wholly below from nor starting at or past upTo.
func verifyBatches(buf []byte, from, upTo uint64) error {
	batches, err := segment.SplitBatches(buf)
	if err != nil {
		return err
	}
	for _, batch := range batches {
		if err := segment.Verify(batch); err != nil {
			return err
		}
		h, err := segment.ParseHeader(batch)
		if err != nil {
			return err
		}
		if h.LastOffset() < from || h.BaseOffset >= upTo {
			return fmt.Errorf("batch [%d, %d] outside the read [%d, %d)", h.BaseOffset, h.LastOffset(), from, upTo)
		}
	}
	return nil
}

// segRefusal maps another node's refusal of a segment request: a segment
// it has no file of is storage.ErrNotFound, as a local read would say.
func segRefusal(node, segID uint64, err error) error {
	var r *dataplane.Refusal
	if !errors.As(err, &r) {
		return fmt.Errorf("broker: node-%d answered a read of segment %d: %w", node, segID, err)
	}
	if r.Status == dataplane.StatusNotFound {
		return fmt.Errorf("%w: segment %d on node-%d", storage.ErrNotFound, segID, node)
	}
	return remoteError(node, r)
}

// segmentExtent returns seg's durable extent from whichever node holds it.
func (b *Broker) segmentExtent(ctx context.Context, seg metadata.Segment) (segExtent, error) {
	if b.holds(seg) && b.copyComplete(seg) && !b.followsActive(seg) {
		info, err := b.store.Info(storage.SegmentID(seg.ID))
		if err != nil {
			return segExtent{}, err
		}
		end, _ := b.readBound(seg, info.DurableEnd)
		return segExtent{durableEnd: end, records: info.Records, maxTimestamp: info.MaxTimestamp}, nil
	}
	d := b.data
	node := primaryOf(seg)
	if d == nil || node == 0 {
		return segExtent{}, b.local(seg)
	}
	if !seg.Active && replicated(seg) {
		// Any whole copy knows a sealed segment's extent; the primary's
		// may be the damaged or missing one.
		return b.sealedExtent(ctx, seg)
	}
	if node == b.cluster.cfg.NodeID {
		// Led here before a restart and not failed over yet: its
		// watermark is unknown until it is.
		return segExtent{}, fmt.Errorf("%w: segment %d awaits its failover", ErrRetry, seg.ID)
	}
	resp, err := d.call(untraced(ctx), node, (&dataplane.Info{Segment: seg.ID}).Encode())
	if err != nil {
		return segExtent{}, err
	}
	ans, err := dataplane.DecodeInfoAnswer(resp)
	if err != nil {
		return segExtent{}, segRefusal(node, seg.ID, err)
	}
	return segExtent{durableEnd: ans.DurableEnd, records: ans.Records, maxTimestamp: ans.MaxTimestamp}, nil
}

// sealedExtent asks seg's other replicas in turn for its extent.
func (b *Broker) sealedExtent(ctx context.Context, seg metadata.Segment) (segExtent, error) {
	err := fmt.Errorf("%w: segment %d has no other replica to ask", ErrMetadataUnavailable, seg.ID)
	for _, node := range b.readNodes(seg) {
		var resp []byte
		resp, err = b.data.call(untraced(ctx), node, (&dataplane.Info{Segment: seg.ID}).Encode())
		if err == nil {
			var ans dataplane.InfoAnswer
			if ans, err = dataplane.DecodeInfoAnswer(resp); err == nil {
				return segExtent{durableEnd: ans.DurableEnd, records: ans.Records, maxTimestamp: ans.MaxTimestamp}, nil
			}
			err = segRefusal(node, seg.ID, err)
		}
		if !b.tryAnotherCopy(seg, err) {
			break
		}
	}
	return segExtent{}, err
}

// seekSegment is storage.Store.SeekTime on whichever node holds seg.
func (b *Broker) seekSegment(ctx context.Context, seg metadata.Segment, atMs int64) (uint64, bool, error) {
	if b.holds(seg) {
		return b.store.SeekTime(storage.SegmentID(seg.ID), atMs)
	}
	d := b.data
	node := primaryOf(seg)
	if d == nil || node == 0 {
		return 0, false, b.local(seg)
	}
	resp, err := d.call(untraced(ctx), node, (&dataplane.Seek{Segment: seg.ID, AtMs: atMs}).Encode())
	if err != nil {
		return 0, false, err
	}
	ans, err := dataplane.DecodeSeekAnswer(resp)
	if err != nil {
		return 0, false, segRefusal(node, seg.ID, err)
	}
	return ans.Base, ans.Found, nil
}

// storeRefusal answers a segment request the local store failed.
func storeRefusal(segID uint64, err error) []byte {
	if errors.Is(err, storage.ErrNotFound) {
		return (&dataplane.Refusal{Status: dataplane.StatusNotFound, Reason: "no_such_segment", Message: err.Error()}).Encode()
	}
	return refusal(dataplane.StatusRefused, err, "segment %d: %v", segID, err)
}

// serveRead answers a read of a segment of this node's store.
func (d *dataPlane) serveRead(req []byte) ([]byte, error) {
	m, err := dataplane.DecodeRead(req)
	if err != nil {
		return nil, err
	}
	id := storage.SegmentID(m.Segment)
	upTo, err := d.b.servedBound(m.Segment, m.UpTo)
	if err != nil {
		return storeRefusal(m.Segment, err), nil
	}
	maxBytes := int(min(m.MaxBytes, uint64(d.lim.ReadBytes)))
	buf, next, err := d.b.store.Read(id, m.From, maxBytes, upTo)
	if err != nil {
		if seg, ok := d.b.segmentByID(m.Segment); ok {
			d.b.readFoundDamage(seg, m.From, err) // the reader asks another copy
		}
		return storeRefusal(m.Segment, err), nil
	}
	info, err := d.b.store.Info(id)
	if err != nil {
		return storeRefusal(m.Segment, err), nil
	}
	return (&dataplane.ReadAnswer{Next: next, DurableEnd: info.DurableEnd, Sealed: info.Sealed, Batches: buf}).Encode(), nil
}

func (d *dataPlane) serveInfo(req []byte) ([]byte, error) {
	m, err := dataplane.DecodeInfo(req)
	if err != nil {
		return nil, err
	}
	info, err := d.b.store.Info(storage.SegmentID(m.Segment))
	if err != nil {
		return storeRefusal(m.Segment, err), nil
	}
	if info.DurableEnd, err = d.b.servedBound(m.Segment, info.DurableEnd); err != nil {
		return storeRefusal(m.Segment, err), nil
	}
	return (&dataplane.InfoAnswer{Base: info.Base, DurableEnd: info.DurableEnd, Records: info.Records,
		MaxTimestamp: info.MaxTimestamp, Sealed: info.Sealed}).Encode(), nil
}

func (d *dataPlane) serveSeek(req []byte) ([]byte, error) {
	m, err := dataplane.DecodeSeek(req)
	if err != nil {
		return nil, err
	}
	base, ok, err := d.b.store.SeekTime(storage.SegmentID(m.Segment), m.AtMs)
	if err != nil {
		return storeRefusal(m.Segment, err), nil
	}
	return (&dataplane.SeekAnswer{Found: ok, Base: base}).Encode(), nil
}

// servedBound is how far this node serves another node's read of its
// copy of segment id: upTo, lowered to the watermark or the seal of a
// replicated segment. A copy that cannot serve (its watermark unknown,
// or behind its seal) answers metadata_unavailable, and the reader asks
// another: not found would tell a reader of an active segment that
// nothing in it is durable yet, a false "caught up" (R3).
func (b *Broker) servedBound(id, upTo uint64) (uint64, error) {
	seg, ok := b.segmentByID(id)
	if !ok || !replicated(seg) {
		return upTo, nil
	}
	if !b.copyComplete(seg) {
		return 0, fmt.Errorf("%w: this copy of segment %d does not know its commit watermark or lacks part of its seal", ErrMetadataUnavailable, id)
	}
	bound, _ := b.readBound(seg, upTo)
	return bound, nil
}

// readFoundDamage reports whether err is damage met reading this node's
// copy of sealed, replicated seg, and if so marks the copy damaged
// (cluster_scrub.go), as the scrubber would: it is never served again,
// and a read of it goes to another replica at once rather than failing
// until the scrubber's next turn at it.
func (b *Broker) readFoundDamage(seg metadata.Segment, from uint64, err error) bool {
	if !storage.IsCorrupt(err) || b.cluster == nil || seg.Active || !replicated(seg) {
		return false
	}
	b.markDamaged(seg.ID, heal.Verdict{Outcome: heal.Damaged, At: from, Reason: err.Error()}, markInStore)
	return true
}

// readFailed wraps a failed segment read, keeping its reason.
func readFailed(segID uint64, err error) error {
	return fmt.Errorf("broker: read segment %d: %w", segID, err)
}
