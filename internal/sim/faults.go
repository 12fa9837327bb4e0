package sim

// Disk faults and permanent node loss, each a seeded fault event whose
// share of the events is its rate in Config.

// diskFault injects a disk fault or a permanent loss when the draw r
// falls in their share; it reports whether it did (the event is then
// spent, even when no node could take it).
func (w *world) diskFault(r float64) bool {
	c := w.cfg
	switch {
	case r < c.FlipRate:
		w.flipSome()
	case r < c.FlipRate+c.FullRate:
		w.fillSome()
	case r < c.FlipRate+c.FullRate+c.FsyncRate:
		w.failFsync()
	case r < c.FlipRate+c.FullRate+c.FsyncRate+c.LossRate:
		w.loseOne()
	default:
		return false
	}
	return true
}

// flipSome flips one bit in the middle of a sealed copy on a node that
// is up. It picks only a copy whose segment keeps two other listed,
// sealed copies no flip touched, so that a healthy source remains when
// the node holding a third is lost.
func (w *world) flipSome() {
	type cand struct {
		n  *node
		id uint64
	}
	var cands []cand
	for _, seg := range w.sealedSegments() {
		good := 0
		for _, id := range replicaIDs(seg) {
			o := w.node(id)
			if cf := o.disk.copies[seg.ID]; !o.lost && cf != nil && cf.sealed && !cf.damaged && !w.chk.rotten[copyKey{id, seg.ID}] {
				good++
			}
		}
		if good < 3 {
			continue
		}
		for _, id := range replicaIDs(seg) {
			o := w.node(id)
			if cf := o.disk.copies[seg.ID]; o.up && cf != nil && cf.sealed && cf.size >= 4 && !cf.damaged {
				cands = append(cands, cand{o, seg.ID})
			}
		}
	}
	if len(cands) == 0 {
		return
	}
	c := cands[w.rng.IntN(len(cands))]
	cf := c.n.disk.copies[c.id]
	pos := cf.size/4 + w.rng.Int64N(cf.size/2)
	if err := c.n.disk.flip(c.id, pos, uint(w.rng.IntN(8))); err != nil {
		w.chk.fail("store", "node %d flipping a bit of %d: %v", c.n.id, c.id, err)
		return
	}
	w.chk.flipped(c.n, c.id)
	w.stats.Flips++
	w.note('B', c.n.id, c.id, uint64(pos))
}

// fillSome fills one node's disk for a while: its writes answer ENOSPC.
// One disk at a time is full.
func (w *world) fillSome() {
	for _, n := range w.nodes {
		if n.disk.full {
			return
		}
	}
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	if !n.up {
		return
	}
	n.disk.full = true
	w.stats.DiskFulls++
	w.note('N', n.id)
	w.after(w.between(w.cfg.FullMin, w.cfg.FullMax), func() {
		n.disk.full = false
		w.note('n', n.id)
	})
}

// failFsync makes one node's next group commit fail.
func (w *world) failFsync() {
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	if !n.up {
		return
	}
	n.disk.failSync = true
	w.stats.FsyncFaults++
	w.note('Y', n.id)
}

// loseOne kills a node for good: at most one a run, with five nodes or
// more, within MaxDown.
func (w *world) loseOne() {
	if len(w.nodes) < 5 || len(w.down()) >= w.cfg.MaxDown {
		return
	}
	for _, n := range w.nodes {
		if n.lost {
			return
		}
	}
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	if !n.up {
		return
	}
	n.crash(w.chance(0.5))
	n.lost = true
	w.stats.Lost++
	w.note('L', n.id)
}
