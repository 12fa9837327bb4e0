package sim

import (
	"cmp"
	"slices"
)

// final checks the log as every node reads it once all is sealed.
func (c *checker) final() {
	w := c.w
	for _, r := range w.ranges {
		var first []histRec
		for i, n := range w.nodes {
			h, complete := w.history(n, r.ID)
			if !complete {
				c.fail("same-history", "range %d cannot be read to its end through node %d", r.ID, n.id)
			}
			if i == 0 {
				first = h
				continue
			}
			if !slices.Equal(h, first) {
				c.fail("same-history", "range %d: node %d reads %d records, node %d reads %d, or they differ", r.ID, n.id, len(h), w.nodes[0].id, len(first))
			}
		}
		c.checkHistory(r.ID, first)
		c.checkReads(r.ID, first)
	}
	c.checkAllAcked()
	c.checkCopies()
}

// checkHistory checks one range's final history: no record twice, each
// in the range it was produced to, per-key order as acknowledged.
func (c *checker) checkHistory(rangeID uint64, h []histRec) {
	seen := map[recID]bool{}
	lastAck := map[string]int{}
	for _, x := range h {
		st := c.recs[x.id]
		switch {
		case st == nil:
			c.fail("no-loss", "range %d holds %s, never sent", rangeID, x.id)
			continue
		case seen[x.id]:
			c.fail("no-dup", "range %d holds %s twice", rangeID, x.id)
		case st.rng != rangeID || st.key != x.key:
			c.fail("no-loss", "range %d holds %s with key %q, sent to range %d with key %q", rangeID, x.id, x.key, st.rng, st.key)
		}
		seen[x.id] = true
		if st.acked {
			if st.ackOrder < lastAck[x.key] {
				c.fail("order", "key %q: %s (ack %d) after a record acknowledged later (%d)", x.key, x.id, st.ackOrder, lastAck[x.key])
			}
			lastAck[x.key] = st.ackOrder
		}
	}
	c.present = append(c.present, seen)
}

func (c *checker) checkAllAcked() {
	ids := make([]recID, 0, len(c.recs))
	for id, st := range c.recs {
		if st.acked {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b recID) int { return cmp.Or(cmp.Compare(a.producer, b.producer), cmp.Compare(a.seq, b.seq)) })
	lost := 0
	for _, id := range ids {
		st := c.recs[id]
		found := false
		for _, seen := range c.present {
			found = found || seen[id]
		}
		if !found {
			lost++
			if lost <= 3 {
				c.fail("no-loss", "acknowledged record %s (segment %d) is not in the log", id, st.seg)
			}
		}
	}
}

// checkReads checks that every read during the run was a prefix of the
// final history: no reader saw a record that later went away (R1, W6).
func (c *checker) checkReads(rangeID uint64, h []histRec) {
	for _, rr := range c.reads {
		if rr.rng != rangeID {
			continue
		}
		if len(rr.ids) > len(h) {
			c.fail("R1", "a read of range %d through node %d saw %d records, the log has %d", rangeID, rr.node, len(rr.ids), len(h))
			continue
		}
		for i, id := range rr.ids {
			if h[i].id != id {
				c.fail("R1", "a read of range %d through node %d saw %s at %d, the log has %s", rangeID, rr.node, id, i, h[i].id)
				break
			}
		}
	}
}
