package sim

import (
	"errors"
	"slices"
	"syscall"

	"github.com/malachi-log/malachi/internal/batch"
	"github.com/malachi-log/malachi/internal/heal"
	"github.com/malachi-log/malachi/internal/metadata"
)

// Healing, as the broker's heal loop does it (cluster_heal.go): every
// node plans with heal.PlanHeals from the control plane and membership;
// a target fills its copy from the planned source over the network,
// seals it at the seal's end, verifies it (heal.Verify) and only then
// records itself (set_segment_replicas with Expect), each step driven by
// a heal.Task; the planning node (the lowest live id) records the drops
// of dead and damaged holders; every node deletes its copies the list no
// longer names (S4).

// healChunk is the bytes one copy request asks for: a segment takes a
// few, so a fill can stall, be refused or lose its source half way.
const healChunk = 1024

// maxScrubsPerPass bounds the copies one heal pass verifies.
const maxScrubsPerPass = 8

// fill is a heal this node runs as its target.
type fill struct {
	task *heal.Task
	next uint64 // the offset the next chunk starts at
}

// copyReq asks a source for the sealed batches of Segment from From;
// Suspect instead tells it the bytes it sent did not verify, so that it
// checks its copy now.
type copyReq struct {
	Segment, From uint64
	Max           int
	Suspect       bool
}

// copyResp answers a copyReq: Data empty when the copy has no more.
type copyResp struct {
	Segment, From uint64
	Data          []byte
	Err           string
}

func (n *node) resetRepair() {
	w := n.w
	n.fills = map[uint64]*fill{}
	var err error
	if n.scrub, err = heal.NewScrubber(heal.ScrubConfig{IntervalMs: w.cfg.ScrubEvery, RateBytes: 1 << 30}); err != nil {
		w.chk.fail("setup", "scrubber: %v", err)
	}
	if n.bucket, err = heal.NewBucket(w.cfg.HealRate, 4*healChunk, w.unixNow()); err != nil {
		w.chk.fail("setup", "heal bucket: %v", err)
	}
}

func (w *world) healLoop(n *node, inc uint64) {
	w.after(w.cfg.HealEvery, func() {
		if n.inc != inc || !n.up {
			return
		}
		n.healPass()
		w.healLoop(n, inc)
	})
}

func (w *world) taskConfig() heal.TaskConfig {
	return heal.TaskConfig{StartTimeoutMs: 4 * w.cfg.HealEvery, StallTimeoutMs: 6 * w.cfg.HealEvery, RecordTimeoutMs: 4 * w.cfg.HealEvery}
}

// healPass is one round of the node's repair: seals missed, scrub,
// damage recorded, plan, fills driven, unlisted copies collected.
func (n *node) healPass() {
	w := n.w
	n.driveFills()
	if !w.cp.reachable(n.id) || w.cfg.Bug == BugNoHeal {
		return
	}
	n.catchUp()
	n.scrubSome()
	n.recordBad()
	n.plan()
	n.collect()
}

// healInput is what the planner sees from this node: the sealed
// segments of the control plane, and membership's live and down nodes.
func (w *world) healInput(self *node) heal.Input {
	in := heal.Input{Now: w.unixNow()}
	for _, o := range w.nodes {
		if w.memberDead(o.id) {
			in.Down = append(in.Down, heal.Down{ID: o.id, SinceMs: epoch + o.downAt + w.cfg.MemberDelay})
		} else {
			in.Live = append(in.Live, heal.Node{ID: o.id, Full: o.up && o.disk.full})
		}
	}
	for _, id := range sortedKeys(self.fills) {
		in.InFlight = append(in.InFlight, self.fills[id].task.Assignment)
	}
	in.Segments = w.healSegments()
	return in
}

// healSegments is the planner's view of the sealed segments, kept until
// the control plane changes.
func (w *world) healSegments() []heal.Segment {
	cp := w.cp
	if cp.healSeg != nil && cp.healAt == cp.version {
		return cp.healSeg
	}
	out := []heal.Segment{}
	for _, seg := range w.sealedSegments() {
		if len(seg.Replicas) == 0 {
			continue
		}
		var damaged []uint64
		for _, name := range seg.Damaged {
			damaged = append(damaged, nodeOfName(name))
		}
		out = append(out, heal.Segment{Seal: sealOf(seg), Topic: "sim", Range: seg.Range,
			Replicas: replicaIDs(seg), Factor: w.cfg.Replicas, Damaged: damaged})
	}
	cp.healSeg, cp.healAt = out, cp.version
	return out
}

// sealedSegments lists the sealed segments of every range, kept until
// the control plane changes; callers must not modify it.
func (w *world) sealedSegments() []metadata.Segment {
	cp := w.cp
	if cp.sealed != nil && cp.sealedAt == cp.version {
		return cp.sealed
	}
	out := []metadata.Segment{}
	for _, r := range w.ranges {
		for _, seg := range cp.st.RangeSegments(r.ID) {
			if !seg.Active {
				out = append(out, seg)
			}
		}
	}
	cp.sealed, cp.sealedAt = out, cp.version
	return out
}

func sealOf(seg metadata.Segment) heal.Seal {
	return heal.Seal{Segment: seg.ID, Base: seg.Base, End: seg.End, Records: seg.Records, Bytes: seg.Bytes,
		ContentHash: seg.ContentHash, Generation: seg.Generation}
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// plan runs heal.PlanHeals and takes the tasks that are this node's.
func (n *node) plan() {
	w := n.w
	in := w.healInput(n)
	p, err := heal.PlanHeals(heal.Config{DeadAfterMs: w.cfg.DeadAfter}, in)
	if err != nil {
		w.chk.fail("heal", "node %d planning: %v", n.id, err)
		return
	}
	planner := uint64(0)
	for _, l := range in.Live {
		if planner == 0 || l.ID < planner {
			planner = l.ID
		}
	}
	for _, a := range p.Tasks {
		switch {
		case len(a.Targets) == 0 && planner == n.id:
			n.dropCopies(a)
		case slices.Contains(a.Targets, n.id):
			n.startFill(a)
		}
	}
}

// dropCopies records a drop-only assignment through its heal.Task.
func (n *node) dropCopies(a heal.Assignment) {
	w := n.w
	t, err := heal.NewTask(a, w.taskConfig(), w.unixNow())
	if err != nil {
		w.chk.fail("heal", "node %d drop task: %v", n.id, err)
		return
	}
	cmd, ok := t.Submit(w.unixNow())
	if !ok {
		return
	}
	if err := n.setReplicas(cmd, false); !errors.Is(err, errUnavailable) {
		_ = t.Recorded(w.unixNow(), err)
		if st, _, _ := t.State(); st == heal.Done {
			w.stats.Drops++
		}
	}
}

// setReplicas applies a heal.SetReplicas; added says it adds this node's
// new copy, which the checker then holds against the seal (S3).
func (n *node) setReplicas(cmd heal.SetReplicas, added bool) error {
	w := n.w
	_, err := w.cp.apply(n.id, metadata.Command{Kind: metadata.KindSetSegmentReplicas, Segment: cmd.Segment,
		Expect: names(cmd.Expect), Replicas: names(cmd.Replicas)})
	if err == nil && added {
		w.chk.recordedCopy(n, cmd.Segment)
	}
	return err
}

func names(ids []uint64) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, nodeName(id))
	}
	return out
}

// startFill starts this node's copy for a, unless it fills it already, is
// at its bound, holds a file of the segment (collect deletes it first;
// a holder rebuilding its damaged copy sets it aside) or has a full
// disk. Of an assignment with several targets it takes its own part; the
// drops wait for a later pass, once all are recorded.
func (n *node) startFill(a heal.Assignment) {
	w := n.w
	id := a.Seal.Segment
	rebuild := slices.Contains(a.Rebuild, n.id)
	if n.fills[id] != nil || len(n.fills) >= heal.DefaultMaxTasksPerNode || n.disk.full ||
		n.disk.copies[id] != nil && !(rebuild && n.setAside(id)) {
		return
	}
	if len(a.Targets) > 1 {
		a.Drop, a.Damaged = nil, nil
	}
	a.Targets, a.Rebuild = []uint64{n.id}, nil
	if rebuild {
		a.Rebuild = []uint64{n.id}
		w.stats.Rebuilds++
	}
	now := w.unixNow()
	t, err := heal.NewTask(a, w.taskConfig(), now)
	if err != nil {
		w.chk.fail("heal", "node %d fill task: %v", n.id, err)
		return
	}
	if _, err := n.disk.create(id, a.Seal.Base); err != nil {
		if !errors.Is(err, syscall.ENOSPC) {
			w.chk.fail("store", "node %d creating a copy of %d to heal: %v", n.id, id, err)
		}
		return
	}
	f := &fill{task: t, next: a.Seal.Base}
	n.fills[id] = f
	_ = t.Start(now)
	w.stats.HealsStarted++
	w.note('H', n.id, id, a.Source)
	n.askChunk(f)
}

func (n *node) askChunk(f *fill) {
	n.w.net.send(n.id, f.task.Source, packet{copyReq: &copyReq{Segment: f.task.Seal.Segment, From: f.next, Max: healChunk}})
}

// onCopyReq serves a heal target from this node's sealed copy, paced by
// the node's heal bucket, verbatim: the target checks what it gets.
func (n *node) onCopyReq(from uint64, req copyReq) {
	w := n.w
	c := n.disk.copies[req.Segment]
	if req.Suspect {
		if c != nil && c.sealed {
			n.verifyCopy(req.Segment)
		}
		return
	}
	resp := copyResp{Segment: req.Segment, From: req.From}
	if c == nil || !c.sealed || c.damaged {
		resp.Err = "no whole sealed copy here"
		w.net.send(n.id, from, packet{copyResp: &resp})
		return
	}
	data, err := n.disk.reader(req.Segment)(req.From, req.Max)
	if err != nil {
		resp.Err = err.Error()
		w.net.send(n.id, from, packet{copyResp: &resp})
		return
	}
	wait, err := n.bucket.Take(w.unixNow(), int64(max(len(data), 1)))
	if err != nil {
		w.chk.fail("heal", "node %d pacing a copy: %v", n.id, err)
		return
	}
	if wait > 0 {
		inc := n.inc
		w.after(wait, func() {
			if n.inc == inc && n.up {
				n.onCopyReq(from, req)
			}
		})
		return
	}
	resp.Data = data
	w.stats.HealBytes += len(data)
	w.net.send(n.id, from, packet{copyResp: &resp})
}

// onCopyResp writes one chunk of a fill and asks for the next; an empty
// chunk ends the copy, which is then sealed and verified.
func (n *node) onCopyResp(from uint64, resp copyResp) {
	w := n.w
	f := n.fills[resp.Segment]
	if st, _, _ := f.state(); f == nil || st != heal.Filling || from != f.task.Source || resp.From != f.next {
		return // a late or repeated answer
	}
	now := w.unixNow()
	switch {
	case resp.Err != "":
		_ = f.task.Copied(now, n.id, heal.Verdict{Outcome: heal.Unreadable, At: f.next, Reason: resp.Err})
	case len(resp.Data) == 0:
		n.finishFill(f)
	default:
		if v, ok := n.writeChunk(f, resp.Data); !ok {
			_ = f.task.Copied(now, n.id, v)
			if v.Outcome == heal.Damaged {
				w.net.send(n.id, from, packet{copyReq: &copyReq{Segment: resp.Segment, Suspect: true}})
			}
			break
		}
		_ = f.task.Progress(now, n.id)
		n.askChunk(f)
		return
	}
	n.afterCopied(f)
}

func (f *fill) state() (heal.State, heal.Reason, string) {
	if f == nil {
		return heal.Failed, heal.NoReason, ""
	}
	return f.task.State()
}

// writeChunk appends a chunk's batches, each checked on write (S1), at
// exactly their offsets.
func (n *node) writeChunk(f *fill, data []byte) (heal.Verdict, bool) {
	id := f.task.Seal.Segment
	parts, err := batch.SplitBatches(data)
	if err != nil {
		return heal.Verdict{Outcome: heal.Damaged, At: f.next, Reason: err.Error()}, false
	}
	for _, b := range parts {
		if n.w.cfg.Bug == BugRecordUnverified {
			err = n.disk.write(id, b)
		} else {
			err = n.disk.append(id, b)
		}
		if err != nil {
			o := heal.Damaged
			if errors.Is(err, syscall.ENOSPC) || n.disk.copies[id] == nil || n.disk.copies[id].failed {
				o = heal.Unreadable
			}
			return heal.Verdict{Outcome: o, At: f.next, Reason: err.Error()}, false
		}
		f.next = n.disk.copies[id].end
	}
	return heal.Verdict{}, true
}

// finishFill seals the filled copy at exactly the seal's end and
// verifies it against the seal before it may be recorded (S3).
func (n *node) finishFill(f *fill) {
	w := n.w
	seal := f.task.Seal
	now := w.unixNow()
	if err := n.disk.seal(seal.Segment, seal.End); err != nil {
		o := heal.Short
		if errors.Is(err, syscall.ENOSPC) {
			o = heal.Unreadable
		}
		_ = f.task.Copied(now, n.id, heal.Verdict{Outcome: o, At: f.next, Reason: err.Error()})
		return
	}
	v := heal.Verify(seal, n.disk.reader(seal.Segment), 0)
	if w.cfg.Bug == BugRecordUnverified {
		v = heal.Verdict{Outcome: heal.Whole, At: seal.End, Records: seal.Records, Bytes: seal.Bytes}
	}
	_ = f.task.Copied(now, n.id, v)
	if v.Outcome == heal.Damaged {
		w.net.send(n.id, f.task.Source, packet{copyReq: &copyReq{Segment: seal.Segment, Suspect: true}})
	}
}

// afterCopied submits a verified copy, or ends a failed fill.
func (n *node) afterCopied(f *fill) {
	if st, _, _ := f.state(); st == heal.Verified || st == heal.Recorded {
		n.submit(f)
	}
	if f.task.Finished() {
		n.fillEnded(f)
	}
}

// submit sends what the task asks: for a rebuild the list without this
// node, then the list with this node, then the list without the copies
// it replaces. A command the control plane did not run (unavailable) is
// sent again on the next pass.
func (n *node) submit(f *fill) {
	w := n.w
	for range 3 {
		st, _, _ := f.task.State()
		cmd, ok := f.task.Submit(w.unixNow())
		if !ok {
			return
		}
		added := slices.Contains(cmd.Replicas, n.id) && !slices.Contains(cmd.Expect, n.id)
		err := n.setReplicas(cmd, added)
		if errors.Is(err, errUnavailable) {
			return
		}
		_ = f.task.Recorded(w.unixNow(), err)
		if err == nil && st == heal.Recorded {
			w.stats.Drops++
		}
		if f.task.Finished() {
			return
		}
	}
}

// driveFills ticks every fill: a source membership calls dead fails it,
// a deadline passed fails it, a verified one is submitted again.
func (n *node) driveFills() {
	w := n.w
	now := w.unixNow()
	for _, id := range sortedKeys(n.fills) {
		f := n.fills[id]
		if w.memberDead(f.task.Source) {
			f.task.NodeDown(now, f.task.Source)
		}
		f.task.Tick(now)
		if !f.task.Finished() && w.cp.reachable(n.id) {
			if st, _, _ := f.task.State(); st == heal.Verified || st == heal.Recorded {
				n.submit(f)
			}
		}
		if f.task.Finished() {
			n.fillEnded(f)
		}
	}
}

// fillEnded forgets a finished fill. A failed one deletes its partial
// copy only when the task says no command named it (Cleanup); else the
// copy stays until collect finds it unlisted.
func (n *node) fillEnded(f *fill) {
	w := n.w
	id := f.task.Seal.Segment
	delete(n.fills, id)
	st, reason, _ := f.task.State()
	w.note('h', n.id, id, uint64(st), uint64(reason))
	if st == heal.Done {
		w.stats.HealsDone++
		return
	}
	w.stats.HealsFailed++
	if slices.Contains(f.task.Cleanup(), n.id) {
		n.removeCopy(id)
	}
}

// setAside moves this node's damaged copy of id out of the way of a
// rebuild, as the store's quarantine does (the simulation keeps no
// quarantined bytes). The checker holds it to the list recording the
// copy damaged: a copy anyone may count is never set aside.
func (n *node) setAside(id uint64) bool {
	w := n.w
	w.chk.settingAside(n, id)
	if err := n.disk.remove(id); err != nil {
		w.chk.fail("store", "node %d setting aside its copy of %d: %v", n.id, id, err)
		return false
	}
	w.stats.SetAside++
	return true
}

// removeCopy deletes this node's copy of id, which the checker holds to
// S4: the control plane must not name it.
func (n *node) removeCopy(id uint64) {
	w := n.w
	w.chk.deleting(n, id)
	if err := n.disk.remove(id); err != nil {
		w.chk.fail("store", "node %d deleting its copy of %d: %v", n.id, id, err)
	}
}

// collect deletes this node's copies of sealed segments whose list does
// not name it and that no fill of its own is making: stale copies of a
// node back from the dead, damaged ones replaced, fills refused.
func (n *node) collect() {
	w := n.w
	for _, id := range n.disk.ids() {
		seg, ok := w.cp.view(id)
		if !ok || seg.Active || len(seg.Replicas) == 0 || n.fills[id] != nil || slices.Contains(seg.Replicas, nodeName(n.id)) {
			continue
		}
		n.removeCopy(id)
		w.stats.Collected++
	}
}

// recordBad records in the control plane this node's listed copies that
// are damaged (a scrub or a read found them), missing, or left behind
// below the seal (as the broker's noteBehind: a copy holding the whole
// segment whose seal record waits for space is not behind), once the
// seal is a few passes old: every planner then counts them out, and a
// healthy copy replaces them.
func (n *node) recordBad() {
	w := n.w
	self := nodeName(n.id)
	for _, seg := range w.sealedSegments() {
		if !slices.Contains(seg.Replicas, self) || slices.Contains(seg.Damaged, self) {
			continue
		}
		c := n.disk.copies[seg.ID]
		if c != nil && !c.damaged && (c.sealed || c.syncedEnd >= seg.End) {
			continue // whole, or whole with its seal still to be recorded (a full disk)
		}
		if (c == nil || !c.damaged) && w.unixNow()-seg.SealedAt < 3*w.cfg.HealEvery {
			continue // a seal just recorded may still be applied here
		}
		if _, err := w.cp.apply(n.id, metadata.Command{Kind: metadata.KindMarkCopyDamaged, Segment: seg.ID, Node: self}); err == nil {
			w.stats.MarkedDamaged++
		}
	}
}
