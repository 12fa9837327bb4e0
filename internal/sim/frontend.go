package sim

import (
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/placement"
	"github.com/malachi-log/malachi/internal/replication"
)

// Refusal reasons a produce may be answered with. All but reasonUnknown
// say the batch was not appended: the client sends it again. An unknown
// outcome (the primary was lost with the batch in flight) is not
// retried: the records may or may not be in the log.
const (
	reasonUnavailable = "metadata_unavailable"
	reasonNotOwner    = "not_owner"
	reasonNoQuorum    = "no_quorum"
	reasonRetry       = "retry"
	reasonUnknown     = "unknown"
)

// produceReq is a produce from a client, or forwarded by a frontend
// (Via is then the frontend and FwdID its key for the reply).
type produceReq struct {
	Client, ID, Range uint64
	Batch             []byte
	Via, FwdID        uint64
}

// produceResp answers a produceReq; Reason is empty when acknowledged.
type produceResp struct {
	Client, ID    uint64
	FwdID         uint64
	Reason        string
	Segment, Base uint64
}

// forward is a produce this frontend passed to a primary, waiting for
// the answer to relay.
type forward struct{ reply func(produceResp) }

// onProduce handles a produce from a client or a forwarding frontend.
func (n *node) onProduce(from uint64, req produceReq) {
	reply := func(r produceResp) {
		r.Client, r.ID, r.FwdID = req.Client, req.ID, req.FwdID
		n.w.net.send(n.id, from, packet{resp: &r})
	}
	n.produce(req, reply)
}

func (n *node) produce(req produceReq, reply func(produceResp)) {
	w := n.w
	r, seg, ok, err := w.cp.head(n.id, req.Range)
	switch {
	case err != nil:
		reply(produceResp{Reason: reasonUnavailable})
		return
	case !ok:
		if req.Via != 0 {
			reply(produceResp{Reason: reasonNotOwner})
			return
		}
		if seg, err = n.open(r); err != nil {
			reply(produceResp{Reason: reasonOf(err)})
			return
		}
	}
	primary := replicaIDs(seg)[0]
	switch {
	case primary == n.id:
		n.appendHere(seg, req, reply)
	case req.Via != 0:
		reply(produceResp{Reason: reasonNotOwner})
	case w.memberDead(primary):
		n.startFailover(seg)
		reply(produceResp{Reason: reasonRetry})
	default:
		n.forwardTo(primary, seg, req, reply)
	}
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, errUnavailable):
		return reasonUnavailable
	case errors.Is(err, errNoQuorum):
		return reasonNoQuorum
	}
	return reasonRetry
}

var errNoQuorum = errors.New("no_quorum")

// errDiskFull refuses to open a segment on a node whose disk is full.
var errDiskFull = errors.New("disk full")

// open opens the range's next segment here, this node its primary, on a
// replica set placed by HRW over the nodes membership says are live,
// refused when fewer than a quorum of the factor are (as the broker's
// clampFactor).
func (n *node) open(r metadata.Range) (metadata.Segment, error) {
	w := n.w
	if n.disk.full {
		// A node whose disk is full leads nothing: the produce goes
		// elsewhere (the client tries another node).
		return metadata.Segment{}, errDiskFull
	}
	var live []placement.Node
	for _, o := range w.nodes {
		if !w.memberDead(o.id) && (!o.disk.full || !o.up) {
			live = append(live, placement.Node{ID: o.id})
		}
	}
	want := min(w.cfg.Replicas, len(w.nodes))
	if want > 1 && len(live) < replication.Quorum(want) {
		return metadata.Segment{}, fmt.Errorf("%w: %d live nodes", errNoQuorum, len(live))
	}
	pl, err := placement.Replace([]uint64{n.id}, nil, placement.Request{
		Topic: "sim", Range: r.ID, Segment: r.NextOffset, Nodes: live, Factor: want,
	})
	if err != nil {
		return metadata.Segment{}, err
	}
	names := make([]string, 0, len(pl.Replicas))
	for _, id := range pl.Replicas {
		names = append(names, nodeName(id))
	}
	res, err := w.cp.apply(n.id, metadata.Command{Kind: metadata.KindOpenSegment, Range: r.ID, Base: r.NextOffset, Replicas: names})
	if err != nil {
		return metadata.Segment{}, err
	}
	seg, _ := w.cp.view(res.SegmentID)
	if _, err := n.disk.create(seg.ID, seg.Base); err != nil {
		w.chk.fail("store", "node %d creating segment %d: %v", n.id, seg.ID, err)
		return metadata.Segment{}, err
	}
	p, err := replication.NewPrimary(replication.Config{Segment: seg.ID, Base: seg.Base, Replicas: pl.Replicas,
		MaxInflightBytes: 4 << 10, MaxRetainedBytes: 16 << 10, ResendAfter: 3 * w.cfg.TickEvery})
	if err != nil {
		w.chk.fail("setup", "primary of %d: %v", seg.ID, err)
		return metadata.Segment{}, err
	}
	n.prim[seg.ID] = &primSeg{seg: seg, ids: pl.Replicas, p: p}
	w.stats.Opens++
	w.note('O', n.id, seg.ID, seg.Base)
	return seg, nil
}

// appendHere appends a produce to a segment led here. A segment this node
// should lead but whose primary it lost (a restart) is failed over.
func (n *node) appendHere(seg metadata.Segment, req produceReq, reply func(produceResp)) {
	w := n.w
	ps := n.prim[seg.ID]
	if ps == nil {
		n.startFailover(seg)
		reply(produceResp{Reason: reasonRetry})
		return
	}
	b := slices.Clone(req.Batch)
	if err := batch.Verify(b); err != nil {
		reply(produceResp{Reason: "invalid_batch"})
		return
	}
	base, out, err := ps.p.Append(b, w.now)
	switch {
	case errors.Is(err, replication.ErrSealed):
		reply(produceResp{Reason: reasonRetry})
		return
	case errors.Is(err, replication.ErrBackpressure):
		reply(produceResp{Reason: reasonNoQuorum})
		return
	case err != nil:
		reply(produceResp{Reason: "refused"})
		w.chk.fail("protocol", "node %d append to %d: %v", n.id, seg.ID, err)
		return
	}
	n.w.chk.write(n, seg.ID)
	if err := n.disk.append(seg.ID, b); err != nil && w.cfg.Bug != BugIgnoreWriteError {
		if !errors.Is(err, syscall.ENOSPC) {
			w.chk.fail("store", "node %d appending to %d: %v", n.id, seg.ID, err)
		}
		// The batch reached no disk and was sent to no follower: it was
		// not appended. Those before it may be anywhere (copyFailed).
		reply(produceResp{Reason: reasonRetry})
		if err := n.disk.failCopy(seg.ID); err != nil {
			w.chk.fail("store", "node %d failing its copy of %d: %v", n.id, seg.ID, err)
		}
		n.copyFailed(seg.ID)
		return
	}
	h, _ := batch.ParseHeader(b)
	ps.waiting = append(ps.waiting, waiter{span: replication.Span{Base: base, End: h.LastOffset() + 1}, reply: reply})
	w.note('a', n.id, seg.ID, base)
	n.scheduleSync()
	n.act(ps, out)
	if w.cfg.Bug == BugAppendTwice && w.chance(0.05) && n.prim[seg.ID] == ps {
		n.appendAgain(ps, req.Batch)
	}
	if c := n.disk.copies[seg.ID]; n.prim[seg.ID] == ps && !ps.rolling && c != nil && c.size >= int64(w.cfg.RollBytes) {
		n.roll(ps)
	}
}

// appendAgain appends b once more, answering no one (BugAppendTwice).
func (n *node) appendAgain(ps *primSeg, b []byte) {
	b = slices.Clone(b)
	_, out, err := ps.p.Append(b, n.w.now)
	if err != nil {
		return
	}
	if err := n.disk.append(ps.seg.ID, b); err != nil {
		n.w.chk.fail("store", "node %d appending to %d: %v", n.id, ps.seg.ID, err)
	}
	n.act(ps, out)
}

// roll fences the primary; the seal follows once it drains (act).
func (n *node) roll(ps *primSeg) {
	ps.rolling, ps.fenceEnd, ps.fencedAt = true, ps.p.Fence(), n.w.now
	n.w.note('R', n.id, ps.seg.ID, ps.fenceEnd)
	if ps.p.Drained() {
		n.sealRoll(ps)
	}
}

// sealRoll records a drained roll's seal with exactly the fence's answer
// (W4), seals the local copy and tells the others.
func (n *node) sealRoll(ps *primSeg) {
	w := n.w
	// A roll knows what it seals: the seal records the records, bytes
	// and content hash every copy is verified against (heal.Verify).
	records, size, hash, err := n.disk.summary(ps.seg.ID, ps.fenceEnd)
	if err != nil {
		w.chk.fail("store", "node %d summing its copy of %d: %v", n.id, ps.seg.ID, err)
		return
	}
	res, err := w.cp.apply(n.id, metadata.Command{Kind: metadata.KindSealSegment, Segment: ps.seg.ID, End: ps.fenceEnd,
		Records: records, Bytes: size, ContentHash: hash})
	switch {
	case errors.Is(err, errUnavailable):
		return // tick tries again
	case errors.Is(err, metadata.ErrAlreadySealed) && res.Sealed != nil:
	case err != nil:
		w.chk.fail("W4", "node %d sealing %d at %d: %v", n.id, ps.seg.ID, ps.fenceEnd, err)
		return
	default:
		w.stats.Rolls++
		w.chk.sealed(ps.seg.ID, res.Sealed.End, "roll")
		if res.Sealed.End != ps.fenceEnd {
			w.chk.fail("W4", "segment %d sealed at %d, its fence answered %d", ps.seg.ID, res.Sealed.End, ps.fenceEnd)
		}
	}
	w.broadcastSeal(*res.Sealed)
}

// broadcastSeal applies a seal on every node that reaches the control
// plane; the others apply it when they reconnect or restart (catchUp).
func (w *world) broadcastSeal(seg metadata.Segment) {
	for _, o := range w.nodes {
		if o.up && w.cp.reachable(o.id) {
			o.sealCopy(seg)
		}
	}
}

// forwardTo passes a produce to the segment's primary. A primary that
// does not answer within ForwardTimeout is suspected: the produce is
// answered with an unknown outcome and the segment failed over.
func (n *node) forwardTo(primary uint64, seg metadata.Segment, req produceReq, reply func(produceResp)) {
	w := n.w
	n.nextFwd++
	id := n.nextFwd
	fw := &forward{reply: reply}
	n.fwd[id] = fw
	req.Via, req.FwdID = n.id, id
	w.net.send(n.id, primary, packet{req: &req})
	inc := n.inc
	w.after(w.cfg.ForwardTimeout, func() {
		if n.inc != inc || n.fwd[id] != fw {
			return
		}
		delete(n.fwd, id)
		reply(produceResp{Reason: reasonUnknown})
		if cur, ok := w.cp.view(seg.ID); ok && cur.Active {
			n.startFailover(cur)
		}
	})
}

// onForwardReply relays a primary's answer to the client.
func (n *node) onForwardReply(r produceResp) {
	fw := n.fwd[r.FwdID]
	if fw == nil {
		return // answered already (timed out)
	}
	delete(n.fwd, r.FwdID)
	fw.reply(r)
}
