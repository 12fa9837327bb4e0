package sim

import (
	"bytes"
	"fmt"

	"github.com/malachi-log/malachi/internal/replication"
)

// maxViolations bounds what a run reports: the first few say enough.
const maxViolations = 20

// recState is what the checker knows of one record.
type recState struct {
	key      string
	rng      uint64
	acked    bool
	ackOrder int // position among its producer's acks
	seg      uint64
}

type copyKey struct{ node, seg uint64 }

type wmKey struct {
	node, inc, seg uint64
	role           byte
}

// checker holds what the invariants are checked against. Each check is
// named by its invariant id in cluster-invariants.md.
type checker struct {
	w          *world
	violations []Violation
	recs       map[recID]*recState
	acks       []int // acks per producer
	// commit is the highest end a primary released as committed per
	// segment; seals, the sealed end per segment.
	commit map[uint64]uint64
	seals  map[uint64]uint64
	// fences are the copies fenced in an incarnation: nothing may be
	// written to them in it (W4).
	fences map[copyKey]uint64
	wms    map[wmKey]uint64
	topWM  map[uint64]uint64 // the highest primary watermark per segment
	reads  []readRec
	// present holds, per range, the records of its final history.
	present []map[recID]bool
	// truth is each sealed segment's bytes; rotten the copies a flip hit.
	truth  map[uint64]truth
	rotten map[copyKey]bool
}

func newChecker(w *world) *checker {
	return &checker{w: w, recs: map[recID]*recState{}, commit: map[uint64]uint64{}, seals: map[uint64]uint64{},
		fences: map[copyKey]uint64{}, wms: map[wmKey]uint64{}, topWM: map[uint64]uint64{},
		truth: map[uint64]truth{}, rotten: map[copyKey]bool{}}
}

func (c *checker) fail(id, format string, args ...any) {
	if len(c.violations) < maxViolations {
		c.violations = append(c.violations, Violation{Invariant: id, At: c.w.now, Detail: fmt.Sprintf(format, args...)})
	}
}

func (c *checker) sent(a *attempt) {
	for i, id := range a.recs {
		c.recs[id] = &recState{key: string(a.keys[i]), rng: a.rng}
	}
	c.w.stats.Records += len(a.recs)
}

func (c *checker) maybe(a *attempt) { c.w.stats.Maybe += len(a.recs) }

func (c *checker) acked(a *attempt, seg, base uint64) {
	w := c.w
	for len(c.acks) <= int(a.recs[0].producer) {
		c.acks = append(c.acks, 0)
	}
	for _, id := range a.recs {
		r := c.recs[id]
		if r.acked {
			c.fail("no-dup", "record %s acknowledged twice", id)
		}
		c.acks[id.producer]++
		r.acked, r.ackOrder, r.seg = true, c.acks[id.producer], seg
	}
	w.stats.Acked += len(a.recs)
	w.note('A', a.recs[0].producer, a.recs[0].seq, seg, base)
}

// committed checks W1 as a primary releases a produce: a quorum of the
// replica set holds the batch's bytes fsynced, and W6 after the fact: no
// seal recorded before cuts it.
func (c *checker) committed(n *node, ps *primSeg, sp replication.Span) {
	w := c.w
	want, ok := n.disk.durableBatch(ps.seg.ID, sp)
	if !ok {
		want = n.disk.read(ps.seg.ID, sp.Base, sp.End, 1<<30)
	}
	have := 0
	for _, id := range ps.ids {
		if b, ok := w.node(id).disk.durableBatch(ps.seg.ID, sp); ok && bytes.Equal(b, want) {
			have++
		}
	}
	if q := replication.Quorum(len(ps.ids)); have < q {
		c.fail("W1", "segment %d [%d, %d) acknowledged with %d fsynced copies, quorum %d", ps.seg.ID, sp.Base, sp.End, have, q)
	}
	if end, ok := c.seals[ps.seg.ID]; ok && sp.End > end {
		c.fail("W6", "segment %d [%d, %d) acknowledged above its seal at %d", ps.seg.ID, sp.Base, sp.End, end)
	}
	c.commit[ps.seg.ID] = max(c.commit[ps.seg.ID], sp.End)
}

// sealed checks W6 when a seal is recorded: it covers every release.
func (c *checker) sealed(seg, end uint64, how string) {
	if got := c.commit[seg]; got > end {
		c.fail("W6", "segment %d sealed at %d by a %s, below the acknowledged end %d", seg, end, how, got)
	}
	c.seals[seg] = end
	c.w.stats.SealedSegments++
}

// tiling checks W3 on a range after an open or a seal.
func (c *checker) tiling(rangeID uint64) {
	st := c.w.cp.st
	r, _ := st.Range(rangeID)
	segs := st.RangeSegments(rangeID)
	for i, s := range segs {
		switch {
		case i > 0 && s.Base != segs[i-1].End:
			c.fail("W3", "range %d: segment %d starts at %d, its predecessor ends at %d", rangeID, s.ID, s.Base, segs[i-1].End)
		case s.Active && i != len(segs)-1:
			c.fail("W3", "range %d: active segment %d is not the last", rangeID, s.ID)
		case !s.Active && i == len(segs)-1 && r.NextOffset != s.End:
			c.fail("W4", "range %d: next offset %d, the last seal %d", rangeID, r.NextOffset, s.End)
		}
	}
}

func (c *checker) fenced(n *node, seg uint64) { c.fences[copyKey{n.id, seg}] = n.inc }

// write checks W4's "nothing is written to a fenced copy".
func (c *checker) write(n *node, seg uint64) {
	if inc, ok := c.fences[copyKey{n.id, seg}]; ok && inc == n.inc {
		c.fail("W4", "node %d wrote to its copy of %d after fencing it", n.id, seg)
	}
}

// primaryGone notes a primary that stopped: its watermark must not be
// taken for a later one's.
func (c *checker) primaryGone(n *node, ps *primSeg) {
	c.w.note('g', n.id, ps.seg.ID, ps.p.Watermark())
}

// watermark checks R1 for one state machine: its watermark never moves
// back, and a copy never learns one above what a primary committed.
func (c *checker) watermark(n *node, seg uint64, role byte, wm uint64) {
	k := wmKey{n.id, n.inc, seg, role}
	if prev, ok := c.wms[k]; ok && wm < prev {
		c.fail("R1", "node %d segment %d: watermark moved back from %d to %d", n.id, seg, prev, wm)
	}
	c.wms[k] = wm
	if role == 'p' {
		c.topWM[seg] = max(c.topWM[seg], wm)
	} else if top := c.topWM[seg]; wm > top && wm > c.baseOf(seg) {
		c.fail("R1", "node %d learned watermark %d of %d above any primary's %d", n.id, wm, seg, top)
	}
}

func (c *checker) baseOf(seg uint64) uint64 {
	s, _ := c.w.cp.view(seg)
	return s.Base
}

// recovered checks the disk model against the store's bookkeeping: after
// a crash or a power loss, every copy keeps at least what it fsynced.
func (c *checker) recovered(n *node, before, after *disk) {
	for _, id := range before.ids() {
		b := before.copies[id]
		a := after.copies[id]
		switch {
		case a == nil && b.syncedEnd > b.base:
			c.fail("durability", "node %d lost its copy of %d (fsynced to %d) in a restart", n.id, id, b.syncedEnd)
		case a != nil && a.end < b.syncedEnd && !a.damaged: // damage is foundDamage's to judge
			c.fail("durability", "node %d copy of %d recovered to %d, fsynced to %d", n.id, id, a.end, b.syncedEnd)
		}
	}
}
