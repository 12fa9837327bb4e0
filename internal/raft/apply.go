package raft

import (
	"fmt"
	"slices"

	etcdraft "go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// apply applies a Ready's committed entries to the group's state machine
// and completes the requests they answer. An entry this build cannot read
// stops the group at that entry (C1): skipping it here while another
// replica applies it would make the replicas diverge, and every replica
// that cannot read it stops at the same index.
func (h *Host) apply(g *group, rd etcdraft.Ready) error {
	for _, e := range rd.CommittedEntries {
		if e.GetIndex() <= g.applied {
			continue // already in the state machine through a snapshot
		}
		var err error
		switch e.GetType() {
		case pb.EntryNormal:
			err = h.applyNormal(g, e)
		case pb.EntryConfChangeV2:
			var cc pb.ConfChangeV2
			if err = proto.Unmarshal(e.GetData(), &cc); err == nil {
				h.applyConfChange(g, &cc, cc.GetContext())
			}
		case pb.EntryConfChange:
			var cc pb.ConfChange
			if err = proto.Unmarshal(e.GetData(), &cc); err == nil {
				h.applyConfChange(g, &cc, cc.GetContext())
			}
		default:
			err = fmt.Errorf("unknown entry type %d", e.GetType())
		}
		if err != nil {
			return fmt.Errorf("%w: group %d: committed entry %d (term %d) cannot be applied by this build: %v",
				ErrGroupFailed, g.id, e.GetIndex(), e.GetTerm(), err)
		}
		g.applied = e.GetIndex()
	}
	if g.confPending != 0 && g.confIndex != 0 && g.applied >= g.confIndex {
		g.clearConf() // applied without matching (its context was unreadable)
	}
	for _, rs := range rd.ReadStates {
		env, err := decodeEnvelope(rs.RequestCtx)
		if err != nil || env.incarnation != h.opts.Incarnation {
			continue
		}
		if f, ok := g.reads[env.seq]; ok {
			delete(g.reads, env.seq)
			delete(g.readLead, env.seq)
			g.indexed = append(g.indexed, indexedRead{index: rs.Index, f: f})
		}
	}
	g.indexed = slices.DeleteFunc(g.indexed, func(r indexedRead) bool {
		if r.index <= g.applied {
			r.f.complete(nil, nil)
			return true
		}
		return false
	})
	return nil
}

func (h *Host) applyNormal(g *group, e *pb.Entry) error {
	if len(e.GetData()) == 0 {
		return nil // a new leader's empty entry
	}
	env, err := decodeEnvelope(e.GetData())
	if err != nil {
		return err
	}
	result := g.sm.Apply(e.GetIndex(), env.payload)
	if env.incarnation != h.opts.Incarnation {
		return nil
	}
	if f, ok := g.proposals[env.seq]; ok {
		delete(g.proposals, env.seq)
		f.complete(result, nil)
	}
	return nil
}

func (h *Host) applyConfChange(g *group, cc pb.ConfChangeI, context []byte) {
	g.confState = g.rn.ApplyConfChange(cc)
	// raft ignores a snapshot whose configuration does not name the
	// receiver, so a replica just added could only be filled from a
	// snapshot taken after its addition: take one at this entry.
	g.snapshotDue = true
	env, err := decodeEnvelope(context)
	if err != nil || env.incarnation != h.opts.Incarnation {
		return
	}
	if f, ok := g.proposals[env.seq]; ok {
		delete(g.proposals, env.seq)
		f.complete(nil, nil)
	}
	if g.confPending == env.seq {
		g.clearConf()
	}
}

// noteConfIndex finds, in the first Ready after a replica change was
// proposed, the index raft gave it. raft appends a change it refuses as an
// empty entry instead; confChangeReady should prevent that, and if it ever
// happens the request fails now, retriable, rather than at its timeout.
func (h *Host) noteConfIndex(g *group, rd etcdraft.Ready) {
	if g.confPending == 0 || g.confIndex != 0 || len(rd.Entries) == 0 {
		return
	}
	for _, e := range rd.Entries {
		if e.GetType() != pb.EntryConfChangeV2 {
			continue
		}
		var cc pb.ConfChangeV2
		if proto.Unmarshal(e.GetData(), &cc) != nil {
			continue
		}
		if env, err := decodeEnvelope(cc.GetContext()); err == nil && env.incarnation == h.opts.Incarnation && env.seq == g.confPending {
			g.confIndex = e.GetIndex()
			return
		}
	}
	if st := g.rn.BasicStatus(); st.RaftState != etcdraft.StateLeader || st.GetTerm() != g.confTerm {
		return // leadership moved; checkLeadership fails the request
	}
	if f, ok := g.proposals[g.confPending]; ok {
		delete(g.proposals, g.confPending)
		f.complete(nil, fmt.Errorf("%w: raft replaced the change with an empty entry", ErrConfChangeInProgress))
	}
	g.clearConf()
}

// checkLeadership fails the requests a leadership change has orphaned:
// proposals made as leader of an earlier term, or while this node no longer
// leads (they may still commit: outcome unknown), and reads sent to a
// leader that is no longer the leader (their answer will not come).
func (h *Host) checkLeadership(g *group) error {
	st := g.rn.BasicStatus()
	term, lead := st.GetTerm(), st.Lead
	if st.RaftState != etcdraft.StateLeader {
		g.failProposals(ErrLeadershipLost)
	} else {
		for seq, f := range g.proposals {
			if f.term != term {
				f.complete(nil, ErrLeadershipLost)
				delete(g.proposals, seq)
			}
		}
		if g.confPending != 0 && g.confTerm != term {
			g.clearConf()
		}
		if g.leaderTerm != term {
			// Everything raft held when it became leader is stored by now
			// (or is its own empty entry, still unstable when the election
			// completed in Advance), so the stored last index is at or
			// above raft's pendingConfIndex.
			last, err := g.storage.LastIndex()
			if err != nil {
				return err
			}
			g.leaderTerm, g.leaderFirst = term, last
		}
	}
	if term != g.term || lead != g.lead {
		for seq, f := range g.reads {
			if g.readLead[seq] != lead || f.term != term {
				f.complete(nil, ErrLeadershipLost)
				delete(g.reads, seq)
				delete(g.readLead, seq)
			}
		}
	}
	g.term, g.lead = term, lead
	return nil
}

// maybeSnapshot snapshots the state machine every Options.SnapshotEvery
// applied entries and compacts the log behind it, keeping CompactMargin
// entries for followers that lag a little. A snapshot larger than a frame
// could never be sent, so it is not taken and the log keeps growing; the
// state machine must stay smaller than Options.MaxFrameBytes.
func (h *Host) maybeSnapshot(g *group) {
	if g.applied < max(g.snapIndex, g.snapFailedAt)+h.opts.SnapshotEvery && !g.snapshotDue {
		return
	}
	g.snapshotDue = false
	if err := h.snapshot(g); err != nil {
		// Retry after another SnapshotEvery entries rather than every cycle.
		g.snapFailedAt = g.applied
		h.stats.SnapshotFailures++
		h.opts.Logger.Warningf("raft: group %d: snapshot at %d: %v", g.id, g.applied, err)
	}
}

func (h *Host) snapshot(g *group) error {
	data, err := g.sm.Snapshot()
	if err != nil {
		return err
	}
	if limit := h.opts.MaxFrameBytes - 4096; len(data) > limit {
		return fmt.Errorf("%d bytes, more than a frame can carry (%d)", len(data), limit)
	}
	term, err := g.storage.Term(g.applied)
	if err != nil {
		return err
	}
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		Index: new(g.applied), Term: new(term), ConfState: proto.Clone(g.confState).(*pb.ConfState),
	}}
	if err := h.opts.LogStore.SetSnapshot(g.id, snap); err != nil {
		return err
	}
	g.snapIndex = g.applied
	h.stats.Snapshots++
	if g.applied > h.opts.CompactMargin {
		return h.opts.LogStore.Compact(g.id, g.applied-h.opts.CompactMargin)
	}
	return nil
}
