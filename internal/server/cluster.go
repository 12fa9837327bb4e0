package server

import (
	"maps"
	"math"
	"slices"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/wire"
)

// Audit events of cluster administration: cluster_remove's target is the
// removed node's id; an applied cluster_rebalance's is "cluster", with
// the count of moves the plan makes.
const (
	auditNodeRemoved = "node_removed"
	auditRebalanced  = "cluster_rebalanced"
)

// clusterStatus encodes the broker's cluster status for cluster_status
// (87), attributes sorted by key, with the repair section when the
// request asked for it.
func clusterStatus(s broker.ClusterStatus, repair bool) *wire.ClusterStatusResponse {
	resp := &wire.ClusterStatusResponse{Node: s.Node, Vnodes: uint32(s.Vnodes)}
	if repair {
		resp.Repair = clusterRepair(s)
	}
	for _, n := range s.Nodes {
		wn := wire.ClusterNode{
			ID: n.ID, Registered: n.Registered, Liveness: n.Liveness, PeerAddr: n.PeerAddr,
			GossipAddr: n.GossipAddr, ClientAddr: n.ClientAddr, HTTPAddr: n.HTTPAddr,
		}
		if repair {
			wn.Disk = n.Disk
		}
		for _, k := range slices.Sorted(maps.Keys(n.Attrs)) {
			wn.Attrs = append(wn.Attrs, wire.ClusterAttr{Key: k, Value: n.Attrs[k]})
		}
		resp.Nodes = append(resp.Nodes, wn)
	}
	for _, g := range s.Groups {
		resp.Groups = append(resp.Groups, wire.ClusterGroup{
			Group: g.Group, Name: g.Name, State: g.State, Leader: g.Leader, Term: g.Term, Commit: g.Commit,
			Applied: g.Applied, Voters: g.Voters, Learners: g.Learners, Placed: g.Placed,
		})
	}
	for _, p := range s.Peers {
		resp.Peers = append(resp.Peers, wire.ClusterPeer{
			Node: p.Node, Connected: p.Connected, Writes: p.Writes, FramesSent: p.FramesSent, BytesSent: p.BytesSent,
			FramesReceived: p.FramesReceived, BytesReceived: p.BytesReceived,
		})
	}
	return resp
}

// maxRepairListed bounds each list of the repair section, whatever the
// broker hands over, so that the answer stays well inside a frame; the
// totals still count everything.
const maxRepairListed = 100

// clusterRepair encodes the repair views of s.
func clusterRepair(s broker.ClusterStatus) *wire.ClusterRepair {
	r := &wire.ClusterRepair{}
	total := 0
	for _, t := range s.UnderReplicated {
		total += t.Segments
	}
	r.UnderReplicatedTotal = clampU32(max(total, len(s.UnderReplicatedSegments)))
	for _, t := range first(s.UnderReplicated) {
		r.UnderReplicated = append(r.UnderReplicated, wire.UnderReplicatedTopic{Topic: t.Topic, Segments: clampU32(t.Segments)})
	}
	for _, u := range first(s.UnderReplicatedSegments) {
		r.UnderReplicatedSegments = append(r.UnderReplicatedSegments, wire.UnderReplicatedSegment{
			Topic: u.Topic, Range: u.Range, Segment: u.Segment, Active: u.Active, Replicas: u.Replicas,
			Live: uint32(u.Live), Factor: uint32(u.Factor),
		})
	}
	if s.Heal == nil {
		return r
	}
	h := s.Heal
	for _, c := range first(h.Healing) {
		r.Healing = append(r.Healing, wire.HealingCopy{Segment: c.Segment, Source: c.Source, Target: c.Target, Bytes: s.HealingBytes[c.Segment]})
	}
	for _, d := range first(h.Damaged) {
		r.Damaged = append(r.Damaged, wire.DamagedCopy{Segment: d.Segment, Node: d.Node})
	}
	for _, p := range first(h.Problems) {
		r.Problems = append(r.Problems, wire.HealProblem{Segment: p.Segment, Problem: p.Problem, Detail: p.Detail})
	}
	// A total is never below what is listed, whatever the broker says.
	r.HealingTotal = clampU32(max(h.HealingTotal, len(h.Healing)))
	r.DamagedTotal = clampU32(max(h.DamagedTotal, len(h.Damaged)))
	r.ProblemsTotal = clampU32(max(h.ProblemsTotal, len(h.Problems)))
	r.ScrubCopies, r.ScrubBehind = clampU32(h.ScrubCopies), h.ScrubBehind
	return r
}

func clampU32(n int) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }

// copyStates maps the broker's copy states to the wire's.
var copyStates = map[string]wire.CopyState{
	broker.CopyUnchecked: wire.CopyUnchecked,
	broker.CopyDamaged:   wire.CopyDamaged,
	broker.CopyHealing:   wire.CopyHealing,
	broker.CopyMissing:   wire.CopyMissing,
	broker.CopyVerified:  wire.CopyVerified,
}

// segmentCopies encodes a segment's copies for describe_topic (65).
func segmentCopies(copies []broker.SegmentCopy) []wire.SegmentCopy {
	var out []wire.SegmentCopy
	for _, c := range copies {
		out = append(out, wire.SegmentCopy{Node: c.Node, State: copyStates[c.State]})
	}
	return out
}

// maxCopiesBytes bounds describe_topic's copies section: with the rest
// of the answer it must fit a frame, so the copies of the last segments
// are left out (and counted as omitted) beyond it or beyond the room the
// frame leaves.
const maxCopiesBytes = 4 << 20

// capCopies leaves out the copies of resp's last segments so that the
// copies section takes at most min(maxCopiesBytes, room) bytes, room
// being what maxFrame leaves after the rest of the answer.
func capCopies(resp *wire.DescribeTopicResponse, maxFrame uint32) {
	resp.CopiesOmitted = capCopiesOf(resp.Ranges, baseSize(resp), maxFrame)
}

// capCopiesOf is capCopies of ranges in an answer of base bytes without
// its copies section (a whole description, or a page of one); it answers
// how many segments' copies it left out.
func capCopiesOf(ranges []wire.RangeInfo, base int, maxFrame uint32) int {
	segments := 0
	for i := range ranges {
		segments += len(ranges[i].Segments)
	}
	budget := maxCopiesBytes - 4
	if room := int(maxFrame) - frameSlack - 4 - base; room < budget {
		budget = room
	}
	kept, cut := 0, false
	for i := range ranges {
		for j := range ranges[i].Segments {
			s := &ranges[i].Segments[j]
			if n := wire.CopiesSize(s.Copies); !cut && n <= budget {
				budget -= n
				kept++
				continue
			}
			// The section holds a prefix of the segments: once one is
			// left out, so are all after it.
			cut, s.Copies = true, nil
		}
	}
	return segments - kept
}

// frameSlack is room left in a frame for its header.
const frameSlack = 64

// baseSize is the size of resp without its copies section.
func baseSize(resp *wire.DescribeTopicResponse) int {
	base := *resp
	base.Copies = false
	return len(base.AppendPayload(nil))
}

func first[T any](l []T) []T { return l[:min(len(l), maxRepairListed)] }

// rebalancePlan encodes a rebalance plan for cluster_rebalance (89).
func rebalancePlan(p broker.RebalancePlan) *wire.ClusterRebalanceResponse {
	resp := &wire.ClusterRebalanceResponse{Applied: p.Applied}
	for _, n := range p.Nodes {
		resp.Nodes = append(resp.Nodes, wire.RebalanceNode{
			ID: n.ID, Live: n.Live, Voter: uint32(n.Voter), VoterAfter: uint32(n.VoterAfter),
			Leads: uint32(n.Leads), LeadsAfter: uint32(n.LeadsAfter),
		})
	}
	for _, g := range p.Groups {
		resp.Groups = append(resp.Groups, wire.RebalanceGroup{
			Group: g.Group, Name: g.Name, Voters: g.Voters, Target: g.Target, Add: g.Add, Remove: g.Remove,
			Leader: g.Leader, NewLeader: g.NewLeader, Held: g.Held,
		})
	}
	return resp
}
