package raft

import (
	"fmt"
	"slices"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Tick advances every group's logical clock by one tick and fails
// requests that waited longer than Options.RequestTimeoutTicks.
func (h *Host) Tick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped != nil {
		return
	}
	h.ticks++
	for _, id := range h.order {
		g := h.groups[id]
		if h.guard(g, "tick", g.rn.Tick) {
			g.expire(h.ticks)
		}
	}
}

// Receive queues a frame from node from for the next Process. It does not
// block and takes ownership of frame.
func (h *Host) Receive(from uint64, frame []byte) error {
	if len(frame) > h.opts.MaxFrameBytes {
		return fmt.Errorf("%w: %d bytes from node %d, limit %d", ErrFrameTooLarge, len(frame), from, h.opts.MaxFrameBytes)
	}
	h.inbox.Lock()
	if len(h.inbox.frames) >= h.opts.MaxPendingFrames || h.inbox.bytes+len(frame) > h.opts.MaxPendingBytes {
		h.inbox.Unlock()
		return ErrInboxFull
	}
	h.inbox.frames = append(h.inbox.frames, inboundFrame{from: from, bytes: frame})
	h.inbox.bytes += len(frame)
	h.inbox.Unlock()
	h.signal()
	return nil
}

func (h *Host) takeInbox() []inboundFrame {
	h.inbox.Lock()
	defer h.inbox.Unlock()
	frames := h.inbox.frames
	h.inbox.frames, h.inbox.bytes = nil, 0
	return frames
}

// groupReady is one group's share of a cycle.
type groupReady struct {
	g  *group
	rd etcdraft.Ready
}

// Process runs one cycle: it steps received frames into their groups,
// collects every group's Ready, saves all of them with one LogStore.Save
// (one fsync), sends one frame per destination node, applies committed
// entries, completes requests, advances raft and takes due snapshots. It
// reports whether another cycle has work already. An error means the log
// could not be saved or a snapshot not restored: the host stops.
func (h *Host) Process() (more bool, err error) {
	inbound := h.takeInbox()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped != nil {
		return false, h.stopped
	}
	for _, in := range inbound {
		h.stepFrame(in)
	}
	var readies []groupReady
	var updates []Update
	for _, id := range h.order {
		g := h.groups[id]
		var rd etcdraft.Ready
		has := false
		h.guard(g, "ready", func() {
			if has = g.rn.HasReady(); has {
				rd = g.rn.Ready()
				h.noteConfIndex(g, rd)
			}
		})
		if !has || g.failed != nil {
			continue
		}
		readies = append(readies, groupReady{g: g, rd: rd})
		if len(rd.Entries) > 0 || !etcdraft.IsEmptyHardState(rd.HardState) || !etcdraft.IsEmptySnap(rd.Snapshot) {
			updates = append(updates, Update{Group: id, HardState: rd.HardState, Entries: rd.Entries, Snapshot: rd.Snapshot})
		}
	}
	if len(readies) == 0 {
		return false, nil
	}
	// The etcd Ready contract: entries, hard state and snapshot are durable
	// before any message of this Ready leaves, since those messages (votes,
	// append acknowledgements) promise that they are.
	if len(updates) > 0 {
		if err := h.opts.LogStore.Save(updates); err != nil {
			return false, h.stop(fmt.Errorf("raft: save: %w", err))
		}
		h.stats.Saves++
	}
	for _, r := range readies {
		if err := h.restore(r.g, r.rd.Snapshot); err != nil {
			return false, h.stop(err)
		}
	}
	reports := h.send(readies)
	for _, r := range readies {
		h.guard(r.g, "apply", func() {
			if err := h.apply(r.g, r.rd); err != nil {
				h.fail(r.g, err)
				return
			}
			r.g.rn.Advance(r.rd)
			if err := h.checkLeadership(r.g); err != nil {
				h.fail(r.g, fmt.Errorf("%w: group %d: %v", ErrGroupFailed, r.g.id, err))
				return
			}
			h.maybeSnapshot(r.g)
		})
	}
	for _, rep := range reports {
		h.guard(rep.g, "report", rep.fn)
	}
	h.publishLeadership(readies)
	for _, id := range h.order {
		g := h.groups[id]
		if g.failed == nil && g.rn.HasReady() {
			return true, nil
		}
	}
	return false, nil
}

// guard runs fn, which drives group g's raft or state machine, and
// contains a panic to the group: raft panics when its log contradicts what
// the leader knows of it (typically a replica that lost its log and
// rejoined under the same node id), and that must stop the group on this
// node, not the node. It reports whether fn completed; a failed group is
// not driven again.
func (h *Host) guard(g *group, what string, fn func()) (ok bool) {
	if g.failed != nil {
		return false
	}
	defer func() {
		if p := recover(); p != nil {
			h.fail(g, fmt.Errorf("%w: group %d: raft %s: %v", ErrGroupFailed, g.id, what, p))
			ok = false
		}
	}()
	fn()
	return g.failed == nil
}

// fail stops group g on this node: its requests fail with err, it is no
// longer ticked, stepped or processed, and Status reports err until the
// group is removed.
func (h *Host) fail(g *group, err error) {
	if g.failed != nil {
		return
	}
	g.failed = err
	g.failAll(err)
	h.stats.GroupFailures++
	h.opts.Logger.Errorf("%v", err)
}

// stop fails every waiting request and makes the host refuse new work.
func (h *Host) stop(err error) error {
	if h.stopped == nil {
		h.stopped = err
		for _, g := range h.groups {
			g.failAll(err)
		}
	}
	return err
}

func (h *Host) stepFrame(in inboundFrame) {
	f, err := decodeFrame(in.bytes, h.opts.MaxMessageEntries)
	if err != nil || f.from != in.from {
		h.stats.BadFrames++
		return
	}
	h.stats.FramesReceived++
	self := h.opts.NodeID
	for _, hb := range f.heartbeats {
		h.step(hb.group, hb.expand(pb.MsgHeartbeat, f.from, self))
	}
	for _, hb := range f.responses {
		h.step(hb.group, hb.expand(pb.MsgHeartbeatResp, f.from, self))
	}
	for _, gm := range f.messages {
		m, err := gm.decode()
		if err != nil {
			h.stats.BadFrames++
			continue
		}
		if !fromPeer(m, f.from, self) {
			h.stats.DroppedMessages++
			continue
		}
		h.step(gm.group, m)
	}
}

// peerTypes are the messages etcd raft v3.7 sends from one replica to
// another. MsgProp is not among them: proposals are never forwarded
// (DisableProposalForwarding), and one stepped from a frame would be
// appended without the bounds ProposeAsync enforces. Local messages
// (MsgHup, MsgBeat, MsgStorage*, ...) never leave a node.
var peerTypes = map[pb.MessageType]bool{
	pb.MsgApp: true, pb.MsgAppResp: true,
	pb.MsgVote: true, pb.MsgVoteResp: true,
	pb.MsgPreVote: true, pb.MsgPreVoteResp: true,
	pb.MsgSnap:      true,
	pb.MsgHeartbeat: true, pb.MsgHeartbeatResp: true,
	pb.MsgReadIndex: true, pb.MsgReadIndexResp: true, // a follower's read, forwarded to the leader
	pb.MsgTimeoutNow:     true,
	pb.MsgTransferLeader: true, // a follower forwards a transfer request to the leader
}

// fromPeer reports whether m is a message a peer may send: one of
// peerTypes, addressed to this node, from the frame's sender. A forwarded
// MsgTransferLeader names the transferee as its sender, which need not be
// the node that forwarded it.
func fromPeer(m *pb.Message, from, self uint64) bool {
	t := m.GetType()
	if !peerTypes[t] || m.GetTo() != self || m.GetFrom() == 0 {
		return false
	}
	return m.GetFrom() == from || t == pb.MsgTransferLeader
}

// step hands a message to its group. Messages for a group this node does
// not host are dropped: raft retransmits, and AddGroup must come first.
// A replica with no state yet casts no vote (see group.stateless).
func (h *Host) step(group uint64, m *pb.Message) {
	g, ok := h.groups[group]
	if !ok || g.failed != nil {
		return
	}
	if g.stateless && (m.GetType() == pb.MsgVote || m.GetType() == pb.MsgPreVote) {
		h.stats.DroppedMessages++
		return
	}
	h.guard(g, "step", func() {
		_ = g.rn.Step(m) // errors are stale or unknown peers; raft recovers
	})
}

// restore replaces a group's state machine with a snapshot received from
// its leader and already saved.
func (h *Host) restore(g *group, snap *pb.Snapshot) error {
	if etcdraft.IsEmptySnap(snap) {
		return nil
	}
	md := snap.GetMetadata()
	if err := g.sm.Restore(snap.GetData()); err != nil {
		return fmt.Errorf("raft: group %d: restore snapshot at %d: %w", g.id, md.GetIndex(), err)
	}
	g.applied, g.snapIndex = md.GetIndex(), md.GetIndex()
	g.confState = proto.Clone(md.GetConfState()).(*pb.ConfState)
	g.stateless = false
	h.stats.SnapshotsRestored++
	return nil
}

// report is a call to make on a group's raft once the Readies are
// advanced: unreachable peers, snapshot status.
type report struct {
	g  *group
	fn func()
}

// send batches every message of the cycle by destination, one frame per
// node, and returns the raft reports (unreachable, snapshot status) to make
// once the Readies are advanced.
func (h *Host) send(readies []groupReady) []report {
	builders := make(map[uint64]*frameBuilder)
	var reports []report
	for _, r := range readies {
		for _, m := range r.rd.Messages {
			to := m.GetTo()
			b := builders[to]
			if b == nil {
				b = &frameBuilder{}
				builders[to] = b
			}
			before := b.size
			n, err := b.add(r.g.id, m)
			if err == nil && before+n <= h.opts.MaxFrameBytes-frameHeaderBytes {
				continue
			}
			// Over the frame bound (or unencodable): drop it and tell raft,
			// which probes and resends; the frame keeps its bound.
			h.undoLast(b, m, n, err)
			h.stats.DroppedOversize++
			reports = append(reports, unreachable(r.g, to, m.GetType() == pb.MsgSnap))
		}
	}
	dests := make([]uint64, 0, len(builders))
	for to := range builders {
		dests = append(dests, to)
	}
	slices.Sort(dests)
	for _, to := range dests {
		reports = append(reports, h.sendFrame(to, builders[to])...)
	}
	return reports
}

// undoLast removes the message add just appended, if it did.
func (h *Host) undoLast(b *frameBuilder, m *pb.Message, n int, err error) {
	if err != nil {
		return
	}
	b.size -= n
	switch {
	case coalescible(m) && m.GetType() == pb.MsgHeartbeat:
		b.heartbeats = b.heartbeats[:len(b.heartbeats)-1]
	case coalescible(m):
		b.responses = b.responses[:len(b.responses)-1]
	default:
		b.messages = b.messages[:len(b.messages)-1]
		b.groups = b.groups[:len(b.groups)-1]
		b.types = b.types[:len(b.types)-1]
	}
}

func (h *Host) sendFrame(to uint64, b *frameBuilder) []report {
	if b.empty() {
		return nil
	}
	payload := b.encode(h.opts.NodeID)
	err := h.opts.Sender.Send(to, payload)
	var reports []report
	if err != nil {
		h.stats.SendErrors++
		seen := make(map[uint64]bool)
		for _, list := range [][]heartbeat{b.heartbeats, b.responses} {
			for _, hb := range list {
				seen[hb.group] = seen[hb.group] // keep a snapshot flag already set
			}
		}
		for i, id := range b.groups {
			seen[id] = seen[id] || b.types[i] == pb.MsgSnap
		}
		for id, snap := range seen {
			if g, ok := h.groups[id]; ok {
				reports = append(reports, unreachable(g, to, snap))
			}
		}
		return reports
	}
	h.stats.FramesSent++
	h.stats.BytesSent += uint64(len(payload))
	h.stats.MessagesSent += uint64(len(b.heartbeats) + len(b.responses) + len(b.messages))
	h.stats.HeartbeatsCoalesced += uint64(len(b.heartbeats) + len(b.responses))
	for i, id := range b.groups {
		if b.types[i] == pb.MsgSnap {
			h.stats.SnapshotsSent++
			// The frame is queued, not delivered: raft moves the follower to
			// probing and, if the snapshot was lost, finds out from the
			// follower's rejection and sends another.
			g := h.groups[id]
			reports = append(reports, report{g, func() { g.rn.ReportSnapshot(to, etcdraft.SnapshotFinish) }})
		}
	}
	return reports
}

func unreachable(g *group, to uint64, snapshot bool) report {
	return report{g, func() {
		g.rn.ReportUnreachable(to)
		if snapshot {
			g.rn.ReportSnapshot(to, etcdraft.SnapshotFailure)
		}
	}}
}
