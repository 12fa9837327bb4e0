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
// An empty answer is the segment's end only from a copy that knows it
// (emptyMeansEnd).
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
	if b.holds(seg) && !b.copyComplete(seg) {
		seg = b.current(seg)
	}
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
	var err, primaryErr, notEnd error
	for _, node := range nodes {
		var ans dataplane.ReadAnswer
		ans, err = b.readRemote(ctx, node, seg, from, maxBytes, upTo)
		if err == nil && len(ans.Batches) == 0 && !emptyMeansEnd(seg, node, from, ans.Sealed) && notEnd == nil {
			seg = b.current(seg) // once: a seal the plan predates may make it the end
		}
		if err == nil && len(ans.Batches) == 0 && !emptyMeansEnd(seg, node, from, ans.Sealed) {
			err = fmt.Errorf("%w: node-%d has nothing of segment %d from %d on, but its copy cannot say the segment ends there",
				ErrMetadataUnavailable, node, seg.ID, from)
			notEnd = err
		}
		if err == nil || !b.tryAnotherCopy(seg, err) {
			return ans.Batches, nil, ans.Next, b.deletedMeanwhile(seg, err)
		}
		if node == primaryOf(seg) {
			primaryErr = err
		}
	}
	switch {
	case seg.Active && errors.Is(primaryErr, storage.ErrNotFound):
		// The primary has not created its file yet: nothing of the
		// segment is durable, whatever a follower's copy answered.
		err = primaryErr
	case notEnd != nil:
		// A copy answered but could not vouch for the end; the copies
		// tried after it failing otherwise does not make the end known.
		err = notEnd
	}
	return nil, nil, from, b.deletedMeanwhile(seg, activeUnanswered(seg, err, primaryErr))
}

// current is seg as the metadata has it now when the reader's plan has
// it active and replicated, else seg: the plan may predate its seal.
// Sealed, it is served to its seal by any whole copy, this node's
// included, whose replica state the seal dropped; and an empty answer
// at or past the seal is its end. Looked up only where the plan's view
// makes a read fail (a copy here that cannot serve, an empty answer
// that cannot be the end), not on every read: a lookup takes the
// metadata's read lock, which its apply needs.
func (b *Broker) current(seg metadata.Segment) metadata.Segment {
	if !seg.Active || !replicated(seg) {
		return seg
	}
	if cur, ok := b.segmentByID(seg.ID); ok {
		return cur
	}
	return seg
}

// emptyMeansEnd reports whether node's empty answer to a read of
// replicated seg from from says the segment holds nothing more there.
// Only a copy that knows the end can say so: one sealed in its store
// (whole to the seal), or the primary of an active segment, whose
// watermark is the commit's. A follower's copy stops at the watermark
// it learned, which lags the primary's (each append carries the
// watermark before it, and the one after the last commit may never
// have reached it), and a copy whose node has not applied the seal yet
// stops there too: taken for the end, either would answer a reader a
// page that stops short of acknowledged records, as caught up (R3).
func emptyMeansEnd(seg metadata.Segment, node, from uint64, sealedCopy bool) bool {
	switch {
	case !replicated(seg), sealedCopy:
		return true
	case seg.Active:
		return node == primaryOf(seg)
	}
	return from >= seg.End
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

// readRemote is one read of seg from node. A failed read answers no
// batches and from as its next offset.
func (b *Broker) readRemote(ctx context.Context, node uint64, seg metadata.Segment, from uint64, maxBytes int, upTo uint64) (dataplane.ReadAnswer, error) {
	d := b.data
	failed := dataplane.ReadAnswer{Next: from}
	req := dataplane.Read{Segment: seg.ID, From: from, MaxBytes: uint64(max(min(maxBytes, d.lim.ReadBytes), 1)), UpTo: upTo}
	resp, err := d.call(untraced(ctx), node, req.Encode())
	if err != nil {
		return failed, err
	}
	ans, err := dataplane.DecodeReadAnswer(resp)
	if err != nil {
		return failed, segRefusal(node, seg.ID, err)
	}
	if err := verifyBatches(ans.Batches, from, upTo); err != nil {
		return failed, fmt.Errorf("broker: segment %d as node-%d sent it: %w", seg.ID, node, err)
	}
	return ans, nil
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
