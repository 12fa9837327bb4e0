package sim

import (
	"errors"
	"slices"
	"syscall"

	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/replication"
	"github.com/malachi-log/malachi/internal/vfs"
)

// node is one simulated broker: its store, the replication state
// machines of the segments it leads or copies, and its frontend state.
// Everything but the store is lost in a crash.
type node struct {
	w      *world
	id     uint64
	up     bool
	inc    uint64 // incarnation: events of an earlier life are ignored
	downAt int64
	disk   *disk
	// crashed is the store a restart recovers from, set at the crash.
	crashed *vfs.MemFS

	prim      map[uint64]*primSeg
	fol       map[uint64]*folSeg
	fwd       map[uint64]*forward
	failovers map[uint64]*failover
	nextFwd   uint64
	syncing   bool
	// lost marks a node that died for good: it never restarts.
	lost bool

	// Repair state, lost in a crash like the rest (heal.go, scrub.go).
	fills  map[uint64]*fill
	scrub  *heal.Scrubber
	bucket *heal.Bucket
	// fullUntil is when a full disk's fault ends (0: not full).
	fullUntil int64
}

// primSeg is a segment led here.
type primSeg struct {
	seg     metadata.Segment
	ids     []uint64
	p       *replication.Primary
	waiting []waiter
	// rolling marks a roll: fenced at fenceEnd at fencedAt, sealed once
	// drained; sealing marks the seal under way.
	rolling  bool
	fenceEnd uint64
	fencedAt int64
}

// waiter is a produce appended here and not yet answered.
type waiter struct {
	span  replication.Span
	reply func(produceResp)
}

// folSeg is a follower's copy kept here.
type folSeg struct {
	id, base, from uint64
	f              *replication.Follower
	wm             uint64 // the watermark reads here use (R1)
	// unknownEnd: the fence created this copy, or it is a fenced copy
	// still empty after a restart; its answer at the base carries
	// FenceAnswer.Unknown (replica's rule).
	unknownEnd bool
}

func newNode(w *world, id uint64) *node {
	n := &node{w: w, id: id, up: true, disk: newDisk(vfs.NewMem())}
	n.disk.trustFailedSync = w.cfg.Bug == BugTrustFailedFsync
	n.reset()
	return n
}

func (n *node) reset() {
	n.prim, n.fol = map[uint64]*primSeg{}, map[uint64]*folSeg{}
	n.fwd, n.failovers = map[uint64]*forward{}, map[uint64]*failover{}
	n.syncing = false
	n.resetRepair()
}

// crash is kill -9 (the kernel keeps unsynced writes) or, with power,
// a power loss (unsynced writes are lost, the last one maybe torn).
func (n *node) crash(power bool) {
	w := n.w
	n.up, n.downAt = false, w.now
	n.inc++
	if power {
		n.crashed = n.disk.fs.PowerLoss(w.rng)
		w.stats.PowerLosses++
	} else {
		n.crashed = n.disk.fs.Clone()
		w.stats.Crashes++
	}
	w.note('x', n.id, b2u(power))
	for _, ps := range n.sortedPrims() {
		w.chk.primaryGone(n, ps)
	}
	n.reset()
}

// restart rebuilds the node from its store and its view of the control
// plane: copies are recovered, seals missed while down applied.
func (n *node) restart() {
	w := n.w
	if n.lost || n.up {
		return
	}
	old := n.disk
	d, errs := recoverDisk(n.crashed)
	for _, err := range errs {
		w.chk.fail("S1", "node %d recovering its store: %v", n.id, err)
	}
	for _, id := range d.ids() {
		if d.copies[id].damaged {
			w.chk.foundDamage(n, id)
		}
	}
	w.chk.recovered(n, old, d)
	d.full, d.trustFailedSync = old.full, old.trustFailedSync // the disk is still what it was
	n.disk, n.crashed = d, nil
	n.up = true
	n.inc++
	w.note('r', n.id)
	w.tickLoop(n, n.inc)
	w.healLoop(n, n.inc)
	if w.cp.reachable(n.id) {
		n.catchUp()
	}
}

// writeFailed handles a follower's failed write (ENOSPC): the copy is
// failed and stops taking appends; it acks nothing it did not fsync.
func (n *node) writeFailed(fs *folSeg, err error) {
	if n.w.cfg.Bug == BugIgnoreWriteError {
		// The bug: the copy acks what it was sent as if written.
		n.w.net.sendRepl(n.id, fs.from, fs.f.Synced(fs.f.End()))
		return
	}
	if !errors.Is(err, syscall.ENOSPC) {
		n.w.chk.fail("S1", "node %d writing a copy of %d: %v", n.id, fs.id, err)
	}
	if err := n.disk.failCopy(fs.id); err != nil {
		n.w.chk.fail("store", "node %d failing its copy of %d: %v", n.id, fs.id, err)
	}
	n.copyFailed(fs.id)
}

// copyFailed stops what used copy id after a failed write or fsync: a
// follower takes no more appends; a primary stops, answers its waiting
// produces with an unknown outcome, and fails the segment over away from
// this node (its own copy answers the fence with its fsynced end).
func (n *node) copyFailed(id uint64) {
	w := n.w
	w.stats.FailedCopies++
	w.note('E', n.id, id)
	delete(n.fol, id)
	ps := n.prim[id]
	if ps == nil {
		return
	}
	ps.p.Fence()
	w.chk.primaryGone(n, ps)
	for _, wt := range ps.waiting {
		wt.reply(produceResp{Reason: reasonUnknown})
	}
	delete(n.prim, id)
	if seg, ok := w.cp.view(id); ok && seg.Active {
		n.startFailover(seg)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func (n *node) sortedPrims() []*primSeg {
	ids := make([]uint64, 0, len(n.prim))
	for id := range n.prim {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*primSeg, 0, len(ids))
	for _, id := range ids {
		out = append(out, n.prim[id])
	}
	return out
}

// catchUp applies every seal of a segment this node keeps a copy of,
// but a copy a heal is filling (it seals its own).
func (n *node) catchUp() {
	for _, id := range n.disk.ids() {
		if n.fills[id] != nil {
			continue
		}
		if seg, ok := n.w.cp.view(id); ok && !seg.Active {
			n.sealCopy(seg)
		}
	}
}

// scheduleSync queues one group commit for everything written so far.
func (n *node) scheduleSync() {
	if n.syncing {
		return
	}
	n.syncing = true
	inc := n.inc
	n.w.after(n.w.between(n.w.cfg.DiskDelayMin, n.w.cfg.DiskDelayMax), func() {
		if n.inc != inc || !n.up {
			return
		}
		n.syncing = false
		n.synced()
	})
}

// synced runs a group commit and tells each copy's state machine.
func (n *node) synced() {
	done, failed, err := n.disk.syncAll()
	if err != nil {
		n.w.chk.fail("store", "node %d fsync: %v", n.id, err)
	}
	for _, id := range failed {
		n.copyFailed(id)
	}
	for _, s := range done {
		n.w.note('s', n.id, s.id, s.end)
		if ps := n.prim[s.id]; ps != nil {
			n.act(ps, ps.p.LocalSynced(s.end, n.w.now))
			if n.w.cfg.Bug == BugAckOnPrimaryFsync {
				n.release(ps, s.end)
			}
			continue
		}
		if fs := n.fol[s.id]; fs != nil {
			n.w.net.sendRepl(n.id, fs.from, fs.f.Synced(s.end))
			n.learn(fs)
		}
	}
}

// onRepl takes a replication message from another node.
func (n *node) onRepl(from uint64, raw []byte) {
	m, err := replication.Decode(raw)
	if err != nil {
		n.w.chk.fail("codec", "node %d decoding a message from %d: %v", n.id, from, err)
		return
	}
	now := n.w.now
	switch m := m.(type) {
	case replication.Append:
		n.followerAppend(from, m)
	case replication.Ack:
		if ps := n.prim[m.Segment]; ps != nil {
			n.act(ps, ps.p.Acked(from, m.End, now))
		}
	case replication.Behind:
		if ps := n.prim[m.Segment]; ps != nil {
			n.act(ps, ps.p.Behind(from, m.Has, now))
		}
	case replication.Fence:
		n.answerFence(from, m.Segment)
	case replication.FenceAnswer:
		n.onFenceAnswer(from, m)
	}
}

// act carries out a primary's output: sends, store reads, and the
// acknowledgement of committed produces (W1).
func (n *node) act(ps *primSeg, out replication.Output) {
	w := n.w
	for _, s := range out.Sends {
		w.net.sendRepl(n.id, s.To, s.Msg)
	}
	for _, r := range out.Reads {
		data := n.disk.read(ps.seg.ID, r.From, r.To, r.MaxBytes)
		more, err := ps.p.ReadDone(r.Node, r.From, data, w.now)
		if err != nil {
			w.chk.fail("store", "node %d read [%d, %d) of %d: %v", n.id, r.From, r.To, ps.seg.ID, err)
			continue
		}
		n.act(ps, more)
	}
	w.chk.watermark(n, ps.seg.ID, 'p', ps.p.Watermark())
	for _, sp := range out.Committed {
		w.note('C', n.id, ps.seg.ID, sp.Base, sp.End)
		n.release(ps, sp.End)
	}
	if ps.rolling && ps.p.Drained() && n.prim[ps.seg.ID] == ps {
		n.sealRoll(ps)
	}
}

// release answers the produces whose appends end at or below end.
func (n *node) release(ps *primSeg, end uint64) {
	i := 0
	for i < len(ps.waiting) && ps.waiting[i].span.End <= end {
		wt := ps.waiting[i]
		n.w.chk.committed(n, ps, wt.span)
		wt.reply(produceResp{Segment: ps.seg.ID, Base: wt.span.Base})
		i++
	}
	ps.waiting = ps.waiting[i:]
}

// followerAppend takes an Append, creating the copy on first contact when
// the control plane lists this node in the set and from as the primary.
func (n *node) followerAppend(from uint64, m replication.Append) {
	fs := n.fol[m.Segment]
	if fs == nil {
		var err error
		if fs, err = n.newCopy(m.Segment, from, false); err != nil {
			return
		}
	}
	if fs.from != from {
		return
	}
	acc, err := fs.f.Append(m)
	if err != nil {
		if !errors.Is(err, replication.ErrFenced) {
			n.w.chk.fail("protocol", "node %d append of %d from %d: %v", n.id, m.Segment, from, err)
		}
		return
	}
	n.learn(fs)
	n.w.net.sendRepl(n.id, from, acc.Reply)
	for _, b := range acc.Write {
		n.w.chk.write(n, m.Segment)
		if err := n.disk.append(m.Segment, b); err != nil {
			n.writeFailed(fs, err)
			return
		}
	}
	if len(acc.Write) > 0 {
		n.scheduleSync()
	}
}

// learn raises the watermark reads use on this copy: what it learned
// from the primary, within what it holds fsynced.
func (n *node) learn(fs *folSeg) {
	if wm := min(fs.f.Watermark(), fs.f.SyncedEnd()); wm > fs.wm {
		fs.wm = wm
	}
	n.w.chk.watermark(n, fs.id, 'f', fs.f.Watermark())
}

// newCopy starts the follower of segment id over this node's copy,
// creating the copy when the primary's first Append meets none.
func (n *node) newCopy(id, primary uint64, fence bool) (*folSeg, error) {
	seg, ok := n.w.cp.view(id)
	ids := replicaIDs(seg)
	switch {
	case !ok || !slices.Contains(ids, n.id):
		return nil, errors.New("not a replica here")
	case !fence && (!seg.Active || ids[0] != primary):
		return nil, errors.New("not active with that primary")
	}
	c := n.disk.copies[id]
	created := false
	if c == nil {
		// A replica the primary never reached holds nothing: it may answer
		// the segment's base, once an empty copy exists to stay fenced.
		// Config.NoFenceWithoutCopy brings back the old refusal.
		if fence && n.w.cfg.NoFenceWithoutCopy {
			return nil, errors.New("no copy to fence")
		}
		var err error
		if c, err = n.disk.create(id, seg.Base); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				n.w.chk.fail("store", "node %d creating a copy of %d: %v", n.id, id, err)
			}
			return nil, err
		}
		created = true
	}
	if c.end != c.syncedEnd {
		return nil, errors.New("writes still queued")
	}
	if (c.sealed || c.fenced || c.failed) && !fence {
		return nil, errors.New("copy sealed, fenced or failed")
	}
	fs := &folSeg{id: id, base: seg.Base, from: primary, f: replication.NewFollower(id, seg.Base, c.end), wm: seg.Base,
		unknownEnd: fence && created || c.fenced && c.end == seg.Base}
	n.fol[id] = fs
	return fs, nil
}

// answerFence answers a failover's fence: a copy answers its fsynced end
// and takes nothing more; a primary running here latches itself and its
// answer says so (FailoverEnd does not count it).
func (n *node) answerFence(from, id uint64) {
	if ps := n.prim[id]; ps != nil {
		if !ps.p.Fenced() {
			ps.fencedAt = n.w.now
		}
		n.w.net.sendRepl(n.id, from, ps.p.FenceAnswer())
		return
	}
	fs := n.fol[id]
	if fs == nil {
		var err error
		if fs, err = n.newCopy(id, 0, true); err != nil {
			return
		}
	}
	a := fs.f.FenceAnswer()
	a.Unknown = fs.unknownEnd && a.End == fs.base && !n.w.cfg.CountCreatedCopies
	n.w.chk.fenced(n, id)
	// A fence held only in memory is forgotten in a restart, and the
	// copy could then ack the old primary above its answer (W6): the
	// fence is recorded on disk before it is answered.
	if !n.w.cfg.VolatileFence {
		if err := n.disk.fence(id); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				n.w.chk.fail("store", "node %d recording the fence of %d: %v", n.id, id, err)
			}
			return // no answer without the record
		}
	}
	n.w.net.sendRepl(n.id, from, a)
}

// sealCopy applies a seal recorded in the control plane to this node's
// copy: the primary or follower stops, the copy is cut to the seal and
// sealed, or left unsealed when it is behind (healing replaces it).
func (n *node) sealCopy(seg metadata.Segment) {
	w := n.w
	if ps := n.prim[seg.ID]; ps != nil {
		ps.p.Fence()
		w.chk.primaryGone(n, ps)
		for _, wt := range ps.waiting {
			wt.reply(produceResp{Reason: reasonUnknown})
		}
		delete(n.prim, seg.ID)
	}
	if fs := n.fol[seg.ID]; fs != nil {
		if _, err := fs.f.Truncate(seg.End); err != nil {
			w.chk.fail("W6", "node %d applying the seal of %d at %d: %v", n.id, seg.ID, seg.End, err)
		}
		delete(n.fol, seg.ID)
	}
	c := n.disk.copies[seg.ID]
	switch {
	case c == nil:
		return
	case c.sealed:
		if c.sealEnd != seg.End {
			w.chk.fail("S2", "node %d copy of %d sealed at %d, the control plane says %d", n.id, seg.ID, c.sealEnd, seg.End)
		}
		return
	case c.end < seg.End || c.dirty:
		w.stats.CopiesBehind++
		return
	}
	if err := n.disk.seal(seg.ID, seg.End); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			w.stats.SealsDeferred++ // catchUp seals it once space returns
			return
		}
		w.chk.fail("W6", "node %d sealing its copy of %d at %d: %v", n.id, seg.ID, seg.End, err)
		return
	}
	w.note('S', n.id, seg.ID, seg.End)
	w.chk.sealedCopy(n, seg)
}

// tick drives the primaries' resends and gives up rolls that do not
// drain (the followers are gone): the segment is failed over.
func (n *node) tick() {
	now := n.w.now
	for _, ps := range n.sortedPrims() {
		if n.prim[ps.seg.ID] != ps {
			continue
		}
		n.act(ps, ps.p.Tick(now))
		if n.prim[ps.seg.ID] != ps || !ps.p.Fenced() {
			continue
		}
		if ps.rolling && ps.p.Drained() {
			n.sealRoll(ps) // a seal the control plane refused before
		} else if now-ps.fencedAt >= n.w.cfg.StuckRoll {
			n.startFailover(ps.seg)
		}
	}
}
