package sim

import (
	"fmt"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/metadata"
)

// maxReads bounds the reads kept for the final prefix check.
const maxReads = 400

// histRec is one record as a reader saw it.
type histRec struct {
	id       recID
	key      string
	seg, off uint64
}

type readRec struct {
	rng, node uint64
	ids       []recID
}

// history reads a range through node n, as a consumer of n would: each
// sealed segment from n's own sealed copy, else from a listed replica
// holding one (a remote read), never from a copy whose batches fail
// their checks (serveSealed); the active segment up to the watermark n
// knows. It stops at the first segment n cannot serve, so a reader is
// never told it is caught up when it is not; complete says whether it
// reached the end.
func (w *world) history(n *node, rangeID uint64) (out []histRec, complete bool) {
	for _, seg := range w.cp.st.RangeSegments(rangeID) {
		data, end, ok := w.serve(n, seg)
		if !ok {
			return out, false
		}
		recs, ok := w.decode(seg, data, end)
		out = append(out, recs...)
		if !ok {
			return out, false
		}
	}
	return out, true
}

// serve answers seg's bytes as node n serves them, and where they stop.
func (w *world) serve(n *node, seg metadata.Segment) ([]byte, uint64, bool) {
	if !seg.Active {
		data, ok := w.serveSealed(n, seg)
		return data, seg.End, ok
	}
	if ps := n.prim[seg.ID]; ps != nil {
		end := ps.p.Watermark()
		return n.disk.read(seg.ID, seg.Base, end, 1<<30), end, true
	}
	if fs := n.fol[seg.ID]; fs != nil {
		return n.disk.read(seg.ID, seg.Base, fs.wm, 1<<30), fs.wm, true
	}
	return nil, 0, false
}

// decode checks and decodes batches read from seg below end; ok is false
// when they do not reach end.
func (w *world) decode(seg metadata.Segment, data []byte, end uint64) ([]histRec, bool) {
	parts, err := batch.SplitBatches(data)
	if err != nil {
		w.chk.fail("S1", "segment %d: %v", seg.ID, err)
		return nil, false
	}
	var out []histRec
	at := seg.Base
	for _, b := range parts {
		if err := batch.Verify(b); err != nil {
			w.chk.fail("S1", "segment %d: a bad batch served: %v", seg.ID, err)
			return out, false
		}
		recs, err := batch.DecodeRecords(b, nil)
		if err != nil {
			w.chk.fail("S1", "segment %d: %v", seg.ID, err)
			return out, false
		}
		for _, r := range recs {
			id, ok := decodeValue(r.Value)
			if !ok {
				w.chk.fail("no-loss", "segment %d offset %d holds a record no producer sent", seg.ID, r.Offset)
				continue
			}
			out = append(out, histRec{id: id, key: string(r.Key), seg: seg.ID, off: r.Offset})
		}
		h, _ := batch.ParseHeader(b)
		at = h.LastOffset() + 1
	}
	return out, at == end
}

// readLoop reads a random range through a random live node now and then,
// and checks R1 on what it returns.
func (w *world) readLoop() {
	if w.stopping {
		return
	}
	defer w.after(w.between(50, 150), w.readLoop)
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	if !n.up {
		return
	}
	r := w.ranges[w.rng.IntN(len(w.ranges))].ID
	recs, _ := w.history(n, r)
	w.stats.Reads++
	w.stats.ReadRecords += len(recs)
	rr := readRec{rng: r, node: n.id}
	for _, h := range recs {
		if bound := w.commitBound(h.seg); h.off >= bound {
			w.chk.fail("R1", "node %d served offset %d of segment %d above its commit %d", n.id, h.off, h.seg, bound)
		}
		rr.ids = append(rr.ids, h.id)
	}
	if len(w.chk.reads) < maxReads {
		w.chk.reads = append(w.chk.reads, rr)
	}
}

// commitBound is the end below which a segment's records may be read:
// its seal, or the highest watermark any primary of it reached.
func (w *world) commitBound(seg uint64) uint64 {
	if s, ok := w.cp.view(seg); ok && !s.Active {
		return s.End
	}
	return w.chk.topWM[seg]
}

// finish stops the producers, seals every active segment (a roll where
// the primary runs, a failover where it does not), and runs the final
// checks on what is left.
func (w *world) finish() {
	w.stopping = true
	w.loop(w.now + w.cfg.ClientTimeout)
	for round := 0; round < 10 && w.activeSegments() > 0; round++ {
		for _, r := range w.ranges {
			if seg, ok := w.cp.st.ActiveSegment(r.ID); ok {
				w.sealNow(seg)
			}
		}
		w.loop(w.now + w.cfg.FailoverTimeout + w.cfg.StuckRoll)
		w.catchUpAll()
	}
	if n := w.activeSegments(); n > 0 {
		w.chk.fail("liveness", "%d ranges still have an active segment after the faults healed: %s", n, w.describeActive())
		return
	}
	// The final seals may leave segments short of copies (a lost node
	// was in their set): the world quiesces, for at most Quiesce, until
	// every sealed segment is back to its factor.
	for deadline := w.now + w.cfg.Quiesce; w.now < deadline && !w.repaired(); {
		w.loop(w.now + w.cfg.HealEvery)
	}
	w.chk.final()
}

func (w *world) activeSegments() int {
	n := 0
	for _, r := range w.ranges {
		if _, ok := w.cp.st.ActiveSegment(r.ID); ok {
			n++
		}
	}
	return n
}

func (w *world) sealNow(seg metadata.Segment) {
	ids := replicaIDs(seg)
	p := w.node(ids[0])
	if ps := p.prim[seg.ID]; ps != nil && !ps.p.Fenced() {
		p.roll(ps)
		return
	}
	if ps := p.prim[seg.ID]; ps != nil {
		return // a roll or a failover is under way
	}
	p.startFailover(seg)
}

// describeActive says where each active segment stands, for a report.
func (w *world) describeActive() string {
	var b []byte
	for _, r := range w.ranges {
		seg, ok := w.cp.st.ActiveSegment(r.ID)
		if !ok {
			continue
		}
		b = fmt.Appendf(b, "segment %d of range %d on %v:", seg.ID, r.ID, seg.Replicas)
		for _, id := range replicaIDs(seg) {
			n := w.node(id)
			b = fmt.Appendf(b, " n%d(up=%v", id, n.up)
			if ps := n.prim[seg.ID]; ps != nil {
				b = fmt.Appendf(b, " primary end=%d wm=%d fenced=%v", ps.p.End(), ps.p.Watermark(), ps.p.Fenced())
			}
			if fs := n.fol[seg.ID]; fs != nil {
				b = fmt.Appendf(b, " follower end=%d synced=%d fenced=%v", fs.f.End(), fs.f.SyncedEnd(), fs.f.Fenced())
			}
			if c := n.disk.copies[seg.ID]; c != nil {
				b = fmt.Appendf(b, " copy end=%d synced=%d sealed=%v", c.end, c.syncedEnd, c.sealed)
			}
			b = append(b, ')')
		}
		b = append(b, "; "...)
	}
	return string(b)
}
