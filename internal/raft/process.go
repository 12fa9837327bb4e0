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
		g.rn.Tick()
		g.expire(h.ticks)
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
		if !g.rn.HasReady() {
			continue
		}
		rd := g.rn.Ready()
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
		h.apply(r.g, r.rd)
		r.g.rn.Advance(r.rd)
		h.checkLeadership(r.g)
		h.maybeSnapshot(r.g)
	}
	for _, rep := range reports {
		rep()
	}
	for _, id := range h.order {
		if h.groups[id].rn.HasReady() {
			return true, nil
		}
	}
	return false, nil
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
	f, err := decodeFrame(in.bytes)
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
		if gm.msg.GetFrom() != f.from || gm.msg.GetTo() != self {
			h.stats.BadFrames++
			continue
		}
		h.step(gm.group, gm.msg)
	}
}

// step hands a message to its group. Messages for a group this node does
// not host are dropped: raft retransmits, and AddGroup must come first.
func (h *Host) step(group uint64, m *pb.Message) {
	if g, ok := h.groups[group]; ok {
		_ = g.rn.Step(m) // errors are stale or unknown peers; raft recovers
	}
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
	h.stats.SnapshotsRestored++
	return nil
}

// send batches every message of the cycle by destination, one frame per
// node, and returns the raft reports (unreachable, snapshot status) to make
// once the Readies are advanced.
func (h *Host) send(readies []groupReady) []func() {
	builders := make(map[uint64]*frameBuilder)
	var reports []func()
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

func (h *Host) sendFrame(to uint64, b *frameBuilder) []func() {
	if b.empty() {
		return nil
	}
	payload := b.encode(h.opts.NodeID)
	err := h.opts.Sender.Send(to, payload)
	var reports []func()
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
			// The frame is queued, not delivered: raft moves the follower to
			// probing and, if the snapshot was lost, finds out from the
			// follower's rejection and sends another.
			g := h.groups[id]
			reports = append(reports, func() { g.rn.ReportSnapshot(to, etcdraft.SnapshotFinish) })
		}
	}
	return reports
}

func unreachable(g *group, to uint64, snapshot bool) func() {
	return func() {
		g.rn.ReportUnreachable(to)
		if snapshot {
			g.rn.ReportSnapshot(to, etcdraft.SnapshotFailure)
		}
	}
}
