package sim

import (
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/malachi-log/malachi/internal/metadata"
)

// truth is what a segment's sealed copies must all hold: the hash and
// size of the first copy sealed, before any fault could touch it.
type truth struct {
	hash uint64
	size int
}

// contentOf hashes n's copy of seg up to its seal.
func contentOf(n *node, seg metadata.Segment) (truth, bool) {
	data, err := n.disk.content(seg.ID, seg.End)
	if err != nil {
		return truth{}, false
	}
	return truth{xxhash.Sum64(data), len(data)}, true
}

// sealedCopy checks S2 as a node seals its copy: the first sealed copy
// of a segment sets what it holds, and every later one must hold the
// same bytes.
func (c *checker) sealedCopy(n *node, seg metadata.Segment) {
	got, ok := contentOf(n, seg)
	if !ok {
		c.fail("S2", "node %d sealed a copy of %d it cannot read", n.id, seg.ID)
		return
	}
	if want, ok := c.truth[seg.ID]; !ok {
		c.truth[seg.ID] = got
	} else if got != want {
		c.fail("S2", "node %d sealed a copy of %d that differs from the first (%d bytes, %d)", n.id, seg.ID, got.size, want.size)
	}
}

// recordedCopy checks S3 as a heal records node n's new copy of seg: it
// is sealed at the seal and holds exactly the segment's bytes.
func (c *checker) recordedCopy(n *node, id uint64) {
	seg, _ := c.w.cp.view(id)
	cf := n.disk.copies[id]
	if cf == nil || !cf.sealed || cf.end != seg.End {
		c.fail("S3", "node %d recorded as holding %d without a sealed copy at its end %d", n.id, id, seg.End)
		return
	}
	got, _ := contentOf(n, seg)
	if want, ok := c.truth[id]; ok && got != want {
		c.fail("S3", "node %d recorded a copy of %d that differs from the seal's bytes", n.id, id)
	}
	if _, ok := c.truth[id]; !ok {
		c.truth[id] = got
	}
}

// deleting checks S4 as node n deletes its copy of id: the control plane
// does not name it.
func (c *checker) deleting(n *node, id uint64) {
	if seg, ok := c.w.cp.view(id); ok && slices.Contains(seg.Replicas, nodeName(n.id)) {
		c.fail("S4", "node %d deleted its copy of %d, which the list %v still names", n.id, id, seg.Replicas)
	}
	delete(c.rotten, copyKey{n.id, id})
}

// settingAside checks S4 as node n sets its copy of id aside to rebuild
// it: the list may still name the copy, but only as damaged.
func (c *checker) settingAside(n *node, id uint64) {
	seg, ok := c.w.cp.view(id)
	self := nodeName(n.id)
	if ok && slices.Contains(seg.Replicas, self) && !slices.Contains(seg.Damaged, self) {
		c.fail("S4", "node %d set aside its copy of %d, which the list %v names and does not record damaged", n.id, id, seg.Replicas)
	}
	delete(c.rotten, copyKey{n.id, id})
}

// flipped records a bit flip the simulation made in n's copy of id.
func (c *checker) flipped(n *node, id uint64) { c.rotten[copyKey{n.id, id}] = true }

// foundDamage checks that damage found in a copy (by a scrub, a read or
// a restart) has a fault to explain it: a flip, or a copy made under
// BugRecordUnverified. Anything else is the store model going wrong.
func (c *checker) foundDamage(n *node, id uint64) {
	if !c.rotten[copyKey{n.id, id}] && c.w.cfg.Bug != BugRecordUnverified {
		c.fail("S1", "node %d copy of %d is damaged with no fault to explain it", n.id, id)
	}
}

// copyState judges one listed holder's copy at the end: "" when it is
// live, sealed, undamaged and holds the segment's bytes.
func (c *checker) copyState(seg metadata.Segment, id uint64) string {
	n := c.w.node(id)
	cf := n.disk.copies[seg.ID]
	switch {
	case n.lost:
		return "lost"
	case !n.up:
		return "down"
	case cf == nil:
		return "missing"
	case !cf.sealed:
		return "unsealed"
	case cf.damaged:
		return "damaged"
	}
	if got, ok := contentOf(n, seg); !ok || got != c.truth[seg.ID] {
		return "different"
	}
	return ""
}

// factorOK reports whether seg is back to its factor: every listed
// holder whole, at least min(factor, nodes not lost) of them, none
// recorded damaged.
func (c *checker) factorOK(seg metadata.Segment) bool {
	if len(seg.Damaged) > 0 || len(seg.Replicas) < c.w.factor() {
		return false
	}
	for _, id := range replicaIDs(seg) {
		if c.copyState(seg, id) != "" {
			return false
		}
	}
	return true
}

func (w *world) factor() int {
	alive := 0
	for _, n := range w.nodes {
		if !n.lost {
			alive++
		}
	}
	return min(w.cfg.Replicas, alive)
}

// checkCopies runs at the end, once the world quiesced: every sealed
// segment has factor live, undamaged, listed copies (the "factor"
// checker), each byte-identical to the first sealed (S2), and a segment
// with records has had a sealed copy (no-loss).
func (c *checker) checkCopies() {
	w := c.w
	for _, seg := range w.sealedSegments() {
		if _, ok := c.truth[seg.ID]; !ok {
			if seg.End > seg.Base {
				c.fail("no-loss", "segment %d [%d, %d) has no sealed copy", seg.ID, seg.Base, seg.End)
			}
			continue
		}
		for _, id := range replicaIDs(seg) {
			switch st := c.copyState(seg, id); st {
			case "":
			case "different":
				c.fail("S2", "node %d sealed copy of %d differs from the segment's bytes", id, seg.ID)
			default:
				c.fail("factor", "segment %d lists node %d, whose copy is %s", seg.ID, id, st)
			}
		}
		if len(seg.Damaged) > 0 {
			c.fail("factor", "segment %d still records damaged copies on %v", seg.ID, seg.Damaged)
		}
		if len(seg.Replicas) < w.factor() {
			c.fail("factor", "segment %d has %d copies listed (%v), its factor is %d", seg.ID, len(seg.Replicas), seg.Replicas, w.factor())
		}
	}
}

// repaired reports whether every sealed segment is back to its factor
// and no heal is under way.
func (w *world) repaired() bool {
	for _, n := range w.nodes {
		if len(n.fills) > 0 {
			return false
		}
	}
	for _, seg := range w.sealedSegments() {
		if _, ok := w.chk.truth[seg.ID]; ok && !w.chk.factorOK(seg) {
			return false
		}
	}
	return true
}
