package sim

import (
	"slices"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
)

// Scrubbing, as the broker's scrub loop does it (cluster_scrub.go): a
// heal.Scrubber per node picks which listed sealed copy is due, and
// heal.Verify judges it against its seal. A copy found damaged or short
// is never served again and is recorded damaged (recordBad); it is
// deleted only once the list without it is recorded (collect). Verifying
// takes no simulated time here: the scrub rate is not simulated, only
// the interval.

// scrubSome verifies the copies due, at most maxScrubsPerPass.
func (n *node) scrubSome() {
	w := n.w
	now := w.unixNow()
	self := nodeName(n.id)
	var local []heal.LocalCopy
	for _, id := range n.disk.ids() {
		c := n.disk.copies[id]
		if seg, ok := w.cp.view(id); ok && c.sealed && !seg.Active && slices.Contains(seg.Replicas, self) {
			local = append(local, heal.LocalCopy{Segment: id, Bytes: c.size})
		}
	}
	if err := n.scrub.Track(now, local); err != nil {
		w.chk.fail("heal", "node %d scrubber: %v", n.id, err)
		return
	}
	for range maxScrubsPerPass {
		id, _, ok := n.scrub.Next(now)
		if !ok {
			return
		}
		n.scrub.Done(now, id, n.verifyCopy(id))
	}
}

// verifyCopy checks this node's sealed copy of id against its seal and
// marks it damaged when it is not whole.
func (n *node) verifyCopy(id uint64) heal.Verdict {
	w := n.w
	seg, _ := w.cp.view(id)
	v := heal.Verify(sealOf(seg), n.disk.reader(id), 0)
	w.stats.Scrubs++
	if c := n.disk.copies[id]; (v.Outcome == heal.Damaged || v.Outcome == heal.Short) && c != nil && !c.damaged {
		c.damaged = true
		w.stats.FoundDamaged++
		w.note('D', n.id, id)
		w.chk.foundDamage(n, id)
	}
	return v
}

// serveSealed reads sealed segment seg for a reader of node n, as the
// node serves it: its own copy first, else a listed replica's. A copy
// known damaged is skipped, and every batch is checked before it is
// served (S1): a copy that fails is marked damaged and the next one
// tried.
func (w *world) serveSealed(n *node, seg metadata.Segment) ([]byte, bool) {
	cands := []uint64{n.id}
	for _, id := range replicaIDs(seg) {
		if id != n.id {
			cands = append(cands, id)
		}
	}
	for _, id := range cands {
		o := w.node(id)
		c := o.disk.copies[seg.ID]
		if !o.up || c == nil || !c.sealed || c.damaged || w.net.isCut(n.id, id) {
			continue
		}
		if w.cfg.Bug == BugServeDamaged {
			return o.disk.read(seg.ID, seg.Base, seg.End, 1<<30), true
		}
		data, err := o.disk.readChecked(seg.ID, seg.Base, seg.End)
		if err != nil {
			c.damaged = true
			w.stats.FoundDamaged++
			w.note('D', o.id, seg.ID)
			w.chk.foundDamage(o, seg.ID)
			continue
		}
		return data, true
	}
	return nil, false
}
